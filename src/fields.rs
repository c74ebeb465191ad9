//! A tool's fields as its Input's schema gives them, shared by what takes or
//! shows a field at a time (the command line's flags, the web page's forms,
//! `list` and `help`): each field's path, kind and description, and one
//! value given as text turned into JSON.

use crate::input::parse_input;
use crate::stop::Stop;
use serde_json::{Map, Value};

/// How one field's value, given as text, becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A string, as given.
    Text,
    /// A whole number.
    Integer,
    /// `true`/`false` (`yes`/`no`, `1`/`0`); a checkbox on the web page.
    Boolean,
    /// A list: items separated by spaces, or a JSON list.
    List,
    /// Any other value (an object), as JSON text.
    Json,
}

impl Flag {
    /// Its command-line id, apart from the global flags' ids.
    pub fn id(&self) -> String {
        format!("field:{}", self.path.join("."))
    }

    /// Its name as a flag or a form's field.
    pub fn name(&self) -> String {
        self.long.clone().unwrap_or_else(|| {
            self.path
                .last()
                .cloned()
                .unwrap_or_default()
                .replace('_', "-")
        })
    }
}

/// One field derived from a schema property: a flag, or a form's field.
#[derive(Debug, Clone)]
pub struct Flag {
    /// Where its value goes in the input: `["budget", "wall"]`.
    pub path: Vec<String>,
    /// The flag's name when the schema gives one (`x-flag`), as for a
    /// field whose own name is a global flag's.
    pub long: Option<String>,
    /// How its text becomes JSON.
    pub kind: Kind,
    /// Its description, on one line.
    pub doc: String,
    /// Whether the command line also takes it without its flag.
    pub positional: bool,
    /// Whether the Input requires it.
    pub required: bool,
}

/// The JSON value of `field` given as `texts` (a list may be given in
/// several parts), refused naming the field when it does not parse.
pub fn to_json(field: &str, kind: Kind, texts: &[&str]) -> Result<Value, Stop> {
    let last = texts.last().copied().unwrap_or("");
    match kind {
        Kind::Text => Ok(Value::String(last.to_string())),
        Kind::Integer => last.parse::<i64>().map(Value::from).map_err(|_| {
            Stop::field(field, format!("{last:?} is not a whole number"))
                .next("give a whole number")
        }),
        Kind::Boolean => match last {
            "true" | "yes" | "1" => Ok(Value::Bool(true)),
            "false" | "no" | "0" => Ok(Value::Bool(false)),
            _ => Err(Stop::field(field, format!("{last:?} is not true or false"))
                .next("give true or false")),
        },
        Kind::List => {
            let mut items = Vec::new();
            for t in texts {
                if t.trim_start().starts_with('[') {
                    match parse_input(format!("{{\"v\":{t}}}").as_bytes()) {
                        Ok(Value::Object(mut o)) => match o.remove("v") {
                            Some(Value::Array(a)) => items.extend(a),
                            _ => {
                                return Err(Stop::field(field, "is not a JSON list")
                                    .next("give the items separated by spaces"));
                            }
                        },
                        _ => {
                            return Err(Stop::field(field, "is not a JSON list")
                                .next("give the items separated by spaces"));
                        }
                    }
                } else {
                    items.extend(t.split_whitespace().map(|s| Value::String(s.to_string())));
                }
            }
            Ok(Value::Array(items))
        }
        Kind::Json => {
            let wrapped = format!("{{\"v\":{last}}}");
            match parse_input(wrapped.as_bytes()) {
                Ok(Value::Object(mut o)) => Ok(o.remove("v").unwrap_or(Value::Null)),
                _ => Err(Stop::field(field, "is not JSON").next("give the value as JSON")),
            }
        }
    }
}

