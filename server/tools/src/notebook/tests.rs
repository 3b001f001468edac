//! `NotebookEdit` and `Read` of notebooks through [`crate::run`], as the agent calls them, on a
//! real workspace in a temp dir.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::{run, ReadLedger, ToolCtx, ToolOutcome};
use outboard_sandbox::{Sandbox, SandboxConfig};
use outboard_vfs::Workspace;

/// A notebook as Jupyter writes it (nbformat 4.5: cell ids; one space per level, keys sorted,
/// a newline at the end): a markdown cell, a code cell with a stream, a result with an image,
/// and an error with coloured traceback, and a key Jupyter does not know.
const NB45: &str = r##"{
 "cells": [
  {
   "cell_type": "markdown",
   "id": "intro",
   "metadata": {},
   "source": [
    "# Sales\n",
    "A look at the numbers."
   ]
  },
  {
   "cell_type": "code",
   "execution_count": 3,
   "id": "load-data",
   "metadata": {
    "tags": [
     "setup"
    ],
    "zeta": 1,
    "alpha": 2
   },
   "outputs": [
    {
     "name": "stdout",
     "output_type": "stream",
     "text": [
      "loaded 3 rows\n"
     ]
    },
    {
     "data": {
      "image/png": "aGVsbG8=",
      "text/plain": [
       "<Figure size 640x480 with 1 Axes>"
      ]
     },
     "metadata": {},
     "output_type": "display_data"
    },
    {
     "data": {
      "text/plain": [
       "   a  b\n",
       "0  1  2"
      ]
     },
     "execution_count": 3,
     "metadata": {},
     "output_type": "execute_result"
    }
   ],
   "source": [
    "import pandas as pd\n",
    "df = pd.read_csv('sales.csv')\n",
    "df"
   ]
  },
  {
   "cell_type": "code",
   "execution_count": 4,
   "id": "boom",
   "metadata": {},
   "outputs": [
    {
     "ename": "ZeroDivisionError",
     "evalue": "division by zero",
     "output_type": "error",
     "traceback": [
      "\u001b[0;31mZeroDivisionError\u001b[0m Traceback (most recent call last)",
      "Cell \u001b[0;32mIn[4], line 1\u001b[0m\n----> 1 1/0"
     ]
    }
   ],
   "source": "1/0"
  }
 ],
 "metadata": {
  "kernelspec": {
   "display_name": "Python 3",
   "language": "python",
   "name": "python3"
  },
  "language_info": {
   "name": "python"
  }
 },
 "nbformat": 4,
 "nbformat_minor": 5,
 "x-custom": {
  "keep": "me"
 }
}
"##;

/// An nbformat 4.4 notebook: no cell ids.
const NB44: &str = r##"{
 "cells": [
  {
   "cell_type": "code",
   "execution_count": null,
   "metadata": {},
   "outputs": [],
   "source": [
    "a = 1"
   ]
  },
  {
   "cell_type": "code",
   "execution_count": null,
   "metadata": {},
   "outputs": [],
   "source": [
    "b = 2"
   ]
  }
 ],
 "metadata": {},
 "nbformat": 4,
 "nbformat_minor": 4
}
"##;

struct Fixture {
    _dir: tempfile::TempDir,
    workspace: Workspace,
    sandbox: Sandbox,
    reads: ReadLedger,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path().join("ws")).unwrap();
        let sandbox = Sandbox::new(SandboxConfig::Bwrap, workspace.root().to_path_buf());
        Fixture { _dir: dir, workspace, sandbox, reads: ReadLedger::new() }
    }

    fn put(&self, rel: &str, content: &[u8]) {
        let path = self.workspace.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace.root().join(rel)).unwrap()
    }

    async fn call(&mut self, name: &str, input: Value) -> ToolOutcome {
        let ctx = ToolCtx {
            workspace: &self.workspace,
            sandbox: &self.sandbox,
            on_output: &mut |_, _| {},
            cancel: CancellationToken::new(),
            default_timeout: Duration::from_secs(20),
            events: None,
            reads: &mut self.reads,
            org: None,
            remote: None,
            read_only: false,
        };
        run(name, &input, ctx).await
    }

    /// Reads `rel` (which must succeed) and returns the answer.
    async fn read(&mut self, rel: &str) -> String {
        let r = self.call("Read", json!({"file_path": rel})).await;
        assert!(!r.is_error, "{}", r.output);
        r.output
    }

    async fn edit(&mut self, input: Value) -> ToolOutcome {
        self.call("NotebookEdit", input).await
    }
}

