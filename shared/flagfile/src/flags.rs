//! The keys a command takes from a file, and checking and applying a file against them.
//!
//! A key is a flag's long name with `_` for `-` (`--base-url` is `base_url`); which flags count is
//! the caller's rule (`outboard`: those with an environment variable, its lasting settings;
//! `serve`: all). A value is checked against every flag of its key with that flag's own value
//! parser, so a file is held to what the command line is, and is refused before anything starts.

use std::collections::BTreeMap;

use clap::builder::ValueParser;
use clap::{Arg, ArgAction, Command};

use crate::error::FlagFileError;
use crate::file::FlagFile;

/// Which flags of a command a file may set.
pub type Rule = fn(&Arg) -> bool;

/// The flags of a command and its subcommands that a file may set, by key.
#[derive(Debug, Clone)]
pub struct Flags {
    by_key: BTreeMap<String, Vec<Arg>>,
    rule: Rule,
    tables: Vec<String>,
}

/// A file's values, checked: the text of each key's flag value(s), ready to become defaults.
#[derive(Debug, Clone)]
pub struct Values {
    texts: BTreeMap<String, Vec<String>>,
    rule: Rule,
}

/// The file key of `arg`: its long name with `_` for `-`; none for positional arguments and
/// clap's own `--help` and `--version`.
pub fn key_of(arg: &Arg) -> Option<String> {
    let builtin = matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    );
    if arg.is_positional() || builtin {
        return None;
    }
    arg.get_long().map(|long| long.replace('-', "_"))
}

/// Whether `arg` is a secret: its environment variable's value is hidden from `--help` (a
/// token), so its value is never shown either, in `--help`, errors or `config show`.
pub fn is_secret(arg: &Arg) -> bool {
    arg.is_hide_env_values_set()
}

impl Flags {
    /// The flags of `cmd` and its subcommands that `rule` keeps.
    pub fn of(cmd: &Command, rule: Rule) -> Flags {
        let mut by_key = BTreeMap::new();
        collect(cmd, rule, &mut by_key);
        Flags { by_key, rule, tables: Vec::new() }
    }

    /// Lets `key` hold an array of tables instead of its flag's value (`[[models]]`, the model
    /// catalog inline where `--models FILE` names a file); the caller reads it with
    /// [`FlagFile::value`].
    pub fn with_tables(mut self, key: &str) -> Flags {
        self.tables.push(key.to_owned());
        self
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }

    /// The first flag of `key` (the subcommands' flags of one key are the same flattened
    /// definition).
    pub fn flag(&self, key: &str) -> Option<&Arg> {
        self.by_key.get(key).and_then(|args| args.first())
    }

    /// Whether `file`'s `key` is an array of tables this command reads itself.
    pub fn is_tables(&self, key: &str, value: &toml::Value) -> bool {
        self.tables.iter().any(|k| k == key) && is_array_of_tables(value)
    }

    /// Checks every key of `file`: it must be a flag's, of the flag's type, with a value its
    /// parser takes. Returns the values to [`Values::apply`].
    pub fn check(&self, file: &FlagFile) -> Result<Values, FlagFileError> {
        let mut texts = BTreeMap::new();
        for key in file.keys() {
            let (Some(args), Some(value)) = (self.by_key.get(key), file.value(key)) else {
                return Err(self.unknown(file, key));
            };
            if self.is_tables(key, value) {
                continue;
            }
            let mut checked = Vec::new();
            for arg in args {
                checked = texts_of(value, arg).map_err(|p| p.error(file, key, is_secret(arg)))?;
                for text in &checked {
                    parse_with(arg, text).map_err(|reason| {
                        Problem::Invalid(reason).error(file, key, is_secret(arg))
                    })?;
                }
            }
            texts.insert(key.to_owned(), checked);
        }
        Ok(Values { texts, rule: self.rule })
    }

    fn unknown(&self, file: &FlagFile, key: &str) -> FlagFileError {
        let underscored = key.replace('-', "_");
        let hint = if self.by_key.contains_key(&underscored) {
            format!("write `{underscored}` (a flag's long name, with _ for -)")
        } else {
            let keys: Vec<&str> = self.keys().collect();
            format!(
                "no flag is called --{}; the keys are: {}",
                key.replace('_', "-"),
                keys.join(", ")
            )
        };
        FlagFileError::UnknownKey {
            path: file.path().display().to_string(),
            line: file.line(key).unwrap_or(1),
            key: key.to_owned(),
            hint,
        }
    }
}

