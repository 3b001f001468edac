//! Stdin, line by line, with a bound: each line is one JSON message of Claude Code's stream-json
//! input. The reader is its own task that hands parsed messages to the session loop over a
//! bounded channel, so a slow turn never stops the control protocol (an `interrupt` is read while
//! the turn streams) and a flood of input waits in the pipe, not in memory.
//!
//! A line longer than [`MAX_LINE_BYTES`] is not kept: its bytes are read and dropped up to its
//! newline and it becomes one [`Inbound::Bad`], so one oversized message costs a bounded buffer
//! and the messages after it are read as usual. A line that is not JSON, or not a message this
//! front end knows, is a `Bad` too; the loop reports it and goes on.

use tokio::io::{AsyncBufRead, AsyncBufReadExt as _};
use tokio::sync::mpsc;

use super::wire::{self, Inbound};

/// The longest stdin line kept, in bytes (10 MiB): a prompt with a few images fits; a line past
/// it is dropped with an error, and the lines after it are read as usual.
pub const MAX_LINE_BYTES: usize = 10 * 1024 * 1024;

/// Messages read ahead of the session loop: a program writes a prompt or a control request and
/// usually waits for the answer, so a handful is plenty; when the loop is busy the rest waits in
/// the pipe (the writer blocks), which is the backpressure stdin has.
pub const INBOUND_CHANNEL_CAPACITY: usize = 16;

/// One stdin line, as read.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A complete line (without its newline), at most [`MAX_LINE_BYTES`].
    Text(Vec<u8>),
    /// A line that was longer: only its length was kept.
    TooLong(usize),
}

/// Reads one line of at most `max` bytes; `None` at the end of the input. A final line without a
/// newline counts as a line.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<Line>> {
    let mut kept: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut any = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any.then(|| finish(kept, total, max)));
        }
        any = true;
        let (part, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        total = total.saturating_add(part.len());
        if total <= max {
            kept.extend_from_slice(part);
        } else if !kept.is_empty() {
            // Past the bound: what was kept is dropped now, the rest is only counted.
            kept = Vec::new();
        }
        let used = ends.unwrap_or(chunk.len());
        reader.consume(used);
        if ends.is_some() {
            return Ok(Some(finish(kept, total, max)));
        }
    }
}

fn finish(kept: Vec<u8>, total: usize, max: usize) -> Line {
    if total > max {
        Line::TooLong(total)
    } else {
        Line::Text(kept)
    }
}

/// Reads `stdin` until it ends, sending each line's message to `to`, numbered from 1; returns
/// when the input ends or the loop is gone. Blank lines are skipped, as Claude Code does.
pub async fn pump<R: AsyncBufRead + Unpin>(mut stdin: R, to: mpsc::Sender<(u64, Inbound)>) {
    let mut number = 0u64;
    loop {
        let line = match read_line(&mut stdin, MAX_LINE_BYTES).await {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                let _ =
                    to.send((number + 1, Inbound::Bad(format!("cannot read stdin: {e}")))).await;
                return;
            }
        };
        number += 1;
        let message = match line {
            Line::TooLong(len) => Inbound::Bad(format!(
                "the line is {len} bytes, over the bound of {MAX_LINE_BYTES} bytes; it was \
                 skipped (send images as files in the workspace, or fewer at a time)"
            )),
            Line::Text(bytes) => {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                wire::parse(&bytes)
            }
        };
        if to.send((number, message)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        // A one-byte buffer splits every line at every byte: the worst case for the bound.
        let mut reader = tokio::io::BufReader::with_capacity(1, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, max).await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn lines_at_and_over_the_bound() {
        let got = lines(b"abcd\nabcde\nab\nxyz", 4).await;
        assert_eq!(
            got,
            vec![
                Line::Text(b"abcd".to_vec()),
                Line::TooLong(5),
                Line::Text(b"ab".to_vec()),
                Line::Text(b"xyz".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn an_empty_input_has_no_line() {
        assert_eq!(lines(b"", 4).await, vec![]);
        assert_eq!(lines(b"\n", 4).await, vec![Line::Text(Vec::new())]);
    }
}