/// A notebook's text as JSON, to compare cells whatever their keys' order.
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn read_shows_cells_with_ids_types_counts_sources_and_text_outputs() {
    let mut f = Fixture::new();
    f.put("nb/sales.ipynb", NB45.as_bytes());
    let out = f.read("nb/sales.ipynb").await;
    assert!(
        out.starts_with(
            "/workspace/nb/sales.ipynb: Jupyter notebook (nbformat 4.5, python), 3 cells\n"
        ),
        "{out}"
    );
    for part in [
        "<cell id=\"intro\" cell_type=\"markdown\">\n# Sales\nA look at the numbers.\n</cell id=\"intro\">",
        "<cell id=\"load-data\" cell_type=\"code\" execution_count=\"3\">\nimport pandas as pd\n",
        "<output cell_id=\"load-data\" output_type=\"stream\" name=\"stdout\">\nloaded 3 rows\n</output>",
        // Five bytes of "hello" are no picture: named, not shown.
        "[image/png output, 5 bytes]: cannot be shown (not an image",
        "<Figure size 640x480 with 1 Axes>\n</output>",
        "output_type=\"execute_result\" execution_count=\"3\">\n   a  b\n0  1  2\n</output>",
        "<output cell_id=\"boom\" output_type=\"error\">\nZeroDivisionError: division by zero\n\
         ZeroDivisionError Traceback (most recent call last)\nCell In[4], line 1\n----> 1 1/0\n",
    ] {
        assert!(out.contains(part), "missing {part:?} in:\n{out}");
    }
    assert!(!out.contains('\u{1b}'), "colour codes stripped: {out}");
    // Read counts as reading it: the edit is let through.
    let r = f
        .edit(json!({"notebook_path": "nb/sales.ipynb", "cell_id": "boom", "new_source": "1/1"}))
        .await;
    assert!(!r.is_error, "{}", r.output);
}

