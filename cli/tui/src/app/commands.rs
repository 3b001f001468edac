//! The slash commands (`/rewind`, `/tasks`, `/model`, …) as the state machine runs them.

use super::*;

impl App {
    pub(super) fn command(&mut self, line: &str) -> Vec<Effect> {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let arg = words.next().map(str::to_owned);
        if name == "/tasks" {
            return self.tasks_command(arg.as_deref(), words.next());
        }
        match (name, arg) {
            ("/help", _) => {
                let text =
                    COMMANDS.iter().map(|(c, h)| format!("{c} {h}")).collect::<Vec<_>>().join("\n");
                self.push_notice(format!("{text}\nPgUp/PgDn or the wheel scroll; Esc interrupts; Alt-Enter or Ctrl-J for a newline; Ctrl-O shows subagents' work and the model's thinking whole or folds them"), false);
                Vec::new()
            }
            ("/new", _) => vec![Effect::NewSession],
            ("/sessions", _) => vec![Effect::ListSessions],
            ("/attach", Some(id)) => vec![Effect::Attach(SessionId(id))],
            ("/drive", _) => {
                if self.driving() {
                    self.notice = Some("you are driving already".into());
                    Vec::new()
                } else if self.owner() {
                    vec![Effect::DriveTake]
                } else {
                    self.notice = Some("asked the driver for the wheel".into());
                    vec![Effect::DriveRequest]
                }
            }
            ("/handover", Some(user)) => vec![Effect::DriveGrant(user)],
            ("/memory", path) => vec![Effect::Memory(path)],
            ("/skills", _) => vec![Effect::Skills],
            ("/agents", _) => vec![Effect::Agents],
            ("/diff", arg) => match &self.session {
                Some(s) => {
                    let stat = arg.as_deref() == Some("--stat");
                    self.notice = Some(format!("fetching the diff of {}…", s.id));
                    vec![Effect::Diff(stat)]
                }
                None => {
                    self.notice = Some("attach to a session first".into());
                    Vec::new()
                }
            },
            ("/compact", _) => {
                // The focus is the rest of the line, every word of it.
                let focus = line.trim_start().trim_start_matches("/compact").trim();
                if self.running {
                    self.notice = Some("a turn is running: compact when it ends".into());
                    return Vec::new();
                }
                self.notice = Some("compacting the conversation…".into());
                vec![Effect::Compact((!focus.is_empty()).then(|| focus.to_owned()))]
            }
            ("/model", None) => {
                vec![Effect::Models(self.session.as_ref().and_then(|s| s.model_name.clone()))]
            }
            ("/model", Some(name)) => {
                if self.session.is_none() {
                    self.notice = Some("attach to a session first".into());
                    Vec::new()
                } else if !self.driving() {
                    self.notice =
                        Some("only the driver picks the model: /drive asks for the wheel".into());
                    Vec::new()
                } else {
                    vec![Effect::SetModel(name)]
                }
            }
            ("/plan", _) => self.toggle_mode(),
            ("/plans", _) => vec![Effect::Plans],
            ("/rewind", arg) => self.rewind_command(arg.as_deref(), words.next()),
            ("/fork", arg) => match arg.as_deref().map(str::parse::<u32>) {
                None => vec![Effect::Fork(None)],
                Some(Ok(n)) => vec![Effect::Fork(Some(n))],
                Some(Err(_)) => {
                    self.notice = Some("/fork, or /fork N (a checkpoint's number)".into());
                    Vec::new()
                }
            },
            ("/interrupt", _) => vec![Effect::Interrupt],
            ("/quit", _) => vec![Effect::Quit],
            ("/attach" | "/handover", None) => {
                self.notice = Some(format!("{name} needs an argument (see /help)"));
                Vec::new()
            }
            _ => {
                self.notice = Some(format!("unknown command {name}; /help lists them"));
                Vec::new()
            }
        }
    }

    /// `/rewind` opens the rewind picker on the checkpoints (a watcher gets their list);
    /// `/rewind N [code|conversation]` (the driver, between turns) goes back to one (both).
    pub(super) fn rewind_command(&mut self, n: Option<&str>, what: Option<&str>) -> Vec<Effect> {
        let Some(n) = n else { return vec![Effect::Checkpoints] };
        let (code, conversation) = match what {
            None => (true, true),
            Some("code") => (true, false),
            Some("conversation") => (false, true),
            Some(_) => {
                self.notice = Some("/rewind N, /rewind N code or /rewind N conversation".into());
                return Vec::new();
            }
        };
        match n.parse::<u32>() {
            Ok(n) => self.rewind_to(n, code, conversation),
            Err(_) => {
                self.notice =
                    Some("/rewind N: N is a checkpoint's number (/rewind lists them)".into());
                Vec::new()
            }
        }
    }

    /// Rewinds to checkpoint `n` (the driver, between turns), or says why not.
    pub(super) fn rewind_to(&mut self, n: u32, code: bool, conversation: bool) -> Vec<Effect> {
        let refusal = if !self.driving() {
            Some("only the driver rewinds: /drive asks for the wheel")
        } else if self.running {
            Some("a turn is running: rewind when it ends (Esc interrupts)")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.notice = Some(refusal.into());
            return Vec::new();
        }
        self.notice = Some(format!("rewinding to checkpoint {n}…"));
        vec![Effect::Rewind { n, code, conversation }]
    }

    /// The answer to `/rewind`: the picker for the driver between turns; otherwise (a watcher,
    /// a turn running, nothing to rewind to) the list, which says how to go back.
    pub(super) fn checkpoints_listed(
        &mut self,
        listed: Result<Vec<outboard_shared::CheckpointInfo>, String>,
    ) {
        match listed {
            Ok(checkpoints) if !checkpoints.is_empty() && self.driving() && !self.running => {
                self.rewind_picker = Some(crate::rewind::RewindPicker::new(checkpoints));
            }
            Ok(checkpoints) => self.push_notice(checkpoints_listing(&checkpoints), false),
            Err(e) => self.notice = Some(format!("no checkpoints: {e}")),
        }
    }

    /// `/tasks` lists the background commands; `/tasks kill ID` (the driver) stops one.
    pub(super) fn tasks_command(&mut self, sub: Option<&str>, id: Option<&str>) -> Vec<Effect> {
        match (sub, id) {
            (None, _) => {
                let listing = self.work.listing();
                self.push_notice(listing, false);
                Vec::new()
            }
            (Some("kill"), Some(id)) if !self.driving() => {
                self.notice =
                    Some(format!("only the driver kills {id}: /drive asks for the wheel"));
                Vec::new()
            }
            (Some("kill"), Some(id)) if !self.work.is_running(id) => {
                self.notice = Some(format!("{id} is not running (see /tasks)"));
                Vec::new()
            }
            (Some("kill"), Some(id)) => vec![Effect::KillTask(id.to_owned())],
            _ => {
                self.notice = Some("/tasks, or /tasks kill ID".into());
                Vec::new()
            }
        }
    }
}

/// `/rewind`'s listing, when no picker opens: one line a checkpoint, and how to go back to one.
pub(super) fn checkpoints_listing(checkpoints: &[outboard_shared::CheckpointInfo]) -> String {
    if checkpoints.is_empty() {
        return "no checkpoints yet: each prompt makes one".into();
    }
    let mut lines = vec!["checkpoints (the state just before each prompt):".to_owned()];
    lines.extend(checkpoints.iter().map(outboard_client::describe::checkpoint_line));
    lines.push(
        "/rewind N: files and conversation · /rewind N code · /rewind N conversation · /fork N"
            .into(),
    );
    lines.join("\n")
}
