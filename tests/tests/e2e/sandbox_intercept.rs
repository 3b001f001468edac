//! Credentials injected outside the sandbox (issue #13, items 4 and 5): real sandboxes (`bwrap`,
//! the launcher and the agent of the real `outboard-server` binary; as root in CI, so each
//! sandbox runs as its own unprivileged host uid and reaches the CA bundle only through its
//! staged bind) whose `curl` reaches local HTTPS upstreams on 127.0.0.1 through the server's
//! proxy. The upstreams have certificates of throwaway CAs made here and echo the request head
//! back, so the tests see both what the upstream got and what the sandbox got.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use outboard_server::netproxy::ca::OrgCa;
use outboard_server::netproxy::{Decide, Injection, NetLimits, Verdict};
use outboard_tests::fixture::{exec, net_sandbox, NetSandbox, VIA_PROXY};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const VALUE: &str = "s3cr3t-intercept-7f3a9c21d4";
const PLACEHOLDER: &str = "outboard-placeholder-GH_TOKEN";

/// Allows every host; lifts the forbidden ranges for `literals`; injects `inject` by port.
struct Policy {
    literals: Vec<(IpAddr, u16)>,
    inject: Vec<(u16, Arc<Injection>)>,
}

impl Decide for Policy {
    fn decide(&self, _host: &str, _port: u16) -> Verdict {
        Verdict::Allow
    }

    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.literals.contains(&(ip, port))
    }

    fn injections(&self, _host: &str, port: u16) -> Vec<Arc<Injection>> {
        self.inject.iter().filter(|(p, _)| *p == port).map(|(_, i)| i.clone()).collect()
    }
}

fn injection(upstream_ca: &str) -> Arc<Injection> {
    Arc::new(Injection {
        name: "GH".into(),
        header: "authorization".into(),
        header_value: format!("Bearer {VALUE}"),
        value: VALUE.into(),
        placeholders: vec![PLACEHOLDER.into()],
        upstream_ca: Some(upstream_ca.into()),
    })
}

