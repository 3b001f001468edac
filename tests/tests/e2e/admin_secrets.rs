//! `outboard-server admin secret set|ls|rm` through the real binary on a real data dir: the value
//! enters through stdin only, `ls` shows hosts and names, no output or file of the data dir holds
//! the value (the running server's log included), a key file others can read and a key other
//! than the one the secrets were sealed with are refused, and mistakes exit 1 with a message. A
//! value typed on a terminal (tmux) is not echoed. tmux is required: a missing tmux fails the
//! terminal test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use std::time::Duration;

use outboard_server::secrets::{SecretKey, Secrets};
use outboard_server::store::{Durability, Store};
use outboard_tests::harness::{bin, wait_until, Api, TestServer};

/// The credential under test: its bytes must never show up outside the sealed row.
const VALUE: &str = "ghp_E2E-SECRET-value-5c0ffee";
/// The key variable, cleared for every run that does not test it (a developer may have it set).
const KEY_ENV: &str = "OUTBOARD_SECRET_KEY";

/// `outboard-server admin secret ARGS --data DIR`, with `stdin` piped in (or none), and extra
/// environment.
fn secret(data: &Path, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin("outboard-server").unwrap());
    cmd.args(["admin", "secret"]).args(args).arg("--data").arg(data).env_remove(KEY_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        // A command that refuses before reading (an unknown org) may close stdin first.
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    }
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn add_user(data: &Path, name: &str, org: &str) {
    let out = Command::new(bin("outboard-server").unwrap())
        .args(["admin", "user", "add", name, "--org", org, "--data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "admin user add: {}", text(&out));
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all.extend(all_bytes(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            all.extend(bytes);
        }
    }
    all
}

/// The value stored for `host` in `org`, opened as the server would (the key file of `data`).
fn stored(data: &Path, org: &str, host: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = Store::open(&data.join("outboard.db"), Durability::Normal).unwrap();
        let secrets = Secrets::new(store, SecretKey::load(data).unwrap());
        let org = secrets.org_by_name(org).await.unwrap();
        secrets.for_host(&org, host).await.unwrap().map(|v| v.expose().to_owned())
    })
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The whole round: set from stdin, ls, the value nowhere (outputs, files, the server's log),
/// rm, and the refusals.
#[test]
fn set_ls_rm_through_stdin_and_the_value_never_shows() {
    let mock_base = "http://127.0.0.1:9"; // never called: no turn runs
    let data = tempfile::tempdir().unwrap();
    add_user(data.path(), "alice", "acme");
    let mut outputs = String::new();

    let set = secret(
        data.path(),
        &["set", "--org", "acme", "--host", "GitHub.com:443", "ci-token"],
        Some(&format!("{VALUE}\n")),
        &[],
    );
    outputs += &text(&set);
    assert!(set.status.success(), "set: {}", text(&set));
    assert!(text(&set).contains("github.com/ci-token"), "{}", text(&set));
    let set2 = secret(
        data.path(),
        &["set", "--org", "acme", "--host", "git.example.com:8443", "deploy"],
        Some("bob:hunter2-E2E"),
        &[],
    );
    outputs += &text(&set2);
    assert!(set2.status.success(), "set: {}", text(&set2));

    // Stored exactly (echo's newline dropped), under the normalized host.
    assert_eq!(stored(data.path(), "acme", "github.com").as_deref(), Some(VALUE));
    assert_eq!(
        stored(data.path(), "acme", "git.example.com:8443").as_deref(),
        Some("bob:hunter2-E2E")
    );

    let key_file = data.path().join("secret.key");
    assert_eq!(std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777, 0o600);

    let ls = secret(data.path(), &["ls", "--org", "acme"], None, &[]);
    outputs += &text(&ls);
    assert!(ls.status.success(), "ls: {}", text(&ls));
    let listed = String::from_utf8_lossy(&ls.stdout).to_string();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines[0].starts_with("HOST")
            && lines[0].contains("NAME")
            && lines[0].contains("SET AT")
            && lines[0].ends_with("OUTBOUND"),
        "{listed}"
    );
    // Not bound to the sandbox's HTTPS: a git credential the server uses itself.
    assert!(lines[1].ends_with("  -") && lines[2].ends_with("  -"), "{listed}");
    assert!(
        lines[1].starts_with("git.example.com:8443") && lines[1].contains("deploy"),
        "{listed}"
    );
    assert!(lines[2].starts_with("github.com ") && lines[2].contains("ci-token"), "{listed}");
    assert!(!listed.contains("hunter2"), "{listed}");

    // A server on this data dir starts with the key file and logs where the key is, not the key.
    let server = TestServer::start_in(data, Api::Anthropic, mock_base, &[]).unwrap();
    let log = server.log();
    assert!(log.contains("org secrets are sealed with this key"), "{log}");
    let key_hex: String =
        std::fs::read(&key_file).unwrap().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!log.contains(&key_hex), "the server logged the key");
    let data_dir = server.data_dir().to_path_buf();
    let files = all_bytes(&data_dir);
    assert!(contains(&files, "git.example.com:8443"), "the search finds stored text");
    for needle in [VALUE, "hunter2-E2E"] {
        assert!(!contains(&files, needle), "{needle} is in a file of the data dir");
        assert!(!outputs.contains(needle), "{needle} was printed: {outputs}");
    }

    // The value cannot be given in argv: there is no argument for it.
    for args in [
        &["set", "--org", "acme", "--host", "h.example", "n", "argv-value"][..],
        &["set", "--org", "acme", "--host", "h.example", "--value", "argv-value", "n"][..],
    ] {
        let out = secret(&data_dir, args, Some(VALUE), &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("unexpected argument"), "{}", text(&out));
    }
    // A token typed as the NAME is refused without being repeated.
    let out = secret(
        &data_dir,
        &["set", "--org", "acme", "--host", "h.example", "ghp_typedOnTheCommandLine"],
        Some(VALUE),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("read from stdin"), "{}", text(&out));
    assert!(!text(&out).contains("typedOnTheCommandLine"), "{}", text(&out));
    // An empty stdin and a two-line value are refused.
    for stdin in ["", "\n", "one\ntwo\n"] {
        let out = secret(
            &data_dir,
            &["set", "--org", "acme", "--host", "h.example", "n"],
            Some(stdin),
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{stdin:?}: {}", text(&out));
        assert!(text(&out).contains("invalid secret value"), "{}", text(&out));
    }
    // More than the 4 KiB a value may hold (a file piped in by mistake): refused, and only the
    // bound is read.
    let big = "v".repeat(100_000);
    let out =
        secret(&data_dir, &["set", "--org", "acme", "--host", "h.example", "n"], Some(&big), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("longer than 4 KiB"), "{}", text(&out));
    let exact = "v".repeat(4096) + "\n";
    let out =
        secret(&data_dir, &["set", "--org", "acme", "--host", "h.example", "n"], Some(&exact), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = secret(&data_dir, &["rm", "--org", "acme", "--host", "h.example", "n"], None, &[]);
    assert!(out.status.success(), "{}", text(&out));
    // An unknown org, for each command.
    for args in [
        &["set", "--org", "nope", "--host", "h.example", "n"][..],
        &["ls", "--org", "nope"][..],
        &["rm", "--org", "nope", "--host", "h.example", "n"][..],
    ] {
        let out = secret(&data_dir, args, Some(VALUE), &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("no org named \"nope\""), "{}", text(&out));
    }
    // A host with a scheme.
    let out = secret(
        &data_dir,
        &["set", "--org", "acme", "--host", "https://github.com", "n"],
        Some(VALUE),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("without scheme"), "{}", text(&out));

    // rm, then ls has only the other one; rm of a missing one exits 1 naming it.
    let rm =
        secret(&data_dir, &["rm", "--org", "acme", "--host", "github.com", "ci-token"], None, &[]);
    assert!(rm.status.success(), "rm: {}", text(&rm));
    let rm = secret(
        &data_dir,
        &["rm", "--org", "acme", "--host", "git.example.com:8443", "deploy"],
        None,
        &[],
    );
    assert!(rm.status.success(), "rm: {}", text(&rm));
    let ls = secret(&data_dir, &["ls", "--org", "acme"], None, &[]);
    assert_eq!(String::from_utf8_lossy(&ls.stdout).lines().count(), 1, "{}", text(&ls));
    let again =
        secret(&data_dir, &["rm", "--org", "acme", "--host", "github.com", "ci-token"], None, &[]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("has no secret ci-token for github.com"), "{}", text(&again));

    let log = server.log();
    assert!(!log.contains(VALUE) && !log.contains("hunter2-E2E"), "the server logged a value");
    drop(server);
}

/// `OUTBOARD_SECRET_KEY` replaces the key file; a run without it (so with a key file of its own)
/// cannot add secrets the server could not open; a key file others can read is refused.
#[test]
fn the_env_key_and_the_key_file_checks() {
    let data = tempfile::tempdir().unwrap();
    add_user(data.path(), "alice", "acme");
    let hex = "9f".repeat(32);
    let env = [(KEY_ENV, hex.as_str())];
    let set = secret(
        data.path(),
        &["set", "--org", "acme", "--host", "h.example", "a"],
        Some(VALUE),
        &env,
    );
    assert!(set.status.success(), "{}", text(&set));
    assert!(!data.path().join("secret.key").exists(), "the env key made a key file");
    assert!(!text(&set).contains(&hex));

    // Without the variable: a key file is made, and it does not open the stored secret.
    let out = secret(
        data.path(),
        &["set", "--org", "acme", "--host", "h.example", "b"],
        Some("other"),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("do not open with this key"), "{}", text(&out));
    assert!(text(&out).contains(KEY_ENV), "{}", text(&out));
    let ls = secret(data.path(), &["ls", "--org", "acme"], None, &env);
    assert_eq!(String::from_utf8_lossy(&ls.stdout).lines().count(), 2, "{}", text(&ls));

    // A bad variable is refused and not repeated.
    let out = secret(data.path(), &["ls", "--org", "acme"], None, &[(KEY_ENV, "not-a-key-XYZ")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("64 hex characters") && !text(&out).contains("XYZ"),
        "{}",
        text(&out)
    );

    // The key file made above, opened up to the group: refused with the fix.
    let key_file = data.path().join("secret.key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = secret(data.path(), &["ls", "--org", "acme"], None, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains(&format!("chmod 600 {}", key_file.display())), "{}", text(&out));
    // And `serve` refuses to start with it.
    let started = TestServer::start_in(data, Api::Anthropic, "http://127.0.0.1:9", &[]);
    let err = started.err().expect("serve started with a key file others can read");
    assert!(err.to_string().contains("chmod 600"), "{err:#}");
}

/// On a terminal, `set` asks for the value and reads it without echo: the typed text never
/// appears on the screen, and is what is stored.
#[test]
fn a_value_typed_on_a_terminal_is_not_echoed() {
    const TYPED: &str = "tty-SECRET-typed-77a1";
    // CI installs tmux (.ci/run); a missing tmux is a failure, never a skip.
    Command::new("tmux").arg("-V").output().expect("tmux is required: apt-get install tmux");
    let data = tempfile::tempdir().unwrap();
    add_user(data.path(), "alice", "acme");
    let socket = format!("outboard-secrets-{}", std::process::id());
    let tmux = |args: &[&str]| -> String {
        let out = Command::new("tmux").args(["-L", &socket]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    struct Kill<'a>(&'a dyn Fn(&[&str]) -> String);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            (self.0)(&["kill-server"]);
        }
    }
    let _kill = Kill(&tmux);
    let script = format!(
        "env -u {KEY_ENV} {bin} admin secret set --org acme --host h.example typed --data {data}; \
         echo EXIT=$?; sleep 120",
        bin = bin("outboard-server").unwrap().display(),
        data = data.path().display(),
    );
    tmux(&["new-session", "-d", "-s", "set", "-x", "150", "-y", "20", "sh", "-c", &script]);
    let mut screen = String::new();
    let mut wait_for = |text: &str| {
        let found =
            wait_until(&format!("{text:?} on the terminal"), Duration::from_secs(60), || {
                screen = tmux(&["capture-pane", "-p", "-t", "set"]);
                screen.contains(text)
            });
        assert!(found.is_ok(), "{text:?} never appeared; the screen:\n{screen}");
        screen.clone()
    };
    wait_for("value for h.example/typed (not shown");
    tmux(&["send-keys", "-t", "set", "-l", TYPED]);
    tmux(&["send-keys", "-t", "set", "Enter"]);
    let end = wait_for("EXIT=");
    assert!(end.contains("EXIT=0") && end.contains("set h.example/typed"), "{end}");
    assert!(!end.contains(TYPED), "the typed value was echoed:\n{end}");
    assert_eq!(stored(data.path(), "acme", "h.example").as_deref(), Some(TYPED));
}
