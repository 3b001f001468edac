//! `scripts/bench.sh workspace`: bringing a repository into a session and the changes back out
//! (issue #12). Prints a markdown table, asserts nothing.
//!
//! The fixture: a repository of [`FILES`] files totalling about [`TOTAL_BYTES`] (deterministic
//! pseudo-random content: text made of code-like lines, every [`BINARY_EVERY`]th file binary
//! noise that does not compress) spread over [`DIRS`] directories, in one commit, served by git's
//! own `http-backend` behind Basic auth on loopback ([`GitHttp`]), in a temp dir on the working
//! directory's disk (a tmpfs would flatter every number).
//!
//! Measured, each the median of `--runs N` runs (default 3):
//! - `git clone` of it over HTTP by git's own client: the baseline an Outboard clone is held to
//!   (target: Outboard ≤ 1.2 × this);
//! - the three Outboard measurements — a clone through Outboard, an upload of the same tree, and
//!   `diff` of [`DIFF_FILES`] changed files — run against an in-process server (the release
//!   sandbox agent beside the bench).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_cli::client::{Client, ConnectOptions};
use outboard_server::secrets::{SecretKey, SecretValue, Secrets};
use outboard_server::store::{Durability, Store};
use outboard_server::{Limits, ServerConfig};
use outboard_shared::{methods, SessionCreateParams, SessionId, SessionRef, SourceSpec};
use outboard_tests::bench::sandbox_config;
use outboard_tests::git_http::{basic_auth, git_command, make_repo_from, GitHttp};
use outboard_tests::mock_llm::MockLlm;

/// Files in the benchmark repository.
const FILES: usize = 10_000;
/// Leaf directories they are spread over (20 top-level ones of 10 each).
const DIRS: usize = 200;
/// The tree's size the file sizes are drawn around (the total lands within a few MiB of it).
const TOTAL_BYTES: usize = 100 << 20;
/// One file in this many is binary.
const BINARY_EVERY: usize = 20;
/// Files changed in the workspace before the `diff` measurement.
const DIFF_FILES: usize = 1_000;
/// The git host's user and password (the org credential Outboard would hold for it).
const GIT_USER: &str = "x-access-token";
const GIT_PASSWORD: &str = "bench-git-token";

#[derive(Debug, clap::Parser)]
#[command(about = "Workspace benchmark: clone, upload and diff of a 10,000-file repository")]
struct Args {
    /// Runs per measurement (the table shows their median, min and max).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args(|a: &Args| {
        if a.runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        Ok(())
    });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let git_version = String::from_utf8(
        std::process::Command::new("git").arg("--version").output().context("git")?.stdout,
    )?;
    println!("## Workspace: a repository in, the changes out — {build}, {cores} cores");
    println!();

    // On the real disk, as the other benches do.
    let dir = tempfile::tempdir_in(".")?;
    let root = dir.path().join("repos");
    std::fs::create_dir(&root)?;
    let made = Instant::now();
    let tree = Tree::new();
    let repo = make_repo_from(&root, "bench.git", tree.files())?;
    let made = made.elapsed();
    let host = GitHttp::start(&root, GIT_USER, GIT_PASSWORD)?;
    let repo_url = host.url("bench.git");
    println!(
        "Fixture: {} files ({} binary), {:.1} MiB in {DIRS} directories, one commit; \
         pack {:.1} MiB; made in {:.1} s; served by `git http-backend` ({}) behind Basic auth \
         on {}.",
        outboard_shared::thousands(FILES as u64),
        tree.binary_files(),
        mib(tree.total_bytes()),
        mib(pack_bytes(&repo.path)?),
        made.as_secs_f64(),
        git_version.trim(),
        host.authority(),
    );
    println!();

    let clones = dir.path().join("clones");
    std::fs::create_dir(&clones)?;
    let outboard = Outboard::start(dir.path(), &host).await?;
    let source = Source { repo_url: repo_url.clone(), work_tree: clones.join("clone-1") };
    // Interleaved, one of each per round, so a machine that gets busier or quieter mid-run
    // weighs on both sides alike.
    let (mut git, mut through) = (Samples::default(), Samples::default());
    for n in 1..=args.runs {
        let dest = clones.join(format!("clone-{n}"));
        git.0.push(git_clone(&repo_url, &dest)?);
        if let Some(took) = clone_through_outboard(&outboard, &source).await? {
            through.0.push(took);
        }
    }
    git.0.sort();
    through.0.sort();
    // The first clone is the working tree the upload measurement sends.
    let upload = measure(args.runs, || upload_through_outboard(&outboard, &source)).await?;
    let diff = measure(args.runs, || diff_through_outboard(&outboard, &source)).await?;
    outboard.shutdown().await;

    println!("| measure | runs | median s | min s | max s | note |");
    println!("|---|---|---|---|---|---|");
    row("`git clone` over HTTP (git's own client)", &git, "the baseline");
    row("clone through Outboard (`--repo URL#main`)", &through, "server-side clone");
    match (through.median(), git.median()) {
        (Some(ours), Some(theirs)) if !theirs.is_zero() => println!(
            "| ratio: Outboard clone / `git clone` | | {:.2} | | | target ≤ 1.2 |",
            ours.as_secs_f64() / theirs.as_secs_f64()
        ),
        _ => println!(
            "| ratio: Outboard clone / `git clone` | | not measured yet | | | target ≤ 1.2 |"
        ),
    }
    row("upload of the same tree (`--upload`)", &upload, "clone's work tree, with .git");
    row(
        &format!("`diff` of {} changed files", outboard_shared::thousands(DIFF_FILES as u64)),
        &diff,
        "workspace vs base commit",
    );
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Outboard measurements
//
// Each function below is one run of one measurement against the in-process server `ob`; the org
// credential for the git host is (`GIT_USER`, `GIT_PASSWORD`) for `source.host.authority()`.

