//! OCX message blocks: the first fenced JSON block of a post or ticket
//! change whose object carries `"ocx"`, its fences paired as CommonMark
//! pairs them. The reader says whether a text holds a message, holds none,
//! or holds one that must be refused (a NUL, text not UTF-8, a name given
//! twice); the writer fences a message as OCX always writes it.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// The protocol version this reader knows.
pub const VERSION: u64 = 1;

/// What a text holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reading", rename_all = "snake_case")]
pub enum Reading {
    /// A message of a known version: its whole object.
    Message { message: Map<String, Value> },
    /// No message: no block with `"ocx"`, or one of an unknown version.
    NotAMessage { why: String },
    /// A message that must be refused, naming the field at fault.
    Refused { field: String, reason: String },
}

/// Reads the message a post's or ticket change's text holds.
pub fn read(text: &[u8]) -> Reading {
    let Ok(text) = std::str::from_utf8(text) else {
        return match first_block_lossy(text) {
            Some(_) => Reading::Refused {
                field: "text".into(),
                reason: "the message is not UTF-8".into(),
            },
            None => Reading::NotAMessage {
                why: "no fenced JSON block with \"ocx\"".into(),
            },
        };
    };
    for block in json_blocks(text) {
        let value = match parse_unique(&block) {
            Ok(v) => v,
            Err(Unparsed::Twice(key)) if block.contains("\"ocx\"") => {
                return Reading::Refused {
                    field: super::kinds::clip(&key),
                    reason: "a name is given twice".into(),
                };
            }
            Err(_) => continue,
        };
        let Value::Object(map) = value else { continue };
        let Some(version) = map.get("ocx") else {
            continue;
        };
        if version.as_u64() != Some(VERSION) || !version.is_u64() {
            return Reading::NotAMessage {
                why: format!("version {version} is not one this reader knows"),
            };
        }
        if let Some(field) = nul_in(&Value::Object(map.clone()), "") {
            return Reading::Refused {
                field: super::kinds::clip(&field),
                reason: "holds a NUL character".into(),
            };
        }
        return Reading::Message { message: map };
    }
    Reading::NotAMessage {
        why: "no fenced JSON block with \"ocx\"".into(),
    }
}

/// The message fenced as OCX writes it: a ```` ```json ```` line, the
/// object pretty-printed, a closing fence.
pub fn write(message: &Map<String, Value>) -> String {
    let body = serde_json::to_string_pretty(message).unwrap_or_default();
    format!("```json\n{body}\n```\n")
}

/// The contents of each fenced code block whose info string is `json` or empty.
pub fn json_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !text.contains("```") && !text.contains("~~~") {
        return out;
    }
    let mut current: Option<String> = None;
    for ev in Parser::new(text) {
        match ev {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let lang = info.split_whitespace().next().unwrap_or("");
                current = (lang.is_empty() || lang.eq_ignore_ascii_case("json")).then(String::new);
            }
            Event::Text(t) => {
                if let Some(c) = current.as_mut() {
                    c.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(c) = current.take() {
                    out.push(c);
                }
            }
            _ => {}
        }
    }
    out
}

fn first_block_lossy(text: &[u8]) -> Option<String> {
    let lossy = String::from_utf8_lossy(text);
    json_blocks(&lossy)
        .into_iter()
        .find(|b| b.contains("\"ocx\""))
}

fn nul_in(v: &Value, path: &str) -> Option<String> {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::String(s) if s.contains('\0') => Some(if path.is_empty() {
            "message".into()
        } else {
            path.into()
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| nul_in(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().find_map(|(k, x)| {
            if k.contains('\0') {
                Some(join(k))
            } else {
                nul_in(x, &join(k))
            }
        }),
        _ => None,
    }
}

/// Why a block is not one JSON value every reader reads alike.
enum Unparsed {
    /// An object names this key twice.
    Twice(String),
    /// It is not JSON.
    Invalid,
}

/// Parses JSON refusing an object that names a key twice, which readers
/// would otherwise disagree on.
fn parse_unique(text: &str) -> Result<Value, Unparsed> {
    let twice = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Unique(&twice)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match (parsed, twice.into_inner()) {
        (_, Some(key)) => Err(Unparsed::Twice(key)),
        (Ok(v), None) => Ok(v),
        (Err(_), None) => Err(Unparsed::Invalid),
    }
}

/// A JSON value read as `serde_json` reads one, but for a key given twice
/// in an object, which it keeps in its cell and refuses.
#[derive(Clone, Copy)]
struct Unique<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v)
            .map(Value::Number)
            .unwrap_or(Value::Null))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(self)?;
            if out.contains_key(&k) {
                *self.0.borrow_mut() = Some(k);
                return Err(de::Error::custom("a key given twice"));
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_field(text: &str) -> Option<String> {
        match read(text.as_bytes()) {
            Reading::Refused { field, .. } => Some(field),
            _ => None,
        }
    }

    #[test]
    fn a_name_given_twice_is_refused_naming_it_at_any_depth() {
        let top = "```json\n{\"ocx\": 1, \"kind\": \"stop\", \"kind\": \"record\"}\n```\n";
        assert_eq!(refused_field(top).as_deref(), Some("kind"));
        let inner = "```json\n{\"ocx\": 1, \"budget\": {\"wall\": 1, \"wall\": 9}}\n```\n";
        assert_eq!(refused_field(inner).as_deref(), Some("wall"));
        let listed = "```json\n{\"ocx\": 1, \"on\": [{\"a\": 1, \"a\": 2}]}\n```\n";
        assert_eq!(refused_field(listed).as_deref(), Some("a"));
    }

    #[test]
    fn a_block_not_ocxs_with_a_name_twice_is_passed_over() {
        let text = "```json\n{\"a\": 1, \"a\": 2}\n```\n\n```json\n{\"ocx\": 1, \"kind\": \"stop\"}\n```\n";
        assert!(matches!(read(text.as_bytes()), Reading::Message { .. }));
        let broken = "```json\n{\"ocx\": 1, \"kind\": \n```\n";
        assert!(matches!(
            read(broken.as_bytes()),
            Reading::NotAMessage { .. }
        ));
    }
}
