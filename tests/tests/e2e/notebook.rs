//! `NotebookEdit` and `Read` of notebooks (issue 55, item 3) through a real server, the
//! `outboard` binaries and the mock model over HTTP: a notebook written by Python's `nbformat`
//! is edited cell by cell (replace, insert, delete; an nbformat 4.4 notebook by index) and is
//! still valid by `nbformat.validate`; bad calls are clear errors that leave the file as it was;
//! a rewind brings the notebook back; an edit cut by a crash runs again only if its notebook is
//! unchanged; the org's policy judges it by its path.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use outboard_shared::{EventKind, ToolCall};
use outboard_tests::fixture::{
    call_results, craft_log, crafted_answer, crafted_call, crafted_opening, crafted_result,
    crafted_start, settled_log, World, ORG,
};
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(90);

fn call(id: &str, name: &str, input: Value) -> MockStep {
    MockStep::tool_calls(vec![MockToolCall::new(name, input).with_id(id)])
}

/// Runs `python3 -c script args…`, which must succeed; its stdout.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3").arg("-c").arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A notebook as Jupyter writes it (`nbformat.writes`), minor version `minor`: a markdown cell
/// `intro`, a code cell `load` with a stream and a result, a code cell `scratch`. Below 4.5 the
/// cells have no ids.
fn notebook(minor: u32) -> String {
    python(
        r##"
import sys, nbformat
from nbformat.v4 import new_notebook, new_markdown_cell, new_code_cell, new_output
nb = new_notebook()
nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
nb.metadata["language_info"] = {"name": "python"}
nb.cells = [
    new_markdown_cell("# Sales\nQuarterly numbers.", id="intro"),
    new_code_cell("import pandas as pd\ndf = pd.read_csv('q.csv')\ndf", id="load", execution_count=1,
        outputs=[new_output("stream", name="stdout", text="read 3 rows\n"),
                 new_output("execute_result", data={"text/plain": "   a\n0  1"}, execution_count=1)]),
    new_code_cell("print('scratch')", id="scratch"),
]
minor = int(sys.argv[1])
nb.nbformat_minor = minor
if minor < 5:
    for c in nb.cells:
        del c["id"]
sys.stdout.write(nbformat.writes(nb))
"##,
        &[&minor.to_string()],
    )
}

/// Validates the notebook at `path` with `nbformat` (read as version 4, then validated, and the
/// raw JSON validated too, strictly: duplicate ids refused rather than repaired); its cells as
/// `[id, cell_type, source, outputs]`.
fn validated(path: &Path) -> Vec<Value> {
    let cells = python(
        r##"
import json, sys, nbformat
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nbformat.validate(nb)
raw = json.load(open(path))
nbformat.validate(raw)
ids = [c["id"] for c in raw["cells"] if "id" in c]
assert len(ids) == len(set(ids)), f"duplicate ids: {ids}"
if (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5):
    assert len(ids) == len(raw["cells"]), "a cell without an id in nbformat 4.5"
else:
    assert not ids, f"ids in an nbformat {raw['nbformat_minor']} notebook: {ids}"
print(json.dumps([[c.get("id"), c.cell_type, c.source, len(c.get("outputs", []))] for c in nb.cells]))
"##,
        &[path.to_str().unwrap()],
    );
    serde_json::from_str(&cells).unwrap()
}

/// The result `(output, is_error)` of call `id` in `events`.
fn result<'a>(r: &'a [(String, String, bool)], id: &str) -> (&'a str, bool) {
    let found = r.iter().find(|(c, _, _)| c == id).unwrap_or_else(|| panic!("no {id}: {r:?}"));
    (found.1.as_str(), found.2)
}

