//! A throwaway PostgreSQL for tests and benchmarks: Debian's own server binaries, a cluster made
//! with `initdb` in a temporary directory, `postgres` on a free loopback port, run as an
//! unprivileged user (`nobody`) when the tests run as root (PostgreSQL refuses root). One cluster
//! per process; each caller gets a schema of its own in it ([`fresh_url`]), so tests running in
//! parallel never see each other's tables.
//!
//! The server is started through a small shell that holds a pipe from this process: when the
//! process ends, however it ends, the pipe closes and the shell stops PostgreSQL and removes the
//! cluster's directory. Nothing outlives the test run.
//!
//! `OUTBOARD_TEST_STORE=postgres` makes [`open_test_store`] (and [`test_spec`]) hand out
//! PostgreSQL stores instead of SQLite files: how `scripts/ci.sh` runs the store's tests and the
//! end-to-end suites a second time on PostgreSQL.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::handle::Store;
use crate::spec::{Durability, StoreSpec};

/// The environment variable that picks the tests' store backend.
pub const TEST_STORE_ENV: &str = "OUTBOARD_TEST_STORE";

/// Connections per test store (each test server opens its own pool).
const TEST_POOL: usize = 3;

/// A running cluster.
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    /// Kept open for the life of the process: closing it stops the server.
    _keepalive: Mutex<ChildStdin>,
    _shell: Mutex<Child>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster(127.0.0.1:{}, {})", self.port, self.dir.display())
    }
}

/// Whether the tests asked for PostgreSQL.
pub fn wanted() -> bool {
    std::env::var(TEST_STORE_ENV).is_ok_and(|v| v == "postgres")
}

/// The process's cluster, started on first use.
pub fn cluster() -> Result<&'static Cluster, String> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| crate::pg::off_runtime(|| Cluster::start(false)))
        .as_ref()
        .map_err(Clone::clone)
}

/// A URL to a new, empty schema of the process's cluster.
pub fn fresh_url() -> Result<String, String> {
    cluster()?.fresh_url()
}

/// A store for a test: a new PostgreSQL schema when [`wanted`], else the SQLite file `path`.
pub fn test_spec(path: &Path) -> StoreSpec {
    if wanted() {
        match fresh_url() {
            Ok(url) => StoreSpec::Postgres { url, pool: TEST_POOL },
            Err(e) => panic!("{TEST_STORE_ENV}=postgres but no PostgreSQL: {e}"),
        }
    } else {
        StoreSpec::Sqlite(path.to_owned())
    }
}

/// [`test_spec`] opened.
pub fn open_test_store(path: &Path) -> Result<Store, StoreError> {
    Store::open_spec(&test_spec(path), Durability::Normal, None)
}

/// Where Debian keeps the server's binaries (`/usr/lib/postgresql/N/bin`, the newest `N`), or
/// `OUTBOARD_PG_BIN`, or the `PATH`.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("OUTBOARD_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((n, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(PathBuf::from)
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
}