#[tokio::test]
async fn a_notebook_without_ids_names_its_cells_by_index() {
    let mut f = Fixture::new();
    f.put("old.ipynb", NB44.as_bytes());
    let out = f.read("/workspace/old.ipynb").await;
    assert!(
        out.contains("<cell id=\"cell-0\" cell_type=\"code\" execution_count=\"none\">\na = 1\n"),
        "{out}"
    );
    assert!(out.contains("<cell id=\"cell-1\""), "{out}");
    // `cell-N` and a bare index both name a cell; an insert adds no id (4.4 has none).
    let r = f
        .edit(json!({"notebook_path": "old.ipynb", "cell_id": "cell-1", "new_source": "b = 3"}))
        .await;
    assert_eq!(
        r.output,
        "Updated code cell cell-1 of /workspace/old.ipynb. Its outputs and execution count were \
         cleared. The notebook has 2 cells."
    );
    let r = f
        .edit(json!({"notebook_path": "old.ipynb", "cell_id": 0, "new_source": "# T", "cell_type": "markdown", "edit_mode": "insert"}))
        .await;
    assert!(!r.is_error && r.output.contains("id cell-1 after cell cell-0"), "{}", r.output);
    let nb = parsed(&f.get("old.ipynb"));
    let cells = nb["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    assert_eq!(cells[1], json!({"cell_type": "markdown", "metadata": {}, "source": ["# T"]}));
    assert_eq!(cells[2]["source"], json!(["b = 3"]));
    assert!(cells.iter().all(|c| c.get("id").is_none()), "no ids in 4.4: {nb}");
    let r = f.edit(json!({"notebook_path": "old.ipynb", "cell_id": "2", "new_source": "", "edit_mode": "delete"})).await;
    assert!(r.output.contains("Deleted cell cell-2 from /workspace/old.ipynb. The cells after it are now numbered one lower."), "{}", r.output);
}

#[tokio::test]
async fn replace_changes_one_cells_source_and_keeps_every_other_byte() {
    let mut f = Fixture::new();
    f.put("sales.ipynb", NB45.as_bytes());
    f.read("sales.ipynb").await;
    let r = f
        .edit(json!({"notebook_path": "/workspace/sales.ipynb", "cell_id": "load-data", "new_source": "import polars as pl\ndf = pl.read_csv('sales.csv')\n"}))
        .await;
    assert_eq!(
        r,
        ToolOutcome::ok(
            "Updated code cell load-data of /workspace/sales.ipynb. Its outputs and execution \
             count were cleared. The notebook has 3 cells."
        )
    );
    // The cell's outputs and count cleared, its metadata (key order too) kept; the rest exact.
    let start = NB45.find("   \"execution_count\": 3,\n   \"id\": \"load-data\"").unwrap();
    let end = NB45.find("  {\n   \"cell_type\": \"code\",\n   \"execution_count\": 4").unwrap();
    let cell = "   \"execution_count\": null,\n   \"id\": \"load-data\",\n   \"metadata\": {\n    \
                \"tags\": [\n     \"setup\"\n    ],\n    \"zeta\": 1,\n    \"alpha\": 2\n   },\n   \
                \"outputs\": [],\n   \"source\": [\n    \"import polars as pl\\n\",\n    \
                \"df = pl.read_csv('sales.csv')\\n\"\n   ]\n  },\n";
    let expected = format!("{}{cell}{}", &NB45[..start], &NB45[end..]);
    assert_eq!(f.get("sales.ipynb"), expected);
    // The ledger took the new content: a second edit needs no new Read.
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "cell_id": "boom", "new_source": "2/1"}))
        .await;
    assert!(!r.is_error, "{}", r.output);
    assert!(
        f.get("sales.ipynb").contains("   \"source\": \"2/1\"\n"),
        "a string source stays a string"
    );
}

#[tokio::test]
async fn insert_after_a_cell_or_at_the_start_with_fresh_ids_and_delete() {
    let mut f = Fixture::new();
    f.put("sales.ipynb", NB45.as_bytes());
    f.read("sales.ipynb").await;
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "cell_id": "intro", "new_source": "x = 1\ny = 2", "cell_type": "code", "edit_mode": "insert"}))
        .await;
    assert!(!r.is_error && r.output.contains("after cell intro"), "{}", r.output);
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "new_source": "# Top", "cell_type": "markdown", "edit_mode": "insert"}))
        .await;
    assert!(!r.is_error && r.output.contains("at the start"), "{}", r.output);
    let nb = parsed(&f.get("sales.ipynb"));
    let cells = nb["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 5);
    let ids: Vec<&str> = cells.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(&ids[1..], ["intro", ids[2], "load-data", "boom"]);
    for id in [ids[0], ids[2]] {
        assert!(super::model::valid_id(id) && id.len() == 8, "{id}");
        assert!(r.output.contains(ids[0]), "the answer names the new id: {}", r.output);
    }
    assert_ne!(ids[0], ids[2]);
    let code = &cells[2];
    assert_eq!(
        code,
        &json!({"cell_type": "code", "execution_count": null, "id": ids[2], "metadata": {}, "outputs": [], "source": ["x = 1\n", "y = 2"]})
    );
    assert_eq!(nb["x-custom"], json!({"keep": "me"}));
    let text = f.get("sales.ipynb");
    assert!(
        text.starts_with("{\n \"cells\": [\n  {\n   \"cell_type\": \"markdown\",\n   \"id\": "),
        "{text}"
    );
    assert!(text.ends_with(" \"x-custom\": {\n  \"keep\": \"me\"\n }\n}\n"), "{text}");

    let deleted = ids[2].to_owned();
    let r = f.edit(json!({"notebook_path": "sales.ipynb", "cell_id": deleted, "new_source": "", "edit_mode": "delete"})).await;
    assert!(
        !r.is_error
            && r.output.starts_with(&format!(
                "Deleted cell {deleted} from /workspace/sales.ipynb. The notebook has 4 cells."
            )),
        "{}",
        r.output
    );
    // Delete needs no new_source.
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "cell_id": ids[0], "edit_mode": "delete"}))
        .await;
    assert!(!r.is_error, "{}", r.output);
    assert_eq!(f.get("sales.ipynb"), NB45, "inserted then deleted: the file as it was");
}

