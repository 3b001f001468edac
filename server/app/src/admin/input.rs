//! Values an admin types or pipes: secrets without echo, CA bundles from files.

use anyhow::Context as _;

/// Reads an `--upstream-ca` file, bounded.
pub(crate) fn read_roots(path: &std::path::Path) -> anyhow::Result<String> {
    use outboard_server::secrets::{SecretError, MAX_UPSTREAM_CA_BYTES};
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the --upstream-ca file {}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_UPSTREAM_CA_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("the --upstream-ca file {} is not PEM text", path.display()))?;
    if text.len() > MAX_UPSTREAM_CA_BYTES {
        return Err(SecretError::BadBinding(format!(
            "--upstream-ca: {} is larger than {} KiB; give the roots only",
            path.display(),
            MAX_UPSTREAM_CA_BYTES / 1024
        ))
        .into());
    }
    Ok(text)
}

/// Reads a secret's value from stdin: all of it when piped (one trailing newline dropped later),
/// one line typed without echo on a terminal. Bounded, so a mistaken `< big-file` is refused
/// without reading it whole.
pub(crate) fn read_secret_value(
    host: &str,
    name: &str,
) -> anyhow::Result<outboard_server::secrets::SecretValue> {
    use outboard_server::secrets::{validate_value, SecretValue, MAX_VALUE_BYTES};
    use std::io::{IsTerminal as _, Read as _};
    let stdin = std::io::stdin();
    let mut raw = Vec::new();
    if stdin.is_terminal() {
        // The terminal's line discipline bounds a line (4 KiB on Linux).
        eprint!("value for {host}/{name} (not shown; Enter ends it): ");
        let line = read_line_without_echo(&stdin);
        eprintln!();
        raw = line?.into_bytes();
    } else {
        // A newline and a carriage return beyond the cap, and one byte to notice it is exceeded.
        let limit = MAX_VALUE_BYTES as u64 + 3;
        stdin.lock().take(limit).read_to_end(&mut raw)?;
    }
    let text = match String::from_utf8(raw) {
        Ok(text) => text,
        Err(e) => {
            let mut bytes = e.into_bytes();
            bytes.fill(0);
            std::hint::black_box(&mut bytes);
            anyhow::bail!(outboard_server::secrets::SecretError::BadValue("it is not UTF-8 text"));
        }
    };
    Ok(validate_value(SecretValue::new(text))?)
}

/// One line from the terminal on stdin with echo off, restored on every path.
pub(crate) fn read_line_without_echo(stdin: &std::io::Stdin) -> anyhow::Result<String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    struct Restore<'a>(&'a std::io::Stdin, rustix::termios::Termios);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let _ = tcsetattr(self.0, OptionalActions::Now, &self.1);
        }
    }
    let saved = tcgetattr(stdin)?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    tcsetattr(stdin, OptionalActions::Now, &quiet)?;
    let _restore = Restore(stdin, saved);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdin.lock(), &mut line)?;
    Ok(line)
}