/// The id a `NotebookEdit` insert answered with.
fn inserted_id(output: &str) -> String {
    let rest = output.split("cell with id ").nth(1).unwrap_or_else(|| panic!("{output}"));
    rest.split(' ').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_keep_a_real_notebook_valid_nbformat() {
    let (nb45, nb44) = (notebook(5), notebook(4));
    let edit = |id: &str, input: Value| call(id, "NotebookEdit", input);
    let World { server, mut c, sid, mock, .. } = World::anthropic(
        vec![
            call("w1", "Write", json!({"file_path": "analysis.ipynb", "content": nb45})),
            call("w2", "Write", json!({"file_path": "old/legacy.ipynb", "content": nb44})),
            call("r1", "Read", json!({"file_path": "/workspace/analysis.ipynb"})),
            call("r2", "Read", json!({"file_path": "old/legacy.ipynb"})),
            edit(
                "e1",
                json!({"notebook_path": "/workspace/analysis.ipynb", "cell_id": "load",
                       "new_source": "import polars as pl\ndf = pl.read_csv('q.csv')\ndf"}),
            ),
            edit(
                "e2",
                json!({"notebook_path": "analysis.ipynb", "cell_id": "load", "edit_mode": "insert",
                       "cell_type": "code", "new_source": "df.describe()"}),
            ),
            edit(
                "e3",
                json!({"notebook_path": "analysis.ipynb", "edit_mode": "insert",
                       "cell_type": "markdown", "new_source": "# Report\n\nGenerated."}),
            ),
            edit(
                "e4",
                json!({"notebook_path": "analysis.ipynb", "cell_id": "scratch",
                       "edit_mode": "delete", "new_source": ""}),
            ),
            edit(
                "e5",
                json!({"notebook_path": "old/legacy.ipynb", "cell_id": "cell-2",
                       "new_source": "print('kept')", "cell_type": "markdown"}),
            ),
            edit(
                "e6",
                json!({"notebook_path": "old/legacy.ipynb", "cell_id": "0", "edit_mode": "insert",
                       "cell_type": "code", "new_source": "x = 1"}),
            ),
            call("r3", "Read", json!({"file_path": "analysis.ipynb"})),
            MockStep::text("edited"),
        ],
        &[],
    )
    .await;
    let events = c.completed_turn(&sid, "edit the notebooks", WAIT).await.unwrap();
    let r = call_results(&events);
    for (id, output, is_error) in &r {
        assert!(!is_error, "{id}: {output}");
    }
    let (read, _) = result(&r, "r1");
    assert!(read.contains("<cell id=\"load\" cell_type=\"code\" execution_count=\"1\">"), "{read}");
    assert!(read.contains("output_type=\"stream\" name=\"stdout\">\nread 3 rows\n"), "{read}");
    let (legacy, _) = result(&r, "r2");
    assert!(legacy.contains("<cell id=\"cell-2\" cell_type=\"code\""), "{legacy}");
    let (replaced, _) = result(&r, "e1");
    assert!(replaced.contains("Its outputs and execution count were cleared"), "{replaced}");
    let described = inserted_id(result(&r, "e2").0);
    let report = inserted_id(result(&r, "e3").0);

    let ws = server.workspace(&sid);
    let cells = validated(&ws.join("analysis.ipynb"));
    assert_eq!(
        cells,
        [
            json!([report, "markdown", "# Report\n\nGenerated.", 0]),
            json!(["intro", "markdown", "# Sales\nQuarterly numbers.", 0]),
            json!(["load", "code", "import polars as pl\ndf = pl.read_csv('q.csv')\ndf", 0]),
            json!([described, "code", "df.describe()", 0]),
        ]
    );
    let legacy = validated(&ws.join("old/legacy.ipynb"));
    assert_eq!(
        legacy,
        [
            json!([null, "markdown", "# Sales\nQuarterly numbers.", 0]),
            json!([null, "code", "x = 1", 0]),
            json!([null, "code", "import pandas as pd\ndf = pd.read_csv('q.csv')\ndf", 2]),
            json!([null, "markdown", "print('kept')", 0]),
        ]
    );
    // The last Read shows the edited notebook; the model got it.
    let (after, _) = result(&r, "r3");
    assert!(after.contains(&format!("<cell id=\"{described}\" cell_type=\"code\"")), "{after}");
    assert!(!after.contains("scratch"), "{after}");
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains("df.describe()"), "the model saw the last Read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_are_clear_errors_and_leave_the_notebook_untouched() {
    let nb = notebook(5);
    let edit = |id: &str, input: Value| call(id, "NotebookEdit", input);
    let World { server, mut c, sid, mock: _mock, .. } = World::anthropic(
        vec![
            call("w1", "Write", json!({"file_path": "a.ipynb", "content": nb})),
            call("w2", "Write", json!({"file_path": "broken.ipynb", "content": "{\"cells\": [\n"})),
            call("r1", "Read", json!({"file_path": "a.ipynb"})),
            call("r2", "Read", json!({"file_path": "broken.ipynb"})),
            edit("b1", json!({"notebook_path": "a.ipynb", "cell_id": "nope", "new_source": "x"})),
            edit(
                "b2",
                json!({"notebook_path": "a.ipynb", "cell_id": "intro", "new_source": "x",
                       "edit_mode": "merge"}),
            ),
            edit(
                "b3",
                json!({"notebook_path": "a.ipynb", "edit_mode": "insert", "cell_type": "code"}),
            ),
            edit(
                "b4",
                json!({"notebook_path": "a.ipynb", "cell_id": "intro", "new_source": "x",
                       "cell_type": "raw"}),
            ),
            edit("b5", json!({"notebook_path": "broken.ipynb", "cell_id": "a", "new_source": "x"})),
            edit(
                "b6",
                json!({"notebook_path": "../escape.ipynb", "cell_id": "a", "new_source": "x"}),
            ),
            edit("b7", json!({"notebook_path": "/etc/x.ipynb", "cell_id": "a", "new_source": "x"})),
            MockStep::text("refused"),
        ],
        &[],
    )
    .await;
    let events = c.completed_turn(&sid, "break things", WAIT).await.unwrap();
    let r = call_results(&events);
    let (broken, is_error) = result(&r, "r2");
    assert!(!is_error && broken.contains("     1\t{\"cells\": ["), "shown as text: {broken}");
    for (id, says) in [
        ("b1", "Cell \"nope\" was not found in the notebook; its cells are intro, load, scratch"),
        ("b2", "edit_mode \"merge\" is not one of replace, insert, delete"),
        ("b3", "new_source is required to replace or insert a cell"),
        ("b4", "cell_type \"raw\" is not one of code, markdown"),
        ("b5", "The notebook /workspace/broken.ipynb is not valid JSON"),
        ("b6", "outside"),
        ("b7", "/workspace"),
    ] {
        let (output, is_error) = result(&r, id);
        assert!(is_error, "{id}: {output}");
        assert!(output.contains(says), "{id}: {output:?} lacks {says:?}");
    }
    let ws = server.workspace(&sid);
    assert_eq!(std::fs::read_to_string(ws.join("a.ipynb")).unwrap(), nb, "untouched");
    assert_eq!(std::fs::read_to_string(ws.join("broken.ipynb")).unwrap(), "{\"cells\": [\n");
    assert!(!ws.parent().unwrap().join("escape.ipynb").exists());
    let mut names: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ipynb") || n.ends_with(".tmp"))
        .collect();
    names.sort();
    assert_eq!(names, ["a.ipynb", "broken.ipynb"], "no temp file left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_brings_the_notebook_back() {
    let nb = notebook(5);
    let World { server, mut c, sid, mock: _mock, .. } = World::anthropic(
        vec![
            call("w1", "Write", json!({"file_path": "a.ipynb", "content": nb})),
            MockStep::text("written"),
            call("r1", "Read", json!({"file_path": "a.ipynb"})),
            call(
                "e1",
                "NotebookEdit",
                json!({"notebook_path": "a.ipynb", "cell_id": "load", "new_source": "changed"}),
            ),
            call(
                "e2",
                "NotebookEdit",
                json!({"notebook_path": "a.ipynb", "cell_id": "intro", "edit_mode": "delete"}),
            ),
            MockStep::text("edited"),
        ],
        &[],
    )
    .await;
    let path = server.workspace(&sid).join("a.ipynb");
    c.completed_turn(&sid, "first prompt: write it", WAIT).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), nb);
    let events = c.completed_turn(&sid, "second prompt: edit it", WAIT).await.unwrap();
    assert!(call_results(&events).iter().all(|(_, _, e)| !e), "{:?}", call_results(&events));
    let edited = validated(&path);
    assert_eq!(edited.len(), 2, "{edited:?}");
    assert_eq!(edited[0], json!(["load", "code", "changed", 0]));

    let answered = c
        .request(
            "session/rewind",
            json!({"session_id": sid, "checkpoint": 2, "code": true, "conversation": true}),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answered["prompt"], "second prompt: edit it");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), nb, "byte for byte as before the edits");
}

