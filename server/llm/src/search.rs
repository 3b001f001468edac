//! The provider's own web search, passed through: the Anthropic API's server tool
//! (`web_search_20250305`) and the Responses API's built-in `web_search`. The harness offers it
//! as one entry of the tool list ([`provider_search_spec`]), each dialect writes that entry in its
//! own shape ([`anthropic_tool`], [`responses_tool`]; Chat Completions has no such tool and
//! leaves it out), and the blocks the provider answers with become one
//! [`ContentBlock::ProviderSearch`] per search ([`from_anthropic`], [`from_responses`]), sent
//! back verbatim to that provider on every later request.
//!
//! Design choice: the entry is a [`ToolSpec`] with a marker in its `input_schema` rather than a
//! new field of the request, so the tool list stays one list (the prompt cache's prefix, the
//! compaction's request, the context estimate all see it) and no caller of the dialects
//! changes. The model never calls it as a client tool: the provider runs it.

use outboard_shared::{ProviderSearch, WebSource};
use serde_json::{json, Map, Value};

use crate::types::{ContentBlock, ToolSpec};

/// The name the provider's search has in a tool list (both APIs call it `web_search`).
pub const PROVIDER_WEB_SEARCH: &str = "web_search";

/// The key that marks a [`ToolSpec`] as the provider's search (no JSON Schema has it).
const MARK: &str = "x-outboard-provider-tool";

/// [`ProviderSearch::provider`] of a search the Anthropic API ran.
pub const ANTHROPIC: &str = "anthropic";
/// [`ProviderSearch::provider`] of a search the Responses API ran.
pub const RESPONSES: &str = "responses";

/// What the provider's search may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchOptions {
    /// Searches per model call at most (Anthropic's `max_uses`; 0: the API's default).
    pub max_uses: u32,
    /// Only results from these domains (empty: any).
    pub allowed_domains: Vec<String>,
    /// Never results from these domains (ignored when `allowed_domains` is set: the APIs take
    /// one or the other).
    pub blocked_domains: Vec<String>,
}

/// The tool-list entry that offers the provider's own search.
pub fn provider_search_spec(options: &SearchOptions) -> ToolSpec {
    let mut schema = Map::new();
    schema.insert(MARK.into(), Value::String(PROVIDER_WEB_SEARCH.into()));
    if options.max_uses > 0 {
        schema.insert("max_uses".into(), json!(options.max_uses));
    }
    if !options.allowed_domains.is_empty() {
        schema.insert("allowed_domains".into(), json!(options.allowed_domains));
    } else if !options.blocked_domains.is_empty() {
        schema.insert("blocked_domains".into(), json!(options.blocked_domains));
    }
    ToolSpec {
        name: PROVIDER_WEB_SEARCH.into(),
        description: String::new(),
        input_schema: Value::Object(schema),
    }
}

/// Whether `spec` is the provider's search ([`provider_search_spec`]).
pub fn is_provider_search(spec: &ToolSpec) -> bool {
    spec.name == PROVIDER_WEB_SEARCH && spec.input_schema.get(MARK).is_some()
}

/// The entry's options, copied onto `tool` (`max_uses`, the domain lists).
fn with_options(mut tool: Map<String, Value>, spec: &ToolSpec, keys: &[&str]) -> Value {
    for key in keys {
        if let Some(value) = spec.input_schema.get(*key) {
            tool.insert((*key).into(), value.clone());
        }
    }
    Value::Object(tool)
}

/// The Anthropic API's server tool for the entry:
/// `{"type": "web_search_20250305", "name": "web_search", "max_uses"?, "allowed_domains"? |
/// "blocked_domains"?}`.
pub fn anthropic_tool(spec: &ToolSpec) -> Value {
    let mut tool = Map::new();
    tool.insert("type".into(), json!("web_search_20250305"));
    tool.insert("name".into(), json!(PROVIDER_WEB_SEARCH));
    with_options(tool, spec, &["max_uses", "allowed_domains", "blocked_domains"])
}

/// The Responses API's built-in tool for the entry: `{"type": "web_search"}`, with
/// `filters.allowed_domains` when the org allows only some (the API has no blocked list).
pub fn responses_tool(spec: &ToolSpec) -> Value {
    let mut tool = Map::new();
    tool.insert("type".into(), json!("web_search"));
    if let Some(allowed) = spec.input_schema.get("allowed_domains") {
        tool.insert("filters".into(), json!({ "allowed_domains": allowed }));
    }
    Value::Object(tool)
}

/// The bytes the blocks of a search add to a request.
pub fn search_bytes(search: &ProviderSearch) -> usize {
    search.blocks.iter().map(|b| b.to_string().len()).sum()
}

