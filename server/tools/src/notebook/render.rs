//! `Read` of a notebook: its cells as the model reads them — each with its id (or `cell-N`),
//! type and execution count, its source, and its outputs as text — bounded like `Read`'s other
//! answers.
//!
//! The cell tags follow Claude Code's `<cell id="…">…</cell id="…">`, which `NotebookEdit`'s
//! `cell_id` refers to. Outputs: a stream's text, the `text/plain` of a result or display (or its
//! `text/markdown`, else a one-line placeholder naming the type), an error's name, value and
//! traceback with the terminal's colour codes removed, and an image as a one-line placeholder
//! ([`image_output`], the one place an image output is turned into what the model gets).

use outboard_shared::{Attachment, AttachmentKind};

use super::json::Json;
use super::model::Notebook;

/// Bytes of text one `Read` of a notebook returns at most (`Read`'s bound): past it the answer
/// says which cell to continue at. The first cell shown is always whole (within its own bounds).
pub const MAX_READ_OUTPUT_BYTES: usize = 256 * 1024;
/// Characters kept of one line of a source or an output (`Read`'s bound).
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of one cell's source shown at most.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;
/// Bytes of one output's text shown at most: its first and last halves, the middle cut with a
/// note (a long log's end is often what matters).
pub const MAX_OUTPUT_TEXT_BYTES: usize = 8 * 1024;
/// Outputs of one cell shown at most; the rest are counted.
pub const MAX_OUTPUTS_PER_CELL: usize = 20;

/// The notebook `nb` (read from `shown`) as `Read` answers it: cells from the 1-based `offset`,
/// at most `limit` of them.
/// Image outputs of the cells shown go to `images` (see [`image_output`]).
pub fn render(
    nb: &Notebook,
    shown: &str,
    offset: Option<u64>,
    limit: Option<u64>,
    images: &mut Vec<Attachment>,
) -> String {
    let cells = nb.cells();
    let total = cells.len();
    let mut out = format!(
        "{shown}: Jupyter notebook (nbformat {}.{}{}), {total} cell{}\n",
        nb.major,
        nb.minor,
        nb.language().map(|l| format!(", {l}")).unwrap_or_default(),
        if total == 1 { "" } else { "s" },
    );
    if total == 0 {
        out.push_str(
            "\n<system-reminder>The notebook has no cells. Add one with NotebookEdit \
             (edit_mode \"insert\").</system-reminder>",
        );
        return out;
    }
    let start = offset.map_or(1, |o| o.max(1) as usize);
    if start > total {
        out.push_str(&format!(
            "\n<system-reminder>Warning: the notebook has {total} cells, fewer than the offset \
             {start}.</system-reminder>"
        ));
        return out;
    }
    let limit = limit.map_or(usize::MAX, |l| (l as usize).max(1));
    let mut next = start;
    for (index, cell) in cells.iter().enumerate().skip(start - 1).take(limit) {
        let mut cell_images = Vec::new();
        let block = cell_block(nb, index, cell, shown, images.len(), &mut cell_images);
        // Room is kept for the note that says where to continue.
        if next > start && out.len() + block.len() + 200 > MAX_READ_OUTPUT_BYTES {
            break;
        }
        images.extend(cell_images);
        out.push('\n');
        out.push_str(&block);
        next = index + 2;
    }
    if next <= total {
        out.push_str(&format!(
            "\n(Showing cells {start}-{} of {total}. Read with offset {next} to continue.)\n",
            next - 1
        ));
    }
    out
}

