//! What an upload may take of the server (issue 50, item 2), on a real `outboard-server` over
//! real HTTP: a flood of uploads stopped by the user's pending bound and by the org's quotas on
//! bytes and on files, counted from the first byte (a body is cut while it arrives); a revoked
//! token ending an upload in flight; a body's overall deadline; a deep archive unpacked with
//! directory lookups linear in its size, and depth bounded; a git "tree bomb" history bundle
//! refused before git runs on it. Each bound is seen in the server's log and metrics too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::Path;
use std::time::Duration;

use outboard_server::store::{Store, UserRow};
use outboard_server::uploads::{materialize, UploadError};
use outboard_tests::harness::{Api, TestServer};

/// Nothing here calls the model: any base URL will do.
const NO_MODEL: &str = "http://127.0.0.1:9";

struct Fixture {
    server: TestServer,
    token: String,
    store: Store,
    user: UserRow,
}

impl Fixture {
    async fn new(extra: &[&str]) -> Fixture {
        let mut args = vec!["--metrics-listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let data = tempfile::tempdir().unwrap();
        let server = TestServer::start_in(data, Api::Anthropic, NO_MODEL, &args).unwrap();
        let token = server.add_user("ada", "acme").unwrap();
        let store = outboard_tests::harness::open_store(server.data_dir()).unwrap();
        let user = store.authenticate(&token).await.unwrap().unwrap();
        Fixture { server, token, store, user }
    }

    fn quota(&self, key: &str, value: &str) {
        let (code, out, err) =
            self.server.admin(&["quota", "set", "--org", "acme", key, value], None).unwrap();
        assert_eq!(code, 0, "{out}{err}");
    }

    fn url(&self) -> String {
        format!("http://{}/v1/uploads", self.server.addr())
    }

    /// POSTs `body` with `token`; the status and the answer's text.
    async fn post(&self, token: &str, body: reqwest::Body) -> (u16, String) {
        let response =
            reqwest::Client::new().post(self.url()).bearer_auth(token).body(body).send().await;
        match response {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, format!("{e:?}")),
        }
    }

    async fn metrics(&self) -> String {
        let url = self.server.metrics_url.clone().unwrap();
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    /// `admin quota show` holds `shown` for the org, and the metrics count `refusals` of
    /// `reason`.
    async fn assert_usage(&self, shown: &str, reason: &str, refusals: u32) {
        let (_, out, _) = self.server.admin(&["quota", "show", "--org", "acme"], None).unwrap();
        assert!(out.contains(shown), "{out}");
        let metrics = self.metrics().await;
        let line = format!("outboard_upload_refusals_total{{reason=\"{reason}\"}} {refusals}");
        assert!(metrics.contains(&line), "{metrics}");
    }

    /// The files left in the uploads directory.
    fn uploads_left(&self) -> Vec<String> {
        let dir = self.server.data_dir().join("uploads");
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }

    async fn unpack(
        &self,
        id: &str,
        dest: &Path,
    ) -> Result<outboard_server::uploads::Materialized, UploadError> {
        materialize(&self.store, self.server.data_dir(), &self.user, id, dest, &|_: &str, _, _| {})
            .await
    }
}

fn member(builder: &mut tar::Builder<Vec<u8>>, path: &str, kind: tar::EntryType, data: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
    header.set_size(data.len() as u64);
    builder.append_data(&mut header, path, data).unwrap();
}

/// An archive of `files` files of `size` incompressible bytes each.
fn archive(files: usize, size: usize, seed: u32) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for i in 0..files {
        let data: Vec<u8> = (0..size as u32)
            .map(|j| ((j ^ seed).wrapping_mul(2_654_435_761).wrapping_add(i as u32) >> 13) as u8)
            .collect();
        member(&mut builder, &format!("f{i}.bin"), tar::EntryType::Regular, &data);
    }
    builder.into_inner().unwrap()
}

/// `bytes` sent in chunks of 16 KiB, without a length: the server only knows what arrived.
fn chunked(bytes: Vec<u8>) -> reqwest::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