#[tokio::test]
async fn a_cell_type_change_converts_the_cell() {
    let mut f = Fixture::new();
    f.put("sales.ipynb", NB45.as_bytes());
    f.read("sales.ipynb").await;
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "cell_id": "boom", "new_source": "Now *text*", "cell_type": "markdown"}))
        .await;
    assert!(
        r.output.starts_with("Updated markdown cell boom of /workspace/sales.ipynb. The"),
        "{}",
        r.output
    );
    let r = f
        .edit(json!({"notebook_path": "sales.ipynb", "cell_id": "intro", "new_source": "print(1)", "cell_type": "code"}))
        .await;
    assert!(!r.is_error, "{}", r.output);
    let nb = parsed(&f.get("sales.ipynb"));
    assert_eq!(
        nb["cells"][2],
        json!({"cell_type": "markdown", "id": "boom", "metadata": {}, "source": "Now *text*"})
    );
    assert_eq!(
        nb["cells"][0],
        json!({"cell_type": "code", "execution_count": null, "id": "intro", "metadata": {}, "outputs": [], "source": ["print(1)"]})
    );
}

/// Each bad call is a clear error naming what is wrong, and the notebook is untouched.
#[tokio::test]
async fn bad_input_is_a_clear_error_and_leaves_the_file_untouched() {
    let mut f = Fixture::new();
    f.put("sales.ipynb", NB45.as_bytes());
    f.put("notes.txt", b"plain");
    f.put("broken.ipynb", b"{\"cells\": [");
    f.put("v3.ipynb", br#"{"nbformat": 3, "nbformat_minor": 0, "worksheets": []}"#);
    f.put("nocells.ipynb", br#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}"#);
    f.put("badcell.ipynb", br#"{"nbformat": 4, "nbformat_minor": 5, "cells": [1]}"#);
    let nb = "sales.ipynb";
    let r = f.edit(json!({"notebook_path": nb, "cell_id": "intro", "new_source": "x"})).await;
    assert!(r.is_error && r.output.starts_with("File has not been read yet"), "{}", r.output);
    for rel in ["sales.ipynb", "broken.ipynb", "v3.ipynb", "nocells.ipynb", "badcell.ipynb"] {
        f.read(rel).await;
    }
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"notebook_path": "notes.txt", "cell_id": "a", "new_source": "x"}),
            "is not a Jupyter notebook (.ipynb file); edit other files with Edit",
        ),
        (
            json!({"notebook_path": nb, "cell_id": "intro", "new_source": "x", "edit_mode": "append"}),
            "edit_mode \"append\" is not one of replace, insert, delete",
        ),
        (
            json!({"notebook_path": nb, "cell_id": "intro", "new_source": "x", "cell_type": "raw"}),
            "cell_type \"raw\" is not one of code, markdown",
        ),
        (
            json!({"notebook_path": nb, "new_source": "x", "edit_mode": "insert"}),
            "cell_type (code or markdown) is required when inserting",
        ),
        (
            json!({"notebook_path": nb, "cell_type": "code", "edit_mode": "insert"}),
            "new_source is required to replace or insert",
        ),
        (json!({"notebook_path": nb, "new_source": "x"}), "cell_id is required to replace a cell"),
        (
            json!({"notebook_path": nb, "edit_mode": "delete"}),
            "cell_id is required to delete a cell",
        ),
        (
            json!({"notebook_path": nb, "cell_id": "nope", "new_source": "x"}),
            "Cell \"nope\" was not found in the notebook; its cells are intro, load-data, boom.",
        ),
        (
            json!({"notebook_path": nb, "cell_id": "cell-3", "new_source": "x"}),
            "Cell \"cell-3\" was not found",
        ),
        (
            json!({"notebook_path": nb, "cell_id": true, "new_source": "x"}),
            "expected a cell id string, got true",
        ),
        (
            json!({"notebook_path": "broken.ipynb", "cell_id": "a", "new_source": "x"}),
            "The notebook /workspace/broken.ipynb is not valid JSON (EOF while parsing",
        ),
        (
            json!({"notebook_path": "v3.ipynb", "cell_id": "a", "new_source": "x"}),
            "is nbformat 3; only nbformat 4 notebooks",
        ),
        (
            json!({"notebook_path": "nocells.ipynb", "cell_id": "a", "new_source": "x"}),
            "has no \"cells\" list",
        ),
        (
            json!({"notebook_path": "badcell.ipynb", "cell_id": "a", "new_source": "x"}),
            "cell 0 is not an object with a \"cell_type\"",
        ),
        (json!({"notebook_path": "../out.ipynb", "cell_id": "a", "new_source": "x"}), "outside"),
        (json!({"notebook_path": "/etc/x.ipynb", "cell_id": "a", "new_source": "x"}), "/workspace"),
        (
            json!({"notebook_path": "missing.ipynb", "cell_id": "a", "new_source": "x"}),
            "Notebook file does not exist: /workspace/missing.ipynb",
        ),
        (
            json!({"notebook_path": "/memory/a.ipynb", "cell_id": "a", "new_source": "x"}),
            "NotebookEdit edits notebooks under /workspace",
        ),
        (json!({"cell_id": "a", "new_source": "x"}), "missing field `notebook_path`"),
    ];
    let before: Vec<(String, Vec<u8>)> =
        ["sales.ipynb", "broken.ipynb", "v3.ipynb", "nocells.ipynb", "badcell.ipynb"]
            .iter()
            .map(|rel| (rel.to_string(), std::fs::read(f.workspace.root().join(rel)).unwrap()))
            .collect();
    for (input, says) in cases {
        let r = f.edit(input.clone()).await;
        assert!(r.is_error, "{input}: {}", r.output);
        assert!(r.output.contains(says), "{input}: {:?} lacks {says:?}", r.output);
    }
    for (rel, bytes) in before {
        assert_eq!(std::fs::read(f.workspace.root().join(&rel)).unwrap(), bytes, "{rel} untouched");
    }
    assert!(!f.workspace.root().parent().unwrap().join("out.ipynb").exists());
    let entries = std::fs::read_dir(f.workspace.root()).unwrap().count();
    assert_eq!(entries, 6, "no temp file left behind");

    // Changed since read (a command wrote it): refused until read again.
    f.put("sales.ipynb", NB44.as_bytes());
    let r = f.edit(json!({"notebook_path": nb, "cell_id": "cell-0", "new_source": "x"})).await;
    assert!(
        r.is_error && r.output.starts_with("File has been modified since read"),
        "{}",
        r.output
    );
    assert_eq!(f.get("sales.ipynb"), NB44);
}

