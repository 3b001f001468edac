#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use super::*;
use pretty_assertions::assert_eq;

fn policy(mode: &str, hosts: &[&str]) -> Policy {
    Policy::parse(mode, &hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()).unwrap()
}

fn allowed(p: &Policy, host: &str, port: u16) -> bool {
    p.decide("acme", host, port) == Decision::Allow
}

#[test]
fn each_mode_reaches_what_its_table_says() {
    let none = policy("none", &[]);
    assert!(!allowed(&none, "crates.io", 443));
    let registries = policy("registries", &[]);
    assert!(allowed(&registries, "static.crates.io", 443));
    assert!(allowed(&registries, "pypi.org", 443));
    assert!(!allowed(&registries, "pypi.org", 8443), "a preset host on another port");
    assert!(!allowed(&registries, "evil.example", 443));
    let plus = policy("registries+", &["git.example.com", "*.corp.example:8443"]);
    assert!(allowed(&plus, "crates.io", 443) && allowed(&plus, "git.example.com", 80));
    assert!(allowed(&plus, "a.b.corp.example", 8443));
    assert!(!allowed(&plus, "corp.example", 8443), "`*.suffix` is not the suffix itself");
    assert!(!allowed(&plus, "xcorp.example", 8443));
    assert!(!allowed(&plus, "a.corp.example", 443), "the pattern names its port");
    let allow = policy("allow", &["git.example.com"]);
    assert!(!allowed(&allow, "crates.io", 443), "`allow` has no preset");
    assert!(allowed(&allow, "GIT.example.com.", 443), "case and a trailing dot do not matter");
    assert!(allowed(&policy("full", &[]), "anything.example", 22));
}

#[test]
fn only_an_ip_literal_with_its_port_lifts_the_forbidden_ranges() {
    let p = policy("allow", &["127.0.0.1:8443", "[::1]:9000", "10.0.0.5"]);
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    assert!(p.allows_literal(lo, 8443));
    assert!(!p.allows_literal(lo, 8444));
    assert!(p.allows_literal("::1".parse().unwrap(), 9000));
    assert!(!p.allows_literal("10.0.0.5".parse().unwrap(), 443), "no port, no literal");
    assert!(!policy("full", &[]).allows_literal(lo, 8443), "full is public addresses only");
}

#[test]
fn a_refusal_names_the_policy_and_the_command_that_would_allow_it() {
    let Decision::Refuse { policy: name, reason, hint } =
        policy("registries", &[]).decide("acme", "evil.example", 443)
    else {
        panic!("allowed");
    };
    assert_eq!(name, "org acme: registries");
    assert!(reason.contains("evil.example:443"), "{reason}");
    assert_eq!(hint, "outboard-server admin network set --org acme registries+ evil.example");
    let Decision::Refuse { hint, .. } =
        policy("allow", &["a.example"]).decide("acme", "b.example", 8080)
    else {
        panic!("allowed");
    };
    assert_eq!(hint, "outboard-server admin network set --org acme allow a.example b.example:8080");
}

#[test]
fn bad_modes_and_hosts_are_refused_with_the_reason() {
    let bad = |mode: &str, hosts: &[&str]| {
        Policy::parse(mode, &hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())
            .unwrap_err()
            .to_string()
    };
    assert!(bad("open", &[]).contains("no network mode"));
    assert!(bad("allow", &[]).contains("at least one HOST"));
    assert!(bad("none", &["a.example"]).contains("takes no hosts"));
    assert!(bad("allow", &["https://a.example/x"]).contains("not a URL"));
    assert!(bad("allow", &["a..example"]).contains("not a host name"));
    assert!(bad("allow", &["a.example:http"]).contains("not a number"));
    let many: Vec<String> = (0..=MAX_HOSTS).map(|i| format!("h{i}.example")).collect();
    assert!(Policy::parse("allow", &many).unwrap_err().to_string().contains("at most"));
}

#[test]
fn words_read_back_as_the_same_policy() {
    for (mode, hosts) in [
        ("none", vec![]),
        ("registries", vec![]),
        ("registries+", vec!["a.example", "*.b.example:444"]),
        ("allow", vec!["127.0.0.1:8443", "[::1]:9000"]),
        ("full", vec![]),
    ] {
        let p = policy(mode, &hosts);
        let words: Vec<String> = p.words().split(' ').map(str::to_owned).collect();
        assert_eq!(Policy::parse(&words[0], &words[1..]).unwrap(), p, "{}", p.words());
    }
}

#[tokio::test]
async fn the_policy_and_the_log_are_kept_per_org() {
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    store.add_user("other", "bob").await.unwrap();
    assert!(show(&store, "acme").await.unwrap().contains("network registries"));
    let text = set(&store, "acme", policy("allow", &["git.example.com"])).await.unwrap();
    assert!(text.contains("network allow git.example.com"), "{text}");
    assert!(show(&store, "other").await.unwrap().contains("network registries"));
    assert!(matches!(show(&store, "nope").await, Err(PolicyError::NoOrg(_))));

    let session = SessionPolicy::load(&store, &alice.org_id, Narrowing::Org).await.unwrap();
    assert_eq!(session.decide("git.example.com", 443), Decision::Allow);
    let narrowed = SessionPolicy::load(&store, &alice.org_id, Narrowing::None).await.unwrap();
    assert!(matches!(narrowed.decide("git.example.com", 443), Decision::Refuse { .. }));

    let row = |host: &str, allowed: bool| LogRow {
        at: now_rfc3339(),
        session_id: "s_1".into(),
        user: "alice".into(),
        host: host.into(),
        port: 443,
        allowed,
        reason: (!allowed).then(|| "not allowed".into()),
        bytes_up: 10,
        bytes_down: 20,
        duration_ms: 3,
        intercepted: allowed,
    };
    append(&store, &alice.org_id, vec![row("a.example", true), row("b.example", false)])
        .await
        .unwrap();
    let rows = log(&store, "acme", 10).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.host.as_str()).collect::<Vec<_>>(),
        ["a.example", "b.example"]
    );
    assert!(log(&store, "other", 10).await.unwrap().is_empty());
    assert!(log_table(&rows).contains("refused (not allowed)"));
    assert!(rows[0].intercepted && !rows[1].intercepted, "{rows:?}");
    assert!(log_table(&rows).contains("a.example:443  allowed, credential injected"));
}
