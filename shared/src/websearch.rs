//! Web searches the model's provider ran on its own servers (the Anthropic API's `web_search`
//! server tool, the Responses API's built-in `web_search`): what a person is shown (the query
//! and the sources found) and the provider's blocks verbatim, which go back to that provider on
//! every later request of the conversation, as it requires.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One search the provider ran while it answered, carried by the `assistant_message` that
/// holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderSearch {
    /// Whose search it was: `anthropic` or `responses` (the dialect that sends it back; another
    /// provider's search is left out of its requests).
    pub provider: String,
    /// The query, as the model asked it (empty when the provider did not say).
    #[serde(default)]
    pub query: String,
    /// The pages found, in the provider's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<WebSource>,
    /// The provider's error code when the search failed (`max_uses_exceeded`, `unavailable`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The provider's blocks, verbatim and in order: Anthropic's `server_tool_use` and its
    /// `web_search_tool_result` (whose `encrypted_content` the API needs back), or the Responses
    /// API's `web_search_call` item.
    pub blocks: Vec<Value>,
}

/// A page a search found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebSource {
    /// Its title (empty when the provider gave none).
    #[serde(default)]
    pub title: String,
    /// Its address.
    pub url: String,
}

impl ProviderSearch {
    /// What a client shows: [`ProviderSearch::summary`], then one line per source (`title —
    /// url`), the first `max_sources` of them and a count of the rest.
    pub fn lines(&self, max_sources: usize) -> Vec<String> {
        let mut lines = vec![self.summary()];
        for source in self.sources.iter().take(max_sources) {
            lines.push(match source.title.trim() {
                "" => source.url.clone(),
                title => format!("{title} — {}", source.url),
            });
        }
        if self.sources.len() > max_sources {
            lines.push(format!("… and {} more", self.sources.len() - max_sources));
        }
        lines
    }

    /// One line for a person: `web search "QUERY": N sources` (or the error).
    pub fn summary(&self) -> String {
        match &self.error {
            Some(code) => format!("web search {:?} failed: {code}", self.query),
            None => {
                let n = self.sources.len();
                format!("web search {:?}: {n} source{}", self.query, if n == 1 { "" } else { "s" })
            }
        }
    }
}
