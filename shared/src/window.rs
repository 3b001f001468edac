//! Where a model's context window came from, so a person can see whether the number the session
//! compacts by is known or guessed, and what sets it (`models/list`, `session/create`, the
//! status line, `outboard models`, `run --json`'s `run_started`).

use serde::{Deserialize, Serialize};

/// The origin of a context window, most authoritative first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// Asked for by a flag: the session's `--context-window` (or `session/create`'s
    /// `context_window`), or the server's `serve --context-window`.
    Flag,
    /// The model file's (or the server configuration's `[[models]]`) `context_window` key.
    Config,
    /// Said by the model's server when asked (llama.cpp, vLLM, Ollama, LM Studio, a gateway).
    Probe,
    /// The model table of known families.
    Table,
    /// A guess: nothing above knows it, so the API's usual window (200k on Anthropic's, 128k on
    /// OpenAI's). Stated once to the person, with how to set the real one.
    ProviderDefault,
    /// A source this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

impl WindowSource {
    /// A few words for a listing: `table`, `probe`, `provider default`, `flag`, `config file`.
    pub fn label(self) -> &'static str {
        match self {
            WindowSource::Flag => "flag",
            WindowSource::Config => "config file",
            WindowSource::Probe => "probe",
            WindowSource::Table => "table",
            WindowSource::ProviderDefault => "provider default",
            WindowSource::Unknown => "unknown",
        }
    }

    /// Whether the window is a guess the person should be told about.
    pub fn is_guess(self) -> bool {
        self == WindowSource::ProviderDefault
    }
}

/// `200000` as `200,000`: token counts for a person.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_snake_case_and_unknown_ones_are_kept_apart() {
        let json = serde_json::to_string(&WindowSource::ProviderDefault).unwrap();
        assert_eq!(json, "\"provider_default\"");
        let later: WindowSource = serde_json::from_str("\"oracle\"").unwrap();
        assert_eq!(later, WindowSource::Unknown);
        assert!(WindowSource::ProviderDefault.is_guess() && !WindowSource::Probe.is_guess());
        assert_eq!(thousands(200_000), "200,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }
}