/// One cell: its tag, its source, its outputs.
fn cell_block(
    nb: &Notebook,
    index: usize,
    cell: &Json,
    shown: &str,
    before: usize,
    images: &mut Vec<Attachment>,
) -> String {
    let id = nb.cell_id(index);
    let kind = cell.get("cell_type").and_then(Json::as_str).unwrap_or("unknown");
    let mut out = format!("<cell id=\"{id}\" cell_type=\"{kind}\"");
    if kind == "code" {
        match cell.get("execution_count").and_then(Json::as_u64) {
            Some(n) => out.push_str(&format!(" execution_count=\"{n}\"")),
            None => out.push_str(" execution_count=\"none\""),
        }
    }
    out.push_str(">\n");
    let source = cell.get("source").and_then(Json::multiline).unwrap_or_default();
    push_text(&mut out, &source, MAX_SOURCE_BYTES, "source");
    out.push_str(&format!("</cell id=\"{id}\">\n"));
    let outputs = cell.get("outputs").and_then(Json::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for output in outputs.iter().take(MAX_OUTPUTS_PER_CELL) {
        let mut shown_images = ImagesOf { file: shown, cell: &id, before, images };
        out.push_str(&output_block(&id, output, &mut shown_images));
    }
    if outputs.len() > MAX_OUTPUTS_PER_CELL {
        out.push_str(&format!(
            "[{} more outputs of cell {id} not shown]\n",
            outputs.len() - MAX_OUTPUTS_PER_CELL
        ));
    }
    out
}

/// One output of the cell `id`.
fn output_block(id: &str, output: &Json, images: &mut ImagesOf<'_>) -> String {
    let kind = output.get("output_type").and_then(Json::as_str).unwrap_or("unknown");
    let mut head = format!("<output cell_id=\"{id}\" output_type=\"{kind}\"");
    let mut body = String::new();
    match kind {
        "stream" => {
            let name = output.get("name").and_then(Json::as_str).unwrap_or("stdout");
            head.push_str(&format!(" name=\"{name}\""));
            let text = output.get("text").and_then(Json::multiline).unwrap_or_default();
            push_text(&mut body, &strip_ansi(&text), MAX_OUTPUT_TEXT_BYTES, "output");
        }
        "execute_result" | "display_data" | "update_display_data" => {
            if let Some(n) = output.get("execution_count").and_then(Json::as_u64) {
                head.push_str(&format!(" execution_count=\"{n}\""));
            }
            body = rich_output(output.get("data"), images);
        }
        "error" => {
            let field = |k: &str| output.get(k).and_then(Json::as_str).unwrap_or_default();
            let mut text = format!("{}: {}\n", field("ename"), field("evalue"));
            if let Some(lines) = output.get("traceback").and_then(Json::as_array) {
                for line in lines.iter().filter_map(Json::as_str) {
                    text.push_str(line);
                    text.push('\n');
                }
            }
            push_text(&mut body, &strip_ansi(&text), MAX_OUTPUT_TEXT_BYTES, "output");
        }
        _ => body.push_str("[an output of a type this tool does not show]\n"),
    }
    format!("{head}>\n{body}</output>\n")
}

/// A result's or display's `data` (a MIME bundle): its images as placeholders, then its text
/// (`text/plain`, else `text/markdown`), else a placeholder naming what it holds.
fn rich_output(data: Option<&Json>, images: &mut ImagesOf<'_>) -> String {
    let Some(bundle) = data.and_then(Json::as_object) else {
        return "[an output without data]\n".into();
    };
    let mut out = String::new();
    for (mime, value) in &bundle.0 {
        if mime.starts_with("image/") {
            out.push_str(&images.show(mime, value));
            out.push('\n');
        }
    }
    let text = ["text/plain", "text/markdown"]
        .iter()
        .find_map(|m| bundle.get(m).and_then(Json::multiline));
    match text {
        Some(text) => push_text(&mut out, &strip_ansi(&text), MAX_OUTPUT_TEXT_BYTES, "output"),
        None if out.is_empty() => {
            for (mime, value) in &bundle.0 {
                let len = value.multiline().map_or(0, |t| t.len());
                out.push_str(&format!("[{mime} output, {len} bytes]\n"));
            }
        }
        None => {}
    }
    out
}

/// What the model is shown of an image output (`mime` is `image/…`, `data` its base64 text, or
/// for SVG its markup): a one-line placeholder with the image's size in bytes. The one place to
/// change when image outputs reach the model as images.
/// Where a cell's image outputs go: each PNG, JPEG, GIF or WebP output becomes an image the
/// model is shown (through `Read`'s own path: decoded with limits, scaled), at most
/// [`MAX_NOTEBOOK_IMAGES`] a read; any other, or past the limit, a placeholder.
struct ImagesOf<'a> {
    file: &'a str,
    cell: &'a str,
    /// Images taken by the cells before this one.
    before: usize,
    images: &'a mut Vec<Attachment>,
}

/// Images one `Read` of a notebook shows at most (as a message carries at most).
pub const MAX_NOTEBOOK_IMAGES: usize = outboard_shared::MAX_MESSAGE_IMAGES;

