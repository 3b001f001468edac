//! The state machine's keys: the composer, the approval and question prompts, the pickers.

use super::*;

impl App {
    /// The approval prompt's keys (see [`super::approvals`] and [`super::guard`]); `None` lets
    /// the key through to the composer.
    pub(super) fn approval_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        if self.approvals.is_empty() || !self.driving() {
            return None;
        }
        let effects = self.prompt_key(key)?;
        // Answered: until its resolution comes back the prompt takes no more keys (a second
        // `y` must not fall on the next request, unseen, nor answer this one twice).
        if effects.iter().any(|e| matches!(e, Effect::Answer(_))) {
            if let Some((_, drawn)) = &mut self.guards.prompt {
                *drawn = None;
            }
        }
        Some(effects)
    }

    fn prompt_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        let plain = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
        if self.approvals.denying {
            return match key.code {
                KeyCode::Enter if plain => {
                    let reason = self.composer.text().to_owned();
                    self.composer.clear();
                    let answer = self.approvals.deny(&reason)?;
                    Some(vec![Effect::Answer(answer)])
                }
                KeyCode::Esc => {
                    self.approvals.denying = false;
                    self.composer.clear();
                    Some(Vec::new())
                }
                _ => None,
            };
        }
        if self.approvals.question().is_some() && (self.approvals.other || self.prompt_armed()) {
            return self.question_key(key, plain);
        }
        // Typed while the prompt opened, or before it was seen: the composer's.
        if !self.prompt_armed() {
            return None;
        }
        let plan = self.approvals.first().is_some_and(|r| r.kind == ApprovalKind::Plan);
        match key.code {
            // Allow for the session: a key of its own, never a letter of a word or Enter.
            KeyCode::BackTab if !plan => Some(
                self.approvals
                    .allow(ApprovalScope::Session)
                    .map(Effect::Answer)
                    .into_iter()
                    .collect(),
            ),
            KeyCode::Char('y' | 'Y') if plain => Some(
                self.approvals.allow(ApprovalScope::Once).map(Effect::Answer).into_iter().collect(),
            ),
            KeyCode::Char('n' | 'N') if plain => {
                self.approvals.denying = true;
                self.stash_composer();
                Some(Vec::new())
            }
            // Any other key is the composer's (and is typing: the prompt waits again).
            _ => None,
        }
    }

    /// The keys of a question's prompt: a digit picks (or toggles), Enter confirms a multiple
    /// choice or gives the typed answer, `o` types another answer, `n` declines.
    pub(super) fn question_key(&mut self, key: KeyEvent, plain: bool) -> Option<Vec<Effect>> {
        let answered = |answer: Option<crate::approvals::Answer>| {
            Some(answer.map(Effect::Answer).into_iter().collect())
        };
        if self.approvals.other {
            return match key.code {
                KeyCode::Enter if plain => {
                    let text = self.composer.text().to_owned();
                    self.composer.clear();
                    answered(self.approvals.give(text))
                }
                KeyCode::Esc => {
                    self.approvals.other = false;
                    self.composer.clear();
                    Some(Vec::new())
                }
                _ => None,
            };
        }
        match key.code {
            KeyCode::Enter if plain => answered(self.approvals.confirm()),
            KeyCode::Char(c) if plain => match c {
                '1'..='9' => answered(self.approvals.pick(c as usize - '0' as usize)),
                'o' | 'O' => {
                    self.approvals.other = true;
                    self.stash_composer();
                    Some(Vec::new())
                }
                'n' | 'N' => {
                    self.approvals.denying = true;
                    self.stash_composer();
                    Some(Vec::new())
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// `/plan` and Shift-Tab: the driver switches plan mode.
    pub(super) fn toggle_mode(&mut self) -> Vec<Effect> {
        if self.session.is_none() {
            self.notice = Some("attach to a session first".into());
            return Vec::new();
        }
        if !self.driving() {
            self.notice =
                Some("only the driver switches plan mode: /drive asks for the wheel".into());
            return Vec::new();
        }
        let mode = match self.mode {
            outboard_shared::SessionMode::Plan => outboard_shared::SessionMode::Default,
            outboard_shared::SessionMode::Default => outboard_shared::SessionMode::Plan,
        };
        vec![Effect::SetMode(mode)]
    }

    pub(super) fn page(&self) -> i32 {
        i32::from(self.height.saturating_sub(6).max(1))
    }

    pub(super) fn key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return self.ctrl_c();
        }
        self.guards.quit_at = None;
        let rewind_armed = std::mem::take(&mut self.rewind_armed);
        self.notice = None;
        if let Some(effects) = self.picker_key(key) {
            return effects;
        }
        if let Some(effects) = self.approval_key(key) {
            return effects;
        }
        match key.code {
            KeyCode::Esc if self.running && self.driving() => return self.interrupt(),
            KeyCode::Esc if self.composer.text().is_empty() && !self.running => {
                if rewind_armed {
                    return self.command("/rewind");
                }
                self.rewind_armed = true;
                self.notice = Some("Esc again: rewind to a checkpoint".into());
                return Vec::new();
            }
            KeyCode::Esc => return Vec::new(),
            KeyCode::BackTab => return self.toggle_mode(),
            KeyCode::PageUp => return self.scroll_by(self.page()),
            KeyCode::PageDown => return self.scroll_by(-self.page()),
            KeyCode::Char('o') if ctrl => {
                self.toggle_tasks();
                return Vec::new();
            }
            _ => {}
        }
        // Everything below edits the composer: typing, which a prompt waits out.
        self.guards.typed_at = Some(self.event_at);
        match key.code {
            KeyCode::Enter if key.modifiers.intersects(KeyModifiers::ALT | KeyModifiers::SHIFT) => {
                self.composer.insert("\n")
            }
            KeyCode::Char('j') if ctrl => self.composer.insert("\n"),
            KeyCode::Enter => return self.submit(),
            KeyCode::Tab => {
                if let [only] = self.completions()[..] {
                    self.composer.set(format!("{only} "));
                }
            }
            KeyCode::Backspace => self.composer.backspace(),
            KeyCode::Delete => self.composer.delete(),
            KeyCode::Left => self.composer.left(),
            KeyCode::Right => self.composer.right(),
            KeyCode::Home => self.composer.home(),
            KeyCode::End => self.composer.end(),
            KeyCode::Up => self.composer.up(),
            KeyCode::Down => self.composer.down(),
            KeyCode::Char('u') if ctrl => self.composer.clear(),
            KeyCode::Char(c) if !ctrl => self.composer.insert(c.encode_utf8(&mut [0; 4])),
            _ => {}
        }
        Vec::new()
    }

    /// The open picker's keys: Esc always closes it; other keys only once it has been drawn
    /// (see [`super::guard`]): a key typed before is the composer's (`None`).
    fn picker_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        if self.picker.is_none() && self.rewind_picker.is_none() {
            return None;
        }
        if key.code == KeyCode::Esc
            && self.rewind_picker.as_ref().is_none_or(|p| p.restore.is_none())
        {
            self.picker = None;
            self.rewind_picker = None;
            return Some(Vec::new());
        }
        if !self.picker_takes() {
            return None;
        }
        if let Some(picker) = &mut self.rewind_picker {
            return Some(match picker.key(key.code) {
                Picked::Open => Vec::new(),
                Picked::Closed => {
                    self.rewind_picker = None;
                    Vec::new()
                }
                Picked::Rewind { n, code, conversation } => {
                    self.rewind_picker = None;
                    self.rewind_to(n, code, conversation)
                }
            });
        }
        let picker = self.picker.as_mut()?;
        match key.code {
            KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
            KeyCode::Down => {
                picker.selected = (picker.selected + 1).min(picker.sessions.len().saturating_sub(1))
            }
            KeyCode::Enter => {
                let chosen = picker.sessions.get(picker.selected).map(|s| s.id.clone());
                self.picker = None;
                if let Some(id) = chosen {
                    return Some(vec![Effect::Attach(id)]);
                }
            }
            _ => {}
        }
        Some(Vec::new())
    }

    /// Esc or Ctrl-C while a turn runs: interrupt it (once; the next Ctrl-C goes on to quit).
    fn interrupt(&mut self) -> Vec<Effect> {
        self.turn.interrupting = true;
        self.notice = Some("interrupting…".into());
        vec![Effect::Interrupt]
    }

    /// Ctrl-C: interrupts a running turn; else clears the composer; on an empty one, twice
    /// (within [`super::guard::QUIT_MS`]) quits.
    fn ctrl_c(&mut self) -> Vec<Effect> {
        if self.running && self.driving() && !self.turn.interrupting {
            return self.interrupt();
        }
        if self.approvals.denying || self.approvals.other {
            self.approvals.denying = false;
            self.approvals.other = false;
            self.composer.clear();
            return Vec::new();
        }
        if !self.composer.text().is_empty() {
            self.composer.clear();
            self.notice = Some("cleared (Ctrl-C on an empty composer, twice, quits)".into());
            return Vec::new();
        }
        if self.guards.quit_at.is_some() {
            return vec![Effect::Quit];
        }
        self.guards.quit_at = Some(self.event_at);
        self.notice = Some("press Ctrl-C again to quit".into());
        Vec::new()
    }

    pub(super) fn submit(&mut self) -> Vec<Effect> {
        let text = self.composer.text().trim().to_owned();
        if text.is_empty() {
            return Vec::new();
        }
        if text.starts_with('/') {
            self.composer.take();
            return self.command(&text);
        }
        if self.session.is_none() {
            // Typed before the attach is answered (a fast typist at start-up): sent once it
            // is, if this connection drives; back in the composer if it watches.
            return self.queue(text, "queued: sent once the session is attached");
        }
        if !self.driving() {
            self.notice = Some("you are watching: /drive asks for the wheel".into());
            return Vec::new();
        }
        if self.running {
            return self
                .queue(text, "queued: sent when this turn ends (Esc interrupts and returns it)");
        }
        if self.conn != ConnState::Connected {
            self.notice = Some("not connected; the message is kept".into());
            return Vec::new();
        }
        self.scroll = 0;
        vec![Effect::Send(self.composer.take())]
    }

    /// Holds `text` (the composer's) until the running turn ends (or the first attach is
    /// answered); a second one joins the first. `notice` says when it goes.
    pub(super) fn queue(&mut self, text: String, notice: &str) -> Vec<Effect> {
        let held = self.queued.as_ref().map_or(0, |q| q.len() + 2);
        if held + text.len() > MAX_QUEUED {
            self.notice =
                Some("the queued message is full: wait for the turn, or Esc to interrupt".into());
            return Vec::new();
        }
        self.composer.take();
        match &mut self.queued {
            Some(q) => {
                q.push_str("\n\n");
                q.push_str(&text);
            }
            None => self.queued = Some(text),
        }
        self.notice = Some(notice.to_owned());
        Vec::new()
    }

    /// The queued message, sent once no turn runs and we are connected; back into the composer
    /// when we no longer drive.
    pub(super) fn release_queued(&mut self) -> Vec<Effect> {
        if self.queued.is_none() {
            return Vec::new();
        }
        if !self.driving() {
            self.unqueue("you no longer drive: the queued message is back in the composer");
            return Vec::new();
        }
        // Disconnected, it waits for the attach that follows the reconnect.
        if self.running || self.conn != ConnState::Connected {
            return Vec::new();
        }
        let text = self.queued.take().unwrap_or_default();
        self.notice = None;
        self.scroll = 0;
        vec![Effect::Send(text)]
    }

    /// Puts the queued message back in front of what the composer holds.
    pub(super) fn unqueue(&mut self, why: &str) {
        let Some(queued) = self.queued.take() else { return };
        let typed = self.composer.take();
        let text = if typed.trim().is_empty() { queued } else { format!("{queued}\n\n{typed}") };
        self.composer.set(text);
        self.notice = Some(why.to_owned());
    }
}
