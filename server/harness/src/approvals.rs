//! Tool calls waiting for a person's answer: the session's [`Gate`], where the loop waits on a
//! call that the org's policy ([`outboard_org::toolpolicy`]) says to `ask` about and where
//! `approval/answer` delivers the answer.
//!
//! The question and the answer are durable events written by the loop (`approval_requested`
//! before it waits, `approval_resolved` once answered, both before the call's `tool_call`), so a
//! restart loses neither: a resumed turn that finds its question open waits again without asking
//! twice, and one that finds it answered acts on that answer. The gate itself is memory only:
//! which calls wait right now, the answers that arrived before the resumed loop got back to its
//! call, and the rules allowed for the rest of the session, each for one tool name (rebuilt
//! from the log with [`Gate::restore`]). A grant is the rules that asked, not the tool: with
//! `Bash(echo*)` and `Bash(rm*)` both `ask`, allowing `echo first` for the session still asks
//! before `rm`.
//!
//! Bounds: a call waits only while its loop runs it, so at most the session's loop and its
//! parallel subagents' calls ([`crate::agent::MAX_PARALLEL_CALLS`] each) wait at once; answers
//! held early are capped at [`MAX_EARLY_ANSWERS`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use outboard_shared::{
    ApprovalDecision, ApprovalScope, EventKind, OrgId, SessionEvent, SessionMode,
};
use tokio::sync::oneshot;

use outboard_org::toolpolicy::Rules;
use outboard_store::Store;

/// Answers held for calls whose resumed loop has not reached them yet: one per open question,
/// and a session has a handful at most; the cap stops a client from filling memory with
/// answers to call ids that the log shows open but no loop will ask for again.
pub const MAX_EARLY_ANSWERS: usize = 64;

/// A person's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Run it or not.
    pub decision: ApprovalDecision,
    /// For `allow`: this call, or also the rules that asked for the rest of the session.
    pub scope: ApprovalScope,
    /// Who answered.
    pub by: String,
    /// Why, for a denial.
    pub reason: Option<String>,
    /// For a question (`AskUserQuestion`) allowed: one answer per question.
    pub answers: Option<Vec<String>>,
}

/// What became of an answer given to [`Gate::answer`].
#[derive(Debug)]
pub enum Delivery {
    /// The waiting loop has it.
    Delivered,
    /// No loop waits on that call (yet): the answer is handed back.
    NotWaiting(Answer),
}

#[derive(Default)]
struct State {
    waiting: HashMap<String, oneshot::Sender<Answer>>,
    early: HashMap<String, Answer>,
    /// (tool name, rule pattern) allowed for the rest of the session.
    allowed: HashSet<(String, String)>,
    /// The session's mode (the last `mode_changed` in the log).
    mode: SessionMode,
    /// The mode the model was last told of (the last of [`PLAN_ON`], [`PLAN_OFF`] in the log);
    /// told again when it differs from `mode`.
    told: SessionMode,
}

