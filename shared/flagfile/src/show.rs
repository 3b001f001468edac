//! The value of each key in effect and where it came from, for `config show`: the environment,
//! the file (with its line), the flag's default, or nothing. Secrets are shown as set or unset.
//!
//! It ranks the sources as clap does once [`crate::flags::Values::apply`] made the file's values
//! defaults: a variable that is present wins, even empty, since clap takes it as given.

use std::fmt;

use crate::file::FlagFile;
use crate::flags::{is_secret, Flags};

/// Where a key's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An environment variable (its name).
    Env(String),
    /// The configuration file, at `path:line`.
    File(String),
    /// The flag's built-in default.
    Default,
    /// Nowhere: the flag is unset.
    Unset,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env(var) => write!(f, "env {var}"),
            Source::File(place) => write!(f, "file {place}"),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("-"),
        }
    }
}

/// One key's effective value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key (the flag's long name with `_`).
    pub key: String,
    /// The value as text; a secret's is `set` or `unset`, a missing one `unset`.
    pub value: String,
    /// Where it comes from.
    pub source: Source,
}

/// Every key of `flags`, with its value in effect given the environment and `file`.
pub fn settings(flags: &Flags, file: Option<&FlagFile>) -> Vec<Setting> {
    flags
        .keys()
        .filter_map(|key| Some((key, flags.flag(key)?)))
        .map(|(key, arg)| {
            let env = arg.get_env().and_then(|var| {
                let value = std::env::var_os(var)?;
                Some((var.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            });
            let in_file = file.and_then(|f| Some((f.place(key), f.value(key)?)));
            let defaults = defaults(arg);
            let (value, source) = match (env, in_file) {
                (Some((var, value)), _) => (Some(value), Source::Env(var)),
                (None, Some((place, value))) => {
                    let shown = if flags.is_tables(key, value) {
                        tables(key, value)
                    } else {
                        display(value)
                    };
                    (Some(shown), Source::File(place))
                }
                (None, None) if !defaults.is_empty() => {
                    (Some(defaults.join(", ")), Source::Default)
                }
                (None, None) => (None, Source::Unset),
            };
            let value = match value {
                Some(_) if is_secret(arg) => "set".to_owned(),
                Some(value) => value,
                None => "unset".to_owned(),
            };
            Setting { key: key.to_owned(), value, source }
        })
        .collect()
}

/// `arg`'s built-in default(s); a switch's is implicit until clap builds the command.
fn defaults(arg: &clap::Arg) -> Vec<String> {
    let given: Vec<String> =
        arg.get_default_values().iter().map(|d| d.to_string_lossy().into_owned()).collect();
    match arg.get_action() {
        clap::ArgAction::SetTrue if given.is_empty() => vec!["false".into()],
        clap::ArgAction::SetFalse if given.is_empty() => vec!["true".into()],
        _ => given,
    }
}

/// `settings` as aligned columns: key, value, source.
pub fn render(settings: &[Setting]) -> String {
    let key_width = settings.iter().map(|s| s.key.len()).max().unwrap_or(0);
    let value_width = settings.iter().map(|s| s.value.chars().count()).max().unwrap_or(0);
    settings
        .iter()
        .map(|s| {
            let line = format!("{:key_width$}  {:value_width$}  {}", s.key, s.value, s.source);
            format!("{}\n", line.trim_end())
        })
        .collect()
}

fn display(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => items.iter().map(display).collect::<Vec<_>>().join(", "),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Table(t) => format!("{{{} keys}}", t.len()),
    }
}

fn tables(key: &str, value: &toml::Value) -> String {
    let n = value.as_array().map_or(0, Vec::len);
    format!("{n} [[{key}]] table{}", if n == 1 { "" } else { "s" })
}
