//! The built-in tools by name: which exist, which a subagent may have, their specs for the model,
//! which only read and which may run side by side.

use outboard_llm::ToolSpec;

use crate::{background, bash, file, notebook, plan, search, todo, webfetch};

/// The names of the tools [`run`] knows, in the order [`specs`] lists them.
pub const TOOL_NAMES: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Glob",
    "Grep",
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "TodoWrite",
    "WebFetch",
];

/// The tools a subagent (`Task`) may be given: all but `Task` itself (a subagent does not
/// start subagents, so the tree stays one level deep) and `TodoWrite` (the todo list is the
/// session's, kept by its main loop). An org agent's `tools` list picks among these.
pub const SUBAGENT_TOOLS: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Glob",
    "Grep",
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "WebFetch",
];

/// The tools offered to the model, the same in every mode (see [`plan`]). `WebSearch` is not
/// among them: the harness adds it when the org turned it on ([`crate::websearch::offer`]). `ExitPlanMode` and
/// `AskUserQuestion` are run by the harness, which reaches a person; [`run`] does not know them.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        bash::spec(),
        background::output_spec(),
        background::kill_spec(),
        search::glob_spec(),
        search::grep_spec(),
        file::read_spec(),
        file::edit_spec(),
        file::write_spec(),
        notebook::spec(),
        todo::spec(),
        webfetch::spec(),
        plan::exit_plan_mode_spec(),
        plan::ask_user_question_spec(),
    ]
}

/// Whether a tool only reads (safe to re-run after a restart; a `WebFetch` is one GET).
pub fn is_read_only(name: &str) -> bool {
    matches!(name, "Read" | "Glob" | "Grep" | "WebFetch" | "WebSearch")
}

/// Whether calls of this tool may run at the same time as the other such calls of one
/// assistant message: they change nothing the others see (a `BashOutput` reads a job's new
/// output, which no other call reads).
pub fn runs_concurrently(name: &str) -> bool {
    is_read_only(name) || name == "BashOutput"
}
