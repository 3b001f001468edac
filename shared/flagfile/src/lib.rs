//! Configuration files whose keys are a clap command's flags: `outboard`'s
//! `~/.config/outboard/config.toml` and `outboard-server serve --config FILE`.
//!
//! The command's own definition drives everything, so no list of keys is kept by hand: a key is a
//! flag's long name with `_` for `-` ([`Flags`]), a flag added later is a key at once, and a key
//! that is no flag is an error naming the file, the line and the key ([`FlagFile::check`]). A
//! file's values become the flags' defaults ([`FlagFile::apply`]), which is where clap already
//! ranks them: the command line, then the environment, then the file, then the built-in default.
//! [`settings`] says, for each key, the value in effect and where it came from.
//!
//! Module map: [`error`] (what is wrong with a file), [`file`] (reading it, with lines),
//! [`flags`] (the keys of a command, checking and applying a file), [`show`] (the effective
//! values and their sources).

pub mod error;
pub mod file;
pub mod flags;
pub mod show;

pub use error::FlagFileError;
pub use file::FlagFile;
pub use flags::Flags;
pub use show::{settings, Setting, Source};
pub use toml::Value;

#[cfg(test)]
mod tests;
