//! The floor plan of docs/architecture.md, held: every `crate::` path in the
//! crate's sources (in `use` lines, grouped or not, and written inline), and
//! every `super::` that leaves its layer, names a layer at or below its
//! file's own. A line scanner, not a parser: it skips comment lines and
//! does not see inline modules, so a `super::` inside one is read as its
//! file's (never an upward step it could miss between layers).

use std::path::{Path, PathBuf};

/// The layers, top to bottom: each level's modules (a top module of
/// `src/`, its file or directory). A module may use any module of a lower
/// level, and of its own level only as [`WITHIN`] allows.
const LEVELS: &[&[&str]] = &[
    &["entry"],
    &["registry"],
    &["tools"],
    &["tool", "fields", "input"],
    &["node", "run"],
    &["context"],
    &["protocol", "place"],
    &["git"],
    &["fossil"],
    &["answer", "stop", "lock", "file", "http"],
];

/// The edges allowed within one level (from, to): the node starts runs (the
/// run never knows the node); a place is said in messages and a message
/// tag marks what is said at one; a tool's fields read their values as
/// input does; an answer says which kind of stop it is.
const WITHIN: &[(&str, &str)] = &[
    ("node", "run"),
    ("answer", "stop"),
    ("protocol", "place"),
    ("place", "protocol"),
    ("fields", "input"),
];

fn level(module: &str) -> Option<usize> {
    LEVELS.iter().position(|l| l.contains(&module))
}

pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's module path: `src/entry/watch.rs` is `["entry", "watch"]`,
/// `src/run/mod.rs` is `["run"]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Each path a `use` tree starting at `text` names (`a::b`, `{a, b::{c, d}}`),
/// with the offset where it starts, under `prefix`.
fn tree(text: &str, at: usize, prefix: String, out: &mut Vec<(usize, String)>) -> usize {
    let b = text.as_bytes();
    let mut i = at;
    let skip = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip(&mut i);
    if b.get(i) == Some(&b'{') {
        i += 1;
        loop {
            skip(&mut i);
            match b.get(i) {
                None => return i,
                Some(b'}') => return i + 1,
                Some(b',') => i += 1,
                // Any other byte (a stray one): stepped over, never looped on.
                _ => i = tree(text, i, prefix.clone(), out).max(i + 1),
            }
        }
    }
    let start = i;
    while i < b.len() && (is_ident(b[i]) || b[i] == b'*') {
        i += 1;
    }
    let path = format!("{prefix}{}", &text[start..i]);
    if text[i..].starts_with("::") {
        return tree(text, i + 2, format!("{path}::"), out);
    }
    out.push((start, path));
    let mut j = i;
    skip(&mut j);
    if text[j..].starts_with("as ") {
        j += 3;
        skip(&mut j);
        while j < b.len() && is_ident(b[j]) {
            j += 1;
        }
        return j;
    }
    i
}

/// Every module path the source `text` of `module` names through `crate::`
/// or `super::`, resolved from the crate's root, with its line.
fn paths(module: &[String], text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b'$' || b[i - 1] == b':');
        if word_start && b[i..].starts_with(b"crate::") {
            i = tree(&code, i + 7, String::new(), &mut found);
        } else if word_start && b[i..].starts_with(b"super::") {
            let mut base = module.to_vec();
            while b[i..].starts_with(b"super::") {
                base.pop();
                i += 7;
            }
            let mut named = Vec::new();
            i = tree(&code, i, String::new(), &mut named);
            // Still inside the file's own top module: its own layer. At the
            // root, a name no layer holds is an inline module's own item.
            if base.is_empty() {
                found.extend(
                    named
                        .into_iter()
                        .filter(|(_, p)| level(p.split("::").next().unwrap_or("")).is_some()),
                );
            }
        } else {
            i += 1;
        }
    }
    found
        .into_iter()
        .map(|(at, path)| (code[..at].matches('\n').count() + 1, path))
        .collect()
}

#[test]
fn calls_flow_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let module = module_of(relative);
        let shown = format!("src/{}", relative.display());
        let Some(own) = module
            .first()
            // The programs' own files (src/main.rs, src/bin/) are above every layer.
            .filter(|m| !matches!(m.as_str(), "lib" | "main" | "bin"))
        else {
            continue;
        };
        let Some(from) = level(own) else {
            upward.push(format!("{shown}: module {own} is in no layer"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, path) in paths(&module, &text) {
            let to = path.split("::").next().unwrap_or("");
            if to == own || WITHIN.contains(&(own.as_str(), to)) {
                continue;
            }
            match level(to) {
                None => upward.push(format!("{shown}:{line}: crate::{path}: {to} is in no layer")),
                Some(l) if l <= from => upward.push(format!(
                    "{shown}:{line}: crate::{path} runs upward: {own} (level {}) uses {to} (level {})",
                    from + 1,
                    l + 1
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        upward.is_empty(),
        "calls must flow one way (docs/architecture.md, the layers):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_scanner_reads_grouped_and_inline_paths() {
    let module = ["place".to_string()];
    let text = "use crate::fossil::{self, repo::Lookup};\nuse crate::{a, b::{c, d as e}};\n\
                // crate::comment\nfn f() { crate::x::y(); super::tools::z(); }\n";
    let found: Vec<String> = paths(&module, text)
        .into_iter()
        .map(|(line, p)| format!("{line} {p}"))
        .collect();
    assert_eq!(
        found,
        [
            "1 fossil::self",
            "1 fossil::repo::Lookup",
            "2 a",
            "2 b::c",
            "2 b::d",
            "4 x::y",
            "4 tools::z"
        ]
    );
}
