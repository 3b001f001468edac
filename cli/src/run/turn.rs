//! The run's turn, followed to its end: sends the prompt, then prints what the session's
//! [`Follow`] delivers (each event once, across lags and reconnects; see
//! `outboard_client::follow`) until the turn ends, answering approval requests as `--approve`
//! says and turning Ctrl-C into `turn/interrupt`. With `--server` a lost connection is retried
//! for `--reconnect-for`; each re-attach prints a `reconnected` line.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;

use outboard_client::{Dial, Follow, FollowError, Retry, Update};
use outboard_shared::headless::{Reconnected, ReconnectedTag};
use outboard_shared::{
    methods, ApprovalAnswerParams, ApprovalDecision, ApprovalKind, ApprovalScope, Empty, EventKind,
    ImageUpload, Role, SessionEvent, SessionId, StopReason, TurnId, TurnInterruptResponse,
};
use tokio::sync::mpsc;

use super::{Connection, Ending, RunError};
use crate::args::{ApproveMode, RunArgs};
use crate::client::{Client, ClientError};
use crate::output::Printer;

/// What a run tells the model when it asks questions that nobody is there to answer.
pub const HEADLESS_NO_ANSWER: &str = "no one can answer: this is a headless `outboard run`     (`--approve deny|allow`), with nobody at a terminal to ask; the user can run again with     `--approve wait` and answer with `outboard answer`";

/// What a run tells the model of a call it denies because nobody is there to approve it.
pub const HEADLESS_DENIAL: &str = "this is a headless `outboard run` with `--approve deny` (the \
    default), so nobody is there to approve it; the user can run again with `--approve allow` or \
    `--approve wait`, or ask an admin to change the org's tool policy";

/// The reason a headless run with `--approve allow` gives when it refuses a call the org's
/// rules could not judge before it runs: allowing it would lift a rule unseen.
pub const HEADLESS_UNJUDGED: &str = "this is a headless `outboard run`, and the org's tool \
    policy could not judge part of this call before it runs, so a person must look at it: write \
    the command without what is only known when it runs, or the user can run again with \
    `--approve wait`";

/// What the first Ctrl-C prints.
const INTERRUPTING: &str = "interrupting… (press Ctrl-C again to quit now)";

/// What the first Ctrl-C prints while disconnected.
const INTERRUPTING_OFFLINE: &str =
    "interrupting once reconnected… (press Ctrl-C again to quit now)";

type InterruptCall =
    Pin<Box<dyn Future<Output = Result<TurnInterruptResponse, ClientError>> + Send>>;

/// An `approval/answer` a run sends by itself (`--approve allow|deny`), with its call id.
type AnswerCall = Pin<Box<dyn Future<Output = (String, Result<Empty, ClientError>)> + Send>>;

/// Where a run stands in its turn; it survives reconnects.
struct Turn {
    session_id: SessionId,
    turn_id: TurnId,
    /// Ctrl-C was pressed once.
    interrupting: bool,
    /// That Ctrl-C's `turn/interrupt` is not answered yet: sent (again) once connected.
    interrupt_owed: bool,
    /// How approval requests are answered.
    approve: ApproveMode,
}

impl Turn {
    /// A Ctrl-C: the first is owed to the server as `turn/interrupt` (and `note` is printed); the
    /// second means quit now, and returns true.
    fn ctrl_c<O: Write, E: Write>(
        &mut self,
        printer: &mut Printer<O, E>,
        note: &str,
    ) -> Result<bool, RunError> {
        if self.interrupting {
            return Ok(true);
        }
        self.interrupting = true;
        self.interrupt_owed = true;
        printer.note(note)?;
        Ok(false)
    }
}

