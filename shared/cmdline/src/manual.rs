//! Shell completions and man pages of the `outboard` and `outboard-server` binaries, generated
//! from their clap definitions (`clap_complete`, `clap_mangen`), so they always match the flags.
//! Both binaries have `completions SHELL` (printed to stdout, to be sourced or saved where the
//! shell looks) and `man [DIR]` (the top page to stdout, or every page into DIR: `NAME.1` and
//! one `NAME-SUB-….1` per subcommand, as `man` expects).

use std::io::Write;
use std::path::Path;

pub use clap_complete::Shell;

/// Why a man page could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    /// Writing a page or the completions failed.
    #[error("cannot write {what}: {source}")]
    Io {
        /// What was being written.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Writes the completions of `cmd` for `shell` to `out`.
pub fn completions(mut cmd: clap::Command, shell: Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, &mut cmd, name, out);
}

/// Writes the top man page of `cmd` to `out`.
pub fn man_page(cmd: clap::Command, out: &mut dyn Write) -> Result<(), ManualError> {
    clap_mangen::Man::new(cmd)
        .render(out)
        .map_err(|source| ManualError::Io { what: "the man page".into(), source })
}

/// `man [DIR]` of a binary: its top page to `out`, or every page into `dir` with the paths
/// written listed on `out`.
pub fn man(cmd: clap::Command, dir: Option<&Path>, out: &mut dyn Write) -> Result<(), ManualError> {
    let Some(dir) = dir else { return man_page(cmd, out) };
    for file in man_pages(cmd, dir)? {
        writeln!(out, "{}", dir.join(file).display())
            .map_err(|source| ManualError::Io { what: "the list of pages".into(), source })?;
    }
    Ok(())
}

/// Writes every page of `cmd` into `dir` (created if missing); returns the files written.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<String>, ManualError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| ManualError::Io { what: dir.display().to_string(), source })?;
    let mut written = Vec::new();
    let mut cmd = cmd;
    cmd.build();
    write_pages(&cmd, cmd.get_name(), dir, &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut Vec<String>,
) -> Result<(), ManualError> {
    let file = format!("{name}.1");
    let path = dir.join(&file);
    let mut out = Vec::new();
    let page = cmd.clone().name(name.to_owned());
    clap_mangen::Man::new(page)
        .render(&mut out)
        .and_then(|()| std::fs::write(&path, &out))
        .map_err(|source| ManualError::Io { what: path.display().to_string(), source })?;
    written.push(file);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn demo() -> clap::Command {
        clap::Command::new("demo")
            .about("A demo")
            .arg(clap::Arg::new("verbose").long("verbose").action(clap::ArgAction::SetTrue))
            .subcommand(
                clap::Command::new("run")
                    .about("Runs it")
                    .subcommand(clap::Command::new("fast").about("Quickly")),
            )
    }

    #[test]
    fn completions_name_the_flags_and_subcommands() {
        let mut out = Vec::new();
        completions(demo(), Shell::Bash, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("--verbose") && text.contains("run"), "{text}");
    }

    #[test]
    fn man_pages_cover_every_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let files = man_pages(demo(), dir.path()).unwrap();
        assert_eq!(files, ["demo.1", "demo-run.1", "demo-run-fast.1"]);
        let run = std::fs::read_to_string(dir.path().join("demo-run.1")).unwrap();
        assert!(run.contains(".TH demo-run") && run.contains("Runs it"), "{run}");
    }
}
