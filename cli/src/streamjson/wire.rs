//! Claude Code's stream-json messages, both ways: [`parse`] reads one stdin line into an
//! [`Inbound`]; the builders write the stdout messages the Claude Agent SDKs parse (their
//! `message_parser.py` is the reference for the fields each one needs). Plain `serde_json`
//! values rather than typed structs: the shapes are Claude Code's, loosely specified and
//! growing, and only the fields written here are promised (docs/STREAM_JSON.md).

use base64::Engine as _;
use outboard_shared::{ImageUpload, Usage, MAX_MESSAGE_IMAGES};
use serde_json::{json, Map, Value};

/// The Claude Code version the `system` `init` message reports: the protocol level Outboard
/// speaks (the SDKs warn about a program that reports none or an older one).
pub const PROTOCOL_VERSION: &str = "2.0.0";

/// One stdin message.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A user message: a prompt.
    User {
        /// Its text (text blocks joined by blank lines).
        text: String,
        /// Its images.
        images: Vec<ImageUpload>,
    },
    /// A control request from the program.
    Control {
        /// Its id, echoed in the response.
        request_id: String,
        /// What it asks.
        request: Control,
    },
    /// The program's answer to one of our control requests (`can_use_tool`).
    Answer {
        /// The request it answers.
        request_id: String,
        /// `response` of a `success`, or the `error` text.
        outcome: Result<Value, String>,
    },
    /// The program withdraws a request it sent (nothing to do: each is answered at once).
    Cancel,
    /// `keep_alive`.
    KeepAlive,
    /// A line that is not a message this front end takes: why.
    Bad(String),
}

/// A control request's `subtype`.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// `initialize`.
    Initialize,
    /// `interrupt`: stop the turn.
    Interrupt,
    /// `set_permission_mode` with its `mode`.
    SetPermissionMode(String),
    /// `set_model` with its `model` (none: the default).
    SetModel(Option<String>),
    /// Any other subtype (refused with an error response).
    Other(String),
}

/// Parses one stdin line.
pub fn parse(line: &[u8]) -> Inbound {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => return Inbound::Bad(format!("not JSON ({e})")),
    };
    let Some(object) = value.as_object() else {
        return Inbound::Bad("not a JSON object".to_owned());
    };
    match object.get("type").and_then(Value::as_str) {
        Some("user") => user(object),
        Some("control_request") => control_request(object),
        Some("control_response") => control_response(object),
        Some("control_cancel_request") => Inbound::Cancel,
        Some("keep_alive") => Inbound::KeepAlive,
        Some(other) => Inbound::Bad(format!(
            "unknown message type {other:?}: stdin takes `user`, `control_request`, \
             `control_response`, `control_cancel_request` and `keep_alive`"
        )),
        None => Inbound::Bad("a message without a string `type`".to_owned()),
    }
}

fn user(object: &Map<String, Value>) -> Inbound {
    let Some(content) = object.get("message").and_then(|m| m.get("content")) else {
        return Inbound::Bad("a `user` message without `message.content`".to_owned());
    };
    let (mut texts, mut images) = (Vec::new(), Vec::new());
    match content {
        Value::String(text) => texts.push(text.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => match block.get("text").and_then(Value::as_str) {
                        Some(text) => texts.push(text.to_owned()),
                        None => return Inbound::Bad("a text block without `text`".to_owned()),
                    },
                    Some("image") => match image(block, images.len() + 1) {
                        Ok(image) => images.push(image),
                        Err(why) => return Inbound::Bad(why),
                    },
                    other => {
                        return Inbound::Bad(format!(
                            "a user message's content block of type {other:?}: only `text` and \
                             `image` blocks are taken (tool results come from Outboard's own tools)"
                        ))
                    }
                }
            }
        }
        _ => return Inbound::Bad("`message.content` is neither a string nor a list".to_owned()),
    }
    if images.len() > MAX_MESSAGE_IMAGES {
        return Inbound::Bad(format!(
            "{} images in one message; at most {MAX_MESSAGE_IMAGES}",
            images.len()
        ));
    }
    let text = texts.join("\n\n");
    if text.trim().is_empty() && images.is_empty() {
        return Inbound::Bad("an empty user message".to_owned());
    }
    Inbound::User { text, images }
}

fn image(block: &Value, n: usize) -> Result<ImageUpload, String> {
    let source = block.get("source");
    let kind = source.and_then(|s| s.get("type")).and_then(Value::as_str);
    let data = source.and_then(|s| s.get("data")).and_then(Value::as_str);
    let (Some("base64"), Some(data)) = (kind, data) else {
        return Err("an image block needs `source.type` \"base64\" and `source.data`".to_owned());
    };
    if base64::engine::general_purpose::STANDARD.decode(data).is_err() {
        return Err("an image block whose `source.data` is not base64".to_owned());
    }
    let media = source.and_then(|s| s.get("media_type")).and_then(Value::as_str).unwrap_or("");
    let ext = media.strip_prefix("image/").unwrap_or("png");
    Ok(ImageUpload { name: format!("image-{n}.{ext}"), data: data.to_owned() })
}

