//! Tool inputs as the model sends them: parsed into each tool's typed parameters, with clear
//! errors and leniency where models are sloppy (`"10"` for a count).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::outcome::ToolOutcome;

/// Deserialises a tool's input, or answers with what is wrong and what `expected` looks like.
pub fn parse<T: DeserializeOwned>(
    tool: &str,
    input: &Value,
    expected: &str,
) -> Result<T, ToolOutcome> {
    match input {
        Value::String(raw) => {
            let head: String = raw.chars().take(200).collect();
            let more = if raw.chars().count() > 200 { "…" } else { "" };
            Err(ToolOutcome::error(format!(
                "The tool arguments were not valid JSON: {head}{more}; send a JSON object"
            )))
        }
        Value::Object(_) => T::deserialize(input).map_err(|e| {
            ToolOutcome::error(format!(
                "Invalid input for {tool}: {e}. Expected parameters: {expected}"
            ))
        }),
        other => Err(ToolOutcome::error(format!(
            "Invalid input for {tool}: expected a JSON object, got {}. Expected parameters: \
             {expected}",
            json_kind(other)
        ))),
    }
}

pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serde helpers for lenient numbers: models send `10`, `10.0` or `"10"` for a count.
pub mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    fn to_count(value: &Value) -> Option<u64> {
        match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1e15).map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// An optional non-negative integer.
    pub fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(v) => to_count(&v).map(Some).ok_or_else(|| {
                serde::de::Error::custom(format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    /// An optional boolean, also accepting `"true"`/`"false"`.
    pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(v) => Err(serde::de::Error::custom(format!("expected true or false, got {v}"))),
        }
    }

    /// An optional string, also accepting a number (a page range sent as `3`).
    pub fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v) => Err(serde::de::Error::custom(format!("expected a string, got {v}"))),
        }
    }
}
