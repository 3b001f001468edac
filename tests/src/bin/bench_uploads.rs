//! `scripts/bench.sh uploads`: what unpacking an upload costs by directory depth (issue 50).
//! Prints a markdown table, asserts nothing.
//!
//! Each archive is a chain of `depth` directories with [`FILES`] files of [`FILE_BYTES`] bytes
//! at its bottom (the hostile round's "1.5 MiB archive of 500 files at depth 1,000"), stored as
//! an upload of a real SQLite store and unpacked by the server library's `materialize` into a
//! fresh directory on the working directory's disk, [`RUNS`] times; the median is shown. Wall
//! time, the process's CPU time over the unpack (user + system: most of a deep unpack is the
//! kernel resolving paths), both per MiB of archive, and the directory lookups the unpack
//! counted (`Materialized::lookups`).

use std::path::Path;
use std::time::{Duration, Instant};

use outboard_server::store::{Durability, Store};
use outboard_server::uploads::materialize;

/// Files at the bottom of each chain.
const FILES: usize = 500;
/// Bytes of each file.
const FILE_BYTES: usize = 2048;
/// Unpacks per depth (the median is shown).
const RUNS: usize = 3;

/// Unpack time per MiB at depth 10 and 1,000 (a table; asserts nothing). `--depths` changes the
/// depths.
#[derive(clap::Parser)]
struct Args {
    /// Directory depths to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [10usize, 1000])]
    depths: Vec<usize>,
}

fn archive(depth: usize) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut path = String::new();
    let add = |builder: &mut tar::Builder<Vec<u8>>, p: &str, kind: tar::EntryType, data: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, p, data).unwrap_or_else(|e| panic!("{p}: {e}"));
    };
    for _ in 0..depth {
        if !path.is_empty() {
            path.push('/');
        }
        path.push('d');
        add(&mut builder, &path, tar::EntryType::Directory, b"");
    }
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..FILES {
        add(&mut builder, &format!("{path}/f{i}"), tar::EntryType::Regular, &data);
    }
    builder.into_inner().unwrap_or_default()
}

/// The process's CPU time so far (user + system).
#[allow(unsafe_code)]
fn cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

async fn store_upload(store: &Store, data: &Path, id: &str, org: &str, user: &str, bytes: &[u8]) {
    let dir = data.join("uploads");
    std::fs::create_dir_all(&dir).unwrap_or_default();
    std::fs::write(dir.join(format!("{id}.tar")), bytes).unwrap_or_default();
    let row = (id.to_owned(), org.to_owned(), user.to_owned(), bytes.len() as i64);
    store
        .call(move |c| {
            c.execute(
                "INSERT INTO uploads (id, org_id, user_id, bytes, branch, created_at)
                 VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
                outboard_server::store::db::params![
                    row.0,
                    row.1,
                    row.2,
                    row.3,
                    // Only the sweep reads it, and none runs here.
                    "2026-01-01T00:00:00.000Z"
                ],
            )?;
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args::<Args>(|_| Ok(()));
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let scratch = tempfile::tempdir_in(".")?;
    let data = scratch.path().join("data");
    let store = Store::open(&data.join("outboard.db"), Durability::Normal)?;
    let (user, _token) = store.add_user("acme", "ada").await?;
    println!(
        "## Unpacking an upload by directory depth ({build} build, {FILES} files of {FILE_BYTES} \
         B at the bottom of the chain, median of {RUNS})\n"
    );
    println!("| depth | archive | members | wall | CPU | wall per MiB | CPU per MiB | lookups |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for depth in args.depths {
        let bytes = archive(depth);
        let mib = bytes.len() as f64 / (1024.0 * 1024.0);
        let mut samples = Vec::new();
        for run in 0..RUNS {
            let id = format!("up_bench_{depth}_{run}");
            store_upload(&store, &data, &id, &user.org_id.0, &user.id.0, &bytes).await;
            let dest = scratch.path().join(format!("ws_{depth}_{run}"));
            std::fs::create_dir(&dest)?;
            let (t0, c0) = (Instant::now(), cpu());
            let got = materialize(&store, &data, &user, &id, &dest, &|_: &str, _, _| {}).await;
            let (wall, used) = (t0.elapsed(), cpu() - c0);
            let got = got.map_err(|e| anyhow::anyhow!("depth {depth}: {e}"))?;
            samples.push((wall, used, got.lookups));
            // The deep chain cannot be removed by path (past PATH_MAX for some tools): `rm -rf`.
            let _ = std::process::Command::new("rm").arg("-rf").arg(&dest).status();
        }
        samples.sort();
        let (wall, used, lookups) = samples[samples.len() / 2];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| {depth} | {mib:.2} MiB | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {lookups} |",
            depth + FILES,
            ms(wall),
            ms(used),
            ms(wall) / mib,
            ms(used) / mib,
        );
    }
    Ok(())
}
