//! Running `git` on the server, outside every sandbox: cloning, snapshotting a workspace,
//! diffing it and pushing it.
//!
//! Every command runs with a cleared environment (no system or global config, no terminal
//! prompt, `LC_ALL=C` so messages can be classified, redirects not followed) and, when the
//! remote needs a credential, a credential helper that answers from this process's memory
//! through the child's environment only: the value never reaches argv, a config file, the
//! repository, or the sandbox (which runs in another pid namespace and never sees these
//! processes). git asks for it only after the host answers 401, and only for the URL it was
//! configured for.
//!
//! Failures are classified from git's stderr into [`GitError`], whose messages say what to do.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncReadExt as _, BufReader};
use tokio::process::Command;

use outboard_org::secrets::SecretValue;

/// The most stderr kept from one git command for its error message: its tail says what went
/// wrong; the progress lines before it do not.
const STDERR_TAIL_BYTES: usize = 4096;

/// CPU seconds one git process of ours may use (`RLIMIT_CPU`, set right after it starts): git
/// runs outside every sandbox and cgroup, on the server's own time, over files a sandbox wrote.
/// A clone of a very large repository stays well under it; a workspace built to make git spin
/// (huge files are left out before git sees them, see `sources::large`) is killed at it.
pub const CPU_LIMIT_SECS: u64 = 600;

/// Wall-clock bound of one git command we wait for; transfers also stop when slower than
/// [`LOW_SPEED_BYTES`] for [`LOW_SPEED_SECS`].
pub const WALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The longest progress line read from git (its lines are far shorter; a longer one is cut).
const PROGRESS_LINE_BYTES: usize = 1024;

/// A transfer slower than this many bytes per second for [`LOW_SPEED_SECS`] is abandoned: a host
/// that accepts and then says nothing must not hold a clone (and its staging directory) forever.
const LOW_SPEED_BYTES: &str = "1000";
/// See [`LOW_SPEED_BYTES`].
const LOW_SPEED_SECS: &str = "60";

/// A git failure, by what the user can do about it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GitError {
    /// The URL cannot be used at all.
    #[error("{0}")]
    BadUrl(String),
    /// The URL's host is, or resolves to, an address that leads back into the server's host or
    /// its networks, and no admin named it. The text depends on the URL alone: it tells nothing
    /// of what listens there.
    #[error(
        "{host} is not a git host this server may reach: it is, or resolves to, a loopback, \
         private, link-local or otherwise internal address. An admin names an internal git host \
         with `outboard-server serve --git-allow-host HOST:PORT`"
    )]
    InternalHost {
        /// The host (and port).
        host: String,
    },
    /// The org holds a credential for the host, and the URL is plain `http://`.
    #[error(
        "the org's credential for {host} is never sent over plain http://: use an https:// URL, \
         or an admin marks the host with `outboard-server serve --git-allow-http HOST:PORT`"
    )]
    CleartextCredential {
        /// The host (and port).
        host: String,
    },
    /// The host did not answer.
    #[error("cannot reach {host}: {detail}. Check the URL and that the host is up")]
    Unreachable {
        /// The host (and port).
        host: String,
        /// What git said.
        detail: String,
    },
    /// The host wants a credential and the org has none for it.
    #[error(
        "{host} asks for a credential and the org has none for it: an admin sets one with \
         `outboard-server admin secret set --org ORG --host {host} NAME`"
    )]
    CredentialMissing {
        /// The host (and port).
        host: String,
    },
    /// The host refused the org's credential (401 or 403).
    #[error(
        "{host} refused the org's credential for it: check it still grants access to the \
         repository, or set a new one with `outboard-server admin secret set`"
    )]
    CredentialRefused {
        /// The host (and port).
        host: String,
    },
    /// No repository at the URL.
    #[error("no git repository at {url}: check the URL")]
    NotFound {
        /// The URL.
        url: String,
    },
    /// The URL answers, but not as a git repository.
    #[error("{url} is not a git repository (the server does not speak git's HTTP protocol)")]
    NotGit {
        /// The URL.
        url: String,
    },
    /// The ref does not exist.
    #[error("{0}")]
    MissingRef(String),
    /// The disk filled up.
    #[error("the server's disk is full ({0}); nothing was kept")]
    DiskFull(String),
    /// The remote refused a push.
    #[error("the push was refused: {0}")]
    PushRefused(String),
    /// git could not be run.
    #[error("cannot run git ({0}): install git on the server")]
    Spawn(String),
    /// Any other failure, with git's last words.
    #[error("git {command} failed: {detail}")]
    Failed {
        /// The git subcommand.
        command: String,
        /// The tail of its stderr.
        detail: String,
    },
}