/// A search from the Anthropic API's blocks: its `server_tool_use` and, when it came, the
/// `web_search_tool_result` that answers it.
pub fn from_anthropic(call: Value, result: Option<Value>) -> ContentBlock {
    let query = call.pointer("/input/query").and_then(Value::as_str).unwrap_or_default();
    let mut search = ProviderSearch {
        provider: ANTHROPIC.into(),
        query: query.to_owned(),
        sources: Vec::new(),
        error: None,
        blocks: vec![call],
    };
    match &result {
        None => search.error = Some("no result".into()),
        Some(result) => match result.get("content") {
            Some(Value::Array(items)) => {
                search.sources = items.iter().filter_map(source).collect();
            }
            Some(error) => {
                let code = error.get("error_code").and_then(Value::as_str).unwrap_or("error");
                search.error = Some(code.to_owned());
            }
            None => search.error = Some("an empty result".into()),
        },
    }
    search.blocks.extend(result);
    ContentBlock::ProviderSearch(search)
}

/// A search from the Responses API's `web_search_call` item (its `action` names the query and,
/// with `include: ["web_search_call.action.sources"]`, the sources).
pub fn from_responses(item: Value) -> ContentBlock {
    let action = item.get("action").unwrap_or(&Value::Null);
    let query = action.get("query").and_then(Value::as_str).unwrap_or_default().to_owned();
    let sources = action
        .get("sources")
        .and_then(Value::as_array)
        .map(|s| s.iter().filter_map(source).collect())
        .unwrap_or_default();
    let status = item.get("status").and_then(Value::as_str).unwrap_or("completed");
    let error = (status == "failed").then(|| status.to_owned());
    ContentBlock::ProviderSearch(ProviderSearch {
        provider: RESPONSES.into(),
        query,
        sources,
        error,
        blocks: vec![item],
    })
}

/// A source from a result item: `{url, title?}`.
fn source(item: &Value) -> Option<WebSource> {
    let url = item.get("url").and_then(Value::as_str)?;
    let title = item.get("title").and_then(Value::as_str).unwrap_or_default();
    Some(WebSource { title: title.to_owned(), url: url.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_written_in_each_dialect_s_shape() {
        let options = SearchOptions {
            max_uses: 5,
            allowed_domains: vec!["docs.rs".into()],
            blocked_domains: vec!["ignored.example".into()],
        };
        let spec = provider_search_spec(&options);
        assert!(is_provider_search(&spec));
        assert_eq!(
            anthropic_tool(&spec),
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5,
                   "allowed_domains": ["docs.rs"]})
        );
        assert_eq!(
            responses_tool(&spec),
            json!({"type": "web_search", "filters": {"allowed_domains": ["docs.rs"]}})
        );
        let blocked = provider_search_spec(&SearchOptions {
            blocked_domains: vec!["evil.example".into()],
            ..SearchOptions::default()
        });
        assert_eq!(
            anthropic_tool(&blocked),
            json!({"type": "web_search_20250305", "name": "web_search",
                   "blocked_domains": ["evil.example"]})
        );
        assert_eq!(responses_tool(&blocked), json!({"type": "web_search"}));
        let plain = ToolSpec {
            name: "web_search".into(),
            description: "an MCP-like tool of that name".into(),
            input_schema: json!({"type": "object"}),
        };
        assert!(!is_provider_search(&plain));
    }

    #[test]
    fn anthropic_blocks_become_one_search_with_its_sources() {
        let call = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                          "input": {"query": "rust 1.80"}});
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "url": "https://blog.rust-lang.org/x",
                         "title": "Announcing", "encrypted_content": "enc", "page_age": null}]});
        let ContentBlock::ProviderSearch(search) =
            from_anthropic(call.clone(), Some(result.clone()))
        else {
            panic!()
        };
        assert_eq!(search.query, "rust 1.80");
        assert_eq!(
            search.sources,
            vec![WebSource {
                title: "Announcing".into(),
                url: "https://blog.rust-lang.org/x".into()
            }]
        );
        assert_eq!(search.blocks, vec![call.clone(), result]);
        let failed = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}});
        let ContentBlock::ProviderSearch(search) = from_anthropic(call, Some(failed)) else {
            panic!()
        };
        assert_eq!(search.error.as_deref(), Some("max_uses_exceeded"));
        assert!(search.summary().contains("failed: max_uses_exceeded"), "{}", search.summary());
    }

    #[test]
    fn a_responses_item_becomes_a_search() {
        let item = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
            "action": {"type": "search", "query": "tokio select",
                       "sources": [{"type": "url", "url": "https://docs.rs/tokio"}]}});
        let ContentBlock::ProviderSearch(search) = from_responses(item.clone()) else { panic!() };
        assert_eq!(search.provider, RESPONSES);
        assert_eq!(search.query, "tokio select");
        assert_eq!(search.sources[0].url, "https://docs.rs/tokio");
        assert_eq!(search.blocks, vec![item]);
    }
}
