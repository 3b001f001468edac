use super::limits::*;
use super::sealed::*;
use super::*;
use outboard_base::util::now_rfc3339;
use outboard_shared::OrgId;
use outboard_store::db::params;
use outboard_store::Store;
use outboard_store::UserRow;
use pretty_assertions::assert_eq;
use std::os::unix::fs::PermissionsExt as _;

/// A value no other part of the fixture contains, so finding its bytes anywhere means a leak.
const VALUE: &str = "tok-UNIT-SECRET-6b1d9e";

struct Fixture {
    dir: tempfile::TempDir,
    store: Store,
    secrets: Secrets,
    alice: UserRow,
    eve: UserRow,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let (eve, _) = store.add_user("evil", "eve").await.unwrap();
    let key = SecretKey::load_with(dir.path(), None).unwrap();
    let secrets = Secrets::new(store.clone(), key);
    Fixture { dir, store, secrets, alice, eve }
}

fn value(text: &str) -> SecretValue {
    SecretValue::new(text.to_owned())
}

/// Waits until the clock shows another millisecond, so the next `set` is strictly later
/// (`created_at` has millisecond resolution).
fn next_millisecond() {
    let start = now_rfc3339();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while now_rfc3339() == start {
        assert!(std::time::Instant::now() < deadline, "the clock did not advance in 10 s");
        std::thread::yield_now();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn set_then_for_host_opens_the_value() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    f.secrets.set(org, "github.com", "ci-token", value(VALUE)).await.unwrap();
    let got = f.secrets.for_host(org, "github.com").await.unwrap().unwrap();
    assert_eq!(got.expose(), VALUE);
    assert!(f.secrets.for_host(org, "gitlab.com").await.unwrap().is_none());
    // Another org sees nothing of it.
    assert!(f.secrets.for_host(&f.eve.org_id, "github.com").await.unwrap().is_none());
    assert!(f.secrets.list(&f.eve.org_id).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_database_files_do_not_hold_the_value() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    f.secrets.set(org, "git.example.com:8443", "deploy-key", value(VALUE)).await.unwrap();
    // Read back once so the sealed row is surely written, then look at every file SQLite keeps.
    assert_eq!(f.secrets.list(org).await.unwrap().len(), 1);
    let mut all = Vec::new();
    for name in ["outboard.db", "outboard.db-wal", "outboard.db-shm"] {
        if let Ok(bytes) = std::fs::read(f.dir.path().join(name)) {
            all.extend_from_slice(&bytes);
        }
    }
    if f.store.backend() == outboard_store::db::Backend::Postgres {
        // No file to read: every byte of every row of the table instead.
        let rows = f
            .store
            .call(|c| {
                let mut stmt = c.prepare(
                    "SELECT host, name, nonce, sealed, created_at,
                            COALESCE(inject_header, ''), COALESCE(placeholders, '')
                     FROM org_secrets",
                )?;
                let rows = stmt.query_map((), |r| {
                    let mut bytes = Vec::new();
                    for i in 0..7usize {
                        bytes.extend(r.get::<_, Vec<u8>>(i)?);
                    }
                    Ok(bytes)
                })?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap();
        all.extend(rows.concat());
    }
    // The search finds what is stored in clear (so it would find the value if it were).
    assert!(contains(&all, b"git.example.com:8443"), "the host is not in the db files");
    assert!(contains(&all, b"deploy-key"), "the name is not in the db files");
    assert!(!contains(&all, VALUE.as_bytes()), "the value is in the db files in clear");
    let b64 = value(VALUE).basic_header();
    let b64 = b64.expose().trim_start_matches("Basic ");
    assert!(!contains(&all, b64.as_bytes()), "the value is in the db files as base64");
}

#[tokio::test]
async fn a_value_sealed_with_another_key_is_a_clear_error() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    f.secrets.set(org, "github.com", "ci-token", value(VALUE)).await.unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other =
        Secrets::new(f.store.clone(), SecretKey::load_with(other_dir.path(), None).unwrap());
    let err = other.for_host(org, "github.com").await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SecretError::WrongKey { .. }), "{err:?}");
    assert_eq!(
        text,
        "the secret github.com/ci-token of org acme does not open with this server's key: was \
         the key file replaced? set it again with `outboard-server admin secret set`"
    );
    // Setting another secret with that key is refused: the server could not open the old ones.
    let err = other.set(org, "gitlab.com", "x", value("other")).await.unwrap_err();
    assert!(matches!(err, SecretError::KeyMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("OUTBOARD_SECRET_KEY"), "{err}");
    assert_eq!(f.secrets.list(org).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_sealed_value_copied_to_another_row_does_not_open() {
    let f = fixture().await;
    let org = f.alice.org_id.clone();
    f.secrets.set(&org, "github.com", "ci-token", value(VALUE)).await.unwrap();
    f.secrets.set(&f.eve.org_id, "gitlab.com", "mine", value("eve-token")).await.unwrap();
    // An attacker with write access to the db copies acme's sealed bytes into eve's org, and into
    // another of acme's hosts.
    let (acme, eve) = (org.0.clone(), f.eve.org_id.0.clone());
    f.store
        .call(move |c| {
            c.execute(
                "INSERT INTO org_secrets (org_id, host, name, nonce, sealed, created_at)
                 SELECT ?2, host, name, nonce, sealed, created_at FROM org_secrets
                 WHERE org_id = ?1",
                params![acme, eve],
            )?;
            c.execute(
                "INSERT INTO org_secrets (org_id, host, name, nonce, sealed, created_at)
                 SELECT org_id, 'evil.example', name, nonce, sealed, created_at FROM org_secrets
                 WHERE org_id = ?1",
                params![acme],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let err = f.secrets.for_host(&f.eve.org_id, "github.com").await.unwrap_err();
    assert!(matches!(err, SecretError::WrongKey { ref org, .. } if org == "evil"), "{err:?}");
    let err = f.secrets.for_host(&org, "evil.example").await.unwrap_err();
    assert!(matches!(err, SecretError::WrongKey { ref host, .. } if host == "evil.example"));
    // The original still opens.
    assert_eq!(f.secrets.for_host(&org, "github.com").await.unwrap().unwrap().expose(), VALUE);
}

#[tokio::test]
async fn set_replaces_list_shows_no_values_and_remove_removes() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    f.secrets.set(org, "github.com", "ci-token", value("first")).await.unwrap();
    f.secrets.set(org, "github.com", "ci-token", value("second")).await.unwrap();
    f.secrets.set(org, "[::1]:3000", "local", value("third")).await.unwrap();
    assert_eq!(f.secrets.for_host(org, "github.com").await.unwrap().unwrap().expose(), "second");
    let list = f.secrets.list(org).await.unwrap();
    let listed: Vec<_> = list.iter().map(|s| (s.host.as_str(), s.name.as_str())).collect();
    assert_eq!(listed, [("[::1]:3000", "local"), ("github.com", "ci-token")]);
    assert!(!format!("{list:?}").contains("second"));
    assert!(f.secrets.remove(org, "github.com", "ci-token").await.unwrap());
    assert!(!f.secrets.remove(org, "github.com", "ci-token").await.unwrap());
    assert!(f.secrets.for_host(org, "github.com").await.unwrap().is_none());
    assert_eq!(f.secrets.list(org).await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_most_recently_set_name_wins_for_a_host() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    f.secrets.set(org, "github.com", "b-token", value("from-b")).await.unwrap();
    next_millisecond();
    f.secrets.set(org, "github.com", "a-token", value("from-a")).await.unwrap();
    assert_eq!(f.secrets.for_host(org, "github.com").await.unwrap().unwrap().expose(), "from-a");
    next_millisecond();
    f.secrets.set(org, "github.com", "b-token", value("from-b-again")).await.unwrap();
    assert_eq!(
        f.secrets.for_host(org, "github.com").await.unwrap().unwrap().expose(),
        "from-b-again"
    );
}

#[tokio::test]
async fn an_unknown_org_is_a_clear_error() {
    let f = fixture().await;
    let err = f.secrets.org_by_name("nope").await.unwrap_err();
    assert!(err.to_string().contains("no org named \"nope\""), "{err}");
    assert_eq!(f.secrets.org_by_name("acme").await.unwrap(), f.alice.org_id);
    let err = f.secrets.set(&OrgId("o_missing".into()), "h", "n", value("v")).await.unwrap_err();
    assert!(matches!(err, SecretError::NoOrg(_)), "{err:?}");
}

#[test]
fn the_key_file_is_made_0600_once_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let first = SecretKey::load_with(dir.path(), None).unwrap();
    let path = dir.path().join(KEY_FILE);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 32);
    let second = SecretKey::load_with(dir.path(), None).unwrap();
    let org = OrgId("o_1".into());
    let (nonce, sealed) = first.seal(&org, "h", "n", &value(VALUE)).unwrap();
    assert_eq!(second.open(&org, "h", "n", &nonce, sealed).unwrap().expose(), VALUE);
    // Debug names the file, never the key.
    let shown = format!("{second:?}");
    assert!(shown.contains("secret.key"), "{shown}");
    let key_hex: String =
        std::fs::read(&path).unwrap().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!shown.contains(&key_hex[..8]), "{shown}");
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    SecretKey::load_with(dir.path(), None).unwrap();
    let path = dir.path().join(KEY_FILE);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = SecretKey::load_with(dir.path(), None).unwrap_err();
    assert!(matches!(err, SecretError::KeyFileMode { mode: 0o644, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("chmod 600 {}", path.display())), "{text}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(SecretKey::load_with(dir.path(), None).is_err());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(SecretKey::load_with(dir.path(), None).is_ok());
}

#[test]
fn a_key_file_of_the_wrong_size_or_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(KEY_FILE);
    std::fs::write(&path, b"short").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = SecretKey::load_with(dir.path(), None).unwrap_err();
    assert!(err.to_string().contains("not a 32-byte key (5 bytes)"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, [7u8; 32]).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    assert!(matches!(
        SecretKey::load_with(dir.path(), None).unwrap_err(),
        SecretError::KeyFileIo { .. }
    ));
}

#[test]
fn the_env_key_is_used_instead_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    let env = SecretKey::load_with(dir.path(), Some(hex.into())).unwrap();
    assert!(!dir.path().join(KEY_FILE).exists(), "the env key made a key file");
    assert_eq!(env.source(), KEY_ENV);
    let org = OrgId("o_1".into());
    let (nonce, sealed) = env.seal(&org, "h", "n", &value(VALUE)).unwrap();
    let again = SecretKey::load_with(dir.path(), Some(hex.to_lowercase().into())).unwrap();
    assert_eq!(again.open(&org, "h", "n", &nonce, sealed.clone()).unwrap().expose(), VALUE);
    // An empty variable means unset: the key file, which does not open what the env key sealed.
    let file = SecretKey::load_with(dir.path(), Some("".into())).unwrap();
    assert!(dir.path().join(KEY_FILE).exists());
    assert!(file.open(&org, "h", "n", &nonce, sealed).is_none());
    for bad in [&hex[..62], "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"] {
        let err = SecretKey::load_with(dir.path(), Some(bad.into())).unwrap_err();
        assert!(matches!(err, SecretError::BadEnvKey), "{err:?}");
        assert!(!err.to_string().contains(bad), "the message shows the key: {err}");
    }
}

#[test]
fn host_key_normalizes_urls_authorities() {
    assert_eq!(host_key("https", "GitHub.com", Some(443)), "github.com");
    assert_eq!(host_key("https", "github.com", None), "github.com");
    assert_eq!(host_key("http", "h.example", Some(80)), "h.example");
    assert_eq!(host_key("HTTP", "h.example", Some(443)), "h.example:443");
    assert_eq!(host_key("https", "h.example", Some(80)), "h.example:80");
    assert_eq!(host_key("https", "h.example", Some(8443)), "h.example:8443");
    assert_eq!(host_key("http", "127.0.0.1", Some(41234)), "127.0.0.1:41234");
    assert_eq!(host_key("https", "[2001:DB8:0::1]", Some(443)), "[2001:db8::1]");
    assert_eq!(host_key("https", "::1", Some(3000)), "[::1]:3000");
}

#[test]
fn hosts_are_validated_and_normalized() {
    assert_eq!(validate_host("GitHub.com").unwrap(), "github.com");
    assert_eq!(validate_host("github.com:443").unwrap(), "github.com");
    assert_eq!(validate_host("h.example:80").unwrap(), "h.example");
    assert_eq!(validate_host("git.example.com:8443").unwrap(), "git.example.com:8443");
    assert_eq!(validate_host("127.0.0.1:3000").unwrap(), "127.0.0.1:3000");
    assert_eq!(validate_host("[2001:db8:0:0::1]:3000").unwrap(), "[2001:db8::1]:3000");
    assert_eq!(validate_host("[::1]").unwrap(), "[::1]");
    // What a stored key is compared with is what host_key makes of the same URL.
    assert_eq!(validate_host("[::1]:443").unwrap(), host_key("https", "[::1]", Some(443)));
    for (bad, why) in [
        ("", "empty"),
        ("https://github.com", "scheme"),
        ("github.com/org/repo", "path"),
        ("github.com:0", "port"),
        ("github.com:99999", "port"),
        ("github.com:+1", "port"),
        ("github.com:", "port"),
        (":8080", "empty"),
        ("git hub.com", "letters"),
        ("github_com", "letters"),
        ("-github.com", "not a host name"),
        ("a..b", "not a host name"),
        ("[::1", "']'"),
        ("[not-ip]:1", "IPv6"),
        ("[::1]x", "after"),
    ] {
        let err = validate_host(bad).unwrap_err();
        assert!(err.to_string().contains(why), "{bad:?}: {err}");
    }
    // Userinfo would carry a credential: it is refused without being repeated.
    let err = validate_host("x-access-token:ghp_LEAK@github.com").unwrap_err();
    assert!(matches!(err, SecretError::HostWithCredential));
    assert!(!err.to_string().contains("LEAK"), "{err}");
}

#[test]
fn names_are_validated() {
    for good in ["ci-token", "a", "A.b_c-9", &"x".repeat(64)] {
        validate_name(good).unwrap();
    }
    for bad in ["", "has space", "slash/name", "é", &"x".repeat(65)] {
        assert!(matches!(validate_name(bad), Err(SecretError::BadName { .. })), "{bad:?}");
    }
    // A token typed where the name goes: refused, and not repeated in the message.
    let err = validate_name("ghp_abcdefLEAK").unwrap_err();
    assert!(matches!(err, SecretError::NameIsToken));
    assert!(!err.to_string().contains("LEAK"), "{err}");
}

#[test]
fn values_are_validated_and_one_trailing_newline_dropped() {
    let ok = |raw: &str| validate_value(value(raw)).unwrap().expose().to_owned();
    assert_eq!(ok("tok\n"), "tok");
    assert_eq!(ok("tok\r\n"), "tok");
    assert_eq!(ok("user:pa ss"), "user:pa ss");
    assert_eq!(ok(&"v".repeat(MAX_VALUE_BYTES)), "v".repeat(MAX_VALUE_BYTES));
    let too_long = "v".repeat(MAX_VALUE_BYTES + 1);
    for (bad, why) in [
        ("", "empty"),
        ("\n", "empty"),
        ("zq7\n\n", "control"),
        ("zq7\nzq8", "control"),
        ("zq7\tzq8", "control"),
        ("zq7\0", "control"),
        (too_long.as_str(), "4 KiB"),
    ] {
        let err = validate_value(value(bad)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(why), "{bad:?}: {text}");
        assert!(!text.contains("zq7") && !text.contains("vvvv"), "the message shows it: {text}");
    }
}

#[tokio::test]
async fn set_refuses_bad_input_and_stores_nothing() {
    let f = fixture().await;
    let org = &f.alice.org_id;
    assert!(f.secrets.set(org, "https://github.com", "n", value("v")).await.is_err());
    assert!(f.secrets.set(org, "github.com", "bad name", value("v")).await.is_err());
    assert!(f.secrets.set(org, "github.com", "n", value("two\nlines")).await.is_err());
    assert!(f.secrets.list(org).await.unwrap().is_empty());
    // The same rules as the admin command: `echo`'s newline is dropped.
    f.secrets.set(org, "GitHub.com:443", "n", value("tok\n")).await.unwrap();
    assert_eq!(f.secrets.for_host(org, "github.com").await.unwrap().unwrap().expose(), "tok");
}

#[test]
fn basic_auth_splits_user_and_password() {
    let (user, password) = value("tok-1").basic_auth();
    assert_eq!((user.as_str(), password.expose()), ("x-access-token", "tok-1"));
    let (user, password) = value("bob:pa:ss").basic_auth();
    assert_eq!((user.as_str(), password.expose()), ("bob", "pa:ss"));
    assert_eq!(value("tok-1").basic_header().expose(), "Basic eC1hY2Nlc3MtdG9rZW46dG9rLTE=");
    assert_eq!(value("bob:pa:ss").basic_header().expose(), "Basic Ym9iOnBhOnNz");
    assert_eq!(value("a:").basic_header().expose(), "Basic YTo=");
    assert_eq!(value("ab:c").basic_header().expose(), "Basic YWI6Yw==");
}

#[test]
fn values_print_redacted() {
    let v = value(VALUE);
    assert_eq!(format!("{v:?}"), "[redacted]");
    assert_eq!(format!("{v}"), "[redacted]");
    assert_eq!(format!("{:?}", v.basic_header()), "[redacted]");
    let e = SecretError::WrongKey { org: "acme".into(), host: "h".into(), name: "n".into() };
    assert!(!format!("{e:?}{e}").contains(VALUE));
}
