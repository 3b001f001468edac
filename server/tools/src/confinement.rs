//! The file tools' confinement cases as one table, so the tools run locally (this crate's tests)
//! and through a sandbox host (the server's) are held to the very same cases: `..` and
//! absolute paths out, symlinks out (to a file, a notebook, `/etc`), a FIFO, whole-tree searches that
//! must not follow the links. Test
//! support, compiled always so the server's tests reach it; it panics on a failed case.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::outcome::ToolOutcome;

/// What a case must answer.
pub enum Expect {
    /// An error that names no host path.
    Refused,
    /// Exactly this outcome.
    Exactly(ToolOutcome),
}

/// The notebook outside the workspace that `link.ipynb` leads to.
const OUTSIDE_NOTEBOOK: &str =
    "{\"cells\": [], \"metadata\": {}, \"nbformat\": 4, \"nbformat_minor\": 5}";

/// Lays out the cases' files: in the workspace directory `root`, links to a file of
/// `outside_dir` and to `/etc`, and a FIFO; returns the outside file, which must stay as it is.
pub fn lay_out(root: &Path, outside_dir: &Path) -> PathBuf {
    let outside = outside_dir.join("outside.txt");
    std::fs::write(&outside, "host secret")
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    symlink(&outside, root.join("link"))
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    symlink("/etc", root.join("etc"))
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    let notebook = outside_dir.join("outside.ipynb");
    std::fs::write(&notebook, OUTSIDE_NOTEBOOK)
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    symlink(&notebook, root.join("link.ipynb"))
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    let fifo = root.join("fifo");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o644))
        .unwrap_or_else(|e| panic!("cannot lay out the confinement cases: {e}"));
    outside
}

/// The calls and what each must answer, for the layout [`lay_out`] made.
pub fn cases(outside: &Path) -> Vec<(&'static str, Value, Expect)> {
    let outside = outside.to_string_lossy().into_owned();
    vec![
        ("Read", json!({"file_path": "link"}), Expect::Refused),
        ("Read", json!({"file_path": "etc/passwd"}), Expect::Refused),
        ("Read", json!({"file_path": "../outside.txt"}), Expect::Refused),
        ("Read", json!({"file_path": "/workspace/../outside.txt"}), Expect::Refused),
        ("Read", json!({"file_path": "/etc/passwd"}), Expect::Refused),
        ("Read", json!({"file_path": outside}), Expect::Refused),
        ("Read", json!({"file_path": "fifo"}), Expect::Refused),
        ("Write", json!({"file_path": "etc/evil", "content": "x"}), Expect::Refused),
        ("Write", json!({"file_path": "../escape.txt", "content": "x"}), Expect::Refused),
        ("Write", json!({"file_path": "link", "content": "x"}), Expect::Refused),
        (
            "Edit",
            json!({"file_path": "link", "old_string": "host", "new_string": "x"}),
            Expect::Refused,
        ),
        ("Read", json!({"file_path": "link.ipynb"}), Expect::Refused),
        (
            "NotebookEdit",
            json!({"notebook_path": "link.ipynb", "edit_mode": "insert", "cell_type": "code",
                   "new_source": "x"}),
            Expect::Refused,
        ),
        (
            "NotebookEdit",
            json!({"notebook_path": "../escape.ipynb", "cell_id": "cell-0", "new_source": "x"}),
            Expect::Refused,
        ),
        (
            "NotebookEdit",
            json!({"notebook_path": "etc/x.ipynb", "cell_id": "cell-0", "new_source": "x"}),
            Expect::Refused,
        ),
        ("Grep", json!({"pattern": "root", "path": "etc"}), Expect::Refused),
        ("Glob", json!({"pattern": "*", "path": "etc"}), Expect::Refused),
        ("Glob", json!({"pattern": "*", "path": "/etc"}), Expect::Refused),
        (
            "Grep",
            json!({"pattern": "secret|root:"}),
            Expect::Exactly(ToolOutcome::ok("No files found")),
        ),
    ]
}

/// Asserts one case's answer; `host` is the host directory that must never be shown.
pub fn check(tool: &str, input: &Value, expect: &Expect, outcome: &ToolOutcome, host: &str) {
    match expect {
        Expect::Refused => assert!(outcome.is_error, "{tool} {input}: {}", outcome.output),
        Expect::Exactly(want) => assert_eq!(outcome, want, "{tool} {input}"),
    }
    // Only the model's own words may contain a host path.
    let echoed = input["file_path"].as_str().is_some_and(|p| p.starts_with(host));
    assert!(echoed || !outcome.output.contains(host), "host path leaked: {}", outcome.output);
}

/// Asserts that nothing outside the workspace changed.
pub fn check_untouched(outside: &Path) {
    assert_eq!(
        std::fs::read_to_string(outside)
            .unwrap_or_else(|e| panic!("cannot read the outside file: {e}")),
        "host secret"
    );
    let escape = outside.parent().map(|d| d.join("escape.txt"));
    assert!(escape.is_some_and(|e| !e.exists()), "a Write escaped the workspace");
    let notebook = outside.with_file_name("outside.ipynb");
    assert_eq!(
        std::fs::read_to_string(notebook)
            .unwrap_or_else(|e| panic!("cannot read the outside notebook: {e}")),
        OUTSIDE_NOTEBOOK
    );
}
