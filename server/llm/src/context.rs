//! How big a model's context is and how many tokens a text takes, in one place: the window
//! table per model family, the estimate of tokens from bytes, and Anthropic's minimum cacheable
//! prefix, and the estimated size of a request body. The harness sizes requests with these
//! (prompt-cache breakpoints, compaction's threshold; the tests measure the mock's recorded
//! bodies with the same [`estimate_tokens`]), so one estimate is used everywhere a count is
//! compared with a window.
//!
//! The estimate is deliberately simple — a token per 4 bytes of UTF-8, rounded up — because no
//! tokenizer of every provider can ship with the server: it is within ~20 % for English and code
//! with the Claude and GPT tokenizers, and only decides when to act, never what is billed (the
//! provider's reported usage is what the log keeps).

use outboard_shared::{Attachment, Reasoning};

use crate::types::{ContentBlock, Message, ModelRequest, ToolSpec};

/// Bytes per token of [`estimate_tokens`].
pub const BYTES_PER_TOKEN: usize = 4;

/// The window assumed for a model on Anthropic's Messages API that no row of [`WINDOWS`] matches
/// and whose server does not say its own: every Claude model since Claude 2.1 has 200k, and the
/// servers that speak the dialect for other models (llama.cpp, LM Studio, gateways) are asked
/// first (the `window` module). A guess, stated to the person with how to set the real one.
pub const ANTHROPIC_DEFAULT_WINDOW: u64 = 200_000;

/// The window assumed for a model on the OpenAI APIs (Chat Completions, Responses) that no row
/// of [`WINDOWS`] matches and whose server does not say its own: the GPT-4o generation's 128k,
/// which today's open-weight families also reach. Too big for a small local server is cheaper
/// than too small: the provider's "too long" refusal teaches the session the real window
/// (`Window::learned_from`), while a too-small guess compacts a session that had room.
pub const OPENAI_DEFAULT_WINDOW: u64 = 128_000;

/// The guessed window of a model of the API `kind` (see [`ANTHROPIC_DEFAULT_WINDOW`],
/// [`OPENAI_DEFAULT_WINDOW`]).
pub fn provider_default_window(kind: crate::ProviderKind) -> u64 {
    match kind {
        crate::ProviderKind::Anthropic => ANTHROPIC_DEFAULT_WINDOW,
        crate::ProviderKind::OpenAi | crate::ProviderKind::Responses => OPENAI_DEFAULT_WINDOW,
    }
}

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
    ("llama", 8_192),
    ("qwen", 32_768),
    ("mistral", 32_768),
    ("deepseek", 128_000),
    ("gemini", 1_048_576),
];

/// The context window of `model` in tokens, from [`WINDOWS`], else its API's guess
/// ([`provider_default_window`]). `model` is a label, `provider/model-id`
/// (`anthropic/claude-sonnet-4-5`), whose provider picks the guess (an unlabelled id counts as
/// OpenAI's), or carries a vendor path (`meta-llama/Llama-3.1-8B`); case is ignored.
pub fn context_window(model: &str) -> u64 {
    known_window(model).unwrap_or_else(|| {
        let kind = model
            .split_once('/')
            .and_then(|(provider, _)| crate::ProviderKind::parse(provider))
            .unwrap_or(crate::ProviderKind::OpenAi);
        provider_default_window(kind)
    })
}

/// The window of `model` when a row of [`WINDOWS`] knows its family; `None` for a model only
/// its server can tell (the `window` module asks it).
pub fn known_window(model: &str) -> Option<u64> {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    WINDOWS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|(_, window)| *window)
}

/// Whether a model takes images, by its family, for a model file that does not say (`vision`).
/// Claude and the OpenAI models since GPT-4 Turbo (o1 and o3, not their minis), Gemini, and
/// open-weight vision families by name (`-vl`, `vision`, `llava`, `pixtral`, `gemma-3`) do; a
/// model the table does not know does on the Anthropic and Responses APIs (whose every current
/// model does) and does not on Chat Completions (a local server's model rarely does).
pub fn takes_images(kind: crate::ProviderKind, model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    let vision_names = ["-vl", "vision", "llava", "pixtral", "gemma-3", "gemma3"];
    if vision_names.iter().any(|v| name.contains(v)) {
        return true;
    }
    let text_only = ["gpt-3.5", "o1-mini", "o1-preview", "o3-mini", "text-", "davinci"];
    if text_only.iter().any(|p| name.starts_with(p))
        || name == "gpt-4"
        || name.starts_with("gpt-4-0")
    {
        return false;
    }
    let vision =
        ["claude", "gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4", "gemini"];
    if vision.iter().any(|p| name.starts_with(p)) {
        return true;
    }
    let text_families = ["llama", "qwen", "mistral", "deepseek", "phi", "codestral", "gemma"];
    if text_families.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    kind != crate::ProviderKind::OpenAi
}

/// The estimated tokens of `bytes` bytes of text (see the module header).
pub fn estimate_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

/// What a message adds to a request body besides its blocks (`{"role":"assistant","content":[]}`
/// and a separator), rounded up.
pub const MESSAGE_OVERHEAD_BYTES: usize = 48;

