//! How big a model's context is and how many tokens a text takes, in one place: the window
//! table per model family, the estimate of tokens from bytes, and Anthropic's minimum cacheable
//! prefix. The harness sizes requests with these (prompt-cache breakpoints today; compaction's
//! threshold and the mock's accounting build on the same functions), so one estimate is used
//! everywhere a count is compared with a window.
//!
//! The estimate is deliberately simple — a token per 4 bytes of UTF-8, rounded up — because no
//! tokenizer of every provider can ship with the server: it is within ~20 % for English and code
//! with the Claude and GPT tokenizers, and only decides when to act, never what is billed (the
//! provider's reported usage is what the log keeps).

/// Bytes per token of [`estimate_tokens`].
pub const BYTES_PER_TOKEN: usize = 4;

/// The window assumed for a model no row of [`WINDOWS`] matches: a local model behind an
/// OpenAI-compatible server (llama.cpp, Ollama, vLLM) whose `n_ctx` we cannot know. 8,192 is
/// the smallest window of the current open-weight families' defaults, so an unknown model is
/// never overfilled; a bigger one is set with `--context-window` or per session.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 8_192;

/// Known windows by model-name prefix (lowercase), most specific first; the first row whose
/// prefix the model's name (without a `provider/` or vendor path) starts with wins. Sources:
/// the vendors' model pages as of 2025 (Claude's 1M-token beta is opt-in, so 200k).
pub const WINDOWS: &[(&str, u64)] = &[
    ("claude", 200_000),
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("llama-3", 131_072),
    ("llama3", 131_072),
    ("llama", DEFAULT_CONTEXT_WINDOW),
    ("qwen", 32_768),
    ("mistral", 32_768),
    ("deepseek", 128_000),
    ("gemini", 1_048_576),
];

/// The context window of `model` in tokens, from [`WINDOWS`] (or [`DEFAULT_CONTEXT_WINDOW`]).
/// `model` may carry a `provider/` prefix (`anthropic/claude-sonnet-4-5`) or a vendor path
/// (`meta-llama/Llama-3.1-8B`); case is ignored.
pub fn context_window(model: &str) -> u64 {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    WINDOWS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map_or(DEFAULT_CONTEXT_WINDOW, |(_, window)| *window)
}

/// The estimated tokens of `bytes` bytes of text (see the module header).
pub fn estimate_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

/// The shortest prefix, in tokens, that Anthropic caches for `model`: a breakpoint on a shorter
/// prefix is accepted but not cached (and a write would be billed for nothing), so the request
/// body marks none there. From Anthropic's prompt-caching page: 4,096 for Claude Opus 4.5 and
/// Haiku 4.5, 2,048 for the older Haiku models, 1,024 for the others (Sonnet, Opus 4/4.1).
pub fn anthropic_min_cacheable(model: &str) -> u64 {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    if name.contains("opus-4-5") || name.contains("haiku-4-5") {
        4_096
    } else if name.contains("haiku") {
        2_048
    } else {
        1_024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_by_family_and_the_default() {
        assert_eq!(context_window("claude-sonnet-4-5"), 200_000);
        assert_eq!(context_window("anthropic/claude-3-5-haiku-latest"), 200_000);
        assert_eq!(context_window("gpt-4.1-mini"), 1_047_576);
        assert_eq!(context_window("openai/gpt-4o-2024-08-06"), 128_000);
        assert_eq!(context_window("gpt-4"), 8_192);
        assert_eq!(context_window("o1-mini"), 128_000);
        assert_eq!(context_window("o3-mini"), 200_000);
        assert_eq!(context_window("meta-llama/Llama-3.1-8B-Instruct"), 131_072);
        assert_eq!(context_window("mock-model"), DEFAULT_CONTEXT_WINDOW);
    }

    #[test]
    fn estimates_round_up() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(8), 2);
        assert_eq!(estimate_tokens(9), 3);
    }

    #[test]
    fn minimum_cacheable_prefix() {
        assert_eq!(anthropic_min_cacheable("claude-sonnet-4-5"), 1_024);
        assert_eq!(anthropic_min_cacheable("claude-3-5-haiku-latest"), 2_048);
        assert_eq!(anthropic_min_cacheable("claude-haiku-4-5"), 4_096);
    }
}
