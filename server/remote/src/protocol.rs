//! The messages between a harness node and a sandbox host, one JSON document per WebSocket
//! binary message, each at most [`MAX_FRAME_BYTES`].
//!
//! A connection opens with the join handshake ([`ToHarness::Challenge`], [`ToHost::Join`],
//! [`ToHarness::Welcome`] or [`ToHarness::Refused`]; see `trust`), then carries calls:
//! each [`ToHost::Call`] has an id chosen by the harness, unique on the connection, so many calls
//! of many sessions share it; the host answers with any number of [`ToHarness::Output`] for that
//! id (a command's output as it comes) and exactly one [`ToHarness::Reply`]. [`ToHost::Cancel`]
//! stops a running call, which still ends with its `Reply`.
//!
//! Design choice: JSON rather than a binary encoding, like the client protocol: a call's cost is
//! the sandbox or the disk, not the encoding, and a captured frame can be read by a person.

use outboard_shared::OutputStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version both ends must speak; a host refuses a join with another one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest message either end sends or accepts, in bytes. A `Write` carries a whole file and
/// a `Write`/`Edit` the session's whole read ledger: the largest file `Edit` loads
/// ([`outboard_tools::MAX_FILE_BYTES`], 32 MiB) plus a full ledger of long paths (4096 entries of
/// up to a few KiB) stays under it, and a peer cannot make the other buffer more.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// From the host to the harness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToHarness {
    /// The first message: the host's version and a fresh random nonce (hex) to prove the join
    /// token against.
    Challenge { version: u32, nonce: String },
    /// The join was accepted; `proof` shows the host knows the token too (see `trust`).
    /// `capacity` is how many workspaces the host offers to take (`sandbox-host --capacity`),
    /// what placement weighs hosts by.
    Welcome {
        proof: String,
        #[serde(default)]
        capacity: Option<u32>,
    },
    /// The join was refused; the reason says what to do. The host closes the connection.
    Refused { reason: String },
    /// Output of the running call `id`.
    Output { id: u64, stream: OutputStream, text: String },
    /// The end of call `id`.
    Reply { id: u64, reply: Reply },
}

/// From the harness to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToHost {
    /// The answer to the challenge: the harness's version, its own nonce and its proof.
    Join { version: u32, nonce: String, proof: String },
    /// Starts call `id`.
    Call { id: u64, op: Op },
    /// Stops call `id` (its processes are killed; it still gets its reply).
    Cancel { id: u64 },
}

/// What a call asks of the host. `workspace` is the id of a workspace on the host (letters,
/// digits, `-` and `_`; see [`valid_workspace_id`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Creates the workspace if it does not exist yet (its sandbox starts with its first
    /// command).
    Open { workspace: String },
    /// Runs `command` with `bash -c` in the workspace's sandbox.
    Exec { workspace: String, command: String, timeout_ms: u64 },
    /// Runs the file tool `name` (`Read`, `Write`, `Edit`, `Glob`, `Grep`) with the model's
    /// `input` against the workspace. `ledger` is the session's read ledger as the tool needs
    /// it: every file entry for `Write` and `Edit` (they check the target against it), none
    /// for the others (they only record).
    Tool { workspace: String, name: String, input: Value, ledger: Vec<WireStamp> },
    /// The `target_before` digest of `path` in the workspace (see
    /// [`outboard_harness::workspace_target_digest`]).
    Digest { workspace: String, path: String },
    /// The ledger entries of `paths` as they are now (files that cannot be read are left out):
    /// how a harness that restarted rebuilds a session's read ledger.
    Stamps { workspace: String, paths: Vec<String> },
    /// The host's load: its capacity, its workspaces, its live sandboxes.
    Status,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The workspace exists.
    Opened,
    /// A command's result (see [`outboard_sandbox::ExecResult`]).
    Exec {
        exit_code: Option<i32>,
        output: String,
        timed_out: bool,
        signal: Option<i32>,
        failure: Option<String>,
    },
    /// A file tool's result, and what it changed in the ledger: entries it recorded (new or
    /// changed) and paths it forgot.
    Tool {
        output: String,
        is_error: bool,
        recorded: Vec<WireStamp>,
        forgotten: Vec<String>,
        /// The picture or PDF a `Read` shows the model.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<outboard_shared::Attachment>,
    },
    /// The digest, `None` when the file cannot be read.
    Digest { digest: Option<String> },
    /// The entries asked for by [`Op::Stamps`].
    Stamps { stamps: Vec<WireStamp> },
    /// The answer to [`Op::Status`].
    Status { capacity: u32, workspaces: u64, live_sandboxes: u64 },
    /// The host could not do the call; the text says why and what to do.
    Failed { error: String },
}