#[tokio::test]
async fn an_oversized_notebook_is_refused_and_an_edit_past_the_limit_is_not_written() {
    let mut f = Fixture::new();
    let limit = super::model::MAX_NOTEBOOK_BYTES as usize;
    let huge = format!(
        "{{\"cells\": [{{\"cell_type\": \"raw\", \"metadata\": {{}}, \"source\": \"{}\"}}], \
         \"metadata\": {{}}, \"nbformat\": 4, \"nbformat_minor\": 4}}",
        "x".repeat(limit)
    );
    f.put("huge.ipynb", huge.as_bytes());
    let r = f.call("Read", json!({"file_path": "huge.ipynb"})).await;
    assert!(r.is_error && r.output.contains("is too large"), "{}", r.output);
    let r = f
        .edit(json!({"notebook_path": "huge.ipynb", "cell_id": "cell-0", "new_source": "x"}))
        .await;
    assert!(r.is_error && r.output.contains("is too large"), "{}", r.output);

    // Just under the limit, then an insert that would take it past.
    let near = huge.replacen(&"x".repeat(200), "", 1);
    f.put("near.ipynb", near.as_bytes());
    f.read("near.ipynb").await;
    let r = f
        .edit(json!({"notebook_path": "near.ipynb", "new_source": "y".repeat(300), "cell_type": "code", "edit_mode": "insert"}))
        .await;
    assert!(r.is_error && r.output.contains("over the 33554432-byte limit"), "{}", r.output);
    assert_eq!(std::fs::read(f.workspace.root().join("near.ipynb")).unwrap(), near.as_bytes());
}