/// Sends the turn and prints its events until it ends, reconnecting (with `--server`) when the
/// connection ends first. `last_seq` is the last durable `seq` before the turn.
pub(super) async fn stream_turn<O: Write, E: Write>(
    conn: &mut Connection,
    args: &RunArgs,
    session_id: &SessionId,
    last_seq: u64,
    (prompt, images): (String, Vec<ImageUpload>),
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Ending, RunError> {
    // A Ctrl-C while `turn/send` is in flight is remembered and acted on once the turn exists.
    let mut interrupting = false;
    let send = conn.client.send_turn(session_id.clone(), prompt, images);
    tokio::pin!(send);
    let sent = loop {
        tokio::select! {
            sent = &mut send => break sent?,
            Some(()) = interrupts.recv() => {
                if interrupting {
                    return Ok(Ending::Abandoned);
                }
                interrupting = true;
                printer.note(INTERRUPTING)?;
            }
        }
    };
    let mut turn = Turn {
        session_id: session_id.clone(),
        turn_id: sent.turn_id,
        interrupting,
        interrupt_owed: interrupting,
        approve: args.approve,
    };
    // The embedded server dies with the connection: nothing to reconnect to.
    let redial = conn.redial.clone().filter(|_| !args.reconnect_for.is_zero());
    let (dial, retry) = match redial {
        Some(r) => {
            let dial = Dial { url: r.url, token: r.token, options: r.options, room: false };
            (dial, Retry::Within(args.reconnect_for))
        }
        None => {
            let url = conn.client.url().to_owned();
            let dial = Dial { url, token: String::new(), options: Default::default(), room: false };
            (dial, Retry::Never)
        }
    };
    let placeholder = Client::disconnected(&dial.url, ClientError::Closed { reason: None });
    let client = std::mem::replace(&mut conn.client, placeholder);
    let mut follow =
        Follow::attached(client, dial, retry, session_id.clone(), Role::Driver, last_seq);
    let ended = follow_turn(&mut follow, &mut turn, interrupts, printer).await;
    conn.client = follow.into_client();
    ended
}

/// Prints the turn's events until it ends, across reconnects.
async fn follow_turn<O: Write, E: Write>(
    follow: &mut Follow,
    turn: &mut Turn,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Ending, RunError> {
    let session_id = turn.session_id.clone();
    let mut interrupt_call: Option<InterruptCall> = turn
        .interrupt_owed
        .then(|| Box::pin(follow.client().interrupt(session_id.clone())) as InterruptCall);
    // One per call the run answers by itself; a message makes at most a few calls, and a call
    // is asked about once.
    let mut answers = futures_util::stream::FuturesUnordered::<AnswerCall>::new();
    // Set between a reconnect and its re-attach: the attempts it took and why it was needed.
    let mut rejoining: Option<(u32, ClientError)> = None;
    loop {
        tokio::select! {
            update = follow.next() => match update {
                Ok(Update::Event(event)) => {
                    if let Some(ending) = on_event(&event, turn, printer)? {
                        return Ok(ending);
                    }
                    if let Some(call) = auto_answer(follow.client(), turn, &event) {
                        answers.push(call);
                    }
                }
                Ok(Update::Attached { snapshot, after_seq, .. }) => {
                    if let Some((attempts, lost)) = rejoining.take() {
                        let line = Reconnected {
                            kind: ReconnectedTag::Reconnected,
                            session_id: session_id.clone(),
                            attempts,
                            after_seq: after_seq.unwrap_or_default(),
                            role: snapshot.role,
                            reason: lost.to_string(),
                        };
                        printer.reconnected(&line)?;
                        if turn.interrupt_owed {
                            interrupt_call = Some(Box::pin(follow.client().interrupt(session_id.clone())));
                        }
                    }
                    for event in &snapshot.events {
                        if let Some(ending) = on_event(event, turn, printer)? {
                            return Ok(ending);
                        }
                        if let Some(call) = auto_answer(follow.client(), turn, event) {
                            answers.push(call);
                        }
                    }
                }
                Ok(Update::Connected { attempts, lost: Some(lost), .. }) => {
                    rejoining = Some((attempts, lost));
                }
                Ok(Update::Connected { lost: None, .. } | Update::Connecting { .. } | Update::Takeover) => {}
                // Gone with the connection: the reconnect re-attaches.
                Ok(Update::AttachFailed { error, .. }) if error.is_fatal() => {}
                Ok(Update::AttachFailed { error, .. }) => {
                    return Err(match rejoining {
                        Some(_) => RunError::Refused(error),
                        None => RunError::Lost(error),
                    });
                }
                Ok(Update::Warning(err)) => printer.note(&format!("outboard: warning: {err}"))?,
                Err(FollowError::Lost(err)) => return Err(RunError::Lost(err)),
                Err(FollowError::Refused(err)) => return Err(RunError::Refused(err)),
                Err(FollowError::GaveUp { budget, attempts, last }) => {
                    return Err(RunError::GaveUp { budget: humantime(budget), attempts, last });
                }
            },
            Some(()) = interrupts.recv() => {
                let connected = follow.is_connected();
                let note = if connected { INTERRUPTING } else { INTERRUPTING_OFFLINE };
                if turn.ctrl_c(printer, note)? {
                    return Ok(Ending::Abandoned);
                }
                if connected {
                    interrupt_call = Some(Box::pin(follow.client().interrupt(session_id.clone())));
                }
            }
            answer = async {
                match interrupt_call.as_mut() {
                    Some(call) => call.await,
                    None => std::future::pending().await,
                }
            } => {
                interrupt_call = None;
                match answer {
                    Ok(TurnInterruptResponse { interrupted }) => {
                        turn.interrupt_owed = false;
                        if !interrupted {
                            tracing::debug!("interrupt: no turn in flight (it is ending)");
                        }
                    }
                    // The connection is gone: the interrupt is sent again after the reconnect.
                    Err(err) if err.is_fatal() => {}
                    Err(err) => {
                        turn.interrupt_owed = false;
                        printer.note(&format!("outboard: cannot interrupt: {err}"))?;
                    }
                }
            }
            Some((call_id, answered)) = futures_util::StreamExt::next(&mut answers) => {
                match answered {
                    Ok(_) => {}
                    // Gone with the connection: the request is in the log and is seen (and
                    // answered) again after the reconnect.
                    Err(err) if err.is_fatal() => {}
                    Err(err) => printer.note(&format!("outboard: cannot answer {call_id}: {err}"))?,
                }
            }
        }
    }
}

/// The answer a run gives by itself to an approval request of its session (`--approve allow`
/// or `deny`); `None` with `--approve wait` or for any other event.
fn auto_answer(client: &Client, turn: &Turn, event: &SessionEvent) -> Option<AnswerCall> {
    let EventKind::ApprovalRequested { call_id, unjudged, kind, .. } = &event.kind else {
        return None;
    };
    if event.session_id != turn.session_id {
        return None;
    }
    let (decision, reason) = match (turn.approve, unjudged) {
        (ApproveMode::Wait, _) => return None,
        // `--approve deny` ends the run at the plan, which waits for a person's answer.
        _ if *kind == ApprovalKind::Plan && turn.approve == ApproveMode::Deny => return None,
        _ if *kind == ApprovalKind::Question => {
            (ApprovalDecision::Deny, Some(HEADLESS_NO_ANSWER.to_owned()))
        }
        // Nobody looks at what the rules could not judge: `--approve allow` does not cover it.
        (ApproveMode::Allow, Some(why)) => {
            (ApprovalDecision::Deny, Some(format!("{HEADLESS_UNJUDGED} ({why})")))
        }
        (ApproveMode::Allow, None) => (ApprovalDecision::Allow, None),
        (ApproveMode::Deny, _) => (ApprovalDecision::Deny, Some(HEADLESS_DENIAL.to_owned())),
    };
    let params = ApprovalAnswerParams {
        session_id: turn.session_id.clone(),
        call_id: call_id.clone(),
        decision,
        scope: ApprovalScope::Once,
        reason,
        answers: None,
    };
    let call = client.call::<methods::ApprovalAnswer>(params);
    let call_id = call_id.clone();
    Some(Box::pin(async move { (call_id, call.await) }))
}

/// `2m`, `90s`, `1.5s`: a duration as a person wrote it.
fn humantime(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_millis() != 0 || secs == 0 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Prints one event (the follow delivers each once); returns how the turn ended when this
/// event ends our turn.
fn on_event<O: Write, E: Write>(
    event: &SessionEvent,
    turn: &Turn,
    printer: &mut Printer<O, E>,
) -> Result<Option<Ending>, RunError> {
    if event.session_id != turn.session_id {
        return Ok(None);
    }
    let turn_id = &turn.turn_id;
    printer.event(event)?;
    if event.parent.is_some() {
        // A subagent's event never ends the session's turn.
        return Ok(None);
    }
    Ok(match &event.kind {
        EventKind::ApprovalRequested {
            call_id,
            kind: ApprovalKind::Plan,
            path: Some(path),
            plan: Some(plan),
            ..
        } => {
            printer.plan(&outboard_shared::headless::PlanProposed {
                kind: Default::default(),
                session_id: turn.session_id.clone(),
                call_id: call_id.clone(),
                path: path.clone(),
                plan: plan.clone(),
            })?;
            (turn.approve == ApproveMode::Deny).then_some(Ending::PlanProposed)
        }
        EventKind::TurnCompleted { turn_id: id, stop_reason, .. } if id == turn_id => {
            Some(Ending::Completed { interrupted: *stop_reason == StopReason::Interrupted })
        }
        EventKind::TurnFailed { turn_id: id, error, class } if id == turn_id => {
            Some(Ending::Failed(error.clone(), *class))
        }
        _ => None,
    })
}
