//! A notebook as `Read` and `NotebookEdit` see it: nbformat 4 JSON checked as far as they rely
//! on it (a top-level object, `nbformat` 4, a `cells` list of objects with a `cell_type`),
//! everything else kept as the file has it.
//!
//! Cell ids: nbformat 4.5 and later give each cell an `id` (1 to 64 of `a-z A-Z 0-9 - _`,
//! unique in the notebook); an older notebook has none, and its cells are named `cell-N` (N the
//! 0-based index) as Claude Code names them. A `cell_id` is looked up as an id first, then as
//! `cell-N` or a bare `N`, so an index works in every notebook.

use super::json::{self, Indent, Json, Object};

/// Notebooks `Read` and `NotebookEdit` load at most (bytes); a larger one is refused with a
/// clear error. Notebooks with many image outputs reach a few MiB; 32 MiB is `Read`'s limit for
/// any file.
pub const MAX_NOTEBOOK_BYTES: u64 = 32 * 1024 * 1024;

/// The longest cell id nbformat allows.
pub const MAX_CELL_ID_CHARS: usize = 64;

/// A parsed nbformat 4 notebook.
#[derive(Debug, Clone)]
pub struct Notebook {
    /// The top-level object, in the file's order.
    root: Object,
    /// `nbformat` (4).
    pub major: u64,
    /// `nbformat_minor` (0 when absent).
    pub minor: u64,
    /// How the file is laid out.
    indent: Indent,
}

impl Notebook {
    /// Parses and checks `bytes`; the error completes "The notebook …" for the model.
    pub fn parse(bytes: &[u8]) -> Result<Notebook, String> {
        let value = json::parse(bytes).map_err(|e| format!("is not valid JSON ({e})"))?;
        let Json::Object(root) = value else {
            return Err("is not a Jupyter notebook: its JSON is not an object".into());
        };
        let major = match root.get("nbformat") {
            Some(v) => v.as_u64().ok_or("has an \"nbformat\" that is not a number")?,
            None => return Err("is not a Jupyter notebook: it has no \"nbformat\" field".into()),
        };
        if major != 4 {
            return Err(format!(
                "is nbformat {major}; only nbformat 4 notebooks can be read as cells and edited \
                 (convert it with `jupyter nbconvert --to notebook --nbformat 4`)"
            ));
        }
        let minor = root.get("nbformat_minor").and_then(Json::as_u64).unwrap_or(0);
        let Some(cells) = root.get("cells").and_then(Json::as_array) else {
            return Err("is not a valid nbformat 4 notebook: it has no \"cells\" list".into());
        };
        for (i, cell) in cells.iter().enumerate() {
            if cell.get("cell_type").and_then(Json::as_str).is_none() {
                return Err(format!(
                    "is not a valid nbformat 4 notebook: cell {i} is not an object with a \
                     \"cell_type\""
                ));
            }
        }
        let indent = Indent::of(&String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]));
        let indent = Indent { final_newline: bytes.ends_with(b"\n"), ..indent };
        Ok(Notebook { root, major, minor, indent })
    }

    /// The notebook as its file holds it, laid out as it was.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Writing a tree of strings, numbers and objects to memory cannot fail.
        json::write(&Json::Object(self.root.clone()), &self.indent).unwrap_or_default()
    }

    /// Whether its cells carry ids (nbformat 4.5 and later).
    pub fn has_ids(&self) -> bool {
        self.major > 4 || self.minor >= 5
    }

    pub fn cells(&self) -> &[Json] {
        self.root.get("cells").and_then(Json::as_array).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn cells_mut(&mut self) -> &mut Vec<Json> {
        if !matches!(self.root.get("cells"), Some(Json::Array(_))) {
            self.root.set("cells", Json::Array(Vec::new()));
        }
        match self.root.get_mut("cells") {
            Some(Json::Array(cells)) => cells,
            _ => unreachable!("set to a list above"),
        }
    }

    /// The name of cell `index`: its `id`, or `cell-N` when it has none.
    pub fn cell_id(&self, index: usize) -> String {
        self.cells()
            .get(index)
            .and_then(|c| c.get("id"))
            .and_then(Json::as_str)
            .filter(|id| !id.is_empty())
            .map_or_else(|| format!("cell-{index}"), str::to_owned)
    }

    /// The index of the cell `cell_id` names: its id, else `cell-N` or `N`.
    pub fn find(&self, cell_id: &str) -> Option<usize> {
        let wanted = cell_id.trim();
        let cells = self.cells();
        if let Some(i) =
            cells.iter().position(|c| c.get("id").and_then(Json::as_str) == Some(wanted))
        {
            return Some(i);
        }
        let number = wanted.strip_prefix("cell-").unwrap_or(wanted);
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        number.parse::<usize>().ok().filter(|i| *i < cells.len())
    }

    /// The cells' names, for an error that lists them (at most `max`, then how many more).
    pub fn names(&self, max: usize) -> String {
        let n = self.cells().len();
        if n == 0 {
            return "the notebook has no cells".into();
        }
        let shown: Vec<String> = (0..n.min(max)).map(|i| self.cell_id(i)).collect();
        let more = if n > max { format!(" and {} more", n - max) } else { String::new() };
        format!("its cells are {}{more}", shown.join(", "))
    }

    /// The kernel's language (`metadata.language_info.name`, else `metadata.kernelspec.language`).
    pub fn language(&self) -> Option<String> {
        let meta = self.root.get("metadata")?;
        let named = meta.get("language_info").and_then(|l| l.get("name"));
        let named = named.or_else(|| meta.get("kernelspec").and_then(|k| k.get("language")));
        named.and_then(Json::as_str).map(str::to_owned)
    }

    /// A new cell id, unique in the notebook: 8 random hex digits, as Jupyter makes them.
    pub fn new_id(&self) -> String {
        for _ in 0..64 {
            let id = outboard_base::util::random_hex(4);
            if self.find_exact(&id).is_none() {
                return id;
            }
        }
        // Only if the system's randomness repeats itself: a longer id, still checked.
        let mut n = self.cells().len();
        while self.find_exact(&format!("cell-{n}")).is_some() {
            n += 1;
        }
        format!("cell-{n}")
    }

    fn find_exact(&self, id: &str) -> Option<usize> {
        self.cells().iter().position(|c| c.get("id").and_then(Json::as_str) == Some(id))
    }
}

/// Whether `id` is a valid nbformat cell id.
pub fn valid_id(id: &str) -> bool {
    (1..=MAX_CELL_ID_CHARS).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `source` as nbformat's list of lines: each line with its `\n`, the last without one unless
/// the text ends there (what Jupyter writes).
pub fn source_lines(source: &str) -> Json {
    let lines = source.split_inclusive('\n').map(|l| Json::String(l.to_owned())).collect();
    Json::Array(lines)
}