/// A crashed turn's two `NotebookEdit`s, both started: `a.ipynb` still holds what it held
/// before its edit (it runs again), `b.ipynb` does not (its edit most likely happened: the model
/// is told, and it does not run twice).
#[tokio::test]
async fn an_edit_cut_by_a_crash_runs_again_only_if_its_notebook_is_unchanged() {
    let nb = notebook(5);
    let mock = MockLlm::start(vec![MockStep::text("Done.")]).await.unwrap();
    let edit = |id: &str, path: &str| {
        crafted_call(
            id,
            "NotebookEdit",
            json!({"notebook_path": path, "cell_id": "scratch", "new_source": "print('again')"}),
        )
    };
    let reads: Vec<ToolCall> = ["a.ipynb", "b.ipynb"]
        .iter()
        .enumerate()
        .map(|(i, p)| crafted_call(&format!("r{i}"), "Read", json!({"file_path": p})))
        .collect();
    let (a, b) = (edit("e1", "a.ipynb"), edit("e2", "b.ipynb"));
    let digest = outboard_server::auth::hex_sha256(nb.as_bytes());
    let mut events = crafted_opening("edit both");
    events.push(crafted_answer(&reads, None));
    for read in &reads {
        events.extend([crafted_start(read), crafted_result(read, "(the cells)")]);
    }
    events.extend([
        crafted_answer(&[a.clone(), b.clone()], None),
        EventKind::ToolCall { call: a, target_before: Some(digest.clone()) },
        EventKind::ToolCall { call: b, target_before: Some(digest) },
    ]);
    let data = tempfile::tempdir().unwrap();
    let (sid, token) = craft_log(data.path(), "anthropic/mock-model", events).await;
    let ws = data.path().join("workspaces").join(&sid);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.ipynb"), &nb).unwrap();
    let applied = nb.replace("print('scratch')", "print('applied before the crash')");
    std::fs::write(ws.join("b.ipynb"), &applied).unwrap();

    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid, WAIT).await;
    let r = call_results(&log);
    let (again, is_error) = result(&r, "e1");
    assert!(!is_error && again.starts_with("Updated code cell scratch"), "{again}");
    let (maybe, _) = result(&r, "e2");
    assert!(maybe.starts_with("The harness restarted while this write ran."), "{maybe}");
    let ws = server.workspace(&sid);
    assert_eq!(validated(&ws.join("a.ipynb"))[2], json!(["scratch", "code", "print('again')", 0]));
    assert_eq!(std::fs::read_to_string(ws.join("b.ipynb")).unwrap(), applied, "not run twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_org_policy_judges_an_edit_by_its_notebook_path() {
    let nb = notebook(5);
    let input = |path: &str| json!({"notebook_path": path, "cell_id": "intro", "new_source": "x"});
    let World { server, mut c, sid, mock: _mock, .. } = World::anthropic(
        vec![
            call("w1", "Write", json!({"file_path": "reports/q.ipynb", "content": nb})),
            call("w2", "Write", json!({"file_path": "drafts/q.ipynb", "content": nb})),
            call("r1", "Read", json!({"file_path": "reports/q.ipynb"})),
            call("r2", "Read", json!({"file_path": "drafts/q.ipynb"})),
            call("e1", "NotebookEdit", input("/workspace/reports/q.ipynb")),
            call("e2", "NotebookEdit", input("drafts/q.ipynb")),
            MockStep::text("done"),
        ],
        &[],
    )
    .await;
    let pattern = "NotebookEdit(/workspace/reports/**)";
    let (code, out, err) =
        server.admin(&["policy", "set", "--org", ORG, pattern, "deny"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let events = c.completed_turn(&sid, "edit both", WAIT).await.unwrap();
    let r = call_results(&events);
    let (denied, is_error) = result(&r, "e1");
    assert!(is_error && denied.contains("the org's tool policy denies NotebookEdit"), "{denied}");
    assert!(denied.contains(pattern), "{denied}");
    let (allowed, is_error) = result(&r, "e2");
    assert!(!is_error, "{allowed}");
    let ws = server.workspace(&sid);
    assert_eq!(std::fs::read_to_string(ws.join("reports/q.ipynb")).unwrap(), nb);
    assert_eq!(validated(&ws.join("drafts/q.ipynb"))[0], json!(["intro", "markdown", "x", 0]));
}
