//! Tool calls of the attached session that wait for a person's approval (the org's policy says
//! `ask`): the open requests, from `approval_requested` events until their `approval_resolved`
//! or the end of their turn, and the prompt the driver answers them with. Watchers see the
//! panel without the keys: the server refuses their answers.
//!
//! A plan (`ExitPlanMode`) is shown once, whole, in the transcript (the prompt points to it),
//! with `y` to approve it (the session leaves plan mode)
//! and `n` to keep planning with a reason. The model's questions (`AskUserQuestion`) are shown
//! one at a time with their options: a digit picks one (toggles one, for a multiple choice,
//! which Enter confirms), `o` types another answer in the composer, `n` declines to answer.
//!
//! Keys while the driver has a request open: `y` allows it once, Shift-Tab (a key of its own,
//! never a letter of a word nor Enter) allows it and the later calls of the same tool that only
//! the rules it names (`covers`, shown above the keys) ask about, `n` starts a denial whose
//! reason is typed in the composer (the composer's own text is set aside meanwhile; Enter sends
//! the reason, possibly empty; Esc goes back). The keys answer only once the prompt has been on
//! screen a moment with no typing (`app::guard`): until then they are the composer's, and the
//! panel says so instead of listing them. Other keys always go to the composer.

use outboard_shared::{
    ApprovalDecision, ApprovalKind, ApprovalScope, EventKind, Question, ToolCall,
};
use ratatui::text::{Line, Span};
use serde_json::Value;

use super::theme::Theme;

/// The keys' line while the prompt waits to be seen (see `app::guard`).
const WAITING: &str = " answer keys in a moment · until then, typing goes to your message";

/// Lines of a request's input shown in the prompt.
const INPUT_LINES: usize = 4;

/// One open request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The call.
    pub call: ToolCall,
    /// The org rule that asks.
    pub rule: String,
    /// What `a` (allow for the session) covers, as the request says.
    pub covers: Option<Vec<String>>,
    /// Why part of it could not be judged before it runs.
    pub unjudged: Option<String>,
    /// Made by a subagent (its `Task` call id).
    pub parent: Option<String>,
    /// A tool call, a plan or questions.
    pub kind: ApprovalKind,
    /// A plan's org file.
    pub path: Option<String>,
    /// A plan's text.
    pub plan: Option<String>,
    /// The questions.
    pub questions: Vec<Question>,
}

/// An answer the driver gave in the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The call.
    pub call_id: String,
    /// Run it or not.
    pub decision: ApprovalDecision,
    /// How far an allow reaches.
    pub scope: ApprovalScope,
    /// Why, for a denial.
    pub reason: Option<String>,
    /// The answers to questions.
    pub answers: Option<Vec<String>>,
}

/// The session's open requests, oldest first; the prompt answers the first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Approvals {
    open: Vec<Request>,
    /// The driver pressed `n`: the composer holds the reason.
    pub denying: bool,
    /// The driver pressed `o`: the composer holds the answer to the current question.
    pub other: bool,
    /// The answers given so far to the first request's questions.
    pub picked: Vec<String>,
    /// The options toggled for the current question (a multiple choice), by index.
    pub toggled: Vec<usize>,
}

