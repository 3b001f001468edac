//! A real git smart-HTTP host on loopback for the repository tests and the workspace benchmark:
//! an axum server that runs git's own `git http-backend` as a CGI program behind HTTP Basic
//! auth, and test repositories made with the git CLI.
//!
//! Why git's own backend rather than a canned responder: what is under test is a real clone,
//! fetch and push (ref advertisement, protocol v2, pack negotiation, gzip-compressed and chunked
//! request bodies), and only git speaks all of it. The Rust part only does what a web server in
//! front of `http-backend` does: authentication, the CGI environment, and streaming bodies both
//! ways (a benchmark clone moves ~100 MiB, so nothing is buffered whole).
//!
//! Every request is recorded with the `Authorization` header *as received*
//! ([`GitHttp::requests`]), so a test can assert that a credential reached the git host.
//!
//! The server runs on its own thread with its own tokio runtime, so plain `#[test]` functions
//! (which run the `outboard` binary with `std::process::Command`) and `#[tokio::test]` ones use
//! it alike; dropping the [`GitHttp`] stops it and kills any backend still running.
//!
//! Repositories ([`make_repo`], [`Repo`]) are bare, under the server's root, built with
//! `git fast-import` (no work tree, fixed author and dates, so commit ids are the same on every
//! run), and every git command here runs with a clean environment ([`git_command`]).

use std::collections::HashSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{bail, Context as _};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::{Bytes, BytesMut};
use futures_util::{stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdout};

/// Requests kept in the log: a clone or push is 2–4 requests and a suite makes a few hundred,
/// so this many is never reached by a real test, while a runaway client cannot grow the log
/// without bound. Later requests are only counted ([`GitHttp::requests_dropped`]), so the log
/// stays an exact prefix of what happened.
pub const MAX_LOGGED_REQUESTS: usize = 4096;

/// The CGI header block `http-backend` writes before its body is a handful of short lines; a
/// block larger than this means the backend is broken, and the request fails with 502 rather
/// than buffering on.
pub const MAX_CGI_HEAD_BYTES: usize = 64 * 1024;

/// Bytes read from the backend's stdout per response chunk: large enough that a 100 MiB pack
/// is not thousands of tiny writes, small enough that nothing sizeable sits in memory.
const BODY_CHUNK_BYTES: usize = 64 * 1024;

/// The fixed identity and date of every commit and tag the helpers make (2024-01-01 UTC).
const AUTHOR: &str = "Outboard Test <test@outboard.invalid> 1704067200 +0000";

/// One request the host received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    /// `GET`, `POST`.
    pub method: String,
    /// The path and query, e.g. `/git/demo.git/info/refs?service=git-upload-pack`.
    pub path: String,
    /// The `Authorization` header exactly as received (lossy UTF-8), if any.
    pub authorization: Option<String>,
    /// The `Content-Encoding` of the body (`gzip` for git's large upload-pack requests).
    pub content_encoding: Option<String>,
    /// The `Content-Length`; `None` for a chunked (or empty) body.
    pub content_length: Option<u64>,
    /// The status answered (the backend's own for requests that reached it).
    pub status: u16,
}

/// What the host decided about a request's credential.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A known user with the right password: served.
    Allowed(String),
    /// No usable `Authorization: Basic` header, or a wrong user or password: 401.
    Unauthorized,
    /// A known user with the right password whom the test forbade: 403.
    Forbidden,
}

#[derive(Debug, Default)]
struct Log {
    requests: Vec<GitRequest>,
    dropped: usize,
}

#[derive(Debug, Default)]
struct Access {
    /// (user, password) pairs accepted.
    users: Vec<(String, String)>,
    /// Users answered 403 even with the right password.
    forbidden: HashSet<String>,
}

#[derive(Debug)]
struct Shared {
    root: PathBuf,
    backend: PathBuf,
    access: Mutex<Access>,
    log: Mutex<Log>,
}