impl ImagesOf<'_> {
    fn show(&mut self, mime: &str, data: &Json) -> String {
        let placeholder = image_output(mime, data);
        let kinds = ["image/png", "image/jpeg", "image/gif", "image/webp"];
        if !kinds.contains(&mime) || self.before + self.images.len() >= MAX_NOTEBOOK_IMAGES {
            return placeholder;
        }
        let text = data.multiline().unwrap_or_default();
        let b64: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let prepared = outboard_media::from_base64(&b64)
            .and_then(|bytes| outboard_media::prepare_image(&bytes));
        match prepared {
            Ok(p) => {
                self.images.push(Attachment {
                    kind: AttachmentKind::Image,
                    media_type: p.media_type.to_owned(),
                    name: format!("{} (cell {} output)", self.file, self.cell),
                    data: outboard_media::base64(&p.bytes),
                    width: p.width,
                    height: p.height,
                    pages: 0,
                    text: None,
                    tokens: outboard_media::image_tokens(p.width, p.height),
                });
                format!("{placeholder}: shown as an image ({}×{})", p.width, p.height)
            }
            Err(e) => format!("{placeholder}: cannot be shown ({e})"),
        }
    }
}

/// The placeholder of an image output: its type and size.
pub fn image_output(mime: &str, data: &Json) -> String {
    let text = data.multiline().unwrap_or_default();
    let bytes = if mime == "image/svg+xml" { text.len() } else { base64_decoded_len(&text) };
    format!("[{mime} output, {bytes} bytes]")
}

/// The number of bytes the base64 text `b64` decodes to (whitespace ignored, as notebooks wrap
/// their base64 in lines).
fn base64_decoded_len(b64: &str) -> usize {
    let symbols = b64.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    let padding = b64.trim_end().bytes().rev().take_while(|b| *b == b'=').count().min(2);
    (symbols * 3 / 4).saturating_sub(padding)
}

/// Appends `text` to `out`, lines cut at [`MAX_LINE_CHARS`], the whole at about `max` bytes
/// (for a source its start, for an output its start and end), ending with a newline.
fn push_text(out: &mut String, text: &str, max: usize, what: &str) {
    if text.is_empty() {
        return;
    }
    let mut lines: Vec<String> = text.split('\n').map(cut_line).collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    let joined = lines.join("\n");
    if joined.len() <= max {
        out.push_str(&joined);
        out.push('\n');
        return;
    }
    let half = if what == "source" { max } else { max / 2 };
    let head = &joined[..floor_char(&joined, half)];
    let tail = if what == "source" {
        ""
    } else {
        &joined[floor_char(&joined, joined.len() - (max - half))..]
    };
    let cut = joined.len() - head.len() - tail.len();
    out.push_str(head);
    out.push_str(&format!("\n[… {cut} bytes of this {what} not shown …]\n"));
    if !tail.is_empty() {
        out.push_str(tail);
        out.push('\n');
    }
}

/// The largest char boundary of `s` at or before `at`.
fn floor_char(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A line cut at [`MAX_LINE_CHARS`] characters, a trailing `\r` dropped.
fn cut_line(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((i, _)) => format!("{}… [line cut]", &line[..i]),
        None => line.to_owned(),
    }
}

/// `text` without terminal escape sequences (the colours of IPython's tracebacks): CSI
/// (`ESC [ … final`), OSC (`ESC ] … BEL` or `ESC \`), and any other `ESC x` pair.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                // Parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_removed_and_text_kept() {
        let tb = "\u{1b}[0;31mValueError\u{1b}[0m: bad \u{1b}[1;32mx\u{1b}[0m\u{1b}]0;title\u{7}!";
        assert_eq!(strip_ansi(tb), "ValueError: bad x!");
        assert_eq!(strip_ansi("plain ünïcode"), "plain ünïcode");
        assert_eq!(strip_ansi("cut \u{1b}[31"), "cut ");
    }

    #[test]
    fn base64_sizes_are_the_decoded_bytes() {
        assert_eq!(base64_decoded_len("aGVsbG8="), 5);
        assert_eq!(base64_decoded_len("aGVs\nbG8h\n"), 6);
        assert_eq!(base64_decoded_len("aA=="), 1);
        assert_eq!(
            image_output("image/png", &Json::String("aGVsbG8=".into())),
            "[image/png output, 5 bytes]"
        );
    }

    #[test]
    fn a_long_output_keeps_its_start_and_end() {
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let mut out = String::new();
        push_text(&mut out, &text, MAX_OUTPUT_TEXT_BYTES, "output");
        assert!(out.len() < MAX_OUTPUT_TEXT_BYTES + 100, "{}", out.len());
        assert!(out.starts_with("line 0\n") && out.ends_with("line 4999\n"), "{out}");
        assert!(out.contains("bytes of this output not shown"));
        let mut long = String::new();
        push_text(&mut long, &"é".repeat(3000), MAX_OUTPUT_TEXT_BYTES, "output");
        assert!(long.contains("[line cut]"));
    }
}
