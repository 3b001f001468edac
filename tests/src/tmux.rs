//! The real `outboard` TUI in tmux, for the end-to-end suites: windows of a tmux server of the
//! test's own, typed into and read back as text.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::process::Command;
use std::time::Duration;

use crate::harness::{wait_until, TestServer};

/// A tmux server of its own (`-L`), so tests never touch a developer's sessions.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// `None` when tmux is not installed.
    pub fn new(name: &str) -> Option<Tmux> {
        Command::new("tmux").arg("-V").output().ok()?;
        Some(Tmux { socket: format!("outboard-test-{name}-{}", std::process::id()) })
    }

    /// `tmux ARGS` on this server; its stdout.
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `argv` in a new 100×30 window named `name`.
    pub fn spawn(&self, name: &str, env: &[(&str, &str)], argv: &[&str]) {
        let mut args = vec!["new-session", "-d", "-s", name, "-x", "100", "-y", "30"];
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for e in &env {
            args.push("-e");
            args.push(e);
        }
        args.extend_from_slice(argv);
        self.cmd(&args);
    }

    /// What window `name` shows now.
    pub fn screen(&self, name: &str) -> String {
        self.cmd(&["capture-pane", "-p", "-t", name])
    }

    /// Types `keys` (tmux `send-keys` arguments) into window `name`.
    pub fn keys(&self, name: &str, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", name];
        args.extend_from_slice(keys);
        self.cmd(&args);
    }

    /// Waits up to a minute for `text` on window `name`; fails with the screen and `server`'s log.
    pub fn wait_for(&self, name: &str, text: &str, server: &TestServer) {
        let mut last = String::new();
        let found = wait_until(&format!("{text:?} on {name}"), Duration::from_secs(60), || {
            last = self.screen(name);
            last.contains(text)
        });
        assert!(
            found.is_ok(),
            "{text:?} never appeared on {name}; the screen:\n{last}\nthe server's log:\n{}",
            server.log()
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}
