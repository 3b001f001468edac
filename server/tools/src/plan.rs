//! Plan mode's side of the tools: which calls a session that plans may make
//! ([`refusal_in_plan_mode`]), and Claude Code's two tools that talk to a person, `ExitPlanMode
//! {plan}` and `AskUserQuestion {questions}` — their specs, their inputs checked with bounds,
//! and the org file a plan is saved as (`/plans/<date>-<slug>.md`, [`save_plan`]).
//!
//! The waiting itself (the approval request, the answer, leaving plan mode) is the harness's:
//! these tools need a person, which only the loop can reach. Their specs are offered in every
//! mode, like every other tool: the tool list and the system prompt stay the same whatever the
//! mode, so the provider's prompt cache survives a switch, and a call that the mode forbids is
//! refused when it is made.
//!
//! What plan mode lets through: the tools that only read (`Read`, `Glob`, `Grep`, `WebFetch`),
//! `TodoWrite` (session state, not the workspace), `BashOutput` (a job's output), the two tools
//! here, and `Bash` when the Bash guard judges its line read-only
//! ([`outboard_bashguard::read_only`]); that judgement explains a refusal early, and the
//! guarantee is the sandbox's read-only view, in which every plan-mode command runs
//! (`ToolCtx::read_only`, `outboard_sandbox::Sandbox::exec_read_only`). MCP tools are refused: nothing marks an org's MCP tool
//! as read-only today (a server's own `readOnlyHint` is the server's claim, not the org's).
//! `Task` is the harness's to allow (its subagent inherits the mode).

use outboard_org::orgfs::{Author, FsError, Precondition};
use outboard_shared::{FileOp, Question};
use outboard_vfs::OrgPath;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::input::parse;
use crate::org::OrgCtx;
use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;

/// The tool that proposes the plan and asks to leave plan mode.
pub const EXIT_PLAN_MODE: &str = "ExitPlanMode";

/// The tool that asks the user questions with choices.
pub const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// The largest plan, in bytes: a page or a few, which a person reads whole before approving.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// Questions of one call: Claude Code's bounds.
pub const QUESTIONS: std::ops::RangeInclusive<usize> = 1..=4;

/// Options of one question (an "other" free answer is always possible besides).
pub const OPTIONS: std::ops::RangeInclusive<usize> = 2..=4;

/// The longest question or option description (bytes).
pub const MAX_QUESTION_BYTES: usize = 1000;

/// The longest header or option label (bytes): a chip and a choice, not prose.
pub const MAX_LABEL_BYTES: usize = 100;

/// Plans saved with the same date and slug before a number is refused: one session proposing
/// the same plan again and again gets `-2`, `-3`, … up to this.
const MAX_SAME_NAME: u32 = 100;

/// The longest slug of a plan's file name (characters).
const MAX_SLUG_CHARS: usize = 48;

const PLAN_PARAMS: &str = "{\"plan\": string (required)}";

const QUESTION_PARAMS: &str = "{\"questions\": [{\"question\": string, \"header\": string, \
     \"options\": [{\"label\": string, \"description\": string}] (2 to 4), \"multiSelect\": \
     boolean}] (1 to 4, required)}";

#[derive(Debug, Deserialize)]
struct PlanParams {
    plan: String,
}

#[derive(Debug, Deserialize)]
struct QuestionParams {
    questions: Vec<Question>,
}