/// One clone of `source.repo_url` at `main` into a new repository session (`session/create`
/// with `source: {type: "repo", url, ref: "main"}`), timed until the session is ready; the
/// session is deleted afterwards.
async fn clone_through_outboard(
    ob: &Outboard,
    source: &Source,
) -> anyhow::Result<Option<Duration>> {
    let client = Client::connect(&ob.url, &ob.token).await?;
    let started = Instant::now();
    let session = repo_session(&client, &source.repo_url).await?;
    let took = started.elapsed();
    delete(&client, session).await?;
    Ok(Some(took))
}

/// `session/create` of a repository session at `main`.
async fn repo_session(client: &Client, url: &str) -> anyhow::Result<SessionId> {
    let params = SessionCreateParams {
        title: Some("bench".into()),
        workspace: None,
        source: Some(SourceSpec::Repo { url: url.to_owned(), git_ref: Some("main".into()) }),
        network: Default::default(),
        context_window: None,
        model: None,
    };
    Ok(client.call::<methods::SessionCreate>(params).await?.session.id)
}

async fn delete(client: &Client, session_id: SessionId) -> anyhow::Result<()> {
    client.call::<methods::SessionDelete>(SessionRef { session_id }).await?;
    Ok(())
}

/// One upload of `source.work_tree` (a clone of the repository: its history, no changes) into
/// a new session, timed from the start of packing to the session ready; deleted afterwards.
async fn upload_through_outboard(
    ob: &Outboard,
    source: &Source,
) -> anyhow::Result<Option<Duration>> {
    let client = Client::connect(&ob.url, &ob.token).await?;
    let started = Instant::now();
    let dir = source.work_tree.clone();
    let packed = tokio::task::spawn_blocking(move || outboard_cli::upload::pack(&dir)).await??;
    let sent = outboard_cli::upload::send(
        &packed,
        &ob.url,
        &ob.token,
        &ConnectOptions::default(),
        outboard_cli::upload::ProgressMode::Quiet,
    )
    .await?;
    let params = SessionCreateParams {
        title: Some("bench".into()),
        workspace: None,
        source: Some(SourceSpec::Upload { upload_id: sent.upload_id }),
        network: Default::default(),
        context_window: None,
        model: None,
    };
    let session = client.call::<methods::SessionCreate>(params).await?.session.id;
    let took = started.elapsed();
    delete(&client, session).await?;
    Ok(Some(took))
}

/// One `diff` of a fresh repository session whose workspace has [`DIFF_FILES`] files changed
/// ([`diff_changes`] written into it first, untimed), timed from the request to the last byte of
/// the diff: the first diff of a session, so git's stat cache is whatever the clone left.
async fn diff_through_outboard(ob: &Outboard, source: &Source) -> anyhow::Result<Option<Duration>> {
    let client = Client::connect(&ob.url, &ob.token).await?;
    let session = repo_session(&client, &source.repo_url).await?;
    let ws = ob.data.join("workspaces").join(session.as_str());
    for (path, content) in diff_changes() {
        std::fs::write(ws.join(path), content)?;
    }
    let endpoint = outboard_cli::http::Endpoint::new(&ob.url, &ob.token, None);
    let started = Instant::now();
    let bytes = endpoint.diff(&session, false).await?.bytes().await?;
    let took = started.elapsed();
    let files = bytes.windows(11).filter(|w| w == b"diff --git ").count();
    if files != DIFF_FILES {
        bail!("the diff has {files} files, not {DIFF_FILES}");
    }
    delete(&client, session).await?;
    Ok(Some(took))
}