/// One session's approvals in flight. Shared by the actor and its turn (and the turn's
/// subagents).
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts waiting for the answer on `call_id`; an answer that came early is there at once.
    pub fn wait(&self, call_id: &str) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.state();
        match state.early.remove(call_id) {
            Some(answer) => {
                let _ = tx.send(answer);
            }
            None => {
                state.waiting.insert(call_id.to_owned(), tx);
            }
        }
        rx
    }

    /// The loop stopped waiting on `call_id` (an interrupt, a shutdown).
    pub fn forget(&self, call_id: &str) {
        self.state().waiting.remove(call_id);
    }

    /// Gives `answer` to the loop waiting on `call_id`, if one does.
    pub fn answer(&self, call_id: &str, answer: Answer) -> Delivery {
        let Some(tx) = self.state().waiting.remove(call_id) else {
            return Delivery::NotWaiting(answer);
        };
        match tx.send(answer) {
            Ok(()) => Delivery::Delivered,
            Err(answer) => Delivery::NotWaiting(answer),
        }
    }

    /// Keeps `answer` for the loop that will wait on `call_id` (the log shows the question
    /// open); `false` when [`MAX_EARLY_ANSWERS`] are held already. A loop that started waiting
    /// since [`Gate::answer`] found none (the caller read the log in between) gets it at once:
    /// under the same lock as [`Gate::wait`], so the answer is never left behind.
    pub fn hold(&self, call_id: &str, answer: Answer) -> bool {
        let mut state = self.state();
        let answer = match state.waiting.remove(call_id) {
            Some(tx) => match tx.send(answer) {
                Ok(()) => return true,
                Err(answer) => answer,
            },
            None => answer,
        };
        if state.early.len() >= MAX_EARLY_ANSWERS && !state.early.contains_key(call_id) {
            return false;
        }
        state.early.insert(call_id.to_owned(), answer);
        true
    }

    /// The session's mode now: a turn and its subagents judge each call by it when it is made.
    pub fn mode(&self) -> SessionMode {
        self.state().mode
    }

    /// Sets the session's mode (once its `mode_changed` is durable).
    pub fn set_mode(&self, mode: SessionMode) {
        self.state().mode = mode;
    }

    /// The mode to tell the model of before its next step, if it was not told of it yet; marks
    /// it told (the caller records the reminder).
    pub fn mode_to_tell(&self) -> Option<SessionMode> {
        let mut state = self.state();
        (state.told != state.mode).then(|| {
            state.told = state.mode;
            state.mode
        })
    }

    /// The model was told of `mode` another way (an approved plan's result).
    pub fn told(&self, mode: SessionMode) {
        self.state().told = mode;
    }

    /// Whether the rule `rule` was allowed for calls of `tool` for the rest of the session.
    pub fn allows(&self, tool: &str, rule: &str) -> bool {
        self.state().allowed.contains(&(tool.to_owned(), rule.to_owned()))
    }

    /// Allows the rules `covers` for calls of `tool` for the rest of the session.
    pub fn allow(&self, tool: &str, covers: &[String]) {
        let mut state = self.state();
        for rule in covers {
            state.allowed.insert((tool.to_owned(), rule.clone()));
        }
    }

    /// The rules allowed for the session in `log` (`approval_resolved` with scope `session`):
    /// what the answer says it covers, or, for an answer written before answers said so, the
    /// rule its request named (narrower than the whole tool such a server granted). And the
    /// session's mode, and the mode the model was last told of.
    pub fn restore(&self, log: &[SessionEvent]) {
        let mut asked: HashMap<&str, &str> = HashMap::new();
        let mut state = self.state();
        for event in log {
            match &event.kind {
                EventKind::ModeChanged { mode, .. } => state.mode = *mode,
                EventKind::SystemReminder { text } if event.parent.is_none() => {
                    if let Some(mode) = reminded(text) {
                        state.told = mode;
                    }
                }
                EventKind::ApprovalRequested { call_id, rule, .. } => {
                    asked.insert(call_id, rule);
                }
                EventKind::ApprovalResolved {
                    call_id,
                    name,
                    decision: ApprovalDecision::Allow,
                    scope: ApprovalScope::Session,
                    covers,
                    ..
                } => {
                    let covers = match (covers, asked.get(call_id.as_str())) {
                        (Some(covers), _) => covers.clone(),
                        (None, Some(rule)) => vec![(*rule).to_owned()],
                        (None, None) => Vec::new(),
                    };
                    for rule in covers {
                        state.allowed.insert((name.clone(), rule));
                    }
                }
                _ => {}
            }
        }
    }
}

/// What a turn decides its calls with: the org's rules (read when the turn starts) and the
/// session's gate. Cheap to clone; a subagent gets its parent's.
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    /// The org's tool rules.
    pub rules: Arc<Rules>,
    /// Where calls wait.
    pub gate: Arc<Gate>,
    /// Where the rules are read from: the store and the session's org (`None`: no rules).
    pub source: Option<(Store, OrgId)>,
}

impl Approvals {
    /// Reads the org's rules again (at the start of each turn). A store that cannot be read
    /// keeps the rules read last, so a failing read never lifts an `ask` or a `deny`.
    pub async fn refresh(&mut self) {
        let Some((store, org)) = &self.source else { return };
        match outboard_org::toolpolicy::load(store, org).await {
            Ok(rules) => self.rules = Arc::new(rules),
            Err(e) => {
                tracing::error!(org = %org.0, "cannot read the org's tool rules, keeping the last ones: {e}")
            }
        }
    }
}

