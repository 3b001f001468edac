//! The git smart-HTTP fixture (`outboard_tests::git_http`) proved with git's own client, no
//! Outboard code: clones at a branch, a tag and a commit id with the right credential; a
//! missing, a wrong and a forbidden credential refused the way git reports them; a push of a new
//! branch (and of a pack large enough that git sends it chunked) landing in the bare repository;
//! a fetch large enough that git gzips its request; the request log and its cap.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::Output;

use outboard_tests::fixture::noise;
use outboard_tests::git_http::{
    basic_auth, git_command, make_repo, GitHttp, Repo, MAX_LOGGED_REQUESTS,
};

const USER: &str = "alice";
const PASSWORD: &str = "s3cret-git-password";

/// A host with one repository `demo.git`: `main` has two commits (README, then src/lib.rs),
/// branch `feature` and annotated tag `v1` sit on the first.
struct Fixture {
    dir: tempfile::TempDir,
    host: GitHttp,
    repo: Repo,
    /// The second commit on `main`.
    main2: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repos");
    std::fs::create_dir(&root).unwrap();
    let repo = make_repo(&root, "demo.git", &[("README.md", b"# demo\n"), ("bin.dat", &[0, 1, 2])])
        .unwrap();
    let main2 =
        repo.commit("main", "main", "second", &[("src/lib.rs", b"fn x() {}\n")], &[]).unwrap();
    repo.commit("feature", &repo.main, "feature work", &[("feature.txt", b"on feature\n")], &[])
        .unwrap();
    assert_eq!(repo.tag("v1", &repo.main).unwrap(), repo.main);
    let host = GitHttp::start(&root, USER, PASSWORD).unwrap();
    Fixture { dir, host, repo, main2 }
}

impl Fixture {
    /// A fresh, empty directory for a clone.
    fn dest(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// `git` in a clean environment with HOME in the test's temp dir.
    fn git(&self) -> std::process::Command {
        git_command(self.dir.path())
    }

    /// `git` sending the right credential on every request.
    fn git_authed(&self) -> std::process::Command {
        let mut git = self.git();
        git.arg("-c")
            .arg(format!("http.extraHeader=Authorization: {}", basic_auth(USER, PASSWORD)));
        git
    }
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "git failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn head_of(fx: &Fixture, dir: &Path) -> String {
    ok(fx.git().arg("-C").arg(dir).args(["rev-parse", "HEAD"]).output().unwrap())
}

#[test]
fn clones_at_a_branch_a_tag_and_the_default_branch_and_fetches_a_commit_by_id() {
    let fx = fixture();
    let url = fx.host.url("demo.git");

    let default = fx.dest("default");
    ok(fx.git_authed().args(["clone", "--quiet", &url]).arg(&default).output().unwrap());
    assert_eq!(head_of(&fx, &default), fx.main2);
    assert_eq!(std::fs::read(default.join("src/lib.rs")).unwrap(), b"fn x() {}\n");
    assert_eq!(std::fs::read(default.join("bin.dat")).unwrap(), [0, 1, 2]);

    // The credential in the URL this time (git probes without it first, then answers the 401).
    let in_url = url.replace("http://", &format!("http://{USER}:{PASSWORD}@"));
    let feature = fx.dest("feature");
    ok(fx
        .git()
        .args(["clone", "--quiet", "--branch", "feature", &in_url])
        .arg(&feature)
        .output()
        .unwrap());
    assert_eq!(head_of(&fx, &feature), fx.repo.rev_parse("feature").unwrap());
    assert_eq!(std::fs::read(feature.join("feature.txt")).unwrap(), b"on feature\n");
    assert!(!feature.join("src/lib.rs").exists());

    let tag = fx.dest("tag");
    ok(fx
        .git_authed()
        .args(["clone", "--quiet", "--branch", "v1", &url])
        .arg(&tag)
        .output()
        .unwrap());
    assert_eq!(head_of(&fx, &tag), fx.repo.main);

    // A commit no ref points at directly (the first on main, behind main's tip), by id: what a
    // clone "at a commit" does after `git init`.
    let by_id = fx.dest("by-id");
    ok(fx.git().args(["init", "--quiet"]).arg(&by_id).output().unwrap());
    ok(fx
        .git_authed()
        .arg("-C")
        .arg(&by_id)
        .args(["fetch", "--quiet", "--depth=1", &url, &fx.repo.main])
        .output()
        .unwrap());
    let fetched =
        ok(fx.git().arg("-C").arg(&by_id).args(["rev-parse", "FETCH_HEAD"]).output().unwrap());
    assert_eq!(fetched, fx.repo.main);

    // Every request reached the host with the credential as git sent it, except the URL clone's
    // unauthenticated probe, answered 401.
    let requests = fx.host.requests();
    let expected = basic_auth(USER, PASSWORD);
    let served: Vec<_> = requests.iter().filter(|r| r.status == 200).collect();
    assert!(served.len() >= 8, "{requests:#?}");
    assert!(served.iter().all(|r| r.authorization.as_deref() == Some(expected.as_str())));
    assert!(served.iter().all(|r| r.path.starts_with("/git/demo.git/")));
    assert!(served.iter().any(|r| r.method == "POST" && r.path == "/git/demo.git/git-upload-pack"));
    let probes: Vec<_> = requests.iter().filter(|r| r.status == 401).collect();
    assert!(!probes.is_empty() && probes.iter().all(|r| r.authorization.is_none()), "{probes:#?}");
}

#[test]
fn a_missing_credential_is_refused_with_401_and_git_exits_128() {
    let fx = fixture();
    let out =
        fx.git().args(["clone", &fx.host.url("demo.git")]).arg(fx.dest("c")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128), "{stderr}");
    // With prompts off git cannot ask for the username the 401 calls for.
    assert!(stderr.contains("could not read Username"), "{stderr}");
    assert!(!fx.dest("c").exists(), "git left a partial clone");
    let requests = fx.host.requests();
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| r.status == 401 && r.authorization.is_none()), "{requests:#?}");
}