impl Approvals {
    /// Takes one event into account.
    pub fn apply(&mut self, kind: &EventKind, parent: Option<&str>) {
        match kind {
            // Seen twice (in `standing` and in the page): one request.
            EventKind::ApprovalRequested {
                call_id,
                name,
                input,
                rule,
                covers,
                unjudged,
                kind,
                path,
                plan,
                questions,
            } if self.open.iter().all(|r| r.call.call_id != *call_id) => {
                self.open.push(Request {
                    call: ToolCall {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                    },
                    rule: rule.clone(),
                    covers: covers.clone(),
                    unjudged: unjudged.clone(),
                    parent: parent.map(str::to_owned),
                    kind: *kind,
                    path: path.clone(),
                    plan: plan.clone(),
                    questions: questions.clone().unwrap_or_default(),
                });
            }
            EventKind::ApprovalResolved { call_id, .. } => {
                if self.open.first().is_some_and(|r| r.call.call_id == *call_id) {
                    self.reset();
                }
                self.open.retain(|r| r.call.call_id != *call_id);
            }
            EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } if parent.is_none() => {
                self.open.clear();
                self.reset();
            }
            _ => {}
        }
    }

    /// Forgets what the prompt was doing (its request was answered).
    fn reset(&mut self) {
        self.denying = false;
        self.other = false;
        self.picked.clear();
        self.toggled.clear();
    }

    /// The question the prompt asks now, with its number.
    pub fn question(&self) -> Option<(usize, &Question)> {
        let first = self.first().filter(|r| r.kind == ApprovalKind::Question)?;
        let at = self.picked.len();
        first.questions.get(at).map(|q| (at, q))
    }

    /// A digit on a question: picks option `n` (from 1), or toggles it for a multiple choice;
    /// the answers once every question has one.
    pub fn pick(&mut self, n: usize) -> Option<Answer> {
        let (_, q) = self.question()?;
        let label = q.options.get(n.checked_sub(1)?)?.label.clone();
        if q.multi_select {
            match self.toggled.iter().position(|&i| i == n - 1) {
                Some(at) => {
                    self.toggled.remove(at);
                }
                None => self.toggled.push(n - 1),
            }
            return None;
        }
        self.give(label)
    }

    /// Enter on a multiple choice: the toggled options, as one answer.
    pub fn confirm(&mut self) -> Option<Answer> {
        let (_, q) = self.question()?;
        if self.toggled.is_empty() {
            return None;
        }
        let mut toggled = self.toggled.clone();
        toggled.sort_unstable();
        let labels: Vec<&str> =
            toggled.iter().filter_map(|&i| q.options.get(i)).map(|o| o.label.as_str()).collect();
        let answer = labels.join(", ");
        self.give(answer)
    }

    /// The current question's answer is `text` (an option or another answer); the answers
    /// once every question has one.
    pub fn give(&mut self, text: String) -> Option<Answer> {
        let first = self.first()?;
        let (call_id, questions) = (first.call.call_id.clone(), first.questions.len());
        let text = text.trim().to_owned();
        if text.is_empty() {
            return None;
        }
        self.picked.push(text);
        self.toggled.clear();
        self.other = false;
        if self.picked.len() < questions {
            return None;
        }
        Some(Answer {
            call_id,
            decision: ApprovalDecision::Allow,
            scope: ApprovalScope::Once,
            reason: None,
            answers: Some(std::mem::take(&mut self.picked)),
        })
    }

    /// The request the prompt is about.
    pub fn first(&self) -> Option<&Request> {
        self.open.first()
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// None open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// `y`: allow once.
    pub fn allow(&self, scope: ApprovalScope) -> Option<Answer> {
        let first = self.first()?;
        Some(Answer {
            call_id: first.call.call_id.clone(),
            decision: ApprovalDecision::Allow,
            scope,
            reason: None,
            answers: None,
        })
    }

    /// Enter while denying: deny with `reason`.
    pub fn deny(&mut self, reason: &str) -> Option<Answer> {
        let first = self.first()?;
        let reason = reason.trim();
        let answer = Answer {
            call_id: first.call.call_id.clone(),
            decision: ApprovalDecision::Deny,
            scope: ApprovalScope::Once,
            reason: (!reason.is_empty()).then(|| reason.to_owned()),
            answers: None,
        };
        self.reset();
        Some(answer)
    }

    /// The panel above the composer: the request, its input, and the keys (for the driver) or
    /// who answers (for a watcher). Empty when nothing is open.
    /// `armed`: the keys answer now (else they are listed as coming).
    pub fn panel(
        &self,
        theme: &Theme,
        driving: bool,
        armed: bool,
        width: u16,
    ) -> Vec<Line<'static>> {
        let Some(first) = self.first() else { return Vec::new() };
        let mut lines = match first.kind {
            ApprovalKind::Plan => self.plan_panel(first, theme, driving, width),
            ApprovalKind::Question => self.question_panel(first, theme, driving, width),
            ApprovalKind::Tool => self.tool_panel(first, theme, driving, width),
        };
        let answering = self.denying || self.other;
        if driving && !armed && !answering {
            if let Some(keys) = lines.last_mut() {
                *keys = Line::from(Span::styled(WAITING.to_owned(), theme.dim()));
            }
        }
        lines
    }

    fn tool_panel(
        &self,
        first: &Request,
        theme: &Theme,
        driving: bool,
        width: u16,
    ) -> Vec<Line<'static>> {
        let width = usize::from(width.max(20));
        let mut lines = Vec::new();
        let more = match self.open.len() {
            1 => String::new(),
            n => format!(" (1 of {n})"),
        };
        let by = if first.parent.is_some() { " by a subagent" } else { "" };
        lines.push(Line::from(vec![
            Span::styled(" ? approval needed".to_owned(), theme.warn()),
            Span::raw(format!(
                "{more}{by}: {} (org rule {})",
                outboard_client::describe::tool_call_summary(&first.call),
                first.rule
            )),
        ]));
        let input = match &first.call.input {
            Value::Object(map) if map.is_empty() => String::new(),
            Value::Null => String::new(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let shown: Vec<&str> = input.lines().collect();
        for line in shown.iter().take(INPUT_LINES) {
            lines.push(Line::from(Span::styled(
                format!(
                    "   {}",
                    outboard_client::describe::truncate(line, width.saturating_sub(4))
                ),
                theme.dim(),
            )));
        }
        if shown.len() > INPUT_LINES {
            let rest = shown.len() - INPUT_LINES;
            lines.push(Line::from(Span::styled(format!("   … {rest} more lines"), theme.dim())));
        }
        if let Some(why) = &first.unjudged {
            let why = format!(" not judged before it runs: {why}");
            lines.push(Line::from(Span::styled(
                outboard_client::describe::truncate(&why, width.saturating_sub(1)),
                theme.warn(),
            )));
        }
        let covers =
            outboard_client::describe::session_covers(&first.call.name, first.covers.as_deref());
        lines.push(Line::from(Span::raw(outboard_client::describe::truncate(
            &format!(" [Shift-Tab] also allows {covers}"),
            width.saturating_sub(1),
        ))));
        let keys = match (driving, self.denying) {
            (true, false) => {
                " [y] allow once  [Shift-Tab] allow for this session  [n] deny  [Esc] interrupt"
            }
            (true, true) => " type the reason in the composer · Enter denies · Esc goes back",
            (false, _) => " waiting for the driver (or `outboard approve`) to answer",
        };
        lines.push(Line::from(Span::styled(keys.to_owned(), theme.bold())));
        lines
    }
}

