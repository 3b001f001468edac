//! Colours of the TUI. Only the terminal's named ANSI colours are used (never RGB), so the
//! screen follows the user's theme, light or dark; with `NO_COLOR` set every colour is dropped
//! and only bold/italic/reverse remain (https://no-color.org).

use ratatui::style::{Color, Modifier, Style};

/// The palette, resolved once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// Whether colours are used at all.
    pub color: bool,
}

impl Theme {
    /// Colours unless `NO_COLOR` is set to a non-empty value.
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme { color: !no_color }
    }

    /// A style with foreground `fg` (dropped without colour).
    pub fn fg(&self, fg: Color) -> Style {
        if self.color {
            Style::default().fg(fg)
        } else {
            Style::default()
        }
    }

    /// Dimmed secondary text.
    pub fn dim(&self) -> Style {
        Style::default().add_modifier(Modifier::DIM)
    }

    /// Bold text.
    pub fn bold(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }

    /// Something that failed.
    pub fn error(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    /// Something that succeeded.
    pub fn ok(&self) -> Style {
        self.fg(Color::Green)
    }

    /// Something in progress or needing attention.
    pub fn warn(&self) -> Style {
        self.fg(Color::Yellow)
    }

    /// Accents: headings, the user's own messages.
    pub fn accent(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    /// Inline code and code blocks.
    pub fn code(&self) -> Style {
        self.fg(Color::Magenta)
    }

    /// An added diff line.
    pub fn added(&self) -> Style {
        self.fg(Color::Green)
    }

    /// A removed diff line.
    pub fn removed(&self) -> Style {
        self.fg(Color::Red)
    }

    /// Bars (status, presence): reversed, so they stand out in any theme and without colour.
    pub fn bar(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
}