#[test]
fn a_wrong_password_is_refused_and_git_says_authentication_failed() {
    let fx = fixture();
    let url = fx.host.url("demo.git").replace("http://", &format!("http://{USER}:wrong@"));
    let out = fx.git().args(["clone", &url]).arg(fx.dest("c")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128), "{stderr}");
    assert!(stderr.contains("Authentication failed"), "{stderr}");
    let wrong = basic_auth(USER, "wrong");
    let requests = fx.host.requests();
    assert!(requests.iter().any(|r| r.authorization.as_deref() == Some(wrong.as_str())));
    assert!(requests.iter().all(|r| r.status == 401), "{requests:#?}");
    // The same with the header: no probe, the wrong value itself is refused.
    let out = fx
        .git()
        .arg("-c")
        .arg(format!("http.extraHeader=Authorization: {wrong}"))
        .args(["ls-remote", &fx.host.url("demo.git")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128));
}

#[test]
fn a_forbidden_user_gets_403() {
    let fx = fixture();
    fx.host.add_user("mallory", "her-own-password");
    fx.host.forbid_user("mallory");
    let mut git = fx.git();
    git.arg("-c").arg(format!(
        "http.extraHeader=Authorization: {}",
        basic_auth("mallory", "her-own-password")
    ));
    let out = git.args(["clone", &fx.host.url("demo.git")]).arg(fx.dest("c")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128), "{stderr}");
    assert!(stderr.contains("The requested URL returned error: 403"), "{stderr}");
    assert!(fx.host.requests().iter().all(|r| r.status == 403));
    // The configured user is not affected.
    ok(fx.git_authed().args(["ls-remote", &fx.host.url("demo.git")]).output().unwrap());
}