fn control_request(object: &Map<String, Value>) -> Inbound {
    let Some(request_id) = object.get("request_id").and_then(Value::as_str) else {
        return Inbound::Bad("a `control_request` without a string `request_id`".to_owned());
    };
    let request = object.get("request");
    let field = |name: &str| request.and_then(|r| r.get(name));
    let request = match field("subtype").and_then(Value::as_str) {
        Some("initialize") => Control::Initialize,
        Some("interrupt") => Control::Interrupt,
        Some("set_permission_mode") => {
            Control::SetPermissionMode(field("mode").and_then(Value::as_str).unwrap_or("").into())
        }
        Some("set_model") => {
            Control::SetModel(field("model").and_then(Value::as_str).map(str::to_owned))
        }
        Some(other) => Control::Other(other.to_owned()),
        None => return Inbound::Bad("a `control_request` without `request.subtype`".to_owned()),
    };
    Inbound::Control { request_id: request_id.to_owned(), request }
}

fn control_response(object: &Map<String, Value>) -> Inbound {
    let response = object.get("response");
    let field = |name: &str| response.and_then(|r| r.get(name));
    let Some(request_id) = field("request_id").and_then(Value::as_str) else {
        return Inbound::Bad("a `control_response` without `response.request_id`".to_owned());
    };
    let outcome = match field("subtype").and_then(Value::as_str) {
        Some("success") => Ok(field("response").cloned().unwrap_or(Value::Null)),
        Some("error") => {
            Err(field("error").and_then(Value::as_str).unwrap_or("no reason given").to_owned())
        }
        _ => {
            return Inbound::Bad(
                "a `control_response` whose subtype is not success or error".into(),
            )
        }
    };
    Inbound::Answer { request_id: request_id.to_owned(), outcome }
}

/// A fresh random id in UUID v4 form (messages' `uuid`).
pub fn uuid() -> String {
    let mut b = [0u8; 16];
    if getrandom::getrandom(&mut b).is_err() {
        // No randomness: ids need only be unique within this process.
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        b = n.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Outboard's usage as Claude Code's (Anthropic's field names; `input_tokens` uncached).
pub fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.uncached_input_tokens(),
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
    })
}

/// A successful `control_response`.
pub fn control_success(request_id: &str, response: Value) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
}

/// A failed `control_response`.
pub fn control_error(request_id: &str, error: &str) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "error", "request_id": request_id, "error": error},
    })
}

/// What `initialize` answers.
pub fn initialize_response() -> Value {
    json!({
        "commands": [],
        "agents": [],
        "output_style": "default",
        "available_output_styles": ["default"],
        "models": [],
        "account": {},
        "pid": std::process::id(),
    })
}

/// The `system` message a stdin line that cannot be used gets (besides a line on stderr).
pub fn input_error(line: u64, error: &str, session_id: Option<&str>) -> Value {
    json!({
        "type": "system",
        "subtype": "input_error",
        "line": line,
        "error": error,
        "session_id": session_id.unwrap_or(""),
        "uuid": uuid(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn user_messages_in_both_content_shapes() {
        let line = br#"{"type":"user","message":{"role":"user","content":"hi"},"session_id":""}"#;
        assert_eq!(parse(line), Inbound::User { text: "hi".into(), images: vec![] });
        let line = br#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGk="}},{"type":"text","text":"b"}]}}"#;
        assert_eq!(
            parse(line),
            Inbound::User {
                text: "a\n\nb".into(),
                images: vec![ImageUpload { name: "image-1.png".into(), data: "aGk=".into() }],
            }
        );
    }

    #[test]
    fn control_messages() {
        let line = br#"{"type":"control_request","request_id":"r1","request":{"subtype":"set_model","model":"m2"}}"#;
        assert_eq!(
            parse(line),
            Inbound::Control {
                request_id: "r1".into(),
                request: Control::SetModel(Some("m2".into()))
            }
        );
        let line = br#"{"type":"control_response","response":{"subtype":"error","request_id":"q","error":"boom"}}"#;
        assert_eq!(
            parse(line),
            Inbound::Answer { request_id: "q".into(), outcome: Err("boom".into()) }
        );
    }

    #[test]
    fn what_is_refused_says_why() {
        for (line, says) in [
            (&b"{nope"[..], "not JSON"),
            (b"[1]", "not a JSON object"),
            (b"{\"type\":\"assistant\"}", "unknown message type \"assistant\""),
            (b"{\"type\":\"user\",\"message\":{\"content\":\"  \"}}", "an empty user message"),
            (
                b"{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\"}]}}",
                "tool_result",
            ),
            (b"{\"type\":\"control_request\",\"request\":{}}", "request_id"),
        ] {
            let Inbound::Bad(why) = parse(line) else { panic!("{line:?} was taken") };
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn uuids_have_the_v4_shape() {
        let id = uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, uuid());
    }
}
