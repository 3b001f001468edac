//! Reading a turn's hooks and running those that match an event.

use std::sync::Arc;

use outboard_hooks::{Answer, Handler, HookEvent, HookSpec, Source};
use serde_json::Value;

use super::repo;
use super::set::Hooks;
use crate::state::Turn;

/// Reads the session's hooks for this turn: the org's, then the repository's.
pub async fn load(turn: &Turn) -> Hooks {
    let mut specs = Vec::new();
    let hooks = Hooks::default();
    if let Some((store, org)) = &turn.approvals.source {
        match outboard_org::hooks::load(store, org).await {
            Ok(org_hooks) => specs.extend(org_hooks),
            // Fail closed: without its org's hooks a turn cannot know what they would refuse.
            Err(e) => {
                hooks.note(format!("the org's hooks could not be read ({e}); tools are refused"));
                specs.push(unreadable_org_hooks());
            }
        }
    }
    if turn.env.remote.is_none() {
        let workspace = turn.env.workspace.clone();
        match tokio::task::spawn_blocking(move || repo::read(workspace.confined())).await {
            Ok(parsed) => {
                for problem in parsed.problems {
                    hooks.note(problem);
                }
                for spec in &parsed.hooks {
                    if !spec.event.fired() {
                        hooks.note(format!(
                            "{}: a hook on {} is loaded but Outboard does not fire that event yet",
                            spec.source.label(),
                            spec.event
                        ));
                    }
                }
                specs.extend(parsed.hooks);
            }
            Err(e) => hooks.note(format!("the repository's hooks could not be read: {e}")),
        }
    }
    Hooks { specs: Arc::new(specs), notes: hooks.notes }
}

/// A stand-in for org hooks that could not be read: matches every tool and always fails, so
/// it blocks.
fn unreadable_org_hooks() -> HookSpec {
    HookSpec {
        event: HookEvent::PreToolUse,
        matcher: outboard_hooks::Matcher::All,
        matcher_text: String::new(),
        handler: Handler::Http(String::new()),
        timeout: std::time::Duration::from_secs(1),
        block_on_failure: true,
        source: Source::Org("(unreadable)".into()),
    }
}

/// Runs every hook on `event` matching `subject` with `input`, in parallel; their combined
/// answer (the default when none matches).
pub async fn fire(turn: &Turn, event: HookEvent, subject: Option<&str>, input: Value) -> Answer {
    let hooks = &turn.hooks;
    let matching: Vec<&HookSpec> =
        hooks.specs.iter().filter(|s| s.applies(event, subject)).collect();
    if matching.is_empty() {
        return Answer::default();
    }
    let body = serde_json::to_string(&input).unwrap_or_else(|_| "{}".into());
    let body: &str = &body;
    let runs = matching.into_iter().map(|spec| async move {
        let result = match &spec.handler {
            Handler::Command(command) => repo::run(turn, spec, command, body).await,
            Handler::Http(_) => match &turn.env.org {
                Some(org) => {
                    let secrets = org.secrets.as_ref();
                    let body = body.as_bytes().to_vec();
                    outboard_org::hooks::call(secrets, &org.org_id, spec, body).await
                }
                None => outboard_hooks::RunResult {
                    failure: Some("has no org to be signed for".into()),
                    ..Default::default()
                },
            },
        };
        let name = format!("the {} `{}`", spec.source.label(), spec.short());
        let answer = outboard_hooks::interpret(event, spec.block_on_failure, &name, &result);
        for failure in &answer.failures {
            let then = if failure.blocked { "blocked" } else { "let through" };
            hooks.note(format!("{event} {name} {}; {then}", failure.what));
        }
        if let Some(message) = &answer.system_message {
            hooks.note(format!("{event} {name} says: {message}"));
        }
        answer
    });
    let answers = futures_util::future::join_all(runs).await;
    let mut merged = Answer::merge(answers);
    let scrub = &turn.env.scrub;
    if let outboard_hooks::Decision::Block(reason) = &mut merged.decision {
        if let std::borrow::Cow::Owned(clean) = scrub.scrub_str(reason) {
            *reason = clean;
        }
    }
    for text in &mut merged.context {
        if let std::borrow::Cow::Owned(clean) = scrub.scrub_str(text) {
            *text = clean;
        }
    }
    merged
}
