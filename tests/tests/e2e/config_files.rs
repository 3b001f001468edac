//! Configuration files on the real binaries: a client `config.toml` in `$XDG_CONFIG_HOME` that
//! names the server and the token file lets `outboard run` reach a server with no flags, under
//! the flags and the environment; `outboard-server serve --config FILE` listens where the file
//! says, with the file's `[[models]]` catalog; `config show` on both sides prints each value's
//! source (a token as set); an unknown key stops either binary naming the file, line and key;
//! embedded mode gets the file's provider, base URL, model, data dir and workspace as flags.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::Path;
use std::process::Command;

use outboard_tests::fixture::{cli_ok, Org, ORG, USER};
use outboard_tests::harness::{bin, outboard_in, Api, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::scripted::{say, script};
use pretty_assertions::assert_eq;

/// `out`'s line for `key`, its columns joined by single spaces.
fn line_of(out: &str, key: &str) -> Option<String> {
    let line = out.lines().find(|l| l.split_whitespace().next() == Some(key))?;
    Some(line.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_config_file_names_the_server_and_the_token_file() {
    let org = Org::start(&[]).await;
    let token = org.server.add_user(USER, ORG).unwrap();
    let home = tempfile::tempdir().unwrap();
    let token_file = home.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::create_dir(home.path().join("outboard")).unwrap();
    let config = home.path().join("outboard/config.toml");
    let text = format!(
        "# the team's server\nserver = \"{}\"\ntoken_file = \"{}\"\nreconnect_for = \"30s\"\n",
        org.server.url,
        token_file.display()
    );
    std::fs::write(&config, text).unwrap();
    let xdg = [("XDG_CONFIG_HOME", home.path().to_str().unwrap())];

    // No flag: the server and the token come from the file (without it, `run` would start an
    // embedded server, which has no API key here and exits 2).
    let prompt = script(&[say("reached through the config file")]);
    let run = outboard_in(None, &xdg, &["run", &prompt], None).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("reached through the config file"), "{}", run.stdout);

    // A flag wins over the file: a closed port cannot be connected to (exit 3).
    let run = outboard_in(None, &xdg, &["run", "--server", "ws://127.0.0.1:9", "hi"], None);
    assert_eq!(run.unwrap().code, 3);

    let env = [xdg[0], ("OUTBOARD_TOKEN", token.as_str()), ("OUTBOARD_APPROVE", "wait")];
    let show = outboard_in(None, &env, &["config", "show"], None).unwrap();
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(!show.stdout.contains(&token), "the token is shown as set: {}", show.stdout);
    let at = |line: usize| format!("file {}:{line}", config.display());
    let want = [
        ("server", format!("server {} {}", org.server.url, at(2))),
        ("token_file", format!("token_file {} {}", token_file.display(), at(3))),
        ("reconnect_for", format!("reconnect_for 30s {}", at(4))),
        ("token", "token set env OUTBOARD_TOKEN".to_owned()),
        ("approve", "approve wait env OUTBOARD_APPROVE".to_owned()),
        ("network", "network org default".to_owned()),
        ("ca_cert", "ca_cert unset -".to_owned()),
    ];
    for (key, line) in want {
        assert_eq!(line_of(&show.stdout, key), Some(line), "{}", show.stdout);
    }
    assert_eq!(
        show.stdout.lines().next(),
        Some(format!("config file: {}", config.display()).as_str())
    );

    // An unknown key stops every command, naming the file, the line and the key.
    std::fs::write(&config, "server = \"ws://127.0.0.1:9\"\n\ncolour = \"dark\"\n").unwrap();
    let run = outboard_in(None, &xdg, &["sessions"], None).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    let want = format!(
        "outboard: {}:3: unknown key `colour`: no flag is called --colour",
        config.display()
    );
    assert!(run.stderr.starts_with(&want), "{}", run.stderr);
    // A file named explicitly must exist; the default one need not.
    let missing = home.path().join("missing.toml");
    let run = outboard_in(None, &[], &["--config", missing.to_str().unwrap(), "sessions"], None);
    let run = run.unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains(&missing.display().to_string()), "{}", run.stderr);
}

/// A server configuration file like `/etc/outboard/server.toml`, with the model catalog inline.
fn server_file(dir: &Path, data: &Path, base_url: &str) -> std::path::PathBuf {
    let path = dir.join("server.toml");
    let text = format!(
        r#"# port 0: the server prints the port it got (the default would be 7700)
listen = "127.0.0.1:0"
data = "{data}"
model = "mock"
max_steps = 7

[[models]]
name = "mock"
provider = "anthropic"
model = "mock-model"
base_url = "{base_url}"
context_window = 200000
"#,
        data = data.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `outboard-server ARGS` with no `OUTBOARD_*` variable but `env`: (status, stdout, stderr).
fn server_command(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin("outboard-server").unwrap());
    cmd.args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OUTBOARD_")) {
        cmd.env_remove(k);
    }
    let out = cmd.envs(env.iter().copied()).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_its_flags_and_models_from_a_file() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let config = server_file(files.path(), data.path(), &mock.anthropic_base_url());
    let server = TestServer::start_with_config(data, &config, Api::Anthropic).unwrap();
    let port = server.addr().rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
    assert!(server.addr().starts_with("127.0.0.1:") && port != 7700, "{}", server.url);
    let token = server.add_user(USER, ORG).unwrap();
    let run = cli_ok(&server, &token, &["run", &script(&[say("served as the file says")])], None);
    assert!(run.stdout.contains("served as the file says"), "{}", run.stdout);
    let models = cli_ok(&server, &token, &["models", "--json"], None);
    assert!(models.stdout.contains("\"anthropic/mock-model\""), "{}", models.stdout);

    let path = config.to_str().unwrap();
    let env = [("OUTBOARD_LEASE_SECS", "4"), ("OUTBOARD_STORE", "postgres://u:pw@db/x")];
    let (code, out, err) = server_command(&["config", "show", "--config", path], &env);
    assert_eq!(code, 0, "{err}");
    let at = |line: usize| format!("file {path}:{line}");
    let want = [
        ("listen", format!("listen 127.0.0.1:0 {}", at(2))),
        ("max_steps", format!("max_steps 7 {}", at(5))),
        ("models", format!("models 1 [[models]] table {}", at(7))),
        ("lease_secs", "lease_secs 4 env OUTBOARD_LEASE_SECS".to_owned()),
        ("store", "store set env OUTBOARD_STORE".to_owned()),
        ("max_connections", "max_connections 4096 default".to_owned()),
        ("tls_cert", "tls_cert unset -".to_owned()),
    ];
    for (key, line) in want {
        assert_eq!(line_of(&out, key), Some(line), "{out}");
    }
    assert!(!out.contains("pw@"), "the store URL is a secret: {out}");

    // A key that is no flag of `serve` stops it before it starts, naming file, line and key.
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nlisten_port = 7700\n").unwrap();
    let (code, _, err) = server_command(&["serve", "--config", path], &[]);
    assert_eq!(code, 2, "{err}");
    let want = format!("outboard-server: {path}:2: unknown key `listen_port`");
    assert!(err.starts_with(&want), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_mode_takes_the_file_as_flags() {
    let mock = MockLlm::start(vec![MockStep::text("embedded, configured by file")]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("outboard")).unwrap();
    let text = format!(
        "provider = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\ndata = \"{}\"\nworkspace = \"{}\"\n",
        mock.openai_base_url(),
        data.path().display(),
        project.path().display()
    );
    std::fs::write(home.path().join("outboard/config.toml"), text).unwrap();
    let xdg = home.path().to_str().unwrap().to_owned();
    // Without the file this run would use Anthropic's API with no key and exit 2.
    let run = tokio::task::spawn_blocking(move || {
        outboard_in(None, &[("XDG_CONFIG_HOME", &xdg)], &["run", "--json", "hi"], None)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.json_lines().unwrap();
    assert_eq!(lines[0]["embedded"], true);
    assert!(run.stdout.contains("embedded, configured by file"), "{}", run.stdout);
    assert!(data.path().join("outboard.db").exists(), "the file's data dir is used");
}

/// Issue 49, item 7: a client file that holds the `token` and that others may read is refused,
/// naming the `chmod 600` that fixes it, before any connection; at 0600 it is used.
#[test]
fn a_token_in_a_file_others_can_read_is_refused_with_the_chmod() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("outboard")).unwrap();
    let config = home.path().join("outboard/config.toml");
    // A closed port: a command that gets past the file fails to connect (exit 3).
    std::fs::write(&config, "server = \"ws://127.0.0.1:9\"\ntoken = \"tok-0644-a1b2\"\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let xdg = [("XDG_CONFIG_HOME", home.path().to_str().unwrap())];
    let run = outboard_in(None, &xdg, &["sessions"], None).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    let chmod = format!("chmod 600 {}", config.display());
    assert!(run.stderr.contains(&chmod) && run.stderr.contains("`token`"), "{}", run.stderr);
    assert!(!run.stderr.contains("tok-0644-a1b2"), "{}", run.stderr);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = outboard_in(None, &xdg, &["sessions"], None).unwrap();
    assert_eq!(run.code, 3, "{}", run.stderr);
}
