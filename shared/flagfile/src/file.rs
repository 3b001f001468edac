//! Reading a configuration file: its top-level keys, each with its value and its line.
//!
//! The text is parsed twice, once for the spans of the keys (`toml::de::DeTable`, which keeps
//! them) and once for the values (`toml::Table`): a file is a few dozen lines, and each parser
//! then does what it is made for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::FlagFileError;

/// A configuration file, read and parsed (its keys not yet checked against any command).
#[derive(Debug, Clone, PartialEq)]
pub struct FlagFile {
    path: PathBuf,
    entries: BTreeMap<String, Entry>,
}

/// One top-level key of the file.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    line: usize,
    value: toml::Value,
}

impl FlagFile {
    /// Reads and parses `path`; a missing file is an error (it was named explicitly).
    pub fn read(path: &Path) -> Result<FlagFile, FlagFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| FlagFileError::Read { path: path.display().to_string(), error })?;
        Self::parse(path, &text)
    }

    /// [`FlagFile::read`], with `None` for a file that does not exist (a default location).
    pub fn read_if_present(path: &Path) -> Result<Option<FlagFile>, FlagFileError> {
        match Self::read(path) {
            Err(FlagFileError::Read { error, .. })
                if error.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// Parses `text` as the content of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<FlagFile, FlagFileError> {
        let syntax = |e: toml::de::Error| FlagFileError::Syntax {
            path: path.display().to_string(),
            line: e.span().map_or(1, |span| line_of(text, span.start)),
            message: e.message().trim().to_owned(),
        };
        let spans = toml::de::DeTable::parse(text).map_err(syntax)?;
        let mut values: toml::Table = toml::from_str(text).map_err(syntax)?;
        let mut entries = BTreeMap::new();
        for (key, _) in spans.get_ref().iter() {
            let name: &str = key.get_ref();
            if let Some(value) = values.remove(name) {
                let line = line_of(text, key.span().start);
                entries.insert(name.to_owned(), Entry { line, value });
            }
        }
        Ok(FlagFile { path: path.to_owned(), entries })
    }

    /// The file's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The value of `key`, when the file sets it.
    pub fn value(&self, key: &str) -> Option<&toml::Value> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// The line `key` is set on (from 1), when the file sets it.
    pub fn line(&self, key: &str) -> Option<usize> {
        self.entries.get(key).map(|e| e.line)
    }

    /// `path:line` of `key`, as errors and `config show` name it.
    pub fn place(&self, key: &str) -> String {
        format!("{}:{}", self.path.display(), self.line(key).unwrap_or(1))
    }
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|b| **b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn keys_carry_their_lines() {
        let text = "# comment\nserver = \"ws://h:1\"\n\n[[models]]\nname = \"a\"\n";
        let file = FlagFile::parse(Path::new("c.toml"), text).unwrap();
        assert_eq!(file.keys().collect::<Vec<_>>(), ["models", "server"]);
        assert_eq!((file.line("server"), file.line("models")), (Some(2), Some(4)));
        assert_eq!(file.value("server"), Some(&toml::Value::String("ws://h:1".into())));
        assert_eq!(file.place("models"), "c.toml:4");
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let err = FlagFile::parse(Path::new("c.toml"), "a = 1\nb = \n").unwrap_err();
        assert!(matches!(&err, FlagFileError::Syntax { line: 2, .. }), "{err:?}");
        assert!(err.to_string().starts_with("c.toml:2: not valid TOML: "), "{err}");
    }

    #[test]
    fn only_a_missing_file_may_be_absent() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        assert_eq!(FlagFile::read_if_present(&missing).unwrap(), None);
        let err = FlagFile::read(&missing).unwrap_err();
        assert!(err.to_string().contains("none.toml"), "{err}");
        // A directory exists but cannot be read as a file: not "absent".
        assert!(FlagFile::read_if_present(dir.path()).is_err());
    }
}