/// The [`DIFF_FILES`] changes of the `diff` measurement, as (path, new content): one file in
/// ten of the tree rewritten, a tenth of them binary (new bytes throughout), the rest text (a
/// line inserted near the start, one appended at the end).
fn diff_changes() -> impl Iterator<Item = (String, Vec<u8>)> {
    let tree = Tree::new();
    let step = FILES / DIFF_FILES;
    // Files k·step are text; for k ≡ 1 (mod 10) take k·step + 9 instead, which is binary.
    (0..DIFF_FILES).map(move |k| {
        let i = if k % 10 == 1 { k * step + step - 1 } else { k * step };
        let (path, mut content) = tree.file(i);
        if tree.is_binary(i) {
            content.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        } else {
            let at = content.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1);
            content.splice(at..at, b"// changed by the diff benchmark\n".iter().copied());
            content.extend_from_slice(b"// and a last line\n");
        }
        (path, content)
    })
}

/// The in-process Outboard server the measurements run against.
struct Outboard {
    /// `ws://127.0.0.1:PORT`.
    url: String,
    /// Its data dir.
    data: PathBuf,
    /// A token of user alice of org acme.
    token: String,
    server: outboard_server::ServerHandle,
    _mock: MockLlm,
}

impl Outboard {
    async fn start(dir: &Path, host: &GitHttp) -> anyhow::Result<Outboard> {
        let mock = MockLlm::start(Vec::new()).await?;
        let data = dir.join("outboard");
        std::fs::create_dir(&data)?;
        let base = mock.anthropic_base_url();
        let mut llm =
            outboard_server::config::llm_config(Some("anthropic"), Some(&base), Some("bench"))?;
        llm.api_key = Some(outboard_server::Secret::new("bench-key"));
        let config = ServerConfig {
            data_dir: data.clone(),
            models: llm.into(),
            sandbox: sandbox_config(),
            limits: Limits::default(),
            net: outboard_server::NetConfig::default(),
            allow_client_workspaces: false,
            place_on_hosts: false,
            store: None,
            workspaces: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = outboard_server::launch(listener, config).await?;
        let token = server.mint_token("acme", "alice").await?;
        // The org's credential for the git host, as `admin secret set` stores it.
        let store = Store::open(&data.join("outboard.db"), Durability::Normal)?;
        let secrets = Secrets::new(store, SecretKey::load(&data)?);
        let org = secrets.org_by_name("acme").await?;
        let value = SecretValue::new(format!("{GIT_USER}:{GIT_PASSWORD}"));
        secrets.set(&org, &host.authority(), "git", value).await?;
        Ok(Outboard { url: server.url(), data, token, server, _mock: mock })
    }

    async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// The repository the measurements bring in.
struct Source {
    /// `http://127.0.0.1:PORT/git/bench.git`, no credential in it.
    repo_url: String,
    /// A clone of it (work tree and `.git`).
    work_tree: PathBuf,
}

// ---------------------------------------------------------------------------------------------
// The baseline

/// `git clone` of `url` into `dest` with the credential, the way a user's git would fetch it.
fn git_clone(url: &str, dest: &Path) -> anyhow::Result<Duration> {
    let home = dest.with_extension("home");
    std::fs::create_dir_all(&home)?;
    let started = Instant::now();
    let out = git_command(&home)
        .arg("-c")
        .arg(format!("http.extraHeader=Authorization: {}", basic_auth(GIT_USER, GIT_PASSWORD)))
        .args(["clone", "--quiet", url])
        .arg(dest)
        .output()
        .context("cannot run git clone")?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!("git clone failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let listed = git_command(&home).arg("-C").arg(dest).args(["ls-files", "-z"]).output()?;
    let files = listed.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()).count();
    if files != FILES {
        bail!("the clone has {files} files, not {FILES}");
    }
    Ok(took)
}

/// The size of the repository's packs.
fn pack_bytes(repo: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(repo.join("objects/pack"))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "pack") {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------------
// Measuring and printing

/// The samples of one measurement; empty when it is not measured yet.
#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn median(&self) -> Option<Duration> {
        self.0.get(self.0.len() / 2).copied()
    }
}

/// Runs `one` `runs` times; the first `None` means the measurement does not exist yet.
async fn measure<F, Fut>(runs: usize, mut one: F) -> anyhow::Result<Samples>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<Duration>>>,
{
    let mut samples = Vec::new();
    for _ in 0..runs {
        match one().await? {
            Some(took) => samples.push(took),
            None => return Ok(Samples(Vec::new())),
        }
    }
    samples.sort();
    Ok(Samples(samples))
}

fn row(measure: &str, samples: &Samples, note: &str) {
    match (samples.median(), samples.0.first(), samples.0.last()) {
        (Some(median), Some(min), Some(max)) => println!(
            "| {measure} | {} | {:.2} | {:.2} | {:.2} | {note} |",
            samples.0.len(),
            median.as_secs_f64(),
            min.as_secs_f64(),
            max.as_secs_f64(),
        ),
        _ => println!("| {measure} | – | not measured yet | | | {note} |"),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

// ---------------------------------------------------------------------------------------------
// The tree

/// SplitMix64: a tiny, well-mixed generator, seeded per file so any file can be made alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Words of the text files: code-like, so the text compresses about as much as source does.
const WORDS: &[&str] = &[
    "let",
    "fn",
    "self",
    "return",
    "match",
    "Some",
    "None",
    "Ok",
    "Err",
    "if",
    "else",
    "for",
    "in",
    "while",
    "struct",
    "impl",
    "pub",
    "use",
    "mod",
    "const",
    "static",
    "mut",
    "ref",
    "as",
    "where",
    "type",
    "trait",
    "enum",
    "loop",
    "break",
    "continue",
    "async",
    "await",
    "move",
    "value",
    "count",
    "index",
    "buffer",
    "len",
    "push",
    "insert",
    "remove",
    "get",
    "set",
    "new",
    "config",
    "session",
    "workspace",
    "repo",
    "commit",
    "branch",
    "path",
    "file",
    "error",
    "result",
    "stream",
    "frame",
    "event",
    "token",
    "server",
    "client",
    "request",
    "response",
    "=",
    "==",
    "=>",
    "->",
    "::",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ",",
    ".",
    "+",
    "-",
    "*",
    "&",
    "0",
    "1",
    "42",
    "1024",
    "\"text\"",
    "'c'",
    "// note",
    "/* why */",
    "#[derive(Debug)]",
];

/// The benchmark tree, file by file.
struct Tree {
    sizes: Vec<usize>,
}

impl Tree {
    fn new() -> Tree {
        let mean = TOTAL_BYTES / FILES;
        let mut rng = Rng(0x0b0a_2d00);
        // Uniform over [mean/8, 15·mean/8): the mean is `mean`, the total close to TOTAL_BYTES.
        let sizes = (0..FILES).map(|_| mean / 8 + rng.below(mean * 14 / 8)).collect();
        Tree { sizes }
    }

    fn is_binary(&self, i: usize) -> bool {
        i % BINARY_EVERY == BINARY_EVERY - 1
    }

    fn binary_files(&self) -> usize {
        (0..FILES).filter(|&i| self.is_binary(i)).count()
    }

    fn total_bytes(&self) -> u64 {
        self.sizes.iter().map(|&s| s as u64).sum()
    }

    /// File `i`: its path and content.
    fn file(&self, i: usize) -> (String, Vec<u8>) {
        let dir = i % DIRS;
        let size = self.sizes[i];
        let mut rng = Rng(i as u64 ^ 0x5eed_0000_0000);
        let (ext, content) = if self.is_binary(i) {
            let mut bytes = Vec::with_capacity(size + 8);
            while bytes.len() < size {
                bytes.extend_from_slice(&rng.next().to_le_bytes());
            }
            bytes.truncate(size);
            ("bin", bytes)
        } else {
            let mut text = Vec::with_capacity(size + 64);
            while text.len() < size {
                text.resize(text.len() + 4 * rng.below(3), b' ');
                for _ in 0..3 + rng.below(9) {
                    text.extend_from_slice(WORDS[rng.below(WORDS.len())].as_bytes());
                    text.push(b' ');
                }
                text.push(b'\n');
            }
            text.truncate(size);
            ([("rs"), ("md"), ("txt"), ("json")][i % 4], text)
        };
        (format!("mod{:02}/part{}/file{i:05}.{ext}", dir / 10, dir % 10), content)
    }

    /// Every file, in order, made as it is consumed.
    fn files(&self) -> impl Iterator<Item = (String, Vec<u8>)> + '_ {
        (0..FILES).map(|i| self.file(i))
    }
}