/// Sets `value` at `path` in `input`, making objects on the way.
pub fn set(input: &mut Value, path: &[String], value: Value, field: &str) -> Result<(), Stop> {
    let mut at = input;
    for (i, key) in path.iter().enumerate() {
        let obj = at.as_object_mut().ok_or_else(|| {
            Stop::field(field, "conflicts with --input").next("give the field once")
        })?;
        if i + 1 == path.len() {
            obj.insert(key.clone(), value);
            return Ok(());
        }
        at = obj
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// The fields a tool's input schema gives, but those in `skip`: one per property, and one per
/// property of a nested object (its name alone, when no other flag has it).
pub fn flags_of(schema: &Value, skip: &[&str]) -> Vec<Flag> {
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut nested = Vec::new();
    let mut positional_taken = false;
    for (name, p) in props {
        let long = p.get("x-flag").and_then(Value::as_str).map(str::to_string);
        if skip.contains(&name.as_str()) && long.is_none() {
            continue;
        }
        let p = resolve(p, &defs);
        let kind = kind_of(&p);
        let first = !positional_taken && kind == Kind::Text && required.first() == Some(name);
        let more = positional_taken
            && kind == Kind::Text
            && p.get("x-positional").and_then(Value::as_bool) == Some(true);
        let positional = first || more;
        positional_taken |= positional;
        out.push(Flag {
            path: vec![name.clone()],
            long,
            kind,
            doc: doc_of(&p),
            positional,
            required: required.contains(name),
        });
        if kind == Kind::Json
            && let Some(sub) = p.get("properties").and_then(Value::as_object)
        {
            for (sname, sp) in sub {
                let sp = resolve(sp, &defs);
                nested.push(Flag {
                    path: vec![name.clone(), sname.clone()],
                    long: None,
                    kind: kind_of(&sp),
                    doc: doc_of(&sp),
                    positional: false,
                    required: false,
                });
            }
        }
    }
    let taken: Vec<String> = out.iter().map(|f| f.path[0].clone()).collect();
    for f in nested {
        let last = f.path.last().cloned().unwrap_or_default();
        let clash = taken.contains(&last)
            || skip.contains(&last.as_str())
            || out.iter().filter(|g| g.path.last() == Some(&last)).count() > 0;
        if !clash {
            out.push(f);
        }
    }
    out
}

/// A property schema with `$ref` and `Option`'s `anyOf [.., null]` seen through.
fn resolve(p: &Value, defs: &Value) -> Value {
    let mut p = p.clone();
    for _ in 0..4 {
        if let Some(r) = p.get("$ref").and_then(Value::as_str) {
            let name = r.rsplit('/').next().unwrap_or("");
            let mut target = defs.get(name).cloned().unwrap_or(Value::Null);
            if let (Some(d), Some(t)) = (p.get("description").cloned(), target.as_object_mut()) {
                t.insert("description".into(), d);
            }
            p = target;
            continue;
        }
        if let Some(any) = p.get("anyOf").and_then(Value::as_array) {
            let non_null: Vec<&Value> = any
                .iter()
                .filter(|v| v.get("type") != Some(&Value::from("null")))
                .collect();
            if non_null.len() == 1 {
                let mut inner = non_null[0].clone();
                if let (Some(d), Some(t)) = (p.get("description").cloned(), inner.as_object_mut()) {
                    t.entry("description").or_insert(d);
                }
                p = inner;
                continue;
            }
        }
        break;
    }
    p
}

fn kind_of(p: &Value) -> Kind {
    let types: Vec<&str> = match p.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    let any_text = p.get("anyOf").and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .any(|v| v.get("type") == Some(&Value::from("string")))
    });
    let choice_of_texts = p.get("oneOf").and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .all(|v| v.get("const").is_some_and(Value::is_string))
    });
    match types.as_slice() {
        ["string"] => Kind::Text,
        [] if any_text || choice_of_texts => Kind::Text,
        ["integer"] => Kind::Integer,
        ["boolean"] => Kind::Boolean,
        ["array"] => Kind::List,
        _ if p.get("enum").is_some() => Kind::Text,
        _ => Kind::Json,
    }
}

fn doc_of(p: &Value) -> String {
    p.get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .replace('\n', " ")
}