/// A test's lock can only be poisoned by a panicking handler, which leaves nothing half-done.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn verdict(&self, authorization: Option<&str>) -> Verdict {
        let Some((user, password)) = authorization.and_then(parse_basic) else {
            return Verdict::Unauthorized;
        };
        let access = lock(&self.access);
        if !access.users.iter().any(|(u, p)| *u == user && *p == password) {
            return Verdict::Unauthorized;
        }
        if access.forbidden.contains(&user) {
            return Verdict::Forbidden;
        }
        Verdict::Allowed(user)
    }

    fn record(&self, request: GitRequest) {
        let mut log = lock(&self.log);
        if log.requests.len() < MAX_LOGGED_REQUESTS {
            log.requests.push(request);
        } else {
            log.dropped += 1;
        }
    }
}

/// A running git smart-HTTP host on `127.0.0.1`; it stops when dropped.
#[derive(Debug)]
pub struct GitHttp {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitHttp {
    /// Starts a host serving the repositories under `root` (`GIT_PROJECT_ROOT`) to `user` with
    /// `password`, on `127.0.0.1:0`, on a thread of its own (callable from sync and async code).
    pub fn start(root: &Path, user: &str, password: &str) -> anyhow::Result<GitHttp> {
        let backend = backend_path()?;
        let root = root
            .canonicalize()
            .with_context(|| format!("the repository root {} must exist", root.display()))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("while binding the git host to 127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            root,
            backend,
            access: Mutex::new(Access {
                users: vec![(user.to_owned(), password.to_owned())],
                ..Access::default()
            }),
            log: Mutex::new(Log::default()),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("while building the git host's runtime")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let thread = std::thread::Builder::new()
            .name("git-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("git host: cannot listen: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            if let Err(e) = served {
                                eprintln!("git host stopped: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime drops every connection task, and with them the backends
                // still running (kill_on_drop).
                drop(runtime);
            })
            .context("while starting the git host's thread")?;
        Ok(GitHttp { addr, shared, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT/git/<repo>` (no credential in it).
    pub fn url(&self, repo: &str) -> String {
        format!("http://{}/git/{repo}", self.addr)
    }

    /// `127.0.0.1:PORT`: the host (with port) a credential is registered for.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    /// The `serve` flags an admin gives for an internal git host like this one: it may be on
    /// loopback (`--git-allow-host`) and get the org's credential over plain http
    /// (`--git-allow-http`). Without them the server refuses its URLs.
    pub fn allow_flags(&self) -> Vec<String> {
        let host = self.authority();
        vec!["--git-allow-host".into(), host.clone(), "--git-allow-http".into(), host]
    }

    /// The repository root (`GIT_PROJECT_ROOT`).
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// Accepts another (user, password) pair too.
    pub fn add_user(&self, user: &str, password: &str) {
        lock(&self.shared.access).users.push((user.to_owned(), password.to_owned()));
    }

    /// Answers `user`'s requests `403` from now on, even with the right password.
    pub fn forbid_user(&self, user: &str) {
        lock(&self.shared.access).forbidden.insert(user.to_owned());
    }

    /// Every request received so far (the first [`MAX_LOGGED_REQUESTS`]), in the order
    /// their answers started.
    pub fn requests(&self) -> Vec<GitRequest> {
        lock(&self.shared.log).requests.clone()
    }

    /// Requests received beyond [`MAX_LOGGED_REQUESTS`] (counted, not kept).
    pub fn requests_dropped(&self) -> usize {
        lock(&self.shared.log).dropped
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `git --exec-path`/git-http-backend.
fn backend_path() -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new("git")
        .arg("--exec-path")
        .output()
        .context("cannot run `git --exec-path`: install git")?;
    if !out.status.success() {
        bail!("`git --exec-path` failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let path = PathBuf::from(String::from_utf8(out.stdout)?.trim()).join("git-http-backend");
    if !path.exists() {
        bail!("{} is missing: install git's http-backend (Debian: package git)", path.display());
    }
    Ok(path)
}

fn header_str(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let mut entry = GitRequest {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or_else(|| parts.uri.path(), |pq| pq.as_str()).into(),
        authorization: header_str(headers, header::AUTHORIZATION),
        content_encoding: header_str(headers, header::CONTENT_ENCODING),
        content_length: header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
        status: 0,
    };
    let user = match shared.verdict(entry.authorization.as_deref()) {
        Verdict::Allowed(user) => user,
        Verdict::Unauthorized => {
            entry.status = 401;
            shared.record(entry);
            let challenge = HeaderValue::from_static("Basic realm=\"test\"");
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, challenge)],
                "authentication required\n",
            )
                .into_response();
        }
        Verdict::Forbidden => {
            entry.status = 403;
            shared.record(entry);
            return (StatusCode::FORBIDDEN, "this user may not access the repository\n")
                .into_response();
        }
    };
    let Some(path_info) = parts.uri.path().strip_prefix("/git").filter(|p| p.starts_with('/'))
    else {
        entry.status = 404;
        shared.record(entry);
        return (StatusCode::NOT_FOUND, "only /git/... is served here\n").into_response();
    };
    let cgi = Cgi {
        path_info: path_info.to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        method: parts.method.to_string(),
        protocol: format!("{:?}", parts.version),
        user,
        content_type: header_str(headers, header::CONTENT_TYPE),
        content_length: header_str(headers, header::CONTENT_LENGTH),
        content_encoding: entry.content_encoding.clone(),
        git_protocol: header_str(headers, HeaderName::from_static("git-protocol")),
    };
    let response = match run_backend(&shared, cgi, body).await {
        Ok(response) => response,
        Err(e) => {
            (StatusCode::BAD_GATEWAY, format!("git http-backend failed: {e:#}\n")).into_response()
        }
    };
    entry.status = response.status().as_u16();
    shared.record(entry);
    response
}

/// The request's part of the CGI environment.
struct Cgi {
    path_info: String,
    query: String,
    method: String,
    protocol: String,
    user: String,
    content_type: Option<String>,
    content_length: Option<String>,
    content_encoding: Option<String>,
    git_protocol: Option<String>,
}

/// Runs `http-backend` for one request: the body streams to its stdin while its stdout streams
/// back as the response.
async fn run_backend(shared: &Shared, cgi: Cgi, body: Body) -> anyhow::Result<Response> {
    let mut command = tokio::process::Command::new(&shared.backend);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", &shared.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &shared.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", &cgi.protocol)
        .env("REQUEST_METHOD", &cgi.method)
        .env("PATH_INFO", &cgi.path_info)
        .env("QUERY_STRING", &cgi.query)
        .env("REMOTE_USER", &cgi.user)
        .env("REMOTE_ADDR", "127.0.0.1");
    // What a git host typically allows: push for authenticated users, fetching any reachable
    // commit by id (a clone "at a commit" fetches it so), partial-clone filters; and no
    // ownership check, whoever made the repositories.
    let config = [
        ("http.receivepack", "true"),
        ("uploadpack.allowReachableSHA1InWant", "true"),
        ("uploadpack.allowFilter", "true"),
        ("safe.directory", "*"),
    ];
    command.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (key, value)) in config.iter().enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    let optional = [
        ("CONTENT_TYPE", &cgi.content_type),
        ("CONTENT_LENGTH", &cgi.content_length),
        // http-backend inflates a gzip body itself.
        ("HTTP_CONTENT_ENCODING", &cgi.content_encoding),
        ("GIT_PROTOCOL", &cgi.git_protocol),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // The backend's complaints go straight to the test's stderr, where a failure shows them.
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", shared.backend.display()))?;
    let mut stdin = child.stdin.take().context("the backend has no stdin")?;
    let mut stdout = child.stdout.take().context("the backend has no stdout")?;
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        while let Some(chunk) = data.next().await {
            // A client that went away, or a backend that stopped reading (it answered an error
            // early): either way there is no one left to give the rest to.
            let Ok(chunk) = chunk else { break };
            if stdin.write_all(&chunk).await.is_err() {
                break;
            }
        }
        // Dropping stdin is the end of the body for a chunked request (no CONTENT_LENGTH).
    });
    let (head, rest) = read_cgi_head(&mut stdout).await?;
    let mut builder = Response::builder().status(head.status);
    for (name, value) in &head.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body = Body::from_stream(stream::unfold(
        Some(BodyStream { first: Some(rest), stdout, child }),
        next_chunk,
    ));
    Ok(builder.body(body)?)
}

/// The rest of a response: what was read past the header block, then the backend's stdout.
struct BodyStream {
    first: Option<Bytes>,
    stdout: ChildStdout,
    /// Held so the backend is killed if the client goes away mid-body, and reaped at the end.
    child: Child,
}

async fn next_chunk(
    state: Option<BodyStream>,
) -> Option<(std::io::Result<Bytes>, Option<BodyStream>)> {
    let mut state = state?;
    if let Some(first) = state.first.take().filter(|b| !b.is_empty()) {
        return Some((Ok(first), Some(state)));
    }
    let mut buf = BytesMut::with_capacity(BODY_CHUNK_BYTES);
    match state.stdout.read_buf(&mut buf).await {
        Ok(0) => {
            let _ = state.child.wait().await;
            None
        }
        Ok(_) => Some((Ok(buf.freeze()), Some(state))),
        Err(e) => Some((Err(e), None)),
    }
}

/// The CGI header block of a response.
#[derive(Debug, PartialEq, Eq)]
struct CgiHead {
    status: u16,
    headers: Vec<(String, String)>,
}

/// Reads the CGI header block (`Status: 200 OK`, headers, a blank line) and returns it with the
/// bytes read past it (the start of the body).
async fn read_cgi_head<R: AsyncRead + Unpin>(out: &mut R) -> anyhow::Result<(CgiHead, Bytes)> {
    let mut buf = BytesMut::with_capacity(4096);
    let (head_len, sep_len) = loop {
        let found = find_blank_line(&buf);
        if found.map_or(buf.len(), |(len, _)| len) > MAX_CGI_HEAD_BYTES {
            bail!("the CGI header block is over {MAX_CGI_HEAD_BYTES} bytes");
        }
        if let Some(found) = found {
            break found;
        }
        if out.read_buf(&mut buf).await? == 0 {
            bail!("the backend exited before ending its CGI header block (see its stderr)");
        }
    };
    let head = buf.split_to(head_len + sep_len);
    let text = String::from_utf8_lossy(&head[..head_len]);
    let mut status = 200;
    let mut headers = Vec::new();
    for line in text.lines().map(|l| l.trim_end_matches('\r')) {
        let Some((name, value)) = line.split_once(':') else {
            bail!("a CGI header line without a colon: {line:?}");
        };
        let value = value.trim().to_owned();
        if name.eq_ignore_ascii_case("status") {
            status = value
                .split_whitespace()
                .next()
                .and_then(|code| code.parse().ok())
                .with_context(|| format!("a CGI Status line without a code: {line:?}"))?;
        } else {
            headers.push((name.trim().to_owned(), value));
        }
    }
    Ok((CgiHead { status, headers }, buf.freeze()))
}

/// Where the header block ends: (its length, the blank line's separator length).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

// ---------------------------------------------------------------------------------------------
// Basic auth

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The `Authorization` header value for `user` and `password` (`Basic base64(user:password)`),
/// e.g. for `git -c http.extraHeader="Authorization: …"`.
pub fn basic_auth(user: &str, password: &str) -> String {
    let raw = format!("{user}:{password}");
    let mut out = String::from("Basic ");
    for chunk in raw.as_bytes().chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// (user, password) of an `Authorization: Basic …` value; `None` if it is anything else.
fn parse_basic(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let mut bytes = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in encoded.trim().trim_end_matches('=').bytes() {
        let v = BASE64.iter().position(|&b| b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    let (user, password) = String::from_utf8(bytes)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_owned(), p.to_owned()))?;
    Some((user, password))
}

// ---------------------------------------------------------------------------------------------
// Test repositories

/// A `git` command with a clean environment: no system or global config, no terminal prompt,
/// no proxy, the C locale (so messages can be matched), `HOME` at `home`, and the fixed author
/// and committer of the helpers.
pub fn git_command(home: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "Outboard Test")
        .env("GIT_AUTHOR_EMAIL", "test@outboard.invalid")
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_NAME", "Outboard Test")
        .env("GIT_COMMITTER_EMAIL", "test@outboard.invalid")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z");
    command
}

/// Runs `command`, failing with its stderr unless it succeeds; returns its trimmed stdout.
fn run(command: &mut std::process::Command) -> anyhow::Result<String> {
    let out = command.output().with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A bare repository under the host's root, with the commit id of its first commit on `main`.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The bare repository's directory.
    pub path: PathBuf,
    /// The first commit on `main` (the default branch).
    pub main: String,
}

/// Makes the bare repository `root/name` (e.g. `demo.git`) holding `files` in one commit on
/// `main`, its default branch.
pub fn make_repo(root: &Path, name: &str, files: &[(&str, &[u8])]) -> anyhow::Result<Repo> {
    make_repo_from(root, name, files.iter().map(|(p, c)| (p.to_string(), c.to_vec())))
}

/// [`make_repo`] from an iterator of (path, content), streamed into `git fast-import` one file
/// at a time (the benchmark's 100 MiB tree never sits in memory whole).
pub fn make_repo_from(
    root: &Path,
    name: &str,
    files: impl IntoIterator<Item = (String, Vec<u8>)>,
) -> anyhow::Result<Repo> {
    let path = root.join(name);
    if path.exists() {
        bail!("{} already exists: pick another repository name", path.display());
    }
    run(git_command(root).args(["init", "--quiet", "--bare", "--initial-branch=main"]).arg(&path))?;
    let repo = Repo { path, main: String::new() };
    let main = repo.import("main", None, "initial commit", files, &[])?;
    Ok(Repo { main, ..repo })
}

impl Repo {
    /// Commits `writes` (added or replaced) and `deletes` on `branch`, on top of `parent` (a
    /// commit id or ref; the branch is made or moved there), and returns the new commit's id.
    pub fn commit(
        &self,
        branch: &str,
        parent: &str,
        message: &str,
        writes: &[(&str, &[u8])],
        deletes: &[&str],
    ) -> anyhow::Result<String> {
        let parent = self.rev_parse(parent)?;
        let writes = writes.iter().map(|(p, c)| (p.to_string(), c.to_vec()));
        self.import(branch, Some(&parent), message, writes, deletes)
    }

    /// Makes branch `name` at `rev` and returns the commit id it points at.
    pub fn branch(&self, name: &str, rev: &str) -> anyhow::Result<String> {
        let commit = self.rev_parse(rev)?;
        run(self.git().args(["branch", name, &commit]))?;
        Ok(commit)
    }

    /// Makes the annotated tag `name` at `rev` and returns the commit id it points at.
    pub fn tag(&self, name: &str, rev: &str) -> anyhow::Result<String> {
        let commit = self.rev_parse(rev)?;
        run(self.git().args(["tag", "-a", "-m", name, name, &commit]))?;
        Ok(commit)
    }

    /// The commit id `rev` names (`main`, `v1`, an id).
    pub fn rev_parse(&self, rev: &str) -> anyhow::Result<String> {
        run(self.git().args(["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")]))
            .with_context(|| format!("{rev} is not a commit of {}", self.path.display()))
    }

    /// A clean-environment git command in this repository.
    pub fn git(&self) -> std::process::Command {
        let mut command = git_command(&self.path);
        command.arg("-C").arg(&self.path);
        command
    }

    /// One commit on `branch` through `git fast-import`.
    fn import(
        &self,
        branch: &str,
        parent: Option<&str>,
        message: &str,
        writes: impl IntoIterator<Item = (String, Vec<u8>)>,
        deletes: &[&str],
    ) -> anyhow::Result<String> {
        let mut child = self
            .git()
            .args(["fast-import", "--quiet", "--done"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run git fast-import")?;
        let stdin = child.stdin.take().context("git fast-import has no stdin")?;
        let mut w = std::io::BufWriter::new(stdin);
        let written = (|| -> std::io::Result<()> {
            writeln!(w, "commit refs/heads/{branch}")?;
            writeln!(w, "author {AUTHOR}")?;
            writeln!(w, "committer {AUTHOR}")?;
            writeln!(w, "data {}", message.len())?;
            writeln!(w, "{message}")?;
            if let Some(parent) = parent {
                writeln!(w, "from {parent}")?;
            }
            for path in deletes {
                writeln!(w, "D {path}")?;
            }
            for (path, content) in writes {
                writeln!(w, "M 100644 inline {path}")?;
                writeln!(w, "data {}", content.len())?;
                w.write_all(&content)?;
                writeln!(w)?;
            }
            writeln!(w, "done")?;
            w.flush()
        })();
        drop(w);
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("git fast-import failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        written.context("while writing to git fast-import")?;
        self.rev_parse(&format!("refs/heads/{branch}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_round_trips() {
        // RFC 7617's example.
        assert_eq!(basic_auth("Aladdin", "open sesame"), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        for (user, password) in [("a", ""), ("ab", "c"), ("x-access-token", "t0k:en/+=")] {
            let header = basic_auth(user, password);
            assert_eq!(parse_basic(&header), Some((user.to_owned(), password.to_owned())));
        }
        assert_eq!(parse_basic("Bearer abc"), None);
        assert_eq!(parse_basic("Basic !!!"), None);
    }

    #[tokio::test]
    async fn cgi_head_is_parsed_and_the_rest_kept() {
        let raw = b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nbody starts";
        let (head, rest) = read_cgi_head(&mut &raw[..]).await.unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(head.headers, vec![("Content-Type".into(), "text/plain".into())]);
        assert_eq!(&rest[..], b"body starts");
        let (head, rest) = read_cgi_head(&mut &b"Expires: never\n\nx"[..]).await.unwrap();
        assert_eq!((head.status, &rest[..]), (200, &b"x"[..]));
    }

    #[tokio::test]
    async fn cgi_head_over_the_cap_is_refused() {
        let mut raw = b"X-Filler: ".to_vec();
        raw.resize(MAX_CGI_HEAD_BYTES + 10, b'a');
        raw.extend_from_slice(b"\r\n\r\nbody");
        match read_cgi_head(&mut &raw[..]).await {
            Ok(_) => panic!("a header block over the cap was accepted"),
            Err(e) => assert!(e.to_string().contains("over"), "{e:#}"),
        }
        // Just under the cap is fine.
        let mut raw = b"X-Filler: ".to_vec();
        raw.resize(MAX_CGI_HEAD_BYTES - 10, b'a');
        raw.extend_from_slice(b"\r\n\r\nbody");
        assert!(read_cgi_head(&mut &raw[..]).await.is_ok());
    }

    #[tokio::test]
    async fn cgi_head_cut_short_is_an_error() {
        let err = read_cgi_head(&mut &b"Status: 200 OK\r\n"[..]).await.unwrap_err();
        assert!(err.to_string().contains("exited"), "{err:#}");
    }
}
