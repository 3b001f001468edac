//! Compaction in the actor: a summary turn started on request or when the window fills, and
//! its end.

use outboard_base::util::new_id;
use outboard_harness as agent;
use outboard_harness::TurnEnd;
use outboard_shared::{ErrorBody, ErrorCode, SessionCompactResponse, TurnId};
use tokio::sync::oneshot;

use super::command::Command;
use super::{Actor, Running};

impl Actor {
    /// Starts a compaction asked for between turns; `reply` is answered when it ends (or at
    /// once, with the refusal, which is also returned).
    pub(super) fn start_compaction(
        &mut self,
        focus: Option<String>,
        reply: oneshot::Sender<Result<SessionCompactResponse, ErrorBody>>,
    ) -> Result<(), ErrorBody> {
        let refused = if self.running.is_some() {
            Some(ErrorBody::new(
                ErrorCode::Conflict,
                "a turn is running in this session: compact when it has ended (long turns \
                 compact by themselves)",
            ))
        } else if let Some(reason) = &self.row.failure {
            Some(ErrorBody::new(ErrorCode::Conflict, format!("this session failed: {reason}")))
        } else if self.shutdown.is_cancelled() {
            Some(ErrorBody::new(
                ErrorCode::ShuttingDown,
                "the server is restarting; ask again in a moment",
            ))
        } else {
            None
        };
        if let Some(e) = refused {
            let _ = reply.send(Err(e.clone()));
            return Err(e);
        }
        let turn_id = TurnId(new_id("compaction"));
        let (turn, tx, cancel) = match self.lend(turn_id.clone(), agent::Resume::default()) {
            Ok(parts) => parts,
            Err(e) => {
                let _ = reply.send(Err(e.clone()));
                return Err(e);
            }
        };
        let task = tokio::spawn(agent::run_compaction(turn, focus));
        tokio::spawn(async move {
            let end = task.await.ok().map(Box::new);
            let _ = tx.send(Command::CompactEnded(end)).await;
        });
        self.running = Some(Running { turn_id, cancel, compaction: Some(reply) });
        Ok(())
    }

    pub(super) async fn compaction_ended(
        &mut self,
        end: Option<Box<(TurnEnd, Result<agent::Compacted, agent::CompactError>)>>,
    ) {
        let reply = self.running.as_mut().and_then(|r| r.compaction.take());
        let outcome = match end {
            Some(end) => {
                let (end, result) = *end;
                self.turn_ended(Some(Box::new(end))).await;
                result.map_err(|e| {
                    let code = match e {
                        agent::CompactError::Nothing | agent::CompactError::NoRoom { .. } => {
                            ErrorCode::BadRequest
                        }
                        agent::CompactError::Stopped => ErrorCode::Conflict,
                        _ => ErrorCode::Internal,
                    };
                    ErrorBody::new(code, e.to_string())
                })
            }
            None => {
                self.running = None;
                self.turn_ended(None).await;
                Err(ErrorBody::new(ErrorCode::Internal, "internal error while compacting"))
            }
        };
        if let Some(reply) = reply {
            let _ = reply.send(outcome.map(|c| SessionCompactResponse {
                seq: c.seq,
                tokens_before: c.tokens_before,
                tokens_after: c.tokens_after,
            }));
        }
    }
}
