//! The address ranges the proxy never connects to unless an admin named the exact address and
//! port: everything that leads back into the server's host, its private networks or the cloud
//! provider's control plane. A pure function so the whole table is tested without a network.
//!
//! Why a deny-list of ranges rather than "public unicast only" by some crate's notion: the list
//! is short, stable (IANA special-purpose registries) and reviewable here in one place, and each
//! entry says *why* in the refusal the sandbox sees.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` must not be reached from a sandbox, or `None` for an ordinary public address.
/// IPv4 addresses embedded in IPv6 (mapped `::ffff:a.b.c.d`, the deprecated compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged as the IPv4 address they
/// carry, since that is where a packet to them may end up.
pub fn forbidden_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    // Metadata before link-local: it is inside 169.254/16, and the more precise name helps.
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        return Some("the cloud metadata address");
    }
    let why = match (a, b, c) {
        (0, _, _) => "an unspecified (\"this network\") address",
        (127, _, _) => "a loopback address",
        (10, _, _) => "a private address (RFC 1918)",
        (172, 16..=31, _) => "a private address (RFC 1918)",
        (192, 168, _) => "a private address (RFC 1918)",
        (169, 254, _) => "a link-local address",
        (100, 64..=127, _) => "a shared (CGNAT) address",
        (192, 0, 0) => "an IETF protocol assignment address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, _, _) => "a multicast address",
        _ if ip.is_broadcast() => "the broadcast address",
        (240..=255, _, _) => "a reserved address",
        _ => return None,
    };
    Some(why)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Some("the cloud metadata address");
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        // `::a.b.c.d`, IPv4-compatible (deprecated).
        [0, 0, 0, 0, 0, 0, hi, lo] => {
            return Some(forbidden_v4(embedded(hi, lo)).unwrap_or("an IPv4-compatible address"))
        }
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return forbidden_v4(embedded(hi, lo)),
        [0x2002, hi, lo, ..] => return forbidden_v4(embedded(hi, lo)),
        _ => {}
    }
    let why = match s[0] {
        0xfc00..=0xfdff => "a private (unique local) address",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xff00..=0xffff => "a multicast address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        0x0100 if s[1..4] == [0, 0, 0] => "a discard-only address",
        _ => return None,
    };
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        let cases: &[(&str, Option<&str>)] = &[
            // IPv4
            ("0.0.0.0", Some("an unspecified (\"this network\") address")),
            ("0.1.2.3", Some("an unspecified (\"this network\") address")),
            ("127.0.0.1", Some("a loopback address")),
            ("127.255.0.9", Some("a loopback address")),
            ("10.0.0.1", Some("a private address (RFC 1918)")),
            ("172.16.0.1", Some("a private address (RFC 1918)")),
            ("172.31.255.255", Some("a private address (RFC 1918)")),
            ("172.32.0.1", None),
            ("172.15.0.1", None),
            ("192.168.1.1", Some("a private address (RFC 1918)")),
            ("169.254.169.254", Some("the cloud metadata address")),
            ("169.254.1.1", Some("a link-local address")),
            ("100.64.0.1", Some("a shared (CGNAT) address")),
            ("100.127.255.254", Some("a shared (CGNAT) address")),
            ("100.128.0.1", None),
            ("100.63.0.1", None),
            ("192.0.0.8", Some("an IETF protocol assignment address")),
            ("192.0.2.1", Some("a documentation address")),
            ("198.51.100.7", Some("a documentation address")),
            ("203.0.113.9", Some("a documentation address")),
            ("198.18.0.1", Some("a benchmarking address")),
            ("224.0.0.1", Some("a multicast address")),
            ("239.255.255.250", Some("a multicast address")),
            ("240.0.0.1", Some("a reserved address")),
            ("255.255.255.255", Some("the broadcast address")),
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("151.101.1.1", None),
            ("192.0.3.1", None),
            // IPv6
            ("::", Some("an unspecified address")),
            ("::1", Some("a loopback address")),
            ("fd00:ec2::254", Some("the cloud metadata address")),
            ("fd00::1", Some("a private (unique local) address")),
            ("fc00::1", Some("a private (unique local) address")),
            ("fe80::1", Some("a link-local address")),
            ("febf::1", Some("a link-local address")),
            ("fec0::1", Some("a site-local address")),
            ("ff02::1", Some("a multicast address")),
            ("2001:db8::1", Some("a documentation address")),
            ("100::1", Some("a discard-only address")),
            ("2606:4700::1111", None),
            ("2a00:1450:4001::1", None),
            // IPv4 inside IPv6
            ("::ffff:127.0.0.1", Some("a loopback address")),
            ("::ffff:10.1.2.3", Some("a private address (RFC 1918)")),
            ("::ffff:169.254.169.254", Some("the cloud metadata address")),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some("a loopback address")),
            ("::8.8.8.8", Some("an IPv4-compatible address")),
            ("64:ff9b::7f00:1", Some("a loopback address")),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::1", Some("a loopback address")),
            ("2002:a9fe:a9fe::1", Some("the cloud metadata address")),
            ("2002:808:808::1", None),
        ];
        let mut wrong = Vec::new();
        for &(text, want) in cases {
            let ip: IpAddr = text.parse().unwrap();
            let got = forbidden_range(ip);
            if got != want {
                wrong.push(format!("{text}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
