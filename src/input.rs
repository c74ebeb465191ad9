//! A tool's input read from text (`--input`, a web form's body, an MCP
//! call's arguments): JSON whose bytes that are not UTF-8 are marked, so the
//! check that refuses them, and a NUL, can name the field holding them.

use crate::stop::Stop;
use serde_json::Value;

/// A character standing where input bytes were not UTF-8, so the field
/// holding them can be named; a noncharacter, never in text people write.
const NOT_UTF8: char = '\u{FDD0}';

/// Reads a tool's whole input given as JSON text (`--input`, a web form's
/// body, an MCP call's arguments).
pub fn parse_input(bytes: &[u8]) -> Result<Value, Stop> {
    let text = mark_invalid(bytes);
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        Stop::field("input", format!("not a JSON object: {e}"))
            .next("give the input as one JSON object")
    })?;
    if !value.is_object() {
        return Err(
            Stop::field("input", "not a JSON object").next("give the input as one JSON object")
        );
    }
    Ok(value)
}

/// JSON text whose bytes that are not UTF-8, and whose escapes of half a
/// surrogate pair, are each replaced by a mark [`check_text`] refuses, so
/// such text still parses and the field holding it can be named. Valid
/// text comes back unchanged.
pub fn mark_invalid(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            text.push(NOT_UTF8);
        }
    }
    mark_lone_surrogates(&text)
}

/// Replaces each `\uD800`–`\uDFFF` escape that is not half of a pair with
/// an escape of [`NOT_UTF8`], since such a string has no UTF-8 form.
fn mark_lone_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let hex4 = |i: usize| -> Option<u32> {
        let s = text.get(i..i + 4)?;
        u32::from_str_radix(s, 16).ok()
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    while i + 1 < b.len() {
        if b[i] == b'\\' {
            if b[i + 1] == b'u'
                && let Some(cp) = hex4(i + 2)
                && (0xD800..0xE000).contains(&cp)
            {
                let paired = (0xD800..0xDC00).contains(&cp)
                    && b.get(i + 6) == Some(&b'\\')
                    && b.get(i + 7) == Some(&b'u')
                    && hex4(i + 8).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                if paired {
                    i += 12;
                } else {
                    out.push_str(&text[last..i]);
                    out.push_str("\\uFDD0");
                    i += 6;
                    last = i;
                }
                continue;
            }
            i += 2;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[last..]);
    out
}

/// The first string (or key) in `value` holding a NUL or bytes that were
/// not UTF-8, as a refusal naming its path.
pub fn check_text(value: &Value, path: &str) -> Result<(), Stop> {
    let bad = |s: &str, p: &str| -> Result<(), Stop> {
        if s.contains('\0') {
            return Err(
                Stop::field(p, "holds a NUL character").next("remove the NUL from the text")
            );
        }
        if s.contains(NOT_UTF8) {
            return Err(Stop::field(p, "is not UTF-8").next("give the text as UTF-8"));
        }
        Ok(())
    };
    match value {
        Value::String(s) => bad(s, if path.is_empty() { "input" } else { path }),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check_text(v, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                bad(k, &p)?;
                check_text(v, &p)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bytes_and_lone_surrogates_are_marked() {
        let v = parse_input(b"{\"text\": \"a\xff\"}").unwrap();
        assert_eq!(
            check_text(&v, "").unwrap_err().field.as_deref(),
            Some("text")
        );
        let v = parse_input(br#"{"to": "\ud800x"}"#).unwrap();
        assert_eq!(check_text(&v, "").unwrap_err().field.as_deref(), Some("to"));
        let v = parse_input(br#"{"to": "\ud83d\ude00"}"#).unwrap();
        assert!(check_text(&v, "").is_ok());
        let v = parse_input(br#"{"a": {"b": ["x\u0000"]}}"#).unwrap();
        assert_eq!(
            check_text(&v, "").unwrap_err().field.as_deref(),
            Some("a.b[0]")
        );
    }
}
