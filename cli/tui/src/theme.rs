//! Colours of the TUI. Only the terminal's named ANSI colours are used (never RGB), so the
//! screen follows the user's theme, light or dark; with `NO_COLOR` set every colour is dropped
//! and only bold/italic/reverse remain (https://no-color.org); `--theme color|mono` overrides it.

use ratatui::style::{Color, Modifier, Style};

/// Whether the screen is coloured (the binary's `--theme`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ThemeChoice {
    /// Colours unless NO_COLOR is set to a non-empty value.
    #[default]
    Auto,
    /// Colours, whatever NO_COLOR says.
    Color,
    /// No colours.
    Mono,
}

/// The palette, resolved once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// Whether colours are used at all.
    pub color: bool,
}

impl Theme {
    /// The palette `--theme` asks for; `auto` reads `NO_COLOR`.
    pub fn new(choice: ThemeChoice) -> Self {
        let no_color = || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let color = match choice {
            ThemeChoice::Auto => !no_color(),
            ThemeChoice::Color => true,
            ThemeChoice::Mono => false,
        };
        Theme { color }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `color` and `mono` hold whatever `NO_COLOR` says; without colour a style keeps only its
    /// modifiers.
    #[test]
    fn the_choice_decides_the_colours() {
        let color = Theme::new(ThemeChoice::Color);
        let mono = Theme::new(ThemeChoice::Mono);
        assert!(color.color && !mono.color);
        assert_eq!(color.error().fg, Some(Color::Red));
        assert_eq!(mono.error().fg, None);
        assert!(mono.error().add_modifier.contains(Modifier::BOLD));
    }
}