/// What a session in plan mode answers a call that could change something; `None`: it may
/// run. `Task` is not judged here (see the module header).
pub fn refusal_in_plan_mode(name: &str, input: &Value) -> Option<ToolOutcome> {
    let why = match name {
        "Read" | "Glob" | "Grep" | "WebFetch" | "WebSearch" | "TodoWrite" | "BashOutput" => {
            return None
        }
        EXIT_PLAN_MODE | ASK_USER_QUESTION => return None,
        "Bash" => {
            let command = input.get("command").and_then(Value::as_str).unwrap_or_default();
            match outboard_bashguard::read_only(command) {
                Ok(()) => return None,
                Err(e) => format!("this command may change something: {e}"),
            }
        }
        "Write" | "Edit" | "NotebookEdit" => format!("{name} changes files"),
        "KillShell" => "KillShell stops a running command".to_owned(),
        name if crate::external::is_external_name(name) => {
            format!("{name} is an MCP tool, and none is known to be read-only (the org marks none)")
        }
        name => format!("{name} is not one of the tools that only read"),
    };
    Some(ToolOutcome::error(format!(
        "Not run: this session is planning (plan mode), so it explores and changes nothing \
         until the user approves a plan; {why}. Read and search (Read, Glob, Grep, WebFetch, \
         and Bash commands that only read: ls, cat, grep, git status|log|diff|show, find \
         without -exec/-delete), then propose the plan with ExitPlanMode."
    )))
}

/// The plan of an `ExitPlanMode` call, checked: not empty, at most [`MAX_PLAN_BYTES`].
pub fn plan_input(input: &Value) -> Result<String, ToolOutcome> {
    let params: PlanParams = parse(EXIT_PLAN_MODE, input, PLAN_PARAMS)?;
    if params.plan.trim().is_empty() {
        return Err(ToolOutcome::error(
            "Invalid input for ExitPlanMode: the plan is empty; write the plan (markdown) in \
             `plan`",
        ));
    }
    if params.plan.len() > MAX_PLAN_BYTES {
        return Err(ToolOutcome::error(format!(
            "Invalid input for ExitPlanMode: the plan is {} bytes; the limit is {MAX_PLAN_BYTES}. \
             Make it shorter: steps and files, not code",
            params.plan.len()
        )));
    }
    Ok(params.plan)
}

/// The questions of an `AskUserQuestion` call, checked against their bounds; the refusal says
/// which question or option is at fault.
pub fn questions_input(input: &Value) -> Result<Vec<Question>, ToolOutcome> {
    let params: QuestionParams = parse(ASK_USER_QUESTION, input, QUESTION_PARAMS)?;
    let invalid = |what: String| {
        Err(ToolOutcome::error(format!(
            "Invalid input for AskUserQuestion: {what}. Expected parameters: {QUESTION_PARAMS}"
        )))
    };
    let n = params.questions.len();
    if !QUESTIONS.contains(&n) {
        return invalid(format!("{n} questions; ask 1 to 4 at a time"));
    }
    for (i, q) in params.questions.iter().enumerate() {
        let at = format!("question {}", i + 1);
        if q.question.trim().is_empty() || q.question.len() > MAX_QUESTION_BYTES {
            return invalid(format!("{at} must be 1 to {MAX_QUESTION_BYTES} bytes"));
        }
        if q.header.len() > MAX_LABEL_BYTES {
            return invalid(format!("{at}'s header is over {MAX_LABEL_BYTES} bytes"));
        }
        if !OPTIONS.contains(&q.options.len()) {
            return invalid(format!(
                "{at} has {} options; give 2 to 4 (the user can always answer something else)",
                q.options.len()
            ));
        }
        for (j, o) in q.options.iter().enumerate() {
            if o.label.trim().is_empty() || o.label.len() > MAX_LABEL_BYTES {
                return invalid(format!(
                    "{at}, option {}: the label must be 1 to {MAX_LABEL_BYTES} bytes",
                    j + 1
                ));
            }
            if o.description.len() > MAX_QUESTION_BYTES {
                return invalid(format!(
                    "{at}, option {}: the description is over {MAX_QUESTION_BYTES} bytes",
                    j + 1
                ));
            }
            if q.options[..j].iter().any(|earlier| earlier.label == o.label) {
                return invalid(format!("{at} has the option \"{}\" twice", o.label));
            }
        }
    }
    Ok(params.questions)
}