/// What a block adds besides its strings (`{"type":"tool_result","tool_use_id":,"content":,
/// "is_error":false}`, OpenAI's `{"role":"tool","tool_call_id":…}`), rounded up; an Anthropic
/// breakpoint (`"cache_control":{"type":"ephemeral"}`) fits in it too.
pub const BLOCK_OVERHEAD_BYTES: usize = 96;

/// What a request body adds besides its messages, system prompt and tools (model, `max_tokens`,
/// `stream`, the OpenAI usage options), rounded up.
pub const REQUEST_OVERHEAD_BYTES: usize = 256;

/// The length of `s` as a JSON string, quotes and escapes included (`serde_json`'s escapes:
/// `\"`, `\\`, the short control escapes, `\u00XX` for the other control characters).
pub fn json_string_bytes(s: &str) -> usize {
    let escapes: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0..=0x1f => 5,
            _ => 0,
        })
        .sum();
    s.len() + 2 + escapes
}

/// The estimated bytes a block takes in either dialect's request body: an upper bound of both
/// (a tool call's input is counted as the JSON string OpenAI wraps it in, escaped twice).
pub fn block_bytes(block: &ContentBlock) -> usize {
    BLOCK_OVERHEAD_BYTES
        + match block {
            ContentBlock::Text(text) => json_string_bytes(text),
            ContentBlock::ToolUse { id, name, input } => {
                json_string_bytes(id)
                    + json_string_bytes(name)
                    + json_string_bytes(&input.to_string())
            }
            ContentBlock::ToolResult { tool_use_id, content, .. } => {
                json_string_bytes(tool_use_id) + json_string_bytes(content)
            }
            ContentBlock::Reasoning(r) => reasoning_bytes(r),
            ContentBlock::Media(m) => media_bytes(m),
            ContentBlock::ProviderSearch(search) => crate::search::search_bytes(search),
        }
}

/// What an attachment counts for in the estimate: the tokens the providers bill for it (see
/// [`Attachment::tokens`]) as bytes of the estimate's rate, not its base64, which no provider
/// counts as text. A document sent as its text counts that text.
pub fn media_bytes(m: &Attachment) -> usize {
    let tokens = usize::try_from(m.tokens).unwrap_or(usize::MAX);
    tokens.saturating_mul(BYTES_PER_TOKEN).max(m.text.as_deref().map_or(0, str::len))
}

/// The estimated bytes a reasoning block takes in whichever dialect sends it.
fn reasoning_bytes(reasoning: &Reasoning) -> usize {
    match reasoning {
        Reasoning::Thinking { thinking, signature } => {
            json_string_bytes(thinking) + json_string_bytes(signature)
        }
        Reasoning::RedactedThinking { data } => json_string_bytes(data),
        Reasoning::OpenaiReasoning { id, summary, encrypted_content } => {
            json_string_bytes(id)
                + summary.iter().map(|s| json_string_bytes(s)).sum::<usize>()
                + encrypted_content.as_deref().map_or(0, json_string_bytes)
        }
    }
}

/// The estimated bytes a message takes in a request body.
pub fn message_bytes(message: &Message) -> usize {
    MESSAGE_OVERHEAD_BYTES + message.content.iter().map(block_bytes).sum::<usize>()
}

/// The estimated bytes of what every request of a turn carries besides its messages: the
/// system prompt, the tools' definitions and the body's own fields.
pub fn fixed_bytes(system: &str, tools: &[ToolSpec]) -> usize {
    let tools: usize = tools
        .iter()
        .map(|t| {
            BLOCK_OVERHEAD_BYTES
                + json_string_bytes(&t.name)
                + json_string_bytes(&t.description)
                + t.input_schema.to_string().len()
        })
        .sum();
    REQUEST_OVERHEAD_BYTES + BLOCK_OVERHEAD_BYTES + json_string_bytes(system) + tools
}

/// The estimated bytes of a whole request body: never less than either dialect sends (checked
/// against both serialisers in their tests), within a few percent for real conversations.
pub fn request_bytes(request: &ModelRequest<'_>) -> usize {
    fixed_bytes(request.system, request.tools)
        + request.messages.iter().map(message_bytes).sum::<usize>()
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
        assert_eq!(context_window("mock-model"), OPENAI_DEFAULT_WINDOW);
        assert_eq!(context_window("openai/mock-model"), OPENAI_DEFAULT_WINDOW);
        assert_eq!(context_window("responses/my-gateway-alias"), OPENAI_DEFAULT_WINDOW);
        assert_eq!(context_window("anthropic/my-gateway-alias"), ANTHROPIC_DEFAULT_WINDOW);
    }

    #[test]
    fn estimates_round_up() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(8), 2);
        assert_eq!(estimate_tokens(9), 3);
    }

    #[test]
    fn json_lengths_count_escapes() {
        for s in ["", "plain", "q\"uote", "back\\slash", "nl\n\r\t", "\u{1}\u{1f}", "€ é"] {
            assert_eq!(json_string_bytes(s), serde_json::to_string(s).unwrap().len(), "{s:?}");
        }
    }

    #[test]
    fn minimum_cacheable_prefix() {
        assert_eq!(anthropic_min_cacheable("claude-sonnet-4-5"), 1_024);
        assert_eq!(anthropic_min_cacheable("claude-3-5-haiku-latest"), 2_048);
        assert_eq!(anthropic_min_cacheable("claude-haiku-4-5"), 4_096);
    }
}