/// The kinds of event [`open_requests`] reads.
pub const KINDS: &[&str] =
    &["approval_requested", "approval_resolved", "turn_completed", "turn_failed"];

/// What the model is told when the session enters plan mode.
pub const PLAN_ON: &str = "<system-reminder>\nPlan mode is active: the user wants you to plan \
    before anything changes. Explore and think — read files, search, fetch pages, keep your todo \
    list, run Bash commands that only read (ls, cat, grep, git status|log|diff|show, find \
    without -exec/-delete) — but change nothing: edits, writes, other commands and MCP tools are \
    refused while the session plans. When your plan is ready, call ExitPlanMode with it; the \
    user approves it or tells you what to change. Ask with AskUserQuestion when a choice is \
    theirs.\n</system-reminder>";

/// What the model is told when plan mode ends by a person's switch (an approved plan's result
/// says it itself).
pub const PLAN_OFF: &str = "<system-reminder>\nPlan mode is off: you may edit files and run \
    commands again, within the org's tool policy.\n</system-reminder>";

/// The mode a reminder in the log told the model of, if it is one of [`PLAN_ON`],
/// [`PLAN_OFF`].
pub fn reminded(text: &str) -> Option<SessionMode> {
    match text {
        PLAN_ON => Some(SessionMode::Plan),
        PLAN_OFF => Some(SessionMode::Default),
        _ => None,
    }
}

/// The kinds of event the session's mode is rebuilt from ([`Gate::restore`]).
pub const MODE_KINDS: &[&str] = &["mode_changed", "system_reminder"];

/// The questions still open in `log` (asked, not answered, their turn not ended), oldest first.
pub fn open_requests(log: &[SessionEvent]) -> Vec<&SessionEvent> {
    let mut open: Vec<&SessionEvent> = Vec::new();
    for event in log {
        match &event.kind {
            EventKind::ApprovalRequested { .. } => open.push(event),
            EventKind::ApprovalResolved { call_id, .. } => open.retain(|e| {
                !matches!(&e.kind, EventKind::ApprovalRequested { call_id: c, .. } if c == call_id)
            }),
            EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. }
                if event.parent.is_none() =>
            {
                open.clear()
            }
            _ => {}
        }
    }
    open
}

/// Whether the question on `call_id` is open in `log`.
pub fn is_open(log: &[SessionEvent], call_id: &str) -> bool {
    open_requests(log)
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ApprovalRequested { call_id: c, .. } if c == call_id))
}