async fn post_archive(fx: &Fixture, archive: Vec<u8>, branch: Option<&str>) -> String {
    let mut request = reqwest::Client::new().post(fx.url()).bearer_auth(&fx.token).body(archive);
    if let Some(b) = branch {
        request = request.header(outboard_shared::http::UPLOAD_BRANCH_HEADER, b);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    serde_json::from_str::<outboard_shared::UploadResponse>(&text).unwrap().upload_id
}

/// Twenty uploads of one user with no session: the ninth passes `pending_uploads_per_user`
/// (8 by default) and is refused with 429 naming the quota; a session using one makes room.
#[tokio::test]
async fn an_upload_flood_is_stopped_by_the_users_pending_bound() {
    let fx = Fixture::new(&[]).await;
    let mut stored = Vec::new();
    let mut refused = Vec::new();
    for i in 0..20 {
        let (status, text) = fx.post(&fx.token, archive(1, 1000, i).into()).await;
        match status {
            200 => stored.push(text),
            _ => refused.push((status, text)),
        }
    }
    assert_eq!(stored.len(), 8, "stored: {stored:?}");
    assert_eq!(refused.len(), 12);
    let (status, text) = &refused[0];
    assert_eq!(*status, 429, "{text}");
    assert!(text.contains("quota_exceeded") && text.contains("pending_uploads_per_user"), "{text}");
    assert!(text.contains("admin quota set --org acme pending_uploads_per_user"), "{text}");
    assert_eq!(fx.uploads_left().len(), 8, "{:?}", fx.uploads_left());
    // A session uses one (its unpack claims it): one more fits.
    let first: outboard_shared::UploadResponse = serde_json::from_str(&stored[0]).unwrap();
    let dest = tempfile::tempdir().unwrap();
    fx.unpack(&first.upload_id, dest.path()).await.unwrap();
    assert_eq!(fx.post(&fx.token, archive(1, 1000, 99).into()).await.0, 200);
    assert_eq!(fx.post(&fx.token, archive(1, 1000, 98).into()).await.0, 429);
    let metrics = fx.metrics().await;
    assert!(
        metrics.contains("outboard_upload_refusals_total{reason=\"pending_uploads_per_user\"} 13"),
        "{metrics}"
    );
    assert!(fx.server.log().contains("upload refused"), "{}", fx.server.log());
}

/// The org's `upload_bytes_per_day` at 1 MiB: 300 KiB uploads of two users of the org are
/// stored until the fourth, which is cut while it arrives (no length announced) and leaves no
/// file; one announcing a length past the room is refused before its body.
#[tokio::test]
async fn an_upload_flood_by_bytes_is_stopped_by_the_orgs_quota_while_it_arrives() {
    let fx = Fixture::new(&[]).await;
    fx.quota("upload_bytes_per_day", "1MiB");
    let other = fx.server.add_user("bob", "acme").unwrap();
    for (i, token) in [&fx.token, &other, &fx.token].into_iter().enumerate() {
        let (status, text) = fx.post(token, chunked(archive(1, 300_000, i as u32))).await;
        assert_eq!(status, 200, "upload {i}: {text}");
    }
    let (status, text) = fx.post(&other, chunked(archive(1, 300_000, 7))).await;
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("upload_bytes_per_day"), "{text}");
    let (status, text) = fx.post(&other, archive(1, 300_000, 8).into()).await;
    assert_eq!(status, 429, "{text}");
    outboard_tests::harness::wait_until(
        "the cut upload's partial file is removed",
        Duration::from_secs(10),
        || fx.uploads_left().iter().all(|f| !f.ends_with(".part")),
    )
    .unwrap();
    assert_eq!(fx.uploads_left().len(), 3, "{:?}", fx.uploads_left());
    fx.assert_usage(
        "upload_bytes_per_day 1048576 (1 MiB)  [set]  (used: 88",
        "upload_bytes_per_day",
        2,
    )
    .await;
}

/// The org's `upload_files_per_day` at 1,000: archives of 400 empty files (a few hundred KiB
/// each) pass until the third, which is cut at its members, not its bytes.
#[tokio::test]
async fn an_upload_flood_by_files_is_stopped_by_the_orgs_quota() {
    let fx = Fixture::new(&[]).await;
    fx.quota("upload_files_per_day", "1000");
    let empty_files = || {
        let mut builder = tar::Builder::new(Vec::new());
        for i in 0..400 {
            member(&mut builder, &format!("e{i}"), tar::EntryType::Regular, b"");
        }
        builder.into_inner().unwrap()
    };
    assert_eq!(fx.post(&fx.token, chunked(empty_files())).await.0, 200);
    assert_eq!(fx.post(&fx.token, chunked(empty_files())).await.0, 200);
    let (status, text) = fx.post(&fx.token, chunked(empty_files())).await;
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("upload_files_per_day") && text.contains("1000"), "{text}");
    // The CLI announces its length: the members are over the quota, not the bytes, so the
    // refusal comes mid-body; the server reads the rest and the CLI gets the answer.
    let tree = tempfile::tempdir().unwrap();
    for i in 0..400 {
        std::fs::write(tree.path().join(format!("e{i}")), b"").unwrap();
    }
    let packed = outboard_cli::upload::pack(tree.path()).unwrap();
    let options = outboard_cli::client::ConnectOptions::default();
    let quiet = outboard_cli::upload::ProgressMode::Quiet;
    let err = outboard_cli::upload::send(&packed, &fx.server.url, &fx.token, &options, quiet)
        .await
        .unwrap_err();
    let outboard_cli::upload::UploadError::Refused { status, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(*status, 429, "{message}");
    assert!(message.contains("upload_files_per_day"), "{message}");
    fx.assert_usage("upload_files_per_day 1000  [set]  (used: 800)", "upload_files_per_day", 2)
        .await;
}

