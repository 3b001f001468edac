//! `scripts/bench.sh vfs`: the org's shared files (`/memory/**`, `/skills/**`, [`OrgFs`]).
//! Prints markdown tables, asserts nothing.
//!
//! - **Throughput**: `OrgFs` directly on a real SQLite file (WAL, `synchronous=NORMAL`) in a temp
//!   dir on the working directory's disk; each "session" is a tokio task with its own [`Author`].
//!   *Writes*: every session rewrites its own [`FILES_PER_SESSION`] files in turn (~1 KiB each)
//!   with `Precondition::Version(last seen)`, as the Write tool does. *Reads*: `read(org, path,
//!   None)` of those files. *Same-file edits*: every session `edit`s one shared file
//!   (compare-and-replace appending a line); the final line count says whether every edit
//!   landed. ops/s is over the wall time of the whole run; p50/p99 are per call.
//! - **Visibility**: from a write committed by A to B seeing it. (a) In process: A's `write`
//!   returns, a channel wakes B, B's `read` returns the new version (one read round trip plus a
//!   wake-up). (b) Over real WebSockets of an in-process server (mock LLM, the release sandbox
//!   agent): A sends `files/write`, B (another user of the org, attached as driver to an idle
//!   session) receives the `memory_changed` event for that version.
//! - **Projection**: `OrgFs::project` (what runs before every Bash command) with 1,000 and
//!   10,000 org files spread over `/memory` and `/skills` (500 B–2 KiB each): the first, full
//!   projection; then calls when nothing changed; then calls when exactly one file changed since
//!   the previous call (the write itself not timed).

use outboard_tests::bench::{percentile, sandbox_config, us};
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use outboard_server::orgfs::{Author, OrgFs, Precondition};
use outboard_server::store::{Durability, Store};
use outboard_server::vfs::OrgPath;
use outboard_server::{Limits, ServerConfig};
use outboard_shared::{EventKind, FileOp, OrgId, SessionEvent, SessionId};
use outboard_tests::harness::WsClient;
use outboard_tests::mock_llm::MockLlm;
use serde_json::json;
use tokio::sync::mpsc;

/// Calls per throughput configuration (split between the sessions).
const OPS: usize = 2000;
/// Sessions of the concurrent configurations.
const SESSIONS: usize = 8;
/// Files each session of the write and read runs cycles through.
const FILES_PER_SESSION: usize = 10;
/// Visibility and projection samples.
const SAMPLES: usize = 200;
/// Visibility samples run and thrown away first.
const WARMUP: usize = 10;
/// The file of the visibility runs.
const VIS_PATH: &str = "/memory/visibility.md";
/// The file every session edits.
const SHARED_PATH: &str = "/memory/shared.md";

/// The org's shared files: throughput of concurrent sessions, visibility of a write, projection
/// cost (tables; asserts nothing). No arguments.
#[derive(clap::Parser)]
struct Args {}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    outboard_tests::bench::args::<Args>(|_| Ok(()));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("## Org files (vfs) — {build}, {cores} cores");
    println!();
    throughput().await?;
    visibility().await?;
    projection().await
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// One org's files on a fresh SQLite file, and the temp dir holding it (removed on drop).
struct Org {
    fs: OrgFs,
    id: OrgId,
    dir: tempfile::TempDir,
}

impl Org {
    async fn new() -> anyhow::Result<Org> {
        // On the real disk, as the durable bench does (a tmpfs would flatter the commits).
        let dir = tempfile::tempdir_in(".")?;
        let store = Store::open(&dir.path().join("outboard.db"), Durability::Normal)?;
        let (user, _) = store.add_user("acme", "alice").await?;
        let fs = OrgFs::new(store, dir.path().join("orgs"));
        Ok(Org { fs, id: user.org_id, dir })
    }

    /// The database with its WAL, in MiB.
    fn db_mib(&self) -> f64 {
        let size =
            |name: &str| std::fs::metadata(self.dir.path().join(name)).map_or(0, |m| m.len());
        (size("outboard.db") + size("outboard.db-wal")) as f64 / (1024.0 * 1024.0)
    }
}

fn author(k: usize) -> Author {
    Author { user: "alice".into(), session: Some(SessionId(format!("s_bench{k}"))) }
}

fn path(raw: &str) -> anyhow::Result<OrgPath> {
    Ok(OrgPath::parse(raw)?)
}