#[tokio::test]
async fn read_is_bounded_and_continues_by_cell() {
    let mut f = Fixture::new();
    let cell = |i: usize| {
        json!({"cell_type": "code", "execution_count": i, "id": format!("c{i}"), "metadata": {},
               "outputs": [{"name": "stdout", "output_type": "stream", "text": format!("{}\n", "y".repeat(49)).repeat(400)}],
               "source": format!("print({i})\n{}", "# pad\n".repeat(2000))})
    };
    let nb = json!({"cells": (0..60).map(cell).collect::<Vec<_>>(), "metadata": {}, "nbformat": 4, "nbformat_minor": 5});
    f.put("big.ipynb", nb.to_string().as_bytes());
    let out = f.read("big.ipynb").await;
    assert!(out.len() <= super::render::MAX_READ_OUTPUT_BYTES, "{}", out.len());
    assert!(out.contains("<cell id=\"c0\""), "{}", &out[..200]);
    assert!(out.contains("bytes of this output not shown"), "a long output is cut");
    let shown = out.matches("</cell id=").count();
    assert!((2..60).contains(&shown), "{shown}");
    let note =
        format!("(Showing cells 1-{shown} of 60. Read with offset {} to continue.)", shown + 1);
    assert!(out.ends_with(&format!("{note}\n")), "{}", &out[out.len() - 200..]);
    let r =
        f.call("Read", json!({"file_path": "big.ipynb", "offset": shown + 1, "limit": 1})).await;
    assert!(r.output.contains(&format!("<cell id=\"c{shown}\"")), "{}", &r.output[..300]);
    assert!(r.output.contains(&format!("(Showing cells {}-{} of 60.", shown + 1, shown + 1)));
}

#[tokio::test]
async fn a_broken_notebook_is_read_as_text_so_it_can_be_fixed() {
    let mut f = Fixture::new();
    f.put("broken.ipynb", b"{\"cells\": [\n");
    let out = f.read("broken.ipynb").await;
    assert_eq!(out, "     1\t{\"cells\": [\n");
}

#[test]
fn plan_mode_refuses_it_as_a_file_change() {
    let refusal = crate::plan::refusal_in_plan_mode("NotebookEdit", &json!({})).unwrap();
    assert!(refusal.output.contains("NotebookEdit changes files"), "{}", refusal.output);
    assert!(!crate::is_read_only("NotebookEdit") && !crate::runs_concurrently("NotebookEdit"));
    assert!(crate::SUBAGENT_TOOLS.contains(&"NotebookEdit"));
}