impl Approvals {
    /// A plan's prompt: where it is (the transcript has it) and its keys.
    fn plan_panel(
        &self,
        first: &Request,
        theme: &Theme,
        driving: bool,
        _width: u16,
    ) -> Vec<Line<'static>> {
        let saved = first.path.as_deref().map(|p| format!(" ({p})")).unwrap_or_default();
        let mut lines = vec![Line::from(vec![
            Span::styled(" ? plan to approve".to_owned(), theme.warn()),
            Span::raw(saved),
        ])];
        // The plan is in the transcript just above, whole, once; the prompt only asks.
        let lines_of_plan = first.plan.as_deref().unwrap_or_default().lines().count();
        lines.push(Line::from(Span::styled(
            format!(
                "   the plan ({lines_of_plan} lines) is above in the transcript (PgUp scrolls)"
            ),
            theme.dim(),
        )));
        let keys = match (driving, self.denying) {
            (true, false) => {
                " [y] approve: leave plan mode and carry it out   [n] keep planning (with a \
                 reason)   [Esc] interrupt the turn"
            }
            (true, true) => {
                " type what to change in the composer · Enter sends it back · Esc goes back"
            }
            (false, _) => " waiting for the driver (or `outboard approve`) to answer",
        };
        lines.push(Line::from(Span::styled(keys.to_owned(), theme.bold())));
        lines
    }

    /// The current question with its options, and the keys.
    fn question_panel(
        &self,
        first: &Request,
        theme: &Theme,
        driving: bool,
        width: u16,
    ) -> Vec<Line<'static>> {
        let width = usize::from(width.max(20));
        let Some((at, q)) = self.question() else { return Vec::new() };
        let of = match first.questions.len() {
            1 => String::new(),
            n => format!(" ({} of {n})", at + 1),
        };
        let header = if q.header.is_empty() { String::new() } else { format!("[{}] ", q.header) };
        let mut lines = vec![Line::from(vec![
            Span::styled(format!(" ? question{of}: "), theme.warn()),
            Span::raw(outboard_client::describe::truncate(
                &format!("{header}{}", q.question),
                width.saturating_sub(16),
            )),
        ])];
        for (i, o) in q.options.iter().enumerate() {
            let mark = match (q.multi_select, self.toggled.contains(&i)) {
                (true, true) => "[x] ",
                (true, false) => "[ ] ",
                (false, _) => "",
            };
            let about = if o.description.is_empty() {
                String::new()
            } else {
                format!(" — {}", o.description)
            };
            lines.push(Line::from(Span::raw(outboard_client::describe::truncate(
                &format!("   {}. {mark}{}{about}", i + 1, o.label),
                width.saturating_sub(1),
            ))));
        }
        let keys = match (driving, self.other, self.denying) {
            (true, true, _) => " type your answer in the composer · Enter gives it · Esc goes back",
            (true, _, true) => " type why in the composer · Enter declines · Esc goes back",
            (true, false, false) if q.multi_select => {
                " [1-4] toggle   [Enter] confirm   [o] other answer   [n] decline to answer"
            }
            (true, false, false) => " [1-4] choose   [o] other answer   [n] decline to answer",
            (false, _, _) => " waiting for the driver (or `outboard answer`) to answer",
        };
        lines.push(Line::from(Span::styled(keys.to_owned(), theme.bold())));
        lines
    }
}