fn sandbox(literals: Vec<u16>, inject: Vec<(u16, Arc<Injection>)>) -> NetSandbox {
    let policy = Policy { literals: literals.into_iter().map(|p| (LOCAL, p)).collect(), inject };
    let ca = Arc::new(OrgCa::generate("acme").unwrap());
    net_sandbox("s_intercept", Arc::new(policy), NetLimits::DEFAULT, Some(ca), Vec::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_gets_the_credential_and_the_sandbox_only_placeholders_and_scrubbed_text() {
    let (up, up_ca, seen) =
        outboard_tests::tls::echo_upstream("the upstream itself", "upstream test CA")
            .await
            .unwrap();
    let net = sandbox(vec![up.port()], vec![(up.port(), injection(&up_ca))]);
    let r = exec(
        &net.sandbox,
        &format!(
            "echo \"$SSL_CERT_FILE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS $CURL_CA_BUNDLE \
             $GIT_SSL_CAINFO $PIP_CERT\"; {VIA_PROXY} curl -sS -v https://{up}/plain 2>&1; \
             echo ==; export GH_TOKEN={PLACEHOLDER}; curl -sS -H \"x-token: token $GH_TOKEN\" \
             -H 'accept-encoding: gzip' https://{up}/placeholder; echo ==; env"
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    let bundle = "/run/outboard/ca-bundle.pem";
    assert!(
        r.output.starts_with(&format!("{bundle} {bundle} {bundle} {bundle} {bundle} {bundle}\n")),
        "{}",
        r.output
    );
    let sections: Vec<&str> = r.output.split("==\n").collect();
    assert_eq!(sections.len(), 3, "{}", r.output);
    // curl verified the proxy's leaf against the bundle: issued by the org's CA, for the IP.
    assert!(
        sections[0].contains("issuer: O=Outboard; CN=Outboard sandbox CA (acme)"),
        "{}",
        sections[0]
    );
    assert!(sections[0].contains("ALPN: server accepted http/1.1"), "{}", sections[0]);
    // The echo: what the upstream got, with the value scrubbed on the way back.
    assert!(sections[0].contains("GET /plain HTTP/1.1\r\n"), "{}", sections[0]);
    assert!(sections[0].contains("authorization: Bearer [secret GH]\r\n"), "{}", sections[0]);
    assert!(sections[1].contains("x-token: token [secret GH]\r\n"), "{}", sections[1]);
    assert!(sections[1].contains("accept-encoding: identity\r\n"), "{}", sections[1]);
    assert!(!r.output.contains(VALUE), "the value reached the sandbox: {}", r.output);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].contains(&format!("authorization: Bearer {VALUE}\r\n")), "{}", seen[0]);
    assert!(seen[1].contains(&format!("x-token: token {VALUE}\r\n")), "{}", seen[1]);
    assert!(seen[1].contains(&format!("authorization: Bearer {VALUE}\r\n")), "{}", seen[1]);
    assert!(!seen[1].contains(PLACEHOLDER) && !seen[1].contains("gzip"), "{}", seen[1]);
    let e = net.audit.wait_for_port("the intercepted request", up.port(), |e| e.allowed).await;
    assert!(e.intercepted && e.reason.is_none(), "{e:?}");
    assert!(e.bytes_up > 0 && e.bytes_down > 0, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_hosts_keep_their_own_certificate_and_an_unverified_upstream_gets_no_credential() {
    let (plain, plain_ca, plain_seen) =
        outboard_tests::tls::echo_upstream("not intercepted", "tunnel test CA").await.unwrap();
    let (rogue, _rogue_ca, rogue_seen) =
        outboard_tests::tls::echo_upstream("rogue", "rogue CA").await.unwrap();
    let (_, named_ca, _) =
        outboard_tests::tls::echo_upstream("unused", "the CA the secret names").await.unwrap();
    let net = sandbox(vec![plain.port(), rogue.port()], vec![(rogue.port(), injection(&named_ca))]);
    std::fs::write(net.ws.join("tunnel-ca.pem"), &plain_ca).unwrap();
    let r = exec(
        &net.sandbox,
        &format!(
            "{VIA_PROXY} curl -sS -v --cacert tunnel-ca.pem https://{plain}/ 2>&1; echo ==; \
             curl -sS -w '%{{http_code}}\\n' https://{rogue}/"
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    let sections: Vec<&str> = r.output.split("==\n").collect();
    assert_eq!(sections.len(), 2, "{}", r.output);
    // Tunnelled untouched: the client sees the upstream's own certificate, not the org CA's.
    assert!(sections[0].contains("subject: CN=not intercepted"), "{}", sections[0]);
    assert!(sections[0].contains("issuer: CN=tunnel test CA"), "{}", sections[0]);
    assert!(!sections[0].contains("Outboard sandbox CA"), "{}", sections[0]);
    assert!(!plain_seen.lock().unwrap()[0].contains("authorization"), "{:?}", plain_seen);
    // Its certificate is not signed by the secret's --upstream-ca: 502, the credential unsent.
    assert!(
        sections[1].contains(&format!("could not reach 127.0.0.1:{}", rogue.port())),
        "{}",
        sections[1]
    );
    assert!(sections[1].contains("certificate"), "{}", sections[1]);
    assert!(sections[1].ends_with("\n502\n"), "{}", sections[1]);
    assert!(rogue_seen.lock().unwrap().is_empty());
    let e = net.audit.wait_for_port("the refused upstream", rogue.port(), |e| e.intercepted).await;
    assert!(e.reason.as_deref().unwrap_or("").contains("certificate"), "{e:?}");
    let e = net.audit.wait_for_port("the tunnel", plain.port(), |e| e.allowed).await;
    assert!(!e.intercepted, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_sees_the_cas_certificate_read_only_and_never_its_key() {
    let net = sandbox(vec![], vec![]);
    let r = exec(
        &net.sandbox,
        "ls -l /run/outboard/ca-bundle.pem | cut -c1-10; \
         (echo x >> /run/outboard/ca-bundle.pem) 2>/dev/null && echo writable || echo read-only; \
         { find / \\( -path /proc -o -path /sys -o -path /dev -o -path /usr \\
           -o -path /run/outboard/agent -o -path /workspace/dump \\) -prune -o -type f -readable -print0 | xargs -0 cat; \
           env; cat /proc/1/environ /proc/self/environ; } > /workspace/dump 2>/dev/null; true",
    )
    .await;
    assert_eq!(r.output, "-rw-r--r--\nread-only\n", "{}", r.output);
    let dump = std::fs::read(net.ws.join("dump")).unwrap();
    let dump = String::from_utf8_lossy(&dump);
    // The bundle is there (the positive control) ...
    assert!(
        dump.contains(net.ca.as_ref().unwrap().cert_pem().trim()),
        "the org CA's certificate is missing"
    );
    // ... and the key's private scalar is nowhere the sandbox can read (but in the agent binary,
    // left out: it was built before this CA existed). Not the key PEM's lines: its PKCS#8 also
    // holds the public key, which the certificate carries too, so a line of it showed up in the
    // bundle about once in twenty runs, whenever both encodings aligned.
    let secret = private_scalar_base64(&net.ca.as_ref().unwrap().key_pem());
    let joined: String = dump.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    assert!(!joined.contains(&secret), "the CA's private key is visible in the sandbox");
}

/// The base64 characters of a PKCS#8 EC key's PEM body that encode its private scalar alone (the
/// 32 bytes after `02 01 01 04 20`: ECPrivateKey's version and the scalar's OCTET STRING).
fn private_scalar_base64(pem: &str) -> String {
    let body: String =
        pem.lines().filter(|l| !l.starts_with("-----")).flat_map(|l| l.trim().chars()).collect();
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            _ => 63,
        }
    };
    let mut der: Vec<u8> = Vec::new();
    for quad in body.trim_end_matches('=').as_bytes().chunks(4) {
        let bits =
            quad.iter().enumerate().fold(0u32, |acc, (i, &c)| acc | value(c) << (18 - 6 * i));
        der.extend_from_slice(&bits.to_be_bytes()[1..quad.len()]);
    }
    let start = der.windows(5).position(|w| w == [2, 1, 1, 4, 32]).expect("a PKCS#8 EC key") + 5;
    assert!(der.len() >= start + 32, "the scalar is whole");
    // Characters that depend on scalar bytes only: from the first 3-byte group inside it to the
    // last one that ends inside it.
    let (first, last) = (start.div_ceil(3), (start + 32) / 3);
    assert!(last > first + 8, "at least 36 characters of it");
    body[first * 4..last * 4].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_another_virtual_host_inside_the_tunnel_gets_421_and_no_credential() {
    // Issue 36, item 4: inside a tunnel to the bound host, `Host: attacker.example` (or TLS
    // asking for that name) reached the upstream with the real credential.
    let (up, up_ca, seen) =
        outboard_tests::tls::echo_upstream("the upstream itself", "upstream test CA")
            .await
            .unwrap();
    let net = sandbox(vec![up.port()], vec![(up.port(), injection(&up_ca))]);
    let port = up.port();
    let r = exec(
        &net.sandbox,
        &format!(
            "{VIA_PROXY} curl -sS -H 'Host: attacker.example' -w '%{{http_code}}\\n' \
             https://{up}/vhost; echo ==; \
             curl -sS -k --connect-to attacker.example:{port}:127.0.0.1:{port} \
             -w '%{{http_code}}\\n' https://attacker.example:{port}/sni; echo ==; \
             curl -sS -o /dev/null -w '%{{http_code}}\\n' https://{up}/control"
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    let sections: Vec<&str> = r.output.split("==\n").collect();
    assert_eq!(sections.len(), 3, "{}", r.output);
    for section in &sections[..2] {
        assert!(section.ends_with("\n421\n"), "{}", r.output);
        assert!(section.contains("credentials go only to the host they are bound to"), "{section}");
    }
    assert!(sections[0].contains("\"attacker.example\" in its Host header"), "{}", sections[0]);
    assert!(sections[1].contains("the server name \"attacker.example\""), "{}", sections[1]);
    assert_eq!(sections[2], "200\n", "{}", r.output);
    // Only the control reached the upstream.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("GET /control HTTP/1.1\r\n"), "{}", seen[0]);
    assert!(!r.output.contains(VALUE), "{}", r.output);
    let e = net.audit.wait_for_port("the refusal", port, |e| e.refused_by.is_some()).await;
    assert!(e.reason.as_deref().unwrap_or("").contains("Nothing was sent"), "{e:?}");
}
