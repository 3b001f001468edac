//! `outboard-server admin network set|show|log` through the real binary: the modes and their
//! hosts read back, bad modes and hosts refused with the reason, an unknown org refused, the log
//! empty until connections are made.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::harness::bin;

fn admin(data: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin("outboard-server").unwrap())
        .arg("admin")
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_org_network_policy_is_set_shown_and_refused_when_wrong() {
    let data = tempfile::tempdir().unwrap();
    let (code, _, err) = admin(data.path(), &["user", "add", "alice", "--org", "acme"]);
    assert_eq!(code, 0, "{err}");

    let (code, out, _) = admin(data.path(), &["network", "show", "--org", "acme"]);
    assert_eq!(code, 0);
    assert!(out.contains("network registries") && out.contains("crates.io"), "{out}");

    let set =
        ["network", "set", "--org", "acme", "registries+", "git.corp.example", "10.0.0.5:8443"];
    let (code, out, err) = admin(data.path(), &set);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("network registries+ git.corp.example 10.0.0.5:8443"), "{out}");
    let (_, shown, _) = admin(data.path(), &["network", "show", "--org", "acme"]);
    assert_eq!(shown, out, "show reads back what set stored");

    for (args, says) in [
        (vec!["open"], "no network mode"),
        (vec!["allow"], "at least one HOST"),
        (vec!["allow", "https://x.example/"], "not a URL"),
        (vec!["none", "x.example"], "takes no hosts"),
    ] {
        let mut full = vec!["network", "set", "--org", "acme"];
        full.extend(args.iter().copied());
        let (code, _, err) = admin(data.path(), &full);
        assert_ne!(code, 0, "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (_, still, _) = admin(data.path(), &["network", "show", "--org", "acme"]);
    assert_eq!(still, out, "a refused set changed the policy");

    let (code, _, err) = admin(data.path(), &["network", "show", "--org", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("no org named \"nope\""), "{err}");

    let (code, out, _) = admin(data.path(), &["network", "log", "--org", "acme"]);
    assert_eq!(code, 0);
    assert_eq!(out, "no connections yet\n");
    let (code, out, _) = admin(data.path(), &["network", "log", "--org", "acme", "--json"]);
    assert_eq!((code, out.as_str()), (0, ""));
}