/// One read-ledger entry on the wire: the host path the tool resolved (opaque to the harness,
/// which only stores it) and the content's length and hex SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireStamp {
    pub path: String,
    pub len: u64,
    pub sha256: String,
}

/// The largest message a harness accepts from a host. A host's messages are small by
/// construction (a command's result is at most its output cap, 128 KiB, a `Read` at most
/// `MAX_READ_OUTPUT_BYTES`, 256 KiB, an output chunk at most the host's `OUTPUT_CHUNK_BYTES`,
/// a ledger rebuild at most 256 entries), even at JSON's worst escaping (6 bytes a byte); only
/// the other direction carries whole files. A host sending more is cut off before the message
/// is buffered: one once sent a 60 MiB `Bash` result that went whole into the log.
pub const MAX_HOST_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The longest text of a host's own a harness keeps (a refusal reason, reachable without the
/// token; a failure): enough for a sentence and what to do.
pub const MAX_HOST_TEXT_BYTES: usize = 512;

/// A host's text as a harness shows it (in `admin hosts ls`, in users' errors): control
/// characters (escape sequences, newlines, Unicode bidirectional controls) become spaces and
/// it is cut at [`MAX_HOST_TEXT_BYTES`] on a character boundary, with `…` when cut.
pub fn host_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_HOST_TEXT_BYTES));
    for c in text.chars() {
        let c = if c.is_control() || is_bidi_control(c) { ' ' } else { c };
        if out.len() + c.len_utf8() > MAX_HOST_TEXT_BYTES {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}

/// Unicode's bidirectional formatting characters, which reorder what a terminal shows.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A message that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Over [`MAX_FRAME_BYTES`].
    #[error(
        "a {len}-byte message is over the sandbox host protocol's {MAX_FRAME_BYTES}-byte bound; \
         send a smaller file or split the work"
    )]
    TooLarge { len: usize },
    /// A host's message over [`MAX_HOST_MESSAGE_BYTES`].
    #[error(
        "the sandbox host sent a {len}-byte message, over the {MAX_HOST_MESSAGE_BYTES} bytes a \
         harness accepts from a host"
    )]
    HostMessageTooLarge { len: usize },
    /// Not a message of this protocol version.
    #[error("a malformed sandbox host message ({0}); are both ends the same outboard version?")]
    Malformed(String),
}

/// A message as the bytes of one WebSocket message, refused past [`MAX_FRAME_BYTES`].
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let bytes = serde_json::to_vec(message).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: bytes.len() });
    }
    Ok(bytes)
}

/// The message in `bytes`, refused past [`MAX_FRAME_BYTES`] before it is parsed.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, FrameError> {
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: bytes.len() });
    }
    serde_json::from_slice(bytes).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// A host's message in `bytes`, as the harness reads it: refused past
/// [`MAX_HOST_MESSAGE_BYTES`] before it is parsed.
pub fn decode_from_host<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, FrameError> {
    if bytes.len() > MAX_HOST_MESSAGE_BYTES {
        return Err(FrameError::HostMessageTooLarge { len: bytes.len() });
    }
    decode(bytes)
}

/// The harness's WebSocket limits: no message or frame from a host past
/// [`MAX_HOST_MESSAGE_BYTES`] (what it sends to the host is bounded by [`encode`]).
pub fn harness_ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_HOST_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_HOST_MESSAGE_BYTES))
}

/// The WebSocket limits of both ends: no message or frame past [`MAX_FRAME_BYTES`], so a peer's
/// oversized message is refused by the transport before it is buffered whole.
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
}

/// Longest workspace id.
pub const MAX_WORKSPACE_ID: usize = 64;

/// Whether `id` may name a workspace: 1 to [`MAX_WORKSPACE_ID`] letters, digits, `-` or `_`, so
/// it is one plain directory name under `DATA/workspaces`.
pub fn valid_workspace_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_WORKSPACE_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The stamp of a wire entry; `None` for a malformed digest (the entry is then as good as
/// absent: the write it would allow is refused, never allowed).
pub fn stamp_from_wire(entry: &WireStamp) -> Option<outboard_tools::ReadStamp> {
    if entry.sha256.len() != 64 {
        return None;
    }
    let mut sha256 = [0u8; 32];
    for (i, byte) in sha256.iter_mut().enumerate() {
        *byte = u8::from_str_radix(entry.sha256.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(outboard_tools::ReadStamp { len: entry.len, sha256 })
}

/// A ledger entry for the wire.
pub fn stamp_to_wire(path: &std::path::Path, stamp: &outboard_tools::ReadStamp) -> WireStamp {
    WireStamp {
        path: path.to_string_lossy().into_owned(),
        len: stamp.len,
        sha256: crate::trust::hex(&stamp.sha256),
    }
}
