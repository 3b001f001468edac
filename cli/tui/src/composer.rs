//! The multi-line composer: the text being written, the cursor, and the history of sent
//! messages. Enter sends; Alt-Enter, Shift-Enter (where the terminal reports it) and Ctrl-J
//! insert a newline; a bracketed paste inserts its text as is, newlines included. Up/Down walk
//! the history when the cursor is on the first/last line.

/// Most messages kept in the history (per process).
pub const HISTORY_LIMIT: usize = 200;

/// The composer's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Composer {
    text: String,
    /// Byte offset of the cursor in `text`, on a char boundary.
    cursor: usize,
    history: Vec<String>,
    /// Position while walking the history (`history.len()` = the draft).
    browsing: Option<usize>,
    draft: String,
}

impl Composer {
    /// The current text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The cursor's byte offset.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Whether nothing is typed.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Replaces the text and puts the cursor at its end.
    pub fn set(&mut self, text: impl Into<String>) {
        self.text = text.into();
        self.cursor = self.text.len();
    }

    /// Inserts `s` at the cursor (typing or a paste).
    pub fn insert(&mut self, s: &str) {
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        self.text.insert_str(self.cursor, &s);
        self.cursor += s.len();
        self.browsing = None;
    }

    /// Deletes the character before the cursor.
    pub fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    /// Deletes the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    /// Moves the cursor one character left.
    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    /// Moves the cursor one character right.
    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// To the start of the current line.
    pub fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    /// To the end of the current line.
    pub fn end(&mut self) {
        self.cursor += self.text[self.cursor..].find('\n').unwrap_or(self.text.len() - self.cursor);
    }

    /// Up: the previous line, or the previous history entry from the first line.
    pub fn up(&mut self) {
        if self.text[..self.cursor].contains('\n') {
            let line_start = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
            let col = self.text[line_start..self.cursor].chars().count();
            let prev_start = self.text[..line_start - 1].rfind('\n').map_or(0, |i| i + 1);
            self.cursor = advance(&self.text, prev_start, col, line_start - 1);
            return;
        }
        let at = self.browsing.unwrap_or(self.history.len());
        if at == 0 {
            return;
        }
        if self.browsing.is_none() {
            self.draft = self.text.clone();
        }
        self.browsing = Some(at - 1);
        self.set(self.history[at - 1].clone());
    }

    /// Down: the next line, or the next history entry (then the draft) from the last line.
    pub fn down(&mut self) {
        if let Some(nl) = self.text[self.cursor..].find('\n') {
            let line_start = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
            let col = self.text[line_start..self.cursor].chars().count();
            let next_start = self.cursor + nl + 1;
            let next_end =
                self.text[next_start..].find('\n').map_or(self.text.len(), |i| next_start + i);
            self.cursor = advance(&self.text, next_start, col, next_end);
            return;
        }
        let Some(at) = self.browsing else { return };
        if at + 1 >= self.history.len() {
            self.browsing = None;
            let draft = std::mem::take(&mut self.draft);
            self.set(draft);
        } else {
            self.browsing = Some(at + 1);
            self.set(self.history[at + 1].clone());
        }
    }

    /// Takes the text out for sending and records it in the history.
    pub fn take(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
            if self.history.len() > HISTORY_LIMIT {
                self.history.remove(0);
            }
        }
        text
    }

    /// Clears the text (history is kept).
    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    /// The cursor as (line, column in chars).
    pub fn cursor_pos(&self) -> (usize, usize) {
        let before = &self.text[..self.cursor];
        let line = before.matches('\n').count();
        let col = before.rsplit('\n').next().unwrap_or("").chars().count();
        (line, col)
    }
}

/// The byte offset `col` chars after `start`, but not past `limit`.
fn advance(text: &str, start: usize, col: usize, limit: usize) -> usize {
    text[start..limit].char_indices().nth(col).map_or(limit, |(i, _)| start + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn editing_and_multiline_movement() {
        let mut c = Composer::default();
        c.insert("hello");
        c.insert("\nwörld");
        assert_eq!(c.cursor_pos(), (1, 5));
        c.up();
        assert_eq!(c.cursor_pos(), (0, 5));
        c.home();
        c.delete();
        c.insert("H");
        c.end();
        c.backspace();
        assert_eq!(c.text(), "Hell\nwörld");
        c.down();
        assert_eq!(c.cursor_pos(), (1, 4));
        c.backspace();
        assert_eq!(c.text(), "Hell\nwörd");
    }

    #[test]
    fn history_walks_back_and_returns_to_the_draft() {
        let mut c = Composer::default();
        c.insert("first");
        assert_eq!(c.take(), "first");
        c.insert("second");
        c.take();
        c.insert("dra");
        c.up();
        assert_eq!(c.text(), "second");
        c.up();
        assert_eq!(c.text(), "first");
        c.up();
        assert_eq!(c.text(), "first");
        c.down();
        c.down();
        assert_eq!(c.text(), "dra");
    }

    #[test]
    fn paste_normalises_newlines() {
        let mut c = Composer::default();
        c.insert("a\r\nb\rc");
        assert_eq!(c.text(), "a\nb\nc");
    }
}