impl Cluster {
    /// Makes and starts a cluster; `durable`: with `fsync` (benchmarks), else without (tests:
    /// nothing here survives the process anyway).
    pub fn start(durable: bool) -> Result<Cluster, String> {
        let bin = bin_dir().ok_or(
            "no PostgreSQL server binaries (apt-get install postgresql, or set OUTBOARD_PG_BIN)",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("outboard-pg-")
            .tempdir()
            .map_err(|e| format!("no temp dir: {e}"))?
            .keep();
        let as_root = rustix::process::geteuid().is_root();
        let (uid, gid) = (65534, 65534);
        if as_root {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-D"])
            .arg(&data)
            .args(["-U", "outboard", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .current_dir(&dir);
        if as_root {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            match Cluster::run(&bin, &dir, &data, port, durable, as_root.then_some((uid, gid))) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn run(
        bin: &Path,
        dir: &Path,
        data: &Path,
        port: u16,
        durable: bool,
        user: Option<(u32, u32)>,
    ) -> Result<Cluster, String> {
        // The shell stops the server and removes the cluster when this process's end of the
        // pipe closes; `down` stops the server (a fast shutdown: sessions end with 57P01) and
        // `up` starts it again on the same port, for tests of an outage.
        let script = r#"
bin="$1"; dir="$2"; port="$3"; onoff="$4"
start() {
    "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
        -c max_connections=400 -c fsync="$onoff" -c synchronous_commit="$onoff" \
        -c full_page_writes="$onoff" >>"$dir/server.log" 2>&1 &
    pid=$!
}
start
while read -r cmd; do
    case "$cmd" in
        down) kill -INT "$pid" 2>/dev/null; wait "$pid"; echo down >>"$dir/server.log" ;;
        up) start ;;
        *) break ;;
    esac
done
kill -QUIT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$dir"
"#;
        let onoff = if durable { "on" } else { "off" };
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("sh")
            .arg(bin)
            .arg(dir)
            .arg(port.to_string())
            .arg(onoff)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid);
        }
        let mut shell = cmd.spawn().map_err(|e| format!("cannot start postgres: {e}"))?;
        let stdin = shell.stdin.take().ok_or("no pipe to the postgres shell")?;
        let cluster = Cluster {
            port,
            dir: dir.to_owned(),
            _keepalive: Mutex::new(stdin),
            _shell: Mutex::new(shell),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls) {
                Ok(_) => return Ok(cluster),
                Err(e) if Instant::now() > deadline => {
                    let log =
                        std::fs::read_to_string(data.join("../server.log")).unwrap_or_default();
                    cluster.stop();
                    return Err(format!("postgres did not start: {e}; {log}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
            if let Ok(mut shell) = cluster._shell.lock() {
                if let Ok(Some(status)) = shell.try_wait() {
                    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                    return Err(format!("postgres exited ({status}): {}", log.trim()));
                }
            }
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` as the cluster's superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://outboard@127.0.0.1:{}/{db}", self.port)
    }

    /// A URL to a new, empty schema (search path set to it), created now.
    pub fn fresh_url(&self) -> Result<String, String> {
        let name = outboard_base::util::new_id("t");
        self.admin(&format!("CREATE SCHEMA {name}"))?;
        Ok(format!("{}?options=-csearch_path%3D{name}", self.url("postgres")))
    }

    /// Runs `sql` as the superuser on database `postgres`.
    pub fn admin(&self, sql: &str) -> Result<(), String> {
        let url = self.url("postgres");
        crate::pg::off_runtime(|| {
            let mut client =
                postgres::Client::connect(&url, postgres::NoTls).map_err(|e| e.to_string())?;
            client.batch_execute(sql).map_err(|e| e.to_string())
        })
    }

    /// Stops the server (a fast shutdown: its sessions end with `57P01`) and returns once it
    /// is down; [`Cluster::up`] starts it again. For tests of an outage, on a cluster of their
    /// own ([`Cluster::start`]), never the process's shared one.
    pub fn down(&self) {
        self.send("down");
        let url = self.url("postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        crate::pg::off_runtime(|| {
            while Instant::now() < deadline
                && postgres::Client::connect(&url, postgres::NoTls).is_ok()
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }

    /// Starts the server [`Cluster::down`] stopped and returns once it accepts connections.
    pub fn up(&self) -> Result<(), String> {
        self.send("up");
        let url = self.url("postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        crate::pg::off_runtime(|| loop {
            match postgres::Client::connect(&url, postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(format!("not up again: {e}")),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        })
    }

    fn send(&self, line: &str) {
        if let Ok(mut pipe) = self._keepalive.lock() {
            let _ = writeln!(pipe, "{line}");
            let _ = pipe.flush();
        }
    }

    /// Stops the server now (it stops by itself when the process ends).
    pub fn stop(&self) {
        if let Ok(mut pipe) = self._keepalive.lock() {
            let _ = pipe.write_all(b"stop\n");
            let _ = pipe.flush();
        }
        if let Ok(mut shell) = self._shell.lock() {
            let _ = shell.wait();
        }
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_starts_and_hands_out_separate_schemas() {
        if bin_dir().is_none() {
            // CI installs postgresql (.ci/run); a developer machine without it says so.
            panic!("PostgreSQL is not installed: apt-get install postgresql");
        }
        let (a, b) = (fresh_url().unwrap(), fresh_url().unwrap());
        assert_ne!(a, b);
        let mut ca = postgres::Client::connect(&a, postgres::NoTls).unwrap();
        ca.batch_execute("CREATE TABLE x (v BIGINT); INSERT INTO x VALUES (7)").unwrap();
        let mut cb = postgres::Client::connect(&b, postgres::NoTls).unwrap();
        let err = cb.query("SELECT v FROM x", &[]).unwrap_err();
        assert!(err.to_string().contains("does not exist") || err.as_db_error().is_some(), "{err}");
        let v: i64 = ca.query_one("SELECT v FROM x", &[]).unwrap().get(0);
        assert_eq!(v, 7);
    }
}