/// A remote repository: its URL, where its credential applies, and the credential.
pub struct Remote {
    /// The URL, without credentials.
    pub url: String,
    /// `host[:port]`, for messages and for looking the credential up.
    pub host: String,
    /// The org's credential for the host, if it has one.
    pub credential: Option<SecretValue>,
    /// The `http.curloptResolve` entry that pins git to the addresses vetted for the host
    /// before git runs; `None` for an IP literal or a local path.
    pub pin: Option<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("host", &self.host)
            .field("credential", &self.credential.as_ref().map(|_| "[redacted]"))
            .field("pin", &self.pin)
            .finish()
    }
}

/// A parsed repository URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoUrl {
    /// The URL as given (normalized: no trailing slash).
    pub url: String,
    /// `http` or `https` (`file` for a local repository of the embedded server).
    pub scheme: String,
    /// `host[:port]` as the credential is looked up: lowercase, default port omitted.
    pub host: String,
}

impl RepoUrl {
    /// Checks a repository URL. `local_ok`: the embedded server, whose user owns the host, may
    /// clone a local path or `file://` URL; a shared server refuses them (they would read the
    /// server's own disk).
    pub fn parse(raw: &str, local_ok: bool) -> Result<RepoUrl, GitError> {
        let raw = raw.trim();
        let bad = |m: String| Err(GitError::BadUrl(m));
        if raw.is_empty() {
            return bad("the repository URL is empty".into());
        }
        if raw.starts_with('/') || raw.starts_with("file://") {
            if !local_ok {
                return bad(format!(
                    "{raw}: a local path or file:// URL names this server's own disk; give an \
                     https:// URL (only the embedded server clones local repositories)"
                ));
            }
            let path = raw.strip_prefix("file://").unwrap_or(raw);
            return Ok(RepoUrl {
                url: path.to_owned(),
                scheme: "file".into(),
                host: "localhost".into(),
            });
        }
        let Some((scheme, rest)) = raw.split_once("://") else {
            return bad(format!(
                "{raw:?} is not a URL: give https://host/path (ssh and scp-style addresses are \
                 not supported; the server authenticates over HTTPS)"
            ));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "https" && scheme != "http" {
            return bad(format!(
                "{raw}: the scheme must be https:// (or http://); {scheme}:// is not supported"
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return bad(
                "the repository URL carries credentials: remove them and store the credential \
                 with `outboard-server admin secret set --org ORG --host HOST NAME`"
                    .into(),
            );
        }
        if rest.contains('?') || rest.contains('#') {
            return bad(format!("{raw}: a repository URL has no query or fragment"));
        }
        if authority.is_empty() {
            return bad(format!("{raw}: no host"));
        }
        if authority.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad(format!("{raw:?}: the host has spaces or control characters"));
        }
        let authority = authority.to_ascii_lowercase();
        let default_port = if scheme == "https" { ":443" } else { ":80" };
        let host = authority.strip_suffix(default_port).unwrap_or(&authority).to_owned();
        let path = &rest[rest.find('/').unwrap_or(rest.len())..];
        if path.chars().any(|c| c.is_control()) {
            return bad(format!("{raw:?}: the path has control characters"));
        }
        let url = format!("{scheme}://{authority}{}", path.trim_end_matches('/'));
        Ok(RepoUrl { url, scheme, host })
    }
}

/// What a progress line of git says: `("receiving", 45, Some(100), line)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// `counting`, `compressing`, `receiving`, `resolving_deltas`, `checking_out`, `writing`…
    pub phase: String,
    /// Units done.
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// The line as git wrote it.
    pub line: String,
}

/// Where progress goes while a command runs.
pub trait ProgressSink: Send + Sync {
    /// One progress report.
    fn report(&self, progress: Progress);
}

impl<F: Fn(Progress) + Send + Sync> ProgressSink for F {
    fn report(&self, progress: Progress) {
        self(progress)
    }
}

/// No progress wanted.
pub struct Quiet;

impl ProgressSink for Quiet {
    fn report(&self, _: Progress) {}
}

/// Sets [`CPU_LIMIT_SECS`] on a git process just started (its helpers, forked later, inherit
/// it). A failure is logged: the wall-clock bound still holds.
fn limit_cpu(child: &tokio::process::Child) {
    let Some(pid) = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)) else {
        return;
    };
    let limit = rustix::process::Rlimit {
        current: Some(CPU_LIMIT_SECS),
        maximum: Some(CPU_LIMIT_SECS + 5),
    };
    if let Err(e) = rustix::process::prlimit(Some(pid), rustix::process::Resource::Cpu, limit) {
        tracing::warn!("could not bound git's CPU time: {e}");
    }
}