#[test]
fn a_pushed_branch_lands_in_the_bare_repository_and_a_large_pack_arrives_chunked() {
    let fx = fixture();
    let work = fx.dest("work");
    ok(fx
        .git_authed()
        .args(["clone", "--quiet", &fx.host.url("demo.git")])
        .arg(&work)
        .output()
        .unwrap());
    std::fs::write(work.join("new.txt"), "pushed\n").unwrap();
    ok(fx.git().arg("-C").arg(&work).args(["add", "new.txt"]).output().unwrap());
    ok(fx.git().arg("-C").arg(&work).args(["commit", "--quiet", "-m", "new"]).output().unwrap());
    let pushed = head_of(&fx, &work);
    ok(fx
        .git_authed()
        .arg("-C")
        .arg(&work)
        .args(["push", "--quiet", "origin", "HEAD:refs/heads/pushed"])
        .output()
        .unwrap());
    assert_eq!(fx.repo.rev_parse("pushed").unwrap(), pushed);
    assert_eq!(fx.repo.rev_parse("main").unwrap(), fx.main2, "main moved");

    // 4 MiB that do not compress: more than git's 1 MiB http.postBuffer, so git streams the pack
    // with chunked transfer encoding (no Content-Length, http-backend reads to EOF).
    let noise = noise(4 << 20, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(work.join("noise.bin"), &noise).unwrap();
    ok(fx.git().arg("-C").arg(&work).args(["add", "noise.bin"]).output().unwrap());
    ok(fx.git().arg("-C").arg(&work).args(["commit", "--quiet", "-m", "noise"]).output().unwrap());
    let big = head_of(&fx, &work);
    ok(fx
        .git_authed()
        .arg("-C")
        .arg(&work)
        .args(["push", "--quiet", "origin", "HEAD:refs/heads/big"])
        .output()
        .unwrap());
    assert_eq!(fx.repo.rev_parse("big").unwrap(), big);
    let stored = fx.repo.git().args(["cat-file", "blob", "big:noise.bin"]).output().unwrap();
    assert!(stored.status.success() && stored.stdout == noise, "the pushed blob differs");
    let pushes: Vec<_> = fx
        .host
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/git-receive-pack"))
        .collect();
    // The small push in one request; the large one as a 4-byte probe (git checks the
    // credential before streaming), then the chunked pack.
    assert_eq!(pushes.len(), 3, "{pushes:#?}");
    assert!(pushes.iter().all(|r| r.status == 200));
    assert!(pushes[0].content_length.is_some_and(|n| n > 4), "{pushes:#?}");
    assert_eq!(pushes[1].content_length, Some(4), "{pushes:#?}");
    assert!(pushes[2].content_length.is_none(), "the large push was not chunked: {pushes:#?}");
}

#[test]
fn a_fetch_of_many_refs_sends_a_gzip_body_that_the_backend_inflates() {
    let fx = fixture();
    // 40 branches at distinct commits: the fetch request's want lines pass 1 KiB, past which
    // git gzips an upload-pack request.
    let mut tips = Vec::new();
    for i in 0..40 {
        let name = format!("topic/branch-number-{i:02}");
        let file = format!("topic-{i}.txt");
        tips.push(fx.repo.commit(&name, "main", &name, &[(&file, name.as_bytes())], &[]).unwrap());
    }
    let mirror = fx.dest("mirror");
    ok(fx
        .git_authed()
        .args(["clone", "--quiet", "--mirror", &fx.host.url("demo.git")])
        .arg(&mirror)
        .output()
        .unwrap());
    for (i, tip) in tips.iter().enumerate() {
        let got = ok(fx
            .git()
            .arg("-C")
            .arg(&mirror)
            .args(["rev-parse", &format!("topic/branch-number-{i:02}")])
            .output()
            .unwrap());
        assert_eq!(&got, tip);
    }
    let requests = fx.host.requests();
    let gzipped: Vec<_> =
        requests.iter().filter(|r| r.content_encoding.as_deref() == Some("gzip")).collect();
    assert!(!gzipped.is_empty(), "git sent no gzip body: {requests:#?}");
    assert!(gzipped.iter().all(|r| r.status == 200 && r.path.ends_with("/git-upload-pack")));
}

/// One request on a keep-alive connection; returns the status.
fn raw_get(conn: &mut BufReader<std::net::TcpStream>, path: &str, auth: Option<&str>) -> u16 {
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    // One write: a request split over several small writes waits on Nagle and delayed ACKs.
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status = status_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).unwrap();
    status
}

#[test]
fn the_request_log_keeps_the_first_requests_up_to_its_cap_and_counts_the_rest() {
    let fx = fixture();
    let stream = std::net::TcpStream::connect(fx.host.authority()).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut conn = BufReader::new(stream);
    // Anything outside /git/ is refused even with the credential, and logged too.
    let right = basic_auth(USER, PASSWORD);
    assert_eq!(raw_get(&mut conn, "/elsewhere", Some(&right)), 404);
    for i in 1..MAX_LOGGED_REQUESTS + 5 {
        assert_eq!(raw_get(&mut conn, &format!("/git/n{i}"), None), 401);
    }
    let requests = fx.host.requests();
    assert_eq!(requests.len(), MAX_LOGGED_REQUESTS);
    assert_eq!(fx.host.requests_dropped(), 5);
    assert_eq!(requests[0].path, "/elsewhere");
    assert_eq!(requests[0].authorization.as_deref(), Some(right.as_str()));
    assert_eq!(
        requests[MAX_LOGGED_REQUESTS - 1].path,
        format!("/git/n{}", MAX_LOGGED_REQUESTS - 1)
    );
}