/// `bytes` of markdown-ish text starting with a line naming `tag`, so every version differs.
fn text(tag: &str, bytes: usize) -> String {
    let mut out = format!("# {tag}\n");
    while out.len() < bytes {
        out.push_str("- the deploy of api v1.2 went out at noon; roll back with `make undo`\n");
    }
    out.truncate(bytes);
    out.push('\n');
    out
}

/// The calls of one run: wall time of the whole run, and each call's latency (sorted).
struct Run {
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Run {
    fn ops_per_s(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// Runs `session(k)` for `k` in `0..sessions` as concurrent tasks; each returns its latencies.
async fn concurrently<F, Fut>(sessions: usize, session: F) -> anyhow::Result<Run>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<Duration>>> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions).map(|k| tokio::spawn(session(k))).collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let wall = start.elapsed();
    latencies.sort();
    Ok(Run { wall, latencies })
}

// ---------------------------------------------------------------------------------------------
// 1. Throughput

fn own_file(k: usize, f: usize) -> String {
    format!("/memory/s{k}/note{f}.md")
}

/// Session `k` rewrites its own files in turn, each write based on the version it last wrote.
async fn writer(fs: OrgFs, org: OrgId, k: usize, ops: usize) -> anyhow::Result<Vec<Duration>> {
    let author = author(k);
    let mut seen = [0u64; FILES_PER_SESSION];
    let mut latencies = Vec::with_capacity(ops);
    for i in 0..ops {
        let f = i % FILES_PER_SESSION;
        let (p, content) = (path(&own_file(k, f))?, text(&format!("s{k} note {i}"), 1024));
        let pre = Precondition::Version(seen[f]);
        let t = Instant::now();
        let written = fs.write(&org, &p, content, &author, FileOp::Write, pre).await?;
        latencies.push(t.elapsed());
        seen[f] = written.file.version;
    }
    Ok(latencies)
}

/// Session `k` reads its own files (the current version) in turn.
async fn reader(fs: OrgFs, org: OrgId, k: usize, ops: usize) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(ops);
    for i in 0..ops {
        let p = path(&own_file(k, i % FILES_PER_SESSION))?;
        let t = Instant::now();
        let (_, content) = fs.read(&org, &p, None).await?;
        latencies.push(t.elapsed());
        if content.len() < 1024 {
            bail!("{p}: read {} bytes, wrote 1 KiB", content.len());
        }
    }
    Ok(latencies)
}

/// Session `k` appends `ops` lines to the shared file, each by compare-and-replace.
async fn editor(fs: OrgFs, org: OrgId, k: usize, ops: usize) -> anyhow::Result<Vec<Duration>> {
    let (author, p) = (author(k), path(SHARED_PATH)?);
    let mut latencies = Vec::with_capacity(ops);
    for i in 0..ops {
        let line = format!("- s{k} edit {i}\n");
        let t = Instant::now();
        fs.edit(&org, &p, &author, move |current| Ok((format!("{current}{line}"), ()))).await?;
        latencies.push(t.elapsed());
    }
    Ok(latencies)
}

/// Whether the shared file holds its header and exactly one distinct line per edit, and its
/// size in KiB.
async fn all_landed(org: &Org, edits: usize) -> anyhow::Result<(bool, f64)> {
    let (_, content) = org.fs.read(&org.id, &path(SHARED_PATH)?, None).await?;
    let lines: Vec<&str> = content.lines().collect();
    let distinct: std::collections::HashSet<&str> = lines.iter().copied().collect();
    let landed = lines.len() == edits + 1 && distinct.len() == edits + 1;
    Ok((landed, content.len() as f64 / 1024.0))
}

fn throughput_row(measure: &str, sessions: usize, run: &Run, landed: &str, note: &str) {
    println!(
        "| {measure} | {sessions} | {} | {:.0} | {:.0} | {:.0} | {landed} | {note} |",
        run.latencies.len(),
        run.ops_per_s(),
        us(percentile(&run.latencies, 0.5)),
        us(percentile(&run.latencies, 0.99)),
    );
}