/// Parses one of git's progress lines (`Receiving objects:  45% (450/1000), 1.2 MiB | …`).
pub fn parse_progress(line: &str) -> Option<Progress> {
    let line = line.trim();
    let line = line.strip_prefix("remote: ").unwrap_or(line);
    let (label, rest) = line.split_once(':')?;
    let phase = match label.trim() {
        "Enumerating objects" => "enumerating",
        "Counting objects" => "counting",
        "Compressing objects" => "compressing",
        "Receiving objects" => "receiving",
        "Resolving deltas" => "resolving_deltas",
        "Updating files" => "checking_out",
        "Writing objects" => "writing",
        _ => return None,
    };
    let (done, total) = match rest.split_once('(') {
        Some((_, counts)) => {
            let counts = counts.split(')').next()?;
            let (d, t) = counts.split_once('/')?;
            (d.trim().parse().ok()?, Some(t.trim().parse().ok()?))
        }
        None => (rest.trim().split([',', ' ']).next()?.parse().ok()?, None),
    };
    Some(Progress { phase: phase.into(), done, total, line: line.to_owned() })
}

/// The `git` program with the environment every command of ours runs in.
#[derive(Debug, Clone)]
pub struct Git {
    program: PathBuf,
}

impl Default for Git {
    fn default() -> Git {
        Git { program: PathBuf::from("git") }
    }
}

/// The shell snippet git runs as its credential helper: it answers `get` from the child's
/// environment and ignores `store`/`erase`.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get || exit 0; \
     printf 'username=%s\\npassword=%s\\n' \"$OUTBOARD_GIT_USER\" \"$OUTBOARD_GIT_PASSWORD\"; }; f";

/// One git command being assembled.
pub struct GitCommand {
    command: Command,
    name: String,
    /// Values that must never appear in an error message (the credential).
    redact: Vec<String>,
}

impl Git {
    /// A command `git ARGS` in `cwd` (None: the process's), with our environment.
    pub fn command(&self, cwd: Option<&Path>, args: &[&str]) -> GitCommand {
        let mut command = Command::new(&self.program);
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", "/nonexistent")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "")
            .env("SSH_ASKPASS", "")
            .env("LC_ALL", "C")
            .env("GIT_CONFIG_COUNT", "5")
            // Redirects could carry a credential to another host; a repository URL is exact.
            .env("GIT_CONFIG_KEY_0", "http.followRedirects")
            .env("GIT_CONFIG_VALUE_0", "false")
            // No hooks, ever: the workspace's files are the sandbox's.
            .env("GIT_CONFIG_KEY_1", "core.hooksPath")
            .env("GIT_CONFIG_VALUE_1", "/dev/null")
            .env("GIT_CONFIG_KEY_2", "protocol.file.allow")
            .env("GIT_CONFIG_VALUE_2", "user")
            .env("GIT_CONFIG_KEY_3", "http.lowSpeedLimit")
            .env("GIT_CONFIG_VALUE_3", LOW_SPEED_BYTES)
            .env("GIT_CONFIG_KEY_4", "http.lowSpeedTime")
            .env("GIT_CONFIG_VALUE_4", LOW_SPEED_SECS)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        command.args(args);
        let name = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or("").to_owned();
        GitCommand { command, name, redact: Vec::new() }
    }