/// A body that keeps coming (a chunk every 50 ms, for ever): the upload is under way, its
/// token is revoked, and the server ends it with 401 within its revocation check, storing
/// nothing. Before, it was stored when the body ended.
#[tokio::test]
async fn a_revoked_token_ends_an_upload_in_flight() {
    let fx = Fixture::new(&[]).await;
    let endless = futures_util::stream::unfold(0u32, |n| async move {
        if n > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some((Ok::<_, std::io::Error>(vec![b'x'; 4096]), n + 1))
    });
    let url = fx.url();
    let token = fx.token.clone();
    let sending = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .body(reqwest::Body::wrap_stream(endless))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    outboard_tests::harness::wait_until_async(
        "the upload is under way",
        Duration::from_secs(10),
        || fx.uploads_left().iter().any(|f| f.ends_with(".part")),
    )
    .await
    .unwrap();
    let (code, listed, err) = fx.server.admin(&["token", "ls"], None).unwrap();
    assert_eq!(code, 0, "{err}");
    let id = listed.lines().find(|l| l.contains("ada")).unwrap().split_whitespace().next();
    let (code, _, err) = fx.server.admin(&["token", "revoke", id.unwrap()], None).unwrap();
    assert_eq!(code, 0, "{err}");
    let Ok(answer) = tokio::time::timeout(Duration::from_secs(30), sending).await else {
        panic!("the upload was still being received 30 s after its token was revoked");
    };
    let (status, text) = answer.unwrap();
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("revoked") && text.contains("nothing was stored"), "{text}");
    outboard_tests::harness::wait_until(
        "the partial upload is removed",
        Duration::from_secs(10),
        || fx.uploads_left().is_empty(),
    )
    .unwrap();
    let metrics = fx.metrics().await;
    assert!(metrics.contains("outboard_upload_refusals_total{reason=\"revoked\"} 1"), "{metrics}");
}

/// A body trickled a chunk every 100 ms never waits 60 s for a chunk, yet it ends at the
/// server's overall deadline (2 s here) with nothing stored.
#[tokio::test]
async fn an_upload_body_has_an_overall_deadline() {
    let fx = Fixture::new(&["--upload-deadline-secs", "2"]).await;
    let trickle = futures_util::stream::unfold((), |()| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Some((Ok::<_, std::io::Error>(vec![b'x'; 10]), ()))
    });
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        fx.post(&fx.token, reqwest::Body::wrap_stream(trickle)),
    )
    .await
    .expect("the trickled body was still being received after 30 s");
    assert_eq!(answer.0, 400, "{}", answer.1);
    assert!(answer.1.contains("deadline of 2 s"), "{}", answer.1);
    outboard_tests::harness::wait_until(
        "the partial upload is removed",
        Duration::from_secs(10),
        || fx.uploads_left().is_empty(),
    )
    .unwrap();
    let metrics = fx.metrics().await;
    assert!(metrics.contains("outboard_upload_refusals_total{reason=\"deadline\"} 1"), "{metrics}");
}

/// An archive of a chain of `depth` directories with `files` files at its bottom.
fn deep_archive(depth: usize, files: usize) -> (Vec<u8>, usize) {
    let mut builder = tar::Builder::new(Vec::new());
    let mut path = String::new();
    for _ in 0..depth {
        if !path.is_empty() {
            path.push('/');
        }
        path.push('d');
        member(&mut builder, &path, tar::EntryType::Directory, b"");
    }
    for i in 0..files {
        member(&mut builder, &format!("{path}/f{i}"), tar::EntryType::Regular, b"data\n");
    }
    (builder.into_inner().unwrap(), depth + files)
}

