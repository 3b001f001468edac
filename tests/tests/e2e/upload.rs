//! `--upload`: a working tree packed by the CLI's packer, sent over real HTTP to a real
//! `outboard-server` (`POST /v1/uploads`), then unpacked by the server library's `materialize`
//! from that server's data dir, and compared with the original byte for byte; the cap refused
//! from `Content-Length` and while streaming; a wrong token; hostile archives crafted with the tar
//! crate refused with nothing left behind; another user's upload not found; an upload used once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use outboard_cli::client::ConnectOptions;
use outboard_cli::connect::ExitCode as _;
use outboard_cli::upload::{self, ProgressMode, UploadError as ClientUploadError};
use outboard_server::store::{Store, UserRow};
use outboard_server::uploads::{materialize, UploadError};
use outboard_tests::harness::{Api, TestServer};
use pretty_assertions::assert_eq;

/// Nothing here calls the model: any base URL will do.
const NO_MODEL: &str = "http://127.0.0.1:9";

fn server(extra: &[&str]) -> TestServer {
    TestServer::start_in(tempfile::tempdir().unwrap(), Api::Anthropic, NO_MODEL, extra).unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    outboard_tests::git::git(dir, args, None)
}

fn write(path: &Path, content: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

#[derive(Debug, PartialEq, Eq)]
enum Node {
    File { content: Vec<u8>, executable: bool },
    Link(PathBuf),
    Dir,
}

/// Every entry under `root` but `.git` and the names in `skip`, by relative path.
fn tree(root: &Path, skip: &[&str]) -> BTreeMap<PathBuf, Node> {
    fn visit(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<PathBuf, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if rel == Path::new(".git") || skip.iter().any(|s| rel == Path::new(s)) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Node::Link(std::fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                out.insert(rel, Node::Dir);
                visit(root, &path, skip, out);
            } else {
                let executable = meta.permissions().mode() & 0o111 != 0;
                out.insert(rel, Node::File { content: std::fs::read(&path).unwrap(), executable });
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, skip, &mut out);
    out
}

struct Fixture {
    server: TestServer,
    token: String,
    store: Store,
    user: UserRow,
}

impl Fixture {
    async fn new(extra: &[&str]) -> Fixture {
        let server = server(extra);
        let token = server.add_user("ada", "acme").unwrap();
        let store = outboard_tests::harness::open_store(server.data_dir()).unwrap();
        let user = store.authenticate(&token).await.unwrap().unwrap();
        Fixture { server, token, store, user }
    }

    async fn send(&self, dir: &Path) -> Result<String, ClientUploadError> {
        let packed = upload::pack(dir).unwrap();
        let options = ConnectOptions::default();
        let sent =
            upload::send(&packed, &self.server.url, &self.token, &options, ProgressMode::Quiet)
                .await?;
        assert_eq!(sent.bytes, packed.bytes);
        Ok(sent.upload_id)
    }

    async fn unpack(
        &self,
        id: &str,
        dest: &Path,
    ) -> Result<outboard_server::uploads::Materialized, UploadError> {
        materialize(&self.store, self.server.data_dir(), &self.user, id, dest, &|_: &str, _, _| {})
            .await
    }

    /// The files left in the uploads directory.
    fn uploads_left(&self) -> Vec<String> {
        let dir = self.server.data_dir().join("uploads");
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }
}

#[tokio::test]
async fn a_git_work_tree_with_uncommitted_and_untracked_changes_arrives_exactly() {
    let fx = Fixture::new(&[]).await;
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    git(root, &["init", "-q"]);
    write(&root.join("README.md"), b"# demo\n");
    write(&root.join("src/lib.rs"), b"pub fn one() -> u32 { 1 }\n");
    write(&root.join("gone.txt"), b"deleted before the upload\n");
    write(&root.join(".gitignore"), b"*.log\ntarget/\n");
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "first"]);
    write(&root.join("docs/guide.md"), b"guide\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "second"]);
    git(root, &["checkout", "-q", "-b", "feature"]);
    // Uncommitted: a modified tracked file, a deleted one, untracked files, an ignored one, a
    // binary file, a symlink.
    write(&root.join("src/lib.rs"), b"pub fn one() -> u32 { 2 }\n");
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    write(&root.join("notes/todo.txt"), b"untracked\n");
    write(&root.join("debug.log"), b"ignored\n");
    write(&root.join("target/out.bin"), b"ignored too\n");
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    write(&root.join("assets/blob.bin"), &binary);
    std::os::unix::fs::symlink("src/lib.rs", root.join("lib-link")).unwrap();

    // From a subdirectory: the whole work tree is uploaded.
    let id = fx.send(&root.join("src")).await.unwrap();
    let dest = tempfile::tempdir().unwrap();
    let done = fx.unpack(&id, dest.path()).await.unwrap();

    assert_eq!(tree(dest.path(), &[]), tree(root, &["debug.log", "target"]));
    assert_eq!(git(dest.path(), &["status", "--porcelain"]), git(root, &["status", "--porcelain"]));
    assert_eq!(git(dest.path(), &["log", "--format=%H %s"]), git(root, &["log", "--format=%H %s"]));
    assert_eq!(done.branch.as_deref(), Some("feature"));
    assert_eq!(done.head.as_deref(), Some(git(root, &["rev-parse", "HEAD"]).trim()));
    assert_eq!(git(dest.path(), &["symbolic-ref", "HEAD"]).trim(), "refs/heads/feature");
    assert!(fx.uploads_left().is_empty(), "{:?}", fx.uploads_left());

    // Used once.
    let again = tempfile::tempdir().unwrap();
    let err = fx.unpack(&id, again.path()).await.unwrap_err();
    assert!(matches!(err, UploadError::Used(_)), "{err}");
}

#[tokio::test]
async fn a_plain_directory_honours_its_ignore_files() {
    let fx = Fixture::new(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join(".gitignore"), b"build/\n*.tmp\n");
    write(&root.join(".ignore"), b"secret.txt\n");
    write(&root.join("main.py"), b"print('hi')\n");
    write(&root.join(".env.example"), b"KEY=\n");
    write(&root.join("build/out.o"), b"ignored\n");
    write(&root.join("scratch.tmp"), b"ignored\n");
    write(&root.join("secret.txt"), b"ignored\n");
    write(&root.join("pkg/mod.py"), b"x = 1\n");
    std::fs::create_dir_all(root.join("empty")).unwrap();

    let id = fx.send(root).await.unwrap();
    let dest = tempfile::tempdir().unwrap();
    let done = fx.unpack(&id, dest.path()).await.unwrap();
    assert_eq!(tree(dest.path(), &[]), tree(root, &["build", "scratch.tmp", "secret.txt"]));
    assert!(!dest.path().join(".git").exists());
    assert_eq!((done.branch, done.head), (None, None));
}

#[tokio::test]
async fn an_upload_over_the_cap_is_refused_from_its_length_with_both_numbers() {
    let fx = Fixture::new(&["--max-upload-bytes", "100000"]).await;
    let dir = tempfile::tempdir().unwrap();
    // Larger than the socket buffers, so the server refuses while the body is still being sent.
    let big: Vec<u8> =
        (0..4_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    write(&dir.path().join("big.bin"), &big);
    let packed_bytes = upload::pack(dir.path()).unwrap().bytes;
    let err = fx.send(dir.path()).await.unwrap_err();
    let ClientUploadError::Refused { status, message } = &err else { panic!("{err}") };
    assert_eq!(*status, 413, "{message}");
    assert!(message.contains(&packed_bytes.to_string()), "{message}");
    assert!(message.contains("100000"), "{message}");
    assert!(fx.uploads_left().is_empty(), "{:?}", fx.uploads_left());
}

/// A body without a length, longer than the cap, then nothing: the server counts, stops at the
/// cap and answers 413 (the body never ends, so only a count can stop it).
#[tokio::test]
async fn a_chunked_body_over_the_cap_is_cut_at_the_cap() {
    let fx = Fixture::new(&["--max-upload-bytes", "100000"]).await;
    let chunk = vec![7u8; 30_000];
    let first =
        futures_util::stream::iter((0..4).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let body = futures_util::StreamExt::chain(first, futures_util::stream::pending());
    let url = format!("http://{}/v1/uploads", fx.server.addr());
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(&fx.token)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let text = response.text().await.unwrap();
    assert!(text.contains("more than 100000"), "{text}");
    outboard_tests::harness::wait_until(
        "the partial upload is removed",
        std::time::Duration::from_secs(10),
        || fx.uploads_left().is_empty(),
    )
    .unwrap();
}

#[tokio::test]
async fn a_wrong_token_is_401() {
    let fx = Fixture::new(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.txt"), b"a\n");
    let packed = upload::pack(dir.path()).unwrap();
    let options = ConnectOptions::default();
    let err = upload::send(&packed, &fx.server.url, "ob_wrong", &options, ProgressMode::Quiet)
        .await
        .unwrap_err();
    let ClientUploadError::Refused { status, message } = &err else { panic!("{err}") };
    assert_eq!(*status, 401, "{message}");
    assert_eq!(err.exit_code(), outboard_cli::exit::CONNECT);
    assert!(fx.uploads_left().is_empty());
}

/// A tar member with a raw name, bypassing the tar crate's own path checks.
fn raw_member(
    builder: &mut tar::Builder<Vec<u8>>,
    name: &[u8],
    kind: tar::EntryType,
    link: Option<&str>,
    data: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    if let Some(link) = link {
        header.set_link_name(link).unwrap();
    }
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

async fn post_archive(fx: &Fixture, archive: Vec<u8>) -> String {
    let url = format!("http://{}/v1/uploads", fx.server.addr());
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(&fx.token)
        .body(archive)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: outboard_shared::UploadResponse = response.json().await.unwrap();
    answer.upload_id
}

#[tokio::test]
async fn hostile_archives_are_refused_and_leave_nothing() {
    let fx = Fixture::new(&[]).await;
    type Craft = fn(&mut tar::Builder<Vec<u8>>);
    let cases: [(&str, Craft); 8] = [
        ("..", |b| raw_member(b, b"../escape.txt", tar::EntryType::Regular, None, b"x")),
        // git takes these for `.git` too; they were `internal` with git's raw stderr before.
        (".GIT", |b| raw_member(b, b".GIT/config", tar::EntryType::Regular, None, b"[core]\n")),
        ("GIT~1", |b| raw_member(b, b"GIT~1/config", tar::EntryType::Regular, None, b"[core]\n")),
        ("absolute", |b| {
            raw_member(b, b"/tmp/outboard-upload-escape", tar::EntryType::Regular, None, b"x")
        }),
        (".git", |b| raw_member(b, b".git/config", tar::EntryType::Regular, None, b"[core]\n")),
        ("symlink", |b| {
            raw_member(b, b"sub", tar::EntryType::Directory, None, b"");
            raw_member(b, b"link", tar::EntryType::Symlink, Some("sub"), b"");
            raw_member(b, b"link/file", tar::EntryType::Regular, None, b"through the link\n");
        }),
        ("hard link", |b| raw_member(b, b"hard", tar::EntryType::Link, Some("/etc/passwd"), b"")),
        ("fifo", |b| raw_member(b, b"pipe", tar::EntryType::Fifo, None, b"")),
    ];
    for (name, craft) in cases {
        let mut builder = tar::Builder::new(Vec::new());
        raw_member(&mut builder, b"first.txt", tar::EntryType::Regular, None, b"unpacked first\n");
        craft(&mut builder);
        let id = post_archive(&fx, builder.into_inner().unwrap()).await;
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join("ws");
        std::fs::create_dir(&dest).unwrap();
        let err = fx.unpack(&id, &dest).await.unwrap_err();
        assert!(matches!(err, UploadError::Unsafe { .. }), "{name}: {err}");
        assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0, "{name}: dest is not empty");
        assert_eq!(
            std::fs::read_dir(parent.path()).unwrap().count(),
            1,
            "{name}: wrote beside dest"
        );
        assert!(fx.uploads_left().is_empty(), "{name}: {:?}", fx.uploads_left());
    }
    assert!(!Path::new("/tmp/outboard-upload-escape").exists());
}

/// A history bundle that is not one is the client's mistake, answered as such: `bad_request`
/// naming the member, never `internal` with git's stderr and the server's paths.
#[tokio::test]
async fn a_junk_history_bundle_is_a_bad_request_naming_the_member() {
    let fx = Fixture::new(&[]).await;
    let mut builder = tar::Builder::new(Vec::new());
    raw_member(&mut builder, b"first.txt", tar::EntryType::Regular, None, b"unpacked first\n");
    let bundle = outboard_shared::http::UPLOAD_HISTORY_BUNDLE.as_bytes();
    raw_member(&mut builder, bundle, tar::EntryType::Regular, None, b"not a bundle at all\n");
    let id = post_archive(&fx, builder.into_inner().unwrap()).await;
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("ws");
    std::fs::create_dir(&dest).unwrap();
    let err = fx.unpack(&id, &dest).await.unwrap_err();
    let body = err.body();
    assert_eq!(body.code, outboard_shared::ErrorCode::BadRequest, "{err}");
    assert!(
        body.message.contains(outboard_shared::http::UPLOAD_HISTORY_BUNDLE),
        "{}",
        body.message
    );
    assert!(body.message.contains("not a git bundle"), "{}", body.message);
    let data = fx.server.data_dir().to_string_lossy().into_owned();
    assert!(!body.message.contains(&data), "the server's path leaked: {}", body.message);
    assert!(!body.message.contains(&*parent.path().to_string_lossy()), "{}", body.message);
}

#[tokio::test]
async fn another_users_upload_is_not_found_and_stays_for_its_owner() {
    let fx = Fixture::new(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.txt"), b"a\n");
    let id = fx.send(dir.path()).await.unwrap();
    let other_token = fx.server.add_user("bob", "acme").unwrap();
    let bob = fx.store.authenticate(&other_token).await.unwrap().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let err =
        materialize(&fx.store, fx.server.data_dir(), &bob, &id, dest.path(), &|_: &str, _, _| {})
            .await
            .unwrap_err();
    assert!(matches!(err, UploadError::NotFound(_)), "{err}");
    assert_eq!(err.body().code, outboard_shared::ErrorCode::NotFound);
    let unknown = fx.unpack("up_nope", dest.path()).await.unwrap_err();
    assert!(matches!(unknown, UploadError::NotFound(_)), "{unknown}");
    fx.unpack(&id, dest.path()).await.unwrap();
    assert_eq!(std::fs::read(dest.path().join("a.txt")).unwrap(), b"a\n");
}

#[test]
fn upload_without_a_server_is_a_usage_error_naming_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ran = outboard_tests::harness::outboard_in(
        Some(dir.path()),
        &[],
        &["run", "hello", "--upload"],
        None,
    )
    .unwrap();
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("use --workspace DIR"), "{}", ran.stderr);
    let tui =
        outboard_tests::harness::outboard_in(Some(dir.path()), &[], &["--upload"], None).unwrap();
    assert_eq!(tui.code, 2, "{}", tui.stderr);
    assert!(tui.stderr.contains("use --workspace DIR"), "{}", tui.stderr);
}