/// `<date>-<slug>`: the date (`YYYY-MM-DD`) and the plan's first heading or line, lowercased,
/// words joined by `-`.
pub fn plan_name(date: &str, plan: &str) -> String {
    let title = plan
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("plan");
    let mut slug = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if slug.chars().count() >= MAX_SLUG_CHARS {
            break;
        }
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    let slug = if slug.is_empty() { "plan" } else { slug };
    format!("{date}-{slug}")
}

/// Saves `plan` as a new org file `/plans/<date>-<slug>.md` (with `-2`, `-3`… when the name is
/// taken), authored by the user driving the session, with the session; its path.
pub async fn save_plan(org: &OrgCtx, plan: &str) -> Result<String, ToolOutcome> {
    let date: String = outboard_base::util::now_rfc3339().chars().take(10).collect();
    let name = plan_name(&date, plan);
    let author = Author { user: org.author.user.clone(), session: org.author.session.clone() };
    for n in 1..=MAX_SAME_NAME {
        let file = match n {
            1 => format!("{}/{name}.md", outboard_vfs::PLANS_PREFIX),
            n => format!("{}/{name}-{n}.md", outboard_vfs::PLANS_PREFIX),
        };
        let path = OrgPath::parse(&file).map_err(|e| ToolOutcome::error(e.to_string()))?;
        let written = org
            .fs
            .write(
                &org.org_id,
                &path,
                plan.to_owned(),
                &author,
                FileOp::Write,
                Precondition::Version(0),
            )
            .await;
        match written {
            Ok(_) => return Ok(file),
            Err(FsError::Conflict(_)) => continue,
            Err(e) => return Err(ToolOutcome::error(format!("The plan could not be saved: {e}"))),
        }
    }
    Err(ToolOutcome::error(format!(
        "The plan could not be saved: {MAX_SAME_NAME} plans named {name} exist today; start the \
         plan with another title"
    )))
}

/// `ExitPlanMode`'s spec (Claude Code's description, adapted).
pub fn exit_plan_mode_spec() -> ToolSpec {
    ToolSpec {
        name: EXIT_PLAN_MODE.into(),
        description: "Use this tool when you are in plan mode and have finished planning: it \
presents your plan to the user for approval. Call it only when the task needs code changes \
planned step by step; not for research, where you simply answer. The plan is saved as an org \
file (/plans/<date>-<slug>.md) that teammates can read. The call waits for the user: if they \
approve, plan mode ends and you carry the plan out; if not, you get their reason and revise the \
plan. Outside plan mode there is nothing to exit: do not call it."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "plan": {
                    "type": "string",
                    "description": "The plan you came up with, that you want to run by the user \
        for approval. Markdown; concise: the steps and the files they touch."
                }
            },
            "required": ["plan"],
            "additionalProperties": false
        }),
    }
}

