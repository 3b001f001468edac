//! What the server sends, applied to the state: an attach's snapshot, each live event, a page
//! of older history.

use super::*;

impl App {
    /// Puts a page of older history above the transcript. Its events are drawn on their own
    /// (a scratch app applies them) so the live state — running, streaming, the last `seq` —
    /// is not touched by events from the past.
    pub(super) fn older(
        &mut self,
        id: &SessionId,
        page: Result<Box<SessionHistoryResponse>, String>,
    ) {
        if self.session.as_ref().is_none_or(|s| s.id != *id) {
            return;
        }
        self.history.loading = false;
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                self.notice = Some(format!("cannot load older history: {e}"));
                return;
            }
        };
        if self.history.cursor.is_some_and(|c| page.events.last().is_some_and(|e| e.seq >= c)) {
            return;
        }
        let mut past = App::new(self.theme, self.width, self.height);
        past.session = self.session.clone();
        past.connection_id = self.connection_id;
        past.expand_tasks = self.expand_tasks;
        for event in page.events {
            past.apply(event);
        }
        past.flush_streaming();
        // A call at the end of the older page whose result opens the newer part is one cell:
        // the older page has its input, the newer part its result. So is a subagent's group
        // split by the boundary: the older page has the call and the first child events.
        let mut merged = Vec::new();
        for (i, cell) in past.cells.iter_mut().enumerate() {
            match &mut cell.kind {
                CellKind::Tool(older) if older.result.is_none() => {
                    let newer = self.cells.iter().position(
                        |c| matches!(&c.kind, CellKind::Tool(t) if t.call_id == older.call_id),
                    );
                    if let Some(j) = newer {
                        if let CellKind::Tool(t) = self.cells.remove(j).kind {
                            older.result = t.result;
                            if older.output.is_empty() {
                                older.output = t.output;
                            }
                        }
                        merged.push(i);
                    }
                }
                CellKind::Task(older) if older.result.is_none() => {
                    if let Some(j) = self.task_index(&older.call_id) {
                        if let CellKind::Task(t) = self.cells.remove(j).kind {
                            older.absorb(t);
                        }
                        merged.push(i);
                    }
                }
                _ => {}
            }
        }
        past.cells.append(&mut self.cells);
        // Cells moved: the next retry opens a line of its own.
        self.retry_cell = None;
        self.cells = past.cells;
        for i in merged {
            self.rerender(i);
        }
        self.history.cursor = Some(page.cursor);
        self.history.has_more = page.has_more;
    }

    pub(super) fn attached(&mut self, snapshot: SessionAttachResponse, resumed: bool) {
        let same = self.session.as_ref().is_some_and(|s| s.id == snapshot.session.id);
        // The first attach keeps what was typed before it was answered (see `submit`).
        if !same && self.session.is_some() {
            self.unqueue("another session: the queued message is back in the composer");
        }
        // The replay below ends old turns again: the message queued here stays queued.
        let queued = self.queued.take();
        let total = snapshot.session.usage;
        if !(resumed && same) {
            self.cells.clear();
            self.last_seq = 0;
            self.usage = Usage::default();
            self.context_used = None;
            self.sandbox = None;
            self.sandbox_queue = None;
            self.work = crate::tasks::Work::default();
            self.approvals = crate::approvals::Approvals::default();
            self.mode = outboard_shared::SessionMode::Default;
            self.presence.clear();
            self.scroll = 0;
            self.history =
                History { cursor: snapshot.cursor, has_more: snapshot.has_more, loading: false };
        }
        self.running = false;
        self.role = snapshot.role;
        self.session = Some(snapshot.session);
        self.streaming.clear();
        self.clear_child_streaming();
        // What still holds from before the page: the todo panel, the running commands.
        for event in &snapshot.standing {
            if let EventKind::ModeChanged { mode, .. } = &event.kind {
                self.mode = *mode;
            }
            self.work.apply(&event.kind);
            self.approvals.apply(&event.kind, event.parent.as_deref());
        }
        for event in snapshot.events {
            self.apply(event);
        }
        // The session's total counts every call up to the snapshot, pages not loaded included;
        // a resumed attach adds the calls it missed instead.
        if let (false, Some(total)) = (resumed && same, total) {
            self.usage = total;
        }
        if let Some(in_flight) = snapshot.in_flight {
            if !self.running || self.turn.started.is_none() {
                self.turn_started();
            }
            self.running = true;
            self.streaming = in_flight.assistant_text;
            for partial in in_flight.tool_output {
                if let Some(cell) = self.tool_mut(&partial.call_id) {
                    cell.output = partial.text;
                } else if let Some(i) = self.child_tool_index(&partial.call_id) {
                    if let CellKind::Task(group) = &mut self.cells[i].kind {
                        if let Some(cell) = group.tool_mut(&partial.call_id) {
                            cell.output = partial.text;
                        }
                    }
                }
            }
            self.rerender_all();
        }
        self.rerender_streaming();
        self.queued = queued;
        // A guessed window is stated once: when the session is new (nothing in its log yet).
        let guessed = self.session.as_ref().filter(|s| {
            !same && s.last_seq == 0 && s.context_window_source.is_some_and(|w| w.is_guess())
        });
        if let Some(s) = guessed {
            let from = s.context_window_from.as_deref().unwrap_or("a guess");
            let text = format!("context window {} tokens — {from}", s.context_window.unwrap_or(0));
            self.push_notice(text, false);
        }
    }

    /// Applies one session event to the transcript.
    pub fn apply(&mut self, event: SessionEvent) {
        if self.session.as_ref().is_some_and(|s| s.id != event.session_id) {
            return;
        }
        // Each event arrives once: the client library's follow de-duplicates by `seq`.
        if event.kind.is_durable() {
            self.last_seq = self.last_seq.max(event.seq);
            if let Some(s) = &mut self.session {
                s.last_seq = self.last_seq;
            }
        }
        self.approvals.apply(&event.kind, event.parent.as_deref());
        // Every model call, the session's, its subagents' and its summaries', as it lands: an
        // attach starts from the session's total (see `attached`).
        if let EventKind::AssistantMessage { usage: Some(u), .. }
        | EventKind::Compaction { usage: Some(u), .. } = &event.kind
        {
            self.usage.add(*u);
        }
        if let Some(parent) = event.parent {
            if event.kind.is_loop_event() {
                self.apply_child(parent, event.kind);
                return;
            }
        }
        match event.kind {
            EventKind::TurnStarted { by, .. } => {
                self.turn_started();
                self.running = true;
                self.turn_by = Some(by);
            }
            EventKind::UserMessage { text, .. } => {
                let by = self.turn_by.clone().unwrap_or_default();
                self.push(CellKind::User { by, text });
            }
            EventKind::AssistantDelta { text } => {
                self.turn.streamed_chars += text.len() as u64;
                self.streaming.push_str(&text);
                self.rerender_streaming();
            }
            EventKind::AssistantMessage { text, usage, reasoning, searches, .. } => {
                if let Some(usage) = usage {
                    self.context_used = Some(usage.input_tokens + usage.output_tokens);
                }
                self.streaming.clear();
                self.turn.streamed_chars = 0;
                self.rerender_streaming();
                let thought: Vec<String> =
                    reasoning.iter().map(|r| r.text()).filter(|t| !t.trim().is_empty()).collect();
                if !reasoning.is_empty() {
                    self.push(CellKind::Thinking(thought.join("\n\n")));
                }
                let notices = searches.iter().map(|s| s.lines(8).join("\n  "));
                notices.for_each(|text| self.push(CellKind::Notice { text, error: false }));
                if !text.trim().is_empty() {
                    self.push(CellKind::Assistant(text));
                }
            }
            EventKind::ToolCall { call, .. } if call.name == TASK_TOOL => {
                match self.task_index(&call.call_id) {
                    Some(i) => {
                        if let CellKind::Task(t) = &mut self.cells[i].kind {
                            t.set_call(&call.input);
                        }
                        self.rerender(i);
                    }
                    None => self.push(CellKind::Task(crate::subagents::TaskCell::from_call(&call))),
                }
            }
            EventKind::ToolCall { call, .. } => {
                if self.tool_mut(&call.call_id).is_none() {
                    self.push(CellKind::Tool(ToolCell::started(call)));
                }
            }
            EventKind::ToolOutputDelta { call_id, text, .. } => {
                if let Some(i) = self.tool_index(&call_id) {
                    if let CellKind::Tool(t) = &mut self.cells[i].kind {
                        t.output.push_str(&text);
                    }
                    self.rerender(i);
                } else if let Some(i) = self.child_tool_index(&call_id) {
                    if let CellKind::Task(group) = &mut self.cells[i].kind {
                        if let Some(t) = group.tool_mut(&call_id) {
                            t.output.push_str(&text);
                        }
                    }
                    self.rerender(i);
                }
            }
            EventKind::ToolResult { call_id, name, output, is_error, duration_ms, .. }
                if name == TASK_TOOL =>
            {
                // The subagent's report. Its call may be on an older page not loaded yet.
                let i = match self.task_index(&call_id) {
                    Some(i) => i,
                    None => {
                        let group = crate::subagents::TaskCell::new(call_id);
                        self.push(CellKind::Task(group));
                        self.cells.len() - 1
                    }
                };
                if let CellKind::Task(t) = &mut self.cells[i].kind {
                    t.result = Some((is_error, output, duration_ms));
                }
                self.rerender(i);
            }
            EventKind::ToolResult { call_id, name, output, is_error, duration_ms, .. } => {
                let result = (is_error, output, duration_ms);
                let i = match self.tool_index(&call_id) {
                    Some(i) => {
                        if let CellKind::Tool(t) = &mut self.cells[i].kind {
                            t.result = Some(result);
                        }
                        i
                    }
                    None => {
                        self.push(CellKind::Tool(ToolCell::from_result(call_id, name, result)));
                        self.cells.len() - 1
                    }
                };
                self.rerender(i);
            }
            EventKind::CompactionStarted { .. } => {
                self.notice = Some("compacting the conversation…".into());
            }
            EventKind::Compaction { tokens_before, tokens_after, trigger, .. } => {
                self.context_used = Some(tokens_after);
                self.notice = None;
                let line = outboard_client::describe::compaction_line(
                    trigger,
                    tokens_before,
                    tokens_after,
                );
                self.push_notice(line, false);
            }
            EventKind::ModelRetry { attempt, delay_ms, reason } => {
                self.model_retry(attempt, delay_ms, &reason);
            }
            EventKind::TurnCompleted { stop_reason, .. } => {
                self.running = false;
                self.flush_streaming();
                self.cut_open_tasks();
                if stop_reason == StopReason::Interrupted {
                    self.unqueue("interrupted: the queued message is back in the composer");
                }
                match stop_reason {
                    StopReason::Interrupted => self.push_notice(
                        "[Request interrupted by user] · what you type next is a new message"
                            .into(),
                        true,
                    ),
                    StopReason::StepLimit => {
                        self.push_notice("stopped at the step limit".into(), true)
                    }
                    StopReason::MaxTokens => {
                        self.push_notice("the model hit its output limit".into(), true)
                    }
                    _ => {}
                }
            }
            EventKind::TurnFailed { error, .. } => {
                self.running = false;
                self.flush_streaming();
                self.cut_open_tasks();
                self.unqueue("the turn failed: the queued message is back in the composer");
                let line = super::turn::error_line(&error, 240);
                self.push_notice(format!("turn failed: {line}"), true);
            }
            EventKind::Sandbox { state, ms, queue } => {
                self.sandbox = Some((state, ms));
                self.sandbox_queue = queue;
            }
            EventKind::Network { host, port, policy, reason, hint, repeated } => {
                let line = outboard_client::describe::network_line(
                    &host, port, &policy, &reason, &hint, repeated,
                );
                self.push_notice(line, true);
            }
            EventKind::MemoryChanged { path, version, op, author, .. } => {
                let what = match op {
                    outboard_shared::FileOp::Delete => "deleted",
                    outboard_shared::FileOp::Restore => "restored",
                    outboard_shared::FileOp::Import => "imported",
                    _ => "updated",
                };
                self.push_notice(format!("{author} {what} {path} (v{version})"), false);
            }
            EventKind::Presence { attached } => {
                // By connection, not by name: two terminals of one user are two entries.
                let driving = attached
                    .iter()
                    .any(|p| p.role == Role::Driver && Some(p.connection_id) == self.connection_id);
                self.role = if driving { Role::Driver } else { Role::Watcher };
                self.presence = attached;
            }
            EventKind::DriveRequested { user } => {
                if self.driving() {
                    self.push_notice(
                        format!("{user} asks to drive — /handover {user} to give them the wheel"),
                        false,
                    );
                }
            }
            EventKind::Todos { .. } => {
                self.work.apply(&event.kind);
            }
            EventKind::BackgroundTask { ref shell_id, ref command, status, exit_code } => {
                if status != outboard_shared::TaskStatus::Running {
                    let line =
                        outboard_client::describe::task_line(shell_id, command, status, exit_code);
                    self.push_notice(line, false);
                }
                self.work.apply(&event.kind);
            }
            // A plan is shown once, whole and as markdown, where the transcript keeps it.
            EventKind::ApprovalRequested {
                kind: outboard_shared::ApprovalKind::Plan,
                path,
                plan,
                ..
            } => {
                self.push(CellKind::Plan { path, plan: plan.unwrap_or_default() });
            }
            EventKind::ApprovalRequested { .. } | EventKind::ApprovalResolved { .. } => {
                if let Some((line, error)) = crate::approvals::transcript_line(&event.kind) {
                    self.push_notice(line, error);
                }
            }
            EventKind::ModelChanged { model, label, context_window, by } => {
                if let Some(s) = &mut self.session {
                    s.model = label.clone();
                    s.model_name = Some(model.clone());
                    s.context_window = Some(context_window);
                }
                self.push_notice(
                    format!("model: {model} ({label}) from the next turn, by {by}"),
                    false,
                );
            }
            EventKind::SessionTitled { title } => {
                if let Some(s) = &mut self.session {
                    s.title = title;
                }
            }
            EventKind::ModeChanged { mode, by } => {
                self.mode = mode;
                let what = match mode {
                    outboard_shared::SessionMode::Plan => {
                        "plan mode: the model explores and proposes a plan; it changes nothing"
                    }
                    outboard_shared::SessionMode::Default => "plan mode off",
                };
                self.push_notice(format!("{what} (by {by})"), false);
            }
            EventKind::Rewound { checkpoint, code, conversation, by, .. } => {
                let line =
                    outboard_client::describe::rewound_line(checkpoint, code, conversation, &by);
                self.push_notice(line, false);
            }
            EventKind::OrgContext { files } => {
                self.push_notice(outboard_client::describe::org_context_line(&files), false);
            }
            EventKind::SystemReminder { .. }
            | EventKind::Checkpoint { .. }
            | EventKind::Unknown => {}
        }
    }

    /// A child's event: into its `Task` call's group, opened headed by the call's id when the
    /// call is not loaded (the page began mid-child).
    pub(super) fn apply_child(&mut self, parent: String, kind: EventKind) {
        let i = match self.task_index(&parent) {
            Some(i) => i,
            None => {
                self.push(CellKind::Task(crate::subagents::TaskCell::new(parent)));
                self.cells.len() - 1
            }
        };
        if let CellKind::Task(t) = &mut self.cells[i].kind {
            t.apply(kind);
        }
        self.rerender(i);
    }

    /// The turn ended: a group still open got no report and will get none.
    pub(super) fn cut_open_tasks(&mut self) {
        // Open groups are the turn's own: the scan stops at the message that started it.
        for i in (0..self.cells.len()).rev() {
            match &mut self.cells[i].kind {
                CellKind::User { .. } => break,
                CellKind::Task(t) if t.running() => {
                    t.cut = true;
                    self.rerender(i);
                }
                _ => {}
            }
        }
    }

    /// A resumed attach's `in_flight` has the main loop's text only: what children had streamed
    /// before the drop is stale (their next complete message brings it whole).
    pub(super) fn clear_child_streaming(&mut self) {
        for i in (0..self.cells.len()).rev() {
            match &mut self.cells[i].kind {
                CellKind::User { .. } => break,
                CellKind::Task(t) if !t.streaming.is_empty() => {
                    t.streaming.clear();
                    self.rerender(i);
                }
                _ => {}
            }
        }
    }

    /// Ctrl-O: every group whole, or back to the newest items of running ones and folded
    /// finished ones.
    pub(super) fn toggle_tasks(&mut self) {
        self.expand_tasks = !self.expand_tasks;
        let (mut tasks, mut thinking) = (false, false);
        for i in 0..self.cells.len() {
            match self.cells[i].kind {
                CellKind::Task(_) => tasks = true,
                CellKind::Thinking(_) => thinking = true,
                CellKind::Tool(_) => {}
                _ => continue,
            }
            self.rerender(i);
        }
        let what = if self.expand_tasks { "shown whole" } else { "folded" };
        // Tool inputs always follow Ctrl-O; the notice names the biggest change.
        let which = match (tasks, thinking) {
            (true, _) => "subagents' work",
            (false, true) => "thinking",
            (false, false) => "tool inputs",
        };
        self.notice = Some(format!("{which} {what} (Ctrl-O)"));
    }

    pub(super) fn task_index(&self, call_id: &str) -> Option<usize> {
        self.cells
            .iter()
            .rposition(|c| matches!(&c.kind, CellKind::Task(t) if t.call_id == call_id))
    }

    /// The group holding the child tool call `call_id` (a delta sent without its parent, an
    /// attach's partial output): running groups are searched, newest first.
    pub(super) fn child_tool_index(&self, call_id: &str) -> Option<usize> {
        self.cells.iter().rposition(
            |c| matches!(&c.kind, CellKind::Task(t) if t.running() && t.has_tool(call_id)),
        )
    }

    pub(super) fn flush_streaming(&mut self) {
        if !self.streaming.trim().is_empty() {
            let text = std::mem::take(&mut self.streaming);
            self.push(CellKind::Assistant(text));
        }
        self.streaming.clear();
        self.rerender_streaming();
    }

    pub(super) fn tool_index(&self, call_id: &str) -> Option<usize> {
        self.cells
            .iter()
            .rposition(|c| matches!(&c.kind, CellKind::Tool(t) if t.call_id == call_id))
    }

    pub(super) fn tool_mut(&mut self, call_id: &str) -> Option<&mut ToolCell> {
        let i = self.tool_index(call_id)?;
        match &mut self.cells[i].kind {
            CellKind::Tool(t) => Some(t),
            _ => None,
        }
    }

    pub(super) fn push(&mut self, kind: CellKind) {
        let lines = render_cell(&kind, self.expand_tasks, self.text_width(), &self.theme);
        self.cells.push(Cell { kind, lines });
    }

    /// Adds a notice cell.
    pub fn push_notice(&mut self, text: String, error: bool) {
        self.push(CellKind::Notice { text, error });
    }

    pub(super) fn rerender(&mut self, i: usize) {
        let width = self.text_width();
        let cell = &mut self.cells[i];
        cell.lines = render_cell(&cell.kind, self.expand_tasks, width, &self.theme);
    }

    pub(super) fn rerender_all(&mut self) {
        for i in 0..self.cells.len() {
            self.rerender(i);
        }
        self.rerender_streaming();
    }

    pub(super) fn rerender_streaming(&mut self) {
        self.streaming_lines = if self.streaming.is_empty() {
            Vec::new()
        } else {
            markdown::render(&self.streaming, self.text_width(), &self.theme)
        };
    }
}