/// What the log holds of a call's approval, for a call found without a result after a restart.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// Asked, not answered: wait again, without asking twice; an allow for the session covers
    /// what the request said.
    Open {
        /// The request's `covers`.
        covers: Vec<String>,
        /// For a plan: the org file it was saved as.
        path: Option<String>,
    },
    /// Answered: act on it (for a plan, with the org file it was saved as).
    Answered(Answer, Option<String>),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn answer(by: &str) -> Answer {
        Answer {
            decision: ApprovalDecision::Allow,
            scope: ApprovalScope::Once,
            by: by.into(),
            reason: None,
            answers: None,
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiting_call_only() {
        let gate = Gate::default();
        let rx = gate.wait("c1");
        assert!(matches!(gate.answer("c2", answer("bob")), Delivery::NotWaiting(_)));
        assert!(matches!(gate.answer("c1", answer("alice")), Delivery::Delivered));
        assert_eq!(rx.await.unwrap().by, "alice");
        // Answered once: a second answer finds nobody waiting.
        assert!(matches!(gate.answer("c1", answer("bob")), Delivery::NotWaiting(_)));
    }

    #[tokio::test]
    async fn an_early_answer_is_held_for_the_call_and_the_hold_is_bounded() {
        let gate = Gate::default();
        assert!(gate.hold("c1", answer("alice")));
        assert_eq!(gate.wait("c1").await.unwrap().by, "alice");
        for i in 0..MAX_EARLY_ANSWERS {
            assert!(gate.hold(&format!("x{i}"), answer("a")));
        }
        assert!(!gate.hold("one-more", answer("a")));
        // Replacing a held answer is not a new one.
        assert!(gate.hold("x0", answer("b")));
    }

    #[tokio::test]
    async fn an_answer_held_after_the_loop_began_to_wait_reaches_it() {
        // `approval/answer` found nobody waiting, read the log, and meanwhile the resumed loop
        // got to its call.
        let gate = Gate::default();
        assert!(matches!(gate.answer("c1", answer("alice")), Delivery::NotWaiting(_)));
        let rx = gate.wait("c1");
        assert!(gate.hold("c1", answer("alice")));
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await;
        assert_eq!(got.unwrap().unwrap().by, "alice");
        assert!(gate.state().early.is_empty(), "delivered, not held");
    }

    fn event(seq: u64, parent: Option<&str>, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: outboard_shared::SessionId("s_1".into()),
            seq,
            ts: String::new(),
            parent: parent.map(str::to_owned),
            kind,
        }
    }

    fn asked(call_id: &str) -> EventKind {
        EventKind::ApprovalRequested {
            call_id: call_id.into(),
            name: "Bash".into(),
            input: serde_json::json!({"command": "ls"}),
            rule: "Bash(ls*)".into(),
            covers: None,
            unjudged: None,
            kind: Default::default(),
            path: None,
            plan: None,
            questions: None,
        }
    }

    fn resolved(call_id: &str, scope: ApprovalScope) -> EventKind {
        EventKind::ApprovalResolved {
            call_id: call_id.into(),
            name: "Bash".into(),
            decision: ApprovalDecision::Allow,
            scope,
            by: "alice".into(),
            reason: None,
            covers: (scope == ApprovalScope::Session).then(|| vec!["Bash(echo*)".into()]),
            answers: None,
        }
    }

    #[test]
    fn open_questions_are_those_asked_not_answered_in_a_turn_not_ended() {
        let end = |seq, parent| {
            event(
                seq,
                parent,
                EventKind::TurnFailed { turn_id: "t_1".into(), error: "x".into(), class: None },
            )
        };
        let log = vec![
            event(1, None, asked("old")),
            end(2, None),
            event(3, None, asked("a")),
            event(4, Some("task_1"), asked("b")),
            event(5, None, asked("c")),
            event(6, None, resolved("a", ApprovalScope::Once)),
            // A subagent's end is not its session's turn's.
            end(7, Some("task_1")),
        ];
        let open: Vec<u64> = open_requests(&log).iter().map(|e| e.seq).collect();
        assert_eq!(open, [4, 5]);
        assert!(is_open(&log, "c") && !is_open(&log, "a") && !is_open(&log, "old"));
    }

    #[test]
    fn rules_allowed_for_the_session_are_rebuilt_from_the_log() {
        let gate = Gate::default();
        gate.restore(&[
            event(1, None, resolved("a", ApprovalScope::Once)),
            event(2, None, resolved("b", ApprovalScope::Session)),
        ]);
        assert!(gate.allows("Bash", "Bash(echo*)"));
        assert!(!gate.allows("Bash", "Bash(rm*)"), "the grant is the rule, not the tool");
        assert!(!gate.allows("Read", "Bash(echo*)"));
        assert!(!Gate::default().allows("Bash", "Bash(echo*)"));
        // An answer written before answers named what they cover: the request's rule.
        let old = Gate::default();
        let EventKind::ApprovalResolved {
            call_id, name, decision, scope, by, reason, answers, ..
        } = resolved("c", ApprovalScope::Session)
        else {
            unreachable!()
        };
        let answered = EventKind::ApprovalResolved {
            call_id,
            name,
            decision,
            scope,
            by,
            reason,
            covers: None,
            answers,
        };
        old.restore(&[event(1, None, asked("c")), event(2, None, answered)]);
        assert!(old.allows("Bash", "Bash(ls*)"));
        assert!(!old.allows("Bash", "Bash(rm*)"));
    }

    #[tokio::test]
    async fn a_call_that_stopped_waiting_takes_no_answer() {
        let gate = Gate::default();
        let rx = gate.wait("c1");
        drop(rx);
        assert!(matches!(gate.answer("c1", answer("a")), Delivery::NotWaiting(_)));
        let _rx = gate.wait("c2");
        gate.forget("c2");
        assert!(matches!(gate.answer("c2", answer("a")), Delivery::NotWaiting(_)));
    }
}
