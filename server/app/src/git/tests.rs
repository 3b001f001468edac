#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use super::*;
use pretty_assertions::assert_eq;

#[test]
fn urls_are_normalized_and_their_host_keyed_without_default_ports() {
    let u = RepoUrl::parse("https://Git.Example:443/acme/app.git/", false).unwrap();
    assert_eq!(u.url, "https://git.example:443/acme/app.git");
    assert_eq!(u.host, "git.example");
    let u = RepoUrl::parse("http://127.0.0.1:8080/git/r", false).unwrap();
    assert_eq!(u.host, "127.0.0.1:8080");
    let u = RepoUrl::parse("http://[::1]:80/r", false).unwrap();
    assert_eq!(u.host, "[::1]");
}

#[test]
fn urls_that_cannot_be_cloned_safely_are_refused_with_the_reason() {
    let cases = [
        ("https://bob:hunter2@git.example/r", "carries credentials"),
        ("https://tok@git.example/r", "carries credentials"),
        ("file:///srv/repo", "this server's own disk"),
        ("/srv/repo", "this server's own disk"),
        ("ssh://git@git.example/r", "ssh"),
        ("git@git.example:acme/r.git", "not a URL"),
        ("ftp://git.example/r", "not supported"),
        ("https:///r", "no host"),
        ("https://git.example/r?x=1", "no query"),
        ("", "empty"),
    ];
    for (url, why) in cases {
        let err = RepoUrl::parse(url, false).unwrap_err().to_string();
        assert!(err.contains(why), "{url}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
    assert_eq!(RepoUrl::parse("file:///srv/repo", true).unwrap().url, "/srv/repo");
}

#[test]
fn progress_lines_are_read() {
    let p = parse_progress("Receiving objects:  45% (450/1000), 1.20 MiB | 2.00 MiB/s").unwrap();
    assert_eq!((p.phase.as_str(), p.done, p.total), ("receiving", 450, Some(1000)));
    let p = parse_progress("remote: Counting objects: 100% (12/12), done.").unwrap();
    assert_eq!((p.phase.as_str(), p.done, p.total), ("counting", 12, Some(12)));
    let p = parse_progress("remote: Enumerating objects: 7, done.").unwrap();
    assert_eq!((p.phase.as_str(), p.done, p.total), ("enumerating", 7, None));
    assert_eq!(parse_progress("Cloning into bare repository 'x'..."), None);
    assert_eq!(parse_progress("fatal: Authentication failed for 'http://h/r'"), None);
}

#[test]
fn advertised_refs_are_parsed_with_tags_peeled() {
    let text = "ref: refs/heads/main\tHEAD\n\
                1111111111111111111111111111111111111111\tHEAD\n\
                1111111111111111111111111111111111111111\trefs/heads/main\n\
                2222222222222222222222222222222222222222\trefs/heads/dev\n\
                3333333333333333333333333333333333333333\trefs/tags/v1\n\
                2222222222222222222222222222222222222222\trefs/tags/v1^{}\n";
    let refs = RemoteRefs::parse(text);
    assert_eq!(refs.head.as_deref(), Some("main"));
    assert_eq!(refs.get("refs/tags/v1"), Some("2222222222222222222222222222222222222222"));
    assert_eq!(refs.branches(), ["main", "dev"]);
}

#[test]
fn failures_are_classified_by_what_the_user_can_do() {
    let remote = |credential: bool| Remote {
        url: "http://h:1/r".into(),
        host: "h:1".into(),
        credential: credential.then(|| SecretValue::new("tok".into())),
        pin: None,
    };
    let failed = |detail: &str| GitError::Failed { command: "fetch".into(), detail: detail.into() };
    let cases = [
        ("fatal: Authentication failed for 'http://h:1/r/'", true, "refused"),
        ("fatal: Authentication failed for 'http://h:1/r/'", false, "has none"),
        (
            "fatal: could not read Username for 'http://h:1': terminal prompts disabled",
            false,
            "has none",
        ),
        (
            "fatal: unable to access 'http://h:1/r/': The requested URL returned error: 403",
            true,
            "refused",
        ),
        (
            "fatal: unable to access 'http://h:1/r/': Failed to connect to h port 1",
            true,
            "cannot reach h:1",
        ),
        ("fatal: repository 'http://h:1/r/' not found", true, "no git repository"),
        ("error: unable to write file: No space left on device", true, "disk is full"),
    ];
    for (detail, credential, says) in cases {
        let msg = classify(failed(detail), &remote(credential)).to_string();
        assert!(msg.contains(says), "{detail}: {msg}");
    }
}

#[tokio::test]
async fn a_failing_command_names_itself_and_never_shows_the_credential() {
    let git = Git::default();
    let remote = Remote {
        url: "http://127.0.0.1:9/r".into(),
        host: "127.0.0.1:9".into(),
        credential: Some(SecretValue::new("s3cr3t-value".into())),
        pin: None,
    };
    let err = git
        .remote_command(None, &remote, &["ls-remote", "http://127.0.0.1:9/r"])
        .output()
        .await
        .unwrap_err();
    let msg = classify(err, &remote).to_string();
    assert!(msg.contains("cannot reach 127.0.0.1:9"), "{msg}");
    assert!(!msg.contains("s3cr3t"), "{msg}");
}