impl Values {
    /// `cmd` with the file's values as the defaults of their flags (every subcommand's): below
    /// the command line and the environment, which clap ranks above a default. A secret's
    /// default is hidden from `--help`.
    pub fn apply(&self, cmd: Command) -> Command {
        cmd.mut_args(|arg| self.default_of(arg)).mut_subcommands(|sub| self.apply(sub))
    }

    /// The checked texts of `key` (several for a repeatable flag).
    pub fn texts(&self, key: &str) -> Option<&[String]> {
        self.texts.get(key).map(Vec::as_slice)
    }

    fn default_of(&self, arg: Arg) -> Arg {
        let texts = key_of(&arg).filter(|_| (self.rule)(&arg)).and_then(|k| self.texts.get(&k));
        let Some(texts) = texts else { return arg };
        let secret = is_secret(&arg);
        let arg = arg.default_values(texts.clone());
        if secret {
            arg.hide_default_value(true)
        } else {
            arg
        }
    }
}

fn collect(cmd: &Command, rule: Rule, into: &mut BTreeMap<String, Vec<Arg>>) {
    for arg in cmd.get_arguments().filter(|a| rule(a)) {
        if let Some(key) = key_of(arg) {
            into.entry(key).or_default().push(arg.clone());
        }
    }
    for sub in cmd.get_subcommands() {
        collect(sub, rule, into);
    }
}

/// What is wrong with one value.
enum Problem {
    Type { expected: &'static str, found: &'static str },
    Invalid(String),
}

impl Problem {
    fn error(self, file: &FlagFile, key: &str, secret: bool) -> FlagFileError {
        let path = file.path().display().to_string();
        let line = file.line(key).unwrap_or(1);
        let key = key.to_owned();
        match self {
            Problem::Type { expected, found } => {
                FlagFileError::WrongType { path, line, key, expected, found }
            }
            // A parser's message may quote the value: never a secret's.
            Problem::Invalid(_) if secret => {
                FlagFileError::InvalidValue { path, line, key, reason: "invalid value".into() }
            }
            Problem::Invalid(reason) => FlagFileError::InvalidValue { path, line, key, reason },
        }
    }
}

/// The flag value(s) `value` stands for: a switch takes `true`/`false`, a repeatable flag an
/// array (or one value), any other flag one string, or one number unless it takes text.
fn texts_of(value: &toml::Value, arg: &Arg) -> Result<Vec<String>, Problem> {
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        return match value {
            toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
            other => Err(Problem::Type { expected: "true or false", found: type_name(other) }),
        };
    }
    let items: Vec<&toml::Value> = match value {
        toml::Value::Array(items) if matches!(arg.get_action(), ArgAction::Append) => {
            items.iter().collect()
        }
        toml::Value::Array(_) => {
            return Err(Problem::Type { expected: "a single value", found: "an array" })
        }
        one => vec![one],
    };
    items.into_iter().map(|item| scalar(item, takes_text(arg))).collect()
}

fn scalar(value: &toml::Value, textual: bool) -> Result<String, Problem> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) if !textual => Ok(i.to_string()),
        toml::Value::Float(f) if !textual => Ok(f.to_string()),
        other => Err(Problem::Type {
            expected: if textual { "a string" } else { "a string or a number" },
            found: type_name(other),
        }),
    }
}

/// Whether `arg` takes text (a URL, a path, a name), where a number is a mistake.
fn takes_text(arg: &Arg) -> bool {
    let id = arg.get_value_parser().type_id();
    [ValueParser::string(), ValueParser::path_buf(), ValueParser::os_string()]
        .iter()
        .any(|p| p.type_id() == id)
}

/// Runs `text` through `arg`'s value parser, as if given on the command line.
fn parse_with(arg: &Arg, text: &str) -> Result<(), String> {
    let probe = Arg::new("value")
        .long("value")
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    let argv = ["file".to_owned(), format!("--value={text}")];
    match Command::new("file").arg(probe).try_get_matches_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => Err(reason(&e)),
    }
}

/// The part of a clap error that is about the value (not its usage text).
fn reason(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let Some(source) = std::error::Error::source(e) {
        return source.to_string();
    }
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) => v.join(", "),
        _ => String::new(),
    };
    let valid = context(ContextKind::ValidValue);
    if valid.is_empty() {
        e.kind().to_string()
    } else {
        format!("{:?} is not one of: {valid}", context(ContextKind::InvalidValue))
    }
}

fn is_array_of_tables(value: &toml::Value) -> bool {
    matches!(value, toml::Value::Array(items) if items.iter().all(toml::Value::is_table))
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}
