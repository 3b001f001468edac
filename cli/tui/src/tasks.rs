//! The session's work beside the transcript: the model's todo list (drawn as a panel above the
//! composer for driver and watchers alike) and its background commands (listed by `/tasks`,
//! killed by `/tasks kill ID`).
//!
//! Both are rebuilt from the session's events alone (the last `todos` event is the list; each
//! `background_task` event the latest state of one command), so a watcher, a reconnect and a
//! restart of the server all show the same thing.

use outboard_shared::{EventKind, TaskStatus, TodoItem, TodoStatus};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::theme::Theme;

/// Rows of the todo panel at most (its heading included); a longer list shows the items around
/// the one in progress, so the panel never pushes the transcript off a small terminal.
pub const TODO_PANEL_ROWS: usize = 8;

/// Background commands remembered for `/tasks`: the oldest ended ones go first beyond it (the
/// server keeps at most 8 running per session).
pub const MAX_TASKS: usize = 64;

/// One background command as the events describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Its shell id.
    pub shell_id: String,
    /// Its command.
    pub command: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// Its exit code, once completed.
    pub exit_code: Option<i32>,
}

/// The todo list and the background commands of the attached session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Work {
    /// The model's latest todo list.
    pub todos: Vec<TodoItem>,
    /// Background commands, in start order.
    pub tasks: Vec<Task>,
}

impl Work {
    /// Takes in an event; `true` when it was one of ours.
    pub fn apply(&mut self, kind: &EventKind) -> bool {
        match kind {
            EventKind::Todos { todos } => {
                self.todos = todos.clone();
                true
            }
            EventKind::BackgroundTask { shell_id, command, status, exit_code } => {
                match self.tasks.iter_mut().find(|t| t.shell_id == *shell_id) {
                    Some(task) => {
                        task.status = *status;
                        task.exit_code = *exit_code;
                    }
                    None => self.tasks.push(Task {
                        shell_id: shell_id.clone(),
                        command: command.clone(),
                        status: *status,
                        exit_code: *exit_code,
                    }),
                }
                while self.tasks.len() > MAX_TASKS {
                    match self.tasks.iter().position(|t| t.status != TaskStatus::Running) {
                        Some(i) => self.tasks.remove(i),
                        None => self.tasks.remove(0),
                    };
                }
                true
            }
            _ => false,
        }
    }

    /// How many background commands run now.
    pub fn running(&self) -> usize {
        self.tasks.iter().filter(|t| t.status == TaskStatus::Running).count()
    }

    /// The todo panel's lines (empty when there is no list): a heading with the progress, then
    /// the items, at most [`TODO_PANEL_ROWS`] lines in all.
    pub fn todo_panel(&self, theme: &Theme) -> Vec<Line<'static>> {
        if self.todos.is_empty() {
            return Vec::new();
        }
        let done = self.todos.iter().filter(|t| t.status == TodoStatus::Completed).count();
        let mut lines = vec![Line::from(vec![
            Span::styled("Todos ", theme.dim().add_modifier(Modifier::BOLD)),
            Span::styled(format!("{done}/{}", self.todos.len()), theme.dim()),
        ])];
        let room = TODO_PANEL_ROWS - 1;
        let current =
            self.todos.iter().position(|t| t.status != TodoStatus::Completed).unwrap_or(0);
        let start = current.saturating_sub(1).min(self.todos.len().saturating_sub(room));
        for t in self.todos.iter().skip(start).take(room) {
            let (mark, text, style) = match t.status {
                TodoStatus::Completed => {
                    ("☒ ", &t.content, theme.dim().add_modifier(Modifier::CROSSED_OUT))
                }
                TodoStatus::InProgress => {
                    ("◐ ", &t.active_form, Style::default().add_modifier(Modifier::BOLD))
                }
                TodoStatus::Pending => ("☐ ", &t.content, Style::default()),
            };
            lines.push(Line::from(vec![
                Span::styled(format!("  {mark}"), style),
                Span::styled(text.clone(), style),
            ]));
        }
        lines
    }

    /// What `/tasks` shows: one line per background command, or that there are none.
    pub fn listing(&self) -> String {
        if self.tasks.is_empty() {
            return "no background commands in this session".to_owned();
        }
        let mut lines: Vec<String> = self
            .tasks
            .iter()
            .map(|t| {
                outboard_client::describe::task_line(&t.shell_id, &t.command, t.status, t.exit_code)
            })
            .collect();
        if self.running() > 0 {
            lines.push("/tasks kill ID stops one".to_owned());
        }
        lines.join("\n")
    }

    /// Whether `shell_id` names a running background command.
    pub fn is_running(&self, shell_id: &str) -> bool {
        self.tasks.iter().any(|t| t.shell_id == shell_id && t.status == TaskStatus::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, status: TaskStatus) -> EventKind {
        EventKind::BackgroundTask {
            shell_id: id.into(),
            command: "sleep 9".into(),
            status,
            exit_code: None,
        }
    }

    #[test]
    fn tasks_are_bounded_ended_ones_go_first() {
        let mut work = Work::default();
        work.apply(&task("bash_run", TaskStatus::Running));
        for n in 0..MAX_TASKS + 5 {
            work.apply(&task(&format!("bash_{n}"), TaskStatus::Killed));
        }
        assert_eq!(work.tasks.len(), MAX_TASKS);
        assert!(work.is_running("bash_run"), "the running one is kept");
        assert_eq!(work.tasks.last().map(|t| t.shell_id.as_str()), Some("bash_68"));
    }

    #[test]
    fn a_long_list_shows_the_items_around_the_current_one() {
        let theme = Theme { color: false };
        let todos = (0..20)
            .map(|i| TodoItem {
                content: format!("step {i}"),
                status: match i {
                    0..=9 => TodoStatus::Completed,
                    10 => TodoStatus::InProgress,
                    _ => TodoStatus::Pending,
                },
                active_form: format!("doing step {i}"),
            })
            .collect();
        let mut work = Work::default();
        work.apply(&EventKind::Todos { todos });
        let lines: Vec<String> = work
            .todo_panel(&theme)
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        assert_eq!(lines.len(), TODO_PANEL_ROWS);
        assert_eq!(lines[0], "Todos 10/20");
        assert_eq!(lines[1], "  ☒ step 9");
        assert_eq!(lines[2], "  ◐ doing step 10");
    }
}
