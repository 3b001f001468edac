//! JSON that keeps its object keys in the order the file has them, for editing notebooks without
//! reordering what the edit does not touch.
//!
//! Design choice: the workspace's `serde_json` is built without `preserve_order` (its `Map` sorts
//! keys), and turning that feature on would change the order of every JSON object the server
//! writes. A notebook needs order only here, so this small tree keeps each object as a list of
//! entries. Parsing goes through `serde_json`'s deserializer (its recursion limit of 128 levels
//! holds, so a hostile file cannot overflow the stack), writing through its serializer with the
//! file's own indentation ([`Indent`]): Jupyter writes one space per level, keys sorted, a
//! newline at the end, and a notebook it wrote is written back byte for byte where not edited.
//! Numbers keep their kind (integer or float); a float may be spelled differently (`1e-05` comes
//! back as `1e-5`), as `serde_json` prints it.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their keys' order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Object),
}

/// A JSON object: its entries in the file's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Object(pub Vec<(String, Json)>);

impl Object {
    /// The value of the first entry named `key`.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of the first entry named `key`, to change it.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value` where it is, or adds it at the end.
    pub fn set(&mut self, key: &str, value: Json) {
        match self.get_mut(key) {
            Some(slot) => *slot = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    /// Sets `key` to `value` where it is, or adds it where sorted order puts it (Jupyter sorts a
    /// cell's keys, so a key added to a cell lands where Jupyter would write it).
    pub fn set_sorted(&mut self, key: &str, value: Json) {
        if let Some(slot) = self.get_mut(key) {
            *slot = value;
            return;
        }
        let at = self.0.iter().position(|(k, _)| k.as_str() > key).unwrap_or(self.0.len());
        self.0.insert(at, (key.to_owned(), value));
    }

    /// Removes every entry named `key`.
    pub fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }
}

impl Json {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Json>> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The value at `key` when this is an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_object().and_then(|o| o.get(key))
    }

    /// A notebook's multiline string: a string, or a list of strings joined (nbformat's two
    /// spellings of `source` and of text outputs); `None` for anything else.
    pub fn multiline(&self) -> Option<String> {
        match self {
            Json::String(s) => Some(s.clone()),
            Json::Array(parts) => {
                parts.iter().map(|p| p.as_str()).collect::<Option<Vec<&str>>>().map(|p| p.concat())
            }
            _ => None,
        }
    }
}

/// How a notebook file is laid out, to write it back the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indent {
    /// The text of one level (one space in Jupyter's files); `None`: all on one line.
    pub unit: Option<String>,
    /// The file ends with a newline.
    pub final_newline: bool,
}

impl Indent {
    /// The layout of `text`: the indentation of its second line (the first key of the
    /// top-level object, one level deep), or one line when it has no line break.
    pub fn of(text: &str) -> Indent {
        let body = text.trim_end();
        let unit = body.find('\n').map(|at| {
            let rest = &body[at + 1..];
            let end = rest.find(|c| c != ' ' && c != '\t').unwrap_or(rest.len());
            rest[..end].to_owned()
        });
        Indent { unit, final_newline: text.ends_with('\n') }
    }

    /// Jupyter's layout: one space per level, a newline at the end.
    pub fn jupyter() -> Indent {
        Indent { unit: Some(" ".into()), final_newline: true }
    }
}

/// Parses `bytes` as JSON, keeping key order.
pub fn parse(bytes: &[u8]) -> Result<Json, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Writes `value` laid out as `indent` says.
pub fn write(value: &Json, indent: &Indent) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::new();
    match &indent.unit {
        Some(unit) => {
            let formatter = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
            value.serialize(&mut ser)?;
        }
        None => serde_json::to_writer(&mut out, value)?,
    }
    if indent.final_newline {
        out.push(b'\n');
    }
    Ok(out)
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(object) => {
                let mut map = s.serialize_map(Some(object.0.len()))?;
                for (k, v) in &object.0 {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            entries.push((k, v));
        }
        Ok(Json::Object(Object(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jupyter_file_round_trips_byte_for_byte_and_keys_keep_their_order() {
        let text = "{\n \"cells\": [\n  {\n   \"cell_type\": \"code\",\n   \"execution_count\": \
                    null,\n   \"metadata\": {},\n   \"outputs\": [],\n   \"source\": [\n    \
                    \"x = 1\\n\",\n    \"é\"\n   ]\n  }\n ],\n \"zeta\": 1.5,\n \"alpha\": {\"b\": \
                    [], \"a\": true}\n}\n";
        let value = parse(text.as_bytes()).unwrap();
        let Json::Object(top) = &value else { panic!("{value:?}") };
        let keys: Vec<&str> = top.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["cells", "zeta", "alpha"], "the file's order, not sorted");
        let indent = Indent::of(text);
        assert_eq!(indent, Indent::jupyter());
        let back = String::from_utf8(write(&value, &indent).unwrap()).unwrap();
        let again = parse(back.as_bytes()).unwrap();
        assert_eq!(again, value);
        let jupyter = "{\n \"a\": [],\n \"b\": {},\n \"c\": [\n  1,\n  \"two\"\n ]\n}\n";
        let written = write(&parse(jupyter.as_bytes()).unwrap(), &Indent::of(jupyter)).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), jupyter);
    }

    #[test]
    fn the_layout_follows_the_file() {
        assert_eq!(Indent::of("{\"a\": 1}"), Indent { unit: None, final_newline: false });
        assert_eq!(
            Indent::of("{\n    \"a\": 1\n}"),
            Indent { unit: Some("    ".into()), final_newline: false }
        );
        let compact = write(&parse(b"{\"a\": [1, 2]}").unwrap(), &Indent::of("{}")).unwrap();
        assert_eq!(compact, b"{\"a\":[1,2]}");
    }

    #[test]
    fn keys_added_to_a_cell_land_in_sorted_order() {
        let mut cell = Object(vec![
            ("cell_type".into(), Json::String("code".into())),
            ("metadata".into(), Json::Object(Object::default())),
            ("source".into(), Json::String(String::new())),
        ]);
        cell.set_sorted("outputs", Json::Array(vec![]));
        cell.set_sorted("execution_count", Json::Null);
        cell.set_sorted("id", Json::String("x".into()));
        let keys: Vec<&str> = cell.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["cell_type", "execution_count", "id", "metadata", "outputs", "source"]);
    }

    #[test]
    fn nesting_past_the_parsers_limit_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).unwrap_err().to_string().contains("recursion limit"));
    }
}
