//! The server's HTTP endpoints beside the WebSocket (`outboard_shared::http`): the same host and
//! port, `http://` for `ws://` and `https://` for `wss://`, the same bearer token and the same
//! trusted CAs. Bodies stream: a diff of any size is copied to its destination as it arrives.

use std::path::PathBuf;

use outboard_shared::{ErrorBody, ErrorCode, SessionId};

use crate::error::ClientError;

/// The HTTP side of one server.
#[derive(Clone)]
pub struct Endpoint {
    base: String,
    token: String,
    ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoints of the server at WebSocket URL `ws_url`.
    pub fn new(ws_url: &str, token: &str, ca_cert: Option<PathBuf>) -> Endpoint {
        let base = if let Some(rest) = ws_url.strip_prefix("wss://") {
            format!("https://{rest}")
        } else if let Some(rest) = ws_url.strip_prefix("ws://") {
            format!("http://{rest}")
        } else {
            ws_url.to_owned()
        };
        Endpoint { base: base.trim_end_matches('/').to_owned(), token: token.to_owned(), ca_cert }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An HTTP client trusting what the WebSocket client trusts.
    pub fn client(&self) -> Result<reqwest::Client, ClientError> {
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &self.ca_cert {
            let ca_err = |e: Box<dyn std::error::Error + Send + Sync>| ClientError::CaCert {
                path: path.display().to_string(),
                reason: e.to_string(),
                source: Some(e.into()),
            };
            let pem = std::fs::read(path).map_err(|e| ca_err(e.into()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(e.into()))? {
                builder = builder.add_root_certificate(cert);
            }
        }
        builder.build().map_err(|e| ClientError::Protocol(format!("HTTP client: {e}")))
    }

    /// A request with the bearer token.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        Ok(self.client()?.request(method, self.url(path)).bearer_auth(&self.token))
    }

    /// `GET /v1/sessions/{id}/diff`: the response, its body not read yet.
    pub async fn diff(
        &self,
        session: &SessionId,
        stat: bool,
    ) -> Result<reqwest::Response, ClientError> {
        let mut path = format!("{}/{}/diff", outboard_shared::http::SESSIONS, session.as_str());
        if stat {
            path.push_str("?stat=1");
        }
        let response = self
            .request(reqwest::Method::GET, &path)?
            .send()
            .await
            .map_err(|e| ClientError::Protocol(format!("GET {path}: {e}")))?;
        checked(response, "session/diff").await
    }
}

/// The response when its status is a success; else the server's error as [`ClientError::Server`].
pub async fn checked(
    response: reqwest::Response,
    method: &'static str,
) -> Result<reqwest::Response, ClientError> {
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let error = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::from_value::<ErrorBody>(v.get("error")?.clone()).ok())
        .unwrap_or_else(|| {
            let code = match status.as_u16() {
                401 => ErrorCode::Unauthorized,
                403 => ErrorCode::Forbidden,
                404 => ErrorCode::NotFound,
                409 => ErrorCode::Conflict,
                413 => ErrorCode::TooLarge,
                _ => ErrorCode::Internal,
            };
            ErrorBody::new(code, format!("HTTP {status}: {}", text.trim()))
        });
    Err(ClientError::Server { method, error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_base_follows_the_websocket_url() {
        assert_eq!(
            Endpoint::new("ws://127.0.0.1:7700", "t", None).url("/v1/x"),
            "http://127.0.0.1:7700/v1/x"
        );
        assert_eq!(
            Endpoint::new("wss://h.example/", "t", None).url("/v1/x"),
            "https://h.example/v1/x"
        );
    }
}