/// The transcript's line for an approval event of the session's own loop.
pub fn transcript_line(kind: &EventKind) -> Option<(String, bool)> {
    match kind {
        // The plan itself is in the transcript once, as the `ExitPlanMode` call's body.
        EventKind::ApprovalRequested { kind: ApprovalKind::Plan, path, .. } => Some((
            format!(
                "? plan proposed{}: waiting for approval",
                path.as_deref().map(|p| format!(", saved as {p}")).unwrap_or_default(),
            ),
            false,
        )),
        EventKind::ApprovalRequested { kind: ApprovalKind::Question, questions, .. } => Some((
            format!("? the model asks {} question(s)", questions.as_ref().map_or(0, Vec::len)),
            false,
        )),
        EventKind::ApprovalRequested { call_id, name, input, rule, .. } => {
            let call =
                ToolCall { call_id: call_id.clone(), name: name.clone(), input: input.clone() };
            Some((
                format!(
                    "? {} waits for approval (org rule {rule})",
                    outboard_client::describe::tool_call_summary(&call)
                ),
                false,
            ))
        }
        EventKind::ApprovalResolved { .. } => {
            let lines = outboard_client::describe::approval_lines("", kind)?;
            let line = lines.first()?.trim().to_owned();
            let denied = matches!(
                kind,
                EventKind::ApprovalResolved { decision: ApprovalDecision::Deny, .. }
            );
            Some((line, denied))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn requested(id: &str) -> EventKind {
        EventKind::ApprovalRequested {
            call_id: id.into(),
            name: "mcp__github__create_issue".into(),
            input: json!({"title": "x"}),
            rule: "mcp__github__*".into(),
            covers: Some(vec!["mcp__github__*".into()]),
            unjudged: None,
            kind: ApprovalKind::Tool,
            path: None,
            plan: None,
            questions: None,
        }
    }

    fn resolved(id: &str) -> EventKind {
        EventKind::ApprovalResolved {
            call_id: id.into(),
            name: "mcp__github__create_issue".into(),
            decision: ApprovalDecision::Allow,
            scope: ApprovalScope::Once,
            by: "alice".into(),
            reason: None,
            covers: None,
            answers: None,
        }
    }

    #[test]
    fn requests_open_until_answered_or_their_turn_ends() {
        let mut a = Approvals::default();
        a.apply(&requested("c1"), None);
        a.apply(&requested("c2"), Some("task_1"));
        a.apply(&requested("c1"), None);
        assert_eq!(a.len(), 2, "a request seen twice (standing and page) is one");
        a.apply(&resolved("c1"), None);
        assert_eq!(a.first().unwrap().call.call_id, "c2");
        // A subagent's turn end is not the session's.
        let end = EventKind::TurnFailed { turn_id: "t".into(), error: "x".into(), class: None };
        a.apply(&end, Some("task_1"));
        assert_eq!(a.len(), 1);
        a.apply(&end, None);
        assert!(a.is_empty());
    }

    #[test]
    fn a_denial_carries_the_trimmed_reason_or_none() {
        let mut a = Approvals::default();
        a.apply(&requested("c1"), None);
        a.denying = true;
        let answer = a.deny("  not on a Friday \n").unwrap();
        assert_eq!(answer.reason.as_deref(), Some("not on a Friday"));
        assert!(!a.denying);
        assert_eq!(a.deny("   ").unwrap().reason, None);
        let allow = a.allow(ApprovalScope::Session).unwrap();
        assert_eq!(
            (allow.decision, allow.scope),
            (ApprovalDecision::Allow, ApprovalScope::Session)
        );
    }

    #[test]
    fn a_long_plan_keeps_its_keys_in_the_prompt_and_is_whole_in_the_transcript() {
        let plan: String = (1..=40).map(|i| format!("{i}. step {i}\n")).collect();
        let asked = EventKind::ApprovalRequested {
            call_id: "p1".into(),
            name: "ExitPlanMode".into(),
            input: json!({}),
            rule: "ExitPlanMode".into(),
            covers: None,
            unjudged: None,
            kind: ApprovalKind::Plan,
            path: Some("/plans/x.md".into()),
            plan: Some(plan.clone()),
            questions: None,
        };
        let mut a = Approvals::default();
        a.apply(&asked, None);
        let lines: Vec<String> = a
            .panel(&Theme { color: false }, true, true, 80)
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        assert_eq!(lines.len(), 3, "the plan is not repeated in the prompt: {lines:#?}");
        assert!(lines[1].contains("the plan (40 lines) is above"), "{lines:#?}");
        assert!(lines.last().unwrap().contains("[y] approve"));
        let (line, _) = transcript_line(&asked).unwrap();
        assert!(!line.contains("step"), "the call's cell has the plan, once: {line}");
    }

    #[test]
    fn the_panel_says_what_allow_for_the_session_covers_and_what_was_not_judged() {
        let text = |a: &Approvals| -> Vec<String> {
            a.panel(&Theme { color: false }, true, true, 200)
                .iter()
                .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
                .collect()
        };
        let mut a = Approvals::default();
        a.apply(&requested("c1"), None);
        assert!(text(&a).contains(
            &" [Shift-Tab] also allows later mcp__github__create_issue calls of this session that no \
              rule but `mcp__github__*` asks about"
                .to_owned()
        ));
        let mut b = Approvals::default();
        b.apply(
            &EventKind::ApprovalRequested {
                call_id: "c2".into(),
                name: "Bash".into(),
                input: json!({"command": "$cmd push"}),
                rule: "Bash(git push*)".into(),
                covers: Some(Vec::new()),
                unjudged: Some("a command is only known when it runs".into()),
                kind: ApprovalKind::Tool,
                path: None,
                plan: None,
                questions: None,
            },
            None,
        );
        let lines = text(&b);
        assert!(lines.contains(
            &" not judged before it runs: a command is only known when it runs".to_owned()
        ));
        assert!(lines
            .iter()
            .any(|l| l.contains("[Shift-Tab] also allows nothing beyond this call")));
    }
}