    /// A command that talks to `remote`, pinned to its vetted addresses, with its credential
    /// available to git's helper.
    pub fn remote_command(&self, cwd: Option<&Path>, remote: &Remote, args: &[&str]) -> GitCommand {
        let mut cmd = self.command(cwd, args);
        let mut count = 5;
        let mut config = |cmd: &mut GitCommand, key: &str, value: &str| {
            cmd.command
                .env(format!("GIT_CONFIG_KEY_{count}"), key)
                .env(format!("GIT_CONFIG_VALUE_{count}"), value);
            count += 1;
            cmd.command.env("GIT_CONFIG_COUNT", count.to_string());
        };
        if let Some(pin) = &remote.pin {
            config(&mut cmd, "http.curloptResolve", pin);
        }
        if let Some(credential) = &remote.credential {
            let (user, password) = credential.basic_auth();
            config(&mut cmd, "credential.helper", CREDENTIAL_HELPER);
            config(&mut cmd, "credential.interactive", "false");
            cmd.command
                .env("OUTBOARD_GIT_USER", &user)
                .env("OUTBOARD_GIT_PASSWORD", password.expose());
            cmd.redact.push(password.expose().to_owned());
            cmd.redact.push(credential.expose().to_owned());
        }
        cmd
    }
}

impl GitCommand {
    /// Sets an environment variable of the command.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> GitCommand {
        self.command.env(key, value);
        self
    }

    /// Runs it to the end; its stdout on success.
    pub async fn output(self) -> Result<Vec<u8>, GitError> {
        self.run_reporting(&Quiet).await
    }

    /// Runs it to the end, its stdout as trimmed text.
    pub async fn text(self) -> Result<String, GitError> {
        let out = self.output().await?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// Runs it with stdout piped and returns the child, for streaming its output; stderr is
    /// dropped.
    /// The process is killed when the server dies (`PR_SET_PDEATHSIG`), even by SIGKILL: a
    /// git left running would go on writing a workspace while a restarted server repairs it
    /// (an interrupted rewind). Tokio spawns from its worker threads, which live as long as the
    /// server.
    #[allow(unsafe_code)]
    pub fn die_with_server(mut self) -> GitCommand {
        // SAFETY: the closure runs in the child between fork and exec and only makes one
        // async-signal-safe system call.
        unsafe {
            self.command.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        self
    }

    /// Reads the command's stdin from the file `path` (the server's own).
    pub fn stdin_file(mut self, path: &Path) -> GitCommand {
        if let Ok(file) = std::fs::File::open(path) {
            self.command.stdin(Stdio::from(file));
        }
        self
    }

    /// The command as a blocking `std::process::Command`, with everything set so far (a
    /// blocking thread's long-lived child: `cat-file --batch` feeding a restore).
    pub fn into_std(self) -> std::process::Command {
        self.command.into_std()
    }

    pub fn spawn_stdout(mut self) -> Result<tokio::process::Child, GitError> {
        self.command.stdout(Stdio::piped()).stderr(Stdio::null());
        let child = self.command.spawn().map_err(|e| GitError::Spawn(e.to_string()))?;
        limit_cpu(&child);
        Ok(child)
    }

    /// Runs it to the end, reporting git's progress lines (stderr, split at `\r` and `\n`).
    pub async fn run_reporting(mut self, sink: &dyn ProgressSink) -> Result<Vec<u8>, GitError> {
        self.command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self.command.spawn().map_err(|e| GitError::Spawn(e.to_string()))?;
        limit_cpu(&child);
        let (Some(mut stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(GitError::Spawn("no pipes".into()));
        };
        let read_stdout = async move {
            let mut out = Vec::new();
            stdout.read_to_end(&mut out).await.map(|_| out)
        };
        let read_stderr = async move {
            let mut reader = BufReader::new(stderr);
            let mut tail: Vec<u8> = Vec::new();
            let mut line: Vec<u8> = Vec::new();
            let mut byte = [0u8; 1];
            loop {
                match reader.read(&mut byte).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if byte[0] == b'\r' || byte[0] == b'\n' {
                    if let Some(p) = parse_progress(&String::from_utf8_lossy(&line)) {
                        sink.report(p);
                    } else if !line.is_empty() {
                        tail.extend_from_slice(&line);
                        tail.push(b'\n');
                        if tail.len() > STDERR_TAIL_BYTES {
                            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                        }
                    }
                    line.clear();
                } else if line.len() < PROGRESS_LINE_BYTES {
                    line.push(byte[0]);
                }
            }
            if !line.is_empty() {
                tail.extend_from_slice(&line);
            }
            tail
        };
        let ran = tokio::time::timeout(WALL_LIMIT, async {
            let (out, tail) = tokio::join!(read_stdout, read_stderr);
            (out, tail, child.wait().await)
        })
        .await;
        let Ok((out, tail, status)) = ran else {
            // `kill_on_drop`: the child goes with the future.
            return Err(GitError::Failed {
                command: self.name,
                detail: format!("took longer than {} minutes", WALL_LIMIT.as_secs() / 60),
            });
        };
        let status = status.map_err(|e| GitError::Spawn(e.to_string()))?;
        let out = out.map_err(|e| GitError::Spawn(e.to_string()))?;
        if status.success() {
            return Ok(out);
        }
        let mut detail = String::from_utf8_lossy(&tail).trim().to_owned();
        for secret in &self.redact {
            if !secret.is_empty() {
                detail = detail.replace(secret.as_str(), "[redacted]");
            }
        }
        Err(GitError::Failed { command: self.name, detail })
    }
}

/// Turns a failure of a command that talked to `remote` into what it means for the user.
pub fn classify(error: GitError, remote: &Remote) -> GitError {
    let GitError::Failed { detail, .. } = &error else {
        return error;
    };
    let text = detail.as_str();
    let host = remote.host.clone();
    let has = |needle: &str| text.contains(needle);
    if has("No space left on device") {
        return GitError::DiskFull(last_line(text));
    }
    if has("Authentication failed") || has("returned error: 403") || has("returned error: 401") {
        return if remote.credential.is_some() {
            GitError::CredentialRefused { host }
        } else {
            GitError::CredentialMissing { host }
        };
    }
    if has("could not read Username") || has("terminal prompts disabled") {
        return GitError::CredentialMissing { host };
    }
    if has("Could not resolve host")
        || has("Failed to connect")
        || has("Connection refused")
        || has("Connection timed out")
        || has("Couldn't connect")
        || has("SSL certificate problem")
        || has("Empty reply from server")
    {
        return GitError::Unreachable { host, detail: last_line(text) };
    }
    if has("returned error: 404") || has("not found") || has("does not appear to be a git") {
        return GitError::NotFound { url: remote.url.clone() };
    }
    if has("not valid: is this a git repository") || has("dumb http transport") {
        return GitError::NotGit { url: remote.url.clone() };
    }
    error
}

fn last_line(text: &str) -> String {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned()
}

/// Refs a remote advertises.
#[derive(Debug, Clone, Default)]
pub struct RemoteRefs {
    /// The branch `HEAD` points at, when the remote says.
    pub head: Option<String>,
    /// `(refname, commit)`, tags peeled to their commit.
    pub refs: Vec<(String, String)>,
}

impl RemoteRefs {
    /// Parses `git ls-remote --symref` output.
    pub fn parse(text: &str) -> RemoteRefs {
        let mut out = RemoteRefs::default();
        let mut peeled: Vec<(String, String)> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("ref: ") {
                if let Some((target, "HEAD")) = rest.split_once('\t') {
                    out.head = target.strip_prefix("refs/heads/").map(str::to_owned);
                }
                continue;
            }
            let Some((sha, name)) = line.split_once('\t') else { continue };
            if let Some(tag) = name.strip_suffix("^{}") {
                peeled.push((tag.to_owned(), sha.to_owned()));
            } else {
                out.refs.push((name.to_owned(), sha.to_owned()));
            }
        }
        for (name, sha) in peeled {
            if let Some(entry) = out.refs.iter_mut().find(|(n, _)| *n == name) {
                entry.1 = sha;
            }
        }
        out
    }

    /// The commit of `refname`, if advertised.
    pub fn get(&self, refname: &str) -> Option<&str> {
        self.refs.iter().find(|(n, _)| n == refname).map(|(_, s)| s.as_str())
    }

    /// Branch names, for messages.
    pub fn branches(&self) -> Vec<&str> {
        self.refs.iter().filter_map(|(n, _)| n.strip_prefix("refs/heads/")).collect()
    }
}

/// Whether `text` is a full commit id (40 hex digits, or 64 for SHA-256 repositories).
pub fn is_commit_id(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests;