/// `AskUserQuestion`'s spec (Claude Code's shape).
pub fn ask_user_question_spec() -> ToolSpec {
    ToolSpec {
        name: ASK_USER_QUESTION.into(),
        description: "Use this tool when you need to ask the user questions during execution: \
to gather preferences or requirements, clarify ambiguous instructions, or get decisions on \
implementation choices. Ask 1 to 4 questions, each with 2 to 4 options; the user may always \
answer with text of their own instead. Use multiSelect when several options may be chosen. The \
call waits for the answers; when nobody can answer (a headless run), the result says so and you \
decide yourself, stating your assumption."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 4,
                    "description": "Questions to ask the user (1-4 questions)",
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {"type": "string", "description": "The complete question, ending with a question mark"},
                            "header": {"type": "string", "description": "Very short label shown as a chip (max 12 chars)"},
                            "options": {
                                "type": "array",
                                "minItems": 2,
                                "maxItems": 4,
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "label": {"type": "string", "description": "The choice, 1-5 words"},
                                        "description": {"type": "string", "description": "What this option means"}
                                    },
                                    "required": ["label", "description"]
                                }
                            },
                            "multiSelect": {"type": "boolean", "description": "Whether several options may be chosen"}
                        },
                        "required": ["question", "header", "options", "multiSelect"]
                    }
                }
            },
            "required": ["questions"],
            "additionalProperties": false
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn question(options: usize) -> Value {
        let options: Vec<Value> =
            (0..options).map(|i| json!({"label": format!("o{i}"), "description": ""})).collect();
        json!({"question": "Which?", "header": "H", "options": options, "multiSelect": false})
    }

    #[test]
    fn question_bounds_are_enforced_with_the_part_at_fault() {
        let ok = questions_input(&json!({"questions": [question(2), question(4)]})).unwrap();
        assert_eq!(ok.len(), 2);
        for (input, says) in [
            (json!({"questions": []}), "0 questions"),
            (json!({"questions": vec![question(2); 5]}), "5 questions"),
            (json!({"questions": [question(1)]}), "question 1 has 1 options"),
            (json!({"questions": [question(2), question(5)]}), "question 2 has 5 options"),
            (
                json!({"questions": [{"question": " ", "options": [{"label": "a"}, {"label": "b"}]}]}),
                "question 1 must be",
            ),
            (
                json!({"questions": [{"question": "Q?", "options": [{"label": "a"}, {"label": "a"}]}]}),
                "\"a\" twice",
            ),
            (
                json!({"questions": [{"question": "Q?", "options": [{"label": ""}, {"label": "b"}]}]}),
                "option 1: the label",
            ),
            (json!({"questions": "which?"}), "Invalid input for AskUserQuestion"),
        ] {
            let err = questions_input(&input).unwrap_err();
            assert!(err.is_error && err.output.contains(says), "{input}: {}", err.output);
        }
    }

    #[test]
    fn a_plan_is_checked_and_named() {
        assert!(plan_input(&json!({"plan": "  "})).unwrap_err().output.contains("empty"));
        let big = "x".repeat(MAX_PLAN_BYTES + 1);
        assert!(plan_input(&json!({"plan": big})).unwrap_err().output.contains("limit"));
        assert_eq!(plan_input(&json!({"plan": "# Do it"})).unwrap(), "# Do it");
        assert_eq!(
            plan_name("2026-12-04", "\n# Add a --plan flag: CLI & server!\n\n1. x"),
            "2026-12-04-add-a-plan-flag-cli-server"
        );
        assert_eq!(plan_name("2026-12-04", "### \n"), "2026-12-04-plan");
        assert_eq!(plan_name("d", &"word ".repeat(50)).len(), "d-".len() + MAX_SLUG_CHARS);
    }

    #[test]
    fn plan_mode_lets_through_what_only_reads() {
        for (name, input) in [
            ("Read", json!({"file_path": "a"})),
            ("Grep", json!({"pattern": "x"})),
            ("TodoWrite", json!({"todos": []})),
            ("Bash", json!({"command": "git status && ls -la"})),
            (EXIT_PLAN_MODE, json!({"plan": "p"})),
        ] {
            assert!(refusal_in_plan_mode(name, &input).is_none(), "{name}");
        }
        for (name, input, says) in [
            ("Write", json!({"file_path": "a", "content": ""}), "Write changes files"),
            ("Edit", json!({}), "Edit changes files"),
            ("NotebookEdit", json!({}), "NotebookEdit changes files"),
            ("Bash", json!({"command": "rm -rf src"}), "`rm -rf src`"),
            ("Bash", json!({"command": "echo x > f"}), "`> f`"),
            ("mcp__github__list_issues", json!({}), "MCP tool"),
            ("KillShell", json!({}), "stops a running command"),
        ] {
            let refusal = refusal_in_plan_mode(name, &input).unwrap();
            assert!(refusal.is_error, "{name}");
            assert!(refusal.output.contains("this session is planning"), "{}", refusal.output);
            assert!(refusal.output.contains(says), "{}", refusal.output);
        }
    }
}
