//! The check off the start's path: a pass is remembered per installation, a failure is not and
//! reaches the first command with its explanation, a remembered pass is checked again when a
//! sandbox fails anyway. Real bubblewrap sandboxes; a broken setup is a sandbox agent that dies
//! at once (`/bin/false`), as one does when the host refuses it namespaces.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;

const T: Duration = Duration::from_secs(20);

/// A setup that cannot start any sandbox: its agent exits before saying hello.
fn broken() -> SandboxConfig {
    SandboxConfig { agent_exe: Some("/bin/false".into()), ..SandboxConfig::Bwrap }
}

#[tokio::test]
async fn a_pass_is_remembered_for_this_installation_and_the_next_start_checks_nothing() {
    let data = tempfile::tempdir().unwrap();
    let memo = data.path().join("sandbox-check");
    start(&SandboxConfig::Bwrap, Some(&memo)).wait().await.unwrap();
    assert_eq!(std::fs::read_to_string(&memo).unwrap(), key(&SandboxConfig::Bwrap));

    // A remembered pass is taken as it is: even a setup that would fail passes at once when
    // the file says this installation passed (what the next start of the same binary sees).
    std::fs::write(&memo, key(&broken())).unwrap();
    start(&broken(), Some(&memo)).wait().await.unwrap();
}

#[tokio::test]
async fn a_remembered_pass_is_checked_again_when_a_sandbox_fails_and_explains_why() {
    let data = tempfile::tempdir().unwrap();
    let memo = data.path().join("sandbox-check");
    std::fs::write(&memo, key(&broken())).unwrap();
    let preflight = start(&broken(), Some(&memo));
    let config = SandboxConfig { preflight: Some(preflight), ..broken() };
    let ws = tempfile::tempdir().unwrap();
    let err = Sandbox::new(config, ws.path().to_path_buf())
        .exec("true", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap_err();
    let said = err.to_string();
    assert!(matches!(err, SandboxError::Unavailable(_)), "{said}");
    assert!(said.contains("a trivial command failed in the bubblewrap sandbox"), "{said}");
    assert!(!memo.exists(), "the stale pass is forgotten");
}

#[tokio::test]
async fn a_failed_check_is_not_remembered_and_is_the_first_commands_error() {
    let data = tempfile::tempdir().unwrap();
    let memo = data.path().join("sandbox-check");
    let preflight = start(&broken(), Some(&memo));
    let err = preflight.wait().await.unwrap_err();
    assert!(matches!(err, SandboxError::Unavailable(_)), "{err}");
    assert!(!memo.exists(), "a failure is not remembered");

    // A session's sandbox waits for the check and fails with its explanation, every time.
    let config = SandboxConfig { preflight: Some(preflight), ..broken() };
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config, ws.path().to_path_buf());
    for _ in 0..2 {
        let err =
            sandbox.exec("true", T, &mut |_, _| {}, CancellationToken::new()).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the sandbox is unavailable on this host: a trivial command failed"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn another_installation_checks_again() {
    let data = tempfile::tempdir().unwrap();
    let memo = data.path().join("sandbox-check");
    let other = SandboxConfig { agent_exe: Some("/bin/true".into()), ..SandboxConfig::Bwrap };
    std::fs::write(&memo, key(&other)).unwrap();
    // The broken setup's agent differs from the remembered one: its check runs, and fails.
    let err = start(&broken(), Some(&memo)).wait().await.unwrap_err();
    assert!(err.to_string().contains("a trivial command failed"), "{err}");
}