/// 500 files at depth 10 and at depth 1,000: the directory lookups the unpack makes stay within
/// two per member at both depths (they were a quadratic 250 million at depth 1,000: each member
/// resolved its whole path again, several times), the tree arrives whole, and depth past 1,024
/// is refused with nothing left.
#[tokio::test]
async fn a_deep_archive_unpacks_with_lookups_linear_in_its_size() {
    let fx = Fixture::new(&[]).await;
    let mut counted = Vec::new();
    for depth in [10, 1000] {
        let (bytes, members) = deep_archive(depth, 500);
        let id = post_archive(&fx, bytes, None).await;
        let dest = tempfile::tempdir().unwrap();
        let got = fx.unpack(&id, dest.path()).await.unwrap();
        let bottom = dest.path().join(vec!["d"; depth].join("/"));
        assert_eq!(std::fs::read_dir(&bottom).unwrap().count(), 500, "depth {depth}");
        assert_eq!(std::fs::read(bottom.join("f499")).unwrap(), b"data\n");
        counted.push((depth, members as u64, got.lookups));
    }
    eprintln!("(depth, members, lookups): {counted:?}");
    for (_, members, lookups) in &counted {
        assert!(*lookups <= 2 * members, "lookups beyond two per member: {counted:?}");
    }
    let per_member = |(_, m, l): (usize, u64, u64)| l as f64 / m as f64;
    assert!(per_member(counted[1]) <= 2.0 * per_member(counted[0]), "{counted:?}");

    let (bytes, _) = deep_archive(1025, 1);
    let id = post_archive(&fx, bytes, None).await;
    let dest = tempfile::tempdir().unwrap();
    let err = fx.unpack(&id, dest.path()).await.unwrap_err();
    assert!(matches!(err, UploadError::Bounded { .. }), "{err}");
    assert!(err.to_string().contains("deeper than 1024"), "{err}");
    assert_eq!(std::fs::read_dir(dest.path()).unwrap().count(), 0);
}

/// [`outboard_tests::git::git`], its output trimmed (an object id, a tree id).
fn git(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    outboard_tests::git::git(dir, args, stdin).trim().to_owned()
}

/// A git "tree bomb": each tree names the one below twice, `levels` deep (2^levels paths),
/// committed on `main` and bundled; a few KiB.
fn tree_bomb(levels: u32) -> Vec<u8> {
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    git(dir, &["init", "-q", "-b", "main"], None);
    let blob = git(dir, &["hash-object", "-w", "--stdin"], Some("boom\n"));
    let mut tree = git(dir, &["mktree"], Some(&format!("100644 blob {blob}\tf\n")));
    for _ in 0..levels {
        let listing = format!("040000 tree {tree}\ta\n040000 tree {tree}\tb\n");
        tree = git(dir, &["mktree"], Some(&listing));
    }
    let commit = git(dir, &["commit-tree", &tree, "-m", "bomb"], None);
    git(dir, &["update-ref", "refs/heads/main", &commit], None);
    git(dir, &["bundle", "create", "-q", "bomb.bundle", "HEAD", "main"], None);
    std::fs::read(dir.join("bomb.bundle")).unwrap()
}

/// A 16-level tree bomb (65,536 paths from a few KiB) against an org whose
/// `upload_files_per_day` is 10,000: refused from the server's own reading of the bundle,
/// before git makes a repository (before, git fetched it and built the whole index); the same
/// tree 8 levels deep (256 paths) is restored.
#[tokio::test]
async fn a_tree_bomb_bundle_is_refused_before_git_runs() {
    let fx = Fixture::new(&[]).await;
    fx.quota("upload_files_per_day", "10000");
    let upload = |bundle: Vec<u8>| {
        let mut builder = tar::Builder::new(Vec::new());
        member(&mut builder, "readme.txt", tar::EntryType::Regular, b"hi\n");
        let reserved = outboard_shared::http::UPLOAD_HISTORY_BUNDLE;
        member(&mut builder, reserved, tar::EntryType::Regular, &bundle);
        builder.into_inner().unwrap()
    };
    let bomb = tree_bomb(16);
    assert!(bomb.len() < 10_000, "{} bytes", bomb.len());
    let id = post_archive(&fx, upload(bomb), Some("main")).await;
    let dest = tempfile::tempdir().unwrap();
    let err = fx.unpack(&id, dest.path()).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, UploadError::Bounded { .. }), "{message}");
    assert!(message.contains("refused before git reads it"), "{message}");
    assert!(
        message.contains("10000 paths") && message.contains("upload_files_per_day"),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(dest.path()).unwrap().count(), 0, "nothing is left");

    let id = post_archive(&fx, upload(tree_bomb(8)), Some("main")).await;
    let dest = tempfile::tempdir().unwrap();
    let got = fx.unpack(&id, dest.path()).await.unwrap();
    assert_eq!(got.branch.as_deref(), Some("main"));
    assert!(dest.path().join(".git").is_dir());
}