async fn throughput() -> anyhow::Result<()> {
    println!("### Throughput: `OrgFs` on SQLite (WAL, synchronous=NORMAL), {OPS} ops per row");
    println!();
    println!("| measure | sessions | ops | ops/s | p50 µs | p99 µs | all landed | note |");
    println!("|---|---|---|---|---|---|---|---|");
    for sessions in [1, SESSIONS] {
        let org = Org::new().await?;
        let per = OPS / sessions;
        let (fs, id) = (&org.fs, &org.id);
        let run = concurrently(sessions, |k| writer(fs.clone(), id.clone(), k, per)).await?;
        let note = format!(
            "own {FILES_PER_SESSION} files per session, ~1 KiB, `Version(last seen)`; db {:.1} MiB",
            org.db_mib()
        );
        throughput_row("write", sessions, &run, "—", &note);
        let run = concurrently(sessions, |k| reader(fs.clone(), id.clone(), k, per)).await?;
        throughput_row("read", sessions, &run, "—", "current version of own files");
    }
    for sessions in [1, SESSIONS] {
        let org = Org::new().await?;
        let per = OPS / sessions;
        let (fs, id) = (&org.fs, &org.id);
        let header = "# shared\n".to_owned();
        fs.write(id, &path(SHARED_PATH)?, header, &author(0), FileOp::Write, Precondition::Any)
            .await?;
        let run = concurrently(sessions, |k| editor(fs.clone(), id.clone(), k, per)).await?;
        let (landed, kib) = all_landed(&org, sessions * per).await?;
        let note = format!(
            "append a line by compare-and-replace; final file {kib:.0} KiB, db {:.1} MiB",
            org.db_mib()
        );
        let landed = if landed { "yes" } else { "**no**" };
        throughput_row("edit one shared file", sessions, &run, landed, &note);
    }
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Visibility

/// (a) A writes; once its `write` returns, a channel wakes B, whose `read` must return that
/// version. Latency: A's write returning → B's read returning.
async fn visibility_in_process() -> anyhow::Result<Vec<Duration>> {
    let org = Org::new().await?;
    let p = path(VIS_PATH)?;
    let (to_b, mut b_inbox) = mpsc::channel::<(u64, String, Instant)>(1);
    let (to_a, mut a_inbox) = mpsc::channel::<Duration>(1);
    let (fs, id, bp) = (org.fs.clone(), org.id.clone(), p.clone());
    let b = tokio::spawn(async move {
        while let Some((version, expected, committed)) = b_inbox.recv().await {
            let (file, content) = fs.read(&id, &bp, None).await?;
            let seen = committed.elapsed();
            if file.version != version || content != expected {
                bail!("B read v{} right after A committed v{version}", file.version);
            }
            to_a.send(seen).await?;
        }
        Ok::<(), anyhow::Error>(())
    });
    let (author, mut last) = (author(0), 0);
    let mut samples = Vec::with_capacity(SAMPLES);
    for n in 0..WARMUP + SAMPLES {
        let content = format!("sample {n}\n");
        let pre = Precondition::Version(last);
        let written =
            org.fs.write(&org.id, &p, content.clone(), &author, FileOp::Write, pre).await?;
        let committed = Instant::now();
        last = written.file.version;
        to_b.send((last, content, committed)).await?;
        let seen = a_inbox.recv().await.context("B stopped")?;
        if n >= WARMUP {
            samples.push(seen);
        }
    }
    drop(to_b);
    b.await??;
    samples.sort();
    Ok(samples)
}

fn is_change_to(e: &SessionEvent, version: u64) -> bool {
    matches!(&e.kind, EventKind::MemoryChanged { path, version: v, .. }
        if path == VIS_PATH && *v == version)
}

/// (b) Over WebSockets: A sends `files/write`; B, attached to a session of the same org,
/// receives `memory_changed`. Returns (send → B notified, send → A answered), sorted.
async fn visibility_over_websockets() -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mock = MockLlm::start(Vec::new()).await?;
    let data = tempfile::tempdir_in(".")?;
    let base = mock.anthropic_base_url();
    let mut llm =
        outboard_server::config::llm_config(Some("anthropic"), Some(&base), Some("bench"))?;
    llm.api_key = Some(outboard_server::Secret::new("bench-key"));
    let config = ServerConfig {
        data_dir: data.path().to_path_buf(),
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
    let alice = server.mint_token("acme", "alice").await?;
    let bob = server.mint_token("acme", "bob").await?;
    let mut a = WsClient::connect(&server.url(), &alice).await?;
    let mut b = WsClient::connect(&server.url(), &bob).await?;
    b.new_session().await?;
    let (mut notified, mut answered) = (Vec::new(), Vec::new());
    for n in 1..=(WARMUP + SAMPLES) as u64 {
        let params =
            json!({"path": VIS_PATH, "content": format!("sample {n}\n"), "base_version": n - 1});
        let sent = Instant::now();
        let (answer, told) = tokio::join!(
            async { (a.request("files/write", params).await, sent.elapsed()) },
            async { (b.events_until(|e| is_change_to(e, n)).await, sent.elapsed()) },
        );
        answer.0?.map_err(|e| anyhow!("files/write: {e}"))?;
        told.0?;
        if n > WARMUP as u64 {
            answered.push(answer.1);
            notified.push(told.1);
        }
    }
    server.shutdown().await;
    notified.sort();
    answered.sort();
    Ok((notified, answered))
}

fn spread_row(measure: &str, samples: &[Duration], note: &str) {
    println!(
        "| {measure} | {} | {:.0} | {:.0} | {:.0} | {note} |",
        samples.len(),
        us(percentile(samples, 0.5)),
        us(percentile(samples, 0.9)),
        us(percentile(samples, 0.99)),
    );
}

async fn visibility() -> anyhow::Result<()> {
    println!("### Visibility: a write committed by one session → another session sees it");
    println!();
    println!("| visibility | samples | p50 µs | p90 µs | p99 µs | note |");
    println!("|---|---|---|---|---|---|");
    let store = visibility_in_process().await?;
    spread_row(
        "(a) store: A's `write` returns → B's `read` returns it",
        &store,
        "B woken by a channel, then one read",
    );
    let (notified, answered) = visibility_over_websockets().await?;
    spread_row(
        "(b) WebSocket: A sends `files/write` → B receives `memory_changed`",
        &notified,
        "in-process server, two users of one org, B attached as driver",
    );
    spread_row("(b) for scale: A's `files/write` round trip", &answered, "same requests");
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Projection before a Bash command

/// The `i`th file: three in five under `/memory` (10 dirs), the rest under `/skills` (40 skills).
fn spread_file(i: usize) -> anyhow::Result<(OrgPath, usize)> {
    let raw = if i % 5 < 3 {
        format!("/memory/team{}/notes/n{i}.md", i % 10)
    } else {
        format!("/skills/skill{}/ref/f{i}.md", i % 40)
    };
    Ok((path(&raw)?, 500 + (i * 7919) % 1549))
}

struct ProjectionCost {
    files: usize,
    first: Duration,
    unchanged: Vec<Duration>,
    one_changed: Vec<Duration>,
}

async fn projection_cost(files: usize) -> anyhow::Result<ProjectionCost> {
    let org = Org::new().await?;
    let (fs, id, author) = (&org.fs, &org.id, author(0));
    let spread = (0..files).map(spread_file).collect::<anyhow::Result<Vec<_>>>()?;
    for (i, (p, bytes)) in spread.iter().enumerate() {
        let content = text(&format!("file {i}"), *bytes);
        fs.write(id, p, content, &author, FileOp::Write, Precondition::Any).await?;
    }
    let t = Instant::now();
    let (_, applied) = fs.project(id).await?;
    let first = t.elapsed();
    if applied != files {
        bail!("the first projection applied {applied} of {files} files");
    }
    let mut unchanged = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        let (_, applied) = fs.project(id).await?;
        unchanged.push(t.elapsed());
        if applied != 0 {
            bail!("nothing changed, yet the projection applied {applied} files");
        }
    }
    let mut one_changed = Vec::with_capacity(SAMPLES);
    for s in 0..SAMPLES {
        let (p, bytes) = &spread[(s * 97) % files];
        let content = text(&format!("change {s}"), *bytes);
        fs.write(id, p, content, &author, FileOp::Write, Precondition::Any).await?;
        let t = Instant::now();
        let (_, applied) = fs.project(id).await?;
        one_changed.push(t.elapsed());
        if applied != 1 {
            bail!("one file changed, yet the projection applied {applied} files");
        }
    }
    unchanged.sort();
    one_changed.sort();
    Ok(ProjectionCost { files, first, unchanged, one_changed })
}

async fn projection() -> anyhow::Result<()> {
    println!("### Projection before a Bash command (`OrgFs::project`, {SAMPLES} calls per case)");
    println!();
    println!("| projection: files | first, full (ms) | nothing changed p50 µs | p99 µs | one file changed p50 µs | p99 µs |");
    println!("|---|---|---|---|---|---|");
    for files in [1000, 10_000] {
        let c = projection_cost(files).await?;
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            c.files,
            c.first.as_secs_f64() * 1e3,
            us(percentile(&c.unchanged, 0.5)),
            us(percentile(&c.unchanged, 0.99)),
            us(percentile(&c.one_changed, 0.5)),
            us(percentile(&c.one_changed, 0.99)),
        );
    }
    println!();
    Ok(())
}
