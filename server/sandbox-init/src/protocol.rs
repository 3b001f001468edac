//! The agent protocol: what the server and the in-sandbox agent say to each other over the
//! agent's stdin and stdout.
//!
//! Framing: a 4-byte big-endian length, then that many bytes of JSON. Length-prefixed JSON rather
//! than JSON lines so a command's output can carry any text without escaping concerns at the
//! framing level, and rather than a binary format so a remote sandbox host can be debugged with
//! `strace`. Versioned: the agent's first frame is [`FromAgent::Hello`] with
//! [`PROTOCOL_VERSION`]; the server refuses any other version (a stale agent binary).
//!
//! One foreground command runs at a time; ids pair a [`ToAgent::Exec`] with its output and
//! [`FromAgent::Done`]. Background commands ([`ToAgent::Spawn`], version 2) run beside it, each
//! with an id of the same sequence: their output comes as [`FromAgent::Output`] frames with that
//! id whenever it is produced (between commands too), and their end as an unsolicited
//! [`FromAgent::JobDone`], so the server learns of it without asking.

use bytes::{Buf, BytesMut};
use outboard_shared::OutputStream;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The hidden first argument that turns our binaries into the agent.
pub const AGENT_ARG: &str = "__sandbox-agent";

/// The protocol version both ends must speak (3: `read_only` on [`ToAgent::Exec`] and
/// [`ToAgent::Spawn`]; an agent that ignored it would run a plan-mode command writable).
pub const PROTOCOL_VERSION: u32 = 3;

/// The largest frame either end accepts; output chunks are far smaller (one pipe read).
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Server → agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// Run `command` with `bash -c` in the current working directory.
    Exec {
        /// Pairs the command with its output and result.
        id: u64,
        /// The shell command.
        command: String,
        /// Killed after this long (its processes, not the sandbox).
        timeout_ms: u64,
        /// Run it in the read-only view (plan mode, [`crate::view`]): every mount read-only.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
    /// Kill the running command `id`; a [`FromAgent::Done`] follows.
    Cancel {
        /// The command.
        id: u64,
    },
    /// Start `command` with `bash -c` in the current working directory as a background job in
    /// its own process group, with no timeout; [`FromAgent::Spawned`] (or an error) answers.
    Spawn {
        /// Names the job in its output and its [`FromAgent::JobDone`].
        id: u64,
        /// The shell command.
        command: String,
        /// Run it in the read-only view (plan mode, [`crate::view`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
    /// Kill background job `id` (its process group); its [`FromAgent::JobDone`] follows.
    KillJob {
        /// The job.
        id: u64,
    },
    /// Answer with [`FromAgent::Pong`] (proves a thawed agent is live).
    Ping {
        /// Echoed back.
        id: u64,
    },
}

/// Agent → server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromAgent {
    /// First frame: the agent is up.
    Hello {
        /// The agent's [`PROTOCOL_VERSION`].
        version: u32,
    },
    /// Output of command `id`, as it came.
    Output {
        /// The command.
        id: u64,
        /// Which pipe.
        stream: OutputStream,
        /// UTF-8 text (split characters are kept whole across frames).
        text: String,
    },
    /// Command `id` ended.
    Done {
        /// The command.
        id: u64,
        /// Exit code, when it exited.
        exit_code: Option<i32>,
        /// Terminating signal, when killed.
        signal: Option<i32>,
        /// Killed by the agent for exceeding its timeout.
        timed_out: bool,
        /// The shell's working directory when the command ended (the next command starts
        /// there): the server's Bash guard resolves relative targets against it. Absent from
        /// agents that predate it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// Background job `id` started.
    Spawned {
        /// The job.
        id: u64,
    },
    /// Background job `id` ended (after its output); sent whenever it happens.
    JobDone {
        /// The job.
        id: u64,
        /// Exit code, when it exited.
        exit_code: Option<i32>,
        /// Terminating signal, when killed.
        signal: Option<i32>,
    },
    /// Answer to [`ToAgent::Ping`].
    Pong {
        /// The ping's id.
        id: u64,
    },
    /// The agent could not do what was asked (e.g. could not start `bash`).
    Error {
        /// The command concerned, if any.
        id: Option<u64>,
        /// What went wrong.
        message: String,
    },
}

/// Writes one frame.
pub async fn write_frame<W, T>(w: &mut W, msg: &T) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await?;
    w.flush().await
}

/// Reads frames; cancel-safe (a partial frame stays buffered), so it can sit in a `select!`.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a byte stream.
    pub fn new(inner: R) -> Self {
        FrameReader { inner, buf: BytesMut::with_capacity(16 * 1024) }
    }

    /// The next message; `Ok(None)` at a clean end of stream.
    pub async fn next<T: DeserializeOwned>(&mut self) -> std::io::Result<Option<T>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if len > MAX_FRAME_BYTES {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a frame of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"),
                    ));
                }
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    let body = self.buf.split_to(len);
                    return serde_json::from_slice(&body).map(Some).map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                    });
                }
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_across_split_reads() {
        let msgs = vec![
            FromAgent::Hello { version: PROTOCOL_VERSION },
            FromAgent::Output { id: 1, stream: OutputStream::Stderr, text: "é\n".into() },
            FromAgent::Done {
                id: 1,
                exit_code: Some(3),
                signal: None,
                timed_out: false,
                cwd: Some("/workspace/src".into()),
            },
        ];
        let mut bytes = Vec::new();
        for m in &msgs {
            write_frame(&mut bytes, m).await.unwrap();
        }
        // One byte at a time: partial frames must wait for the rest.
        let (mut tx, rx) = tokio::io::duplex(1);
        tokio::spawn(async move { tx.write_all(&bytes).await });
        let mut reader = FrameReader::new(rx);
        let mut got = Vec::new();
        while let Some(m) = reader.next::<FromAgent>().await.unwrap() {
            got.push(m);
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn wire_shape_is_tagged_json() {
        let exec =
            |read_only| ToAgent::Exec { id: 7, command: "ls".into(), timeout_ms: 5, read_only };
        let v = serde_json::to_value(exec(false)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "exec", "id": 7, "command": "ls", "timeout_ms": 5})
        );
        let v = serde_json::to_value(exec(true)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "exec", "id": 7, "command": "ls", "timeout_ms": 5, "read_only": true})
        );
    }
}
