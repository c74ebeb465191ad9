//! The house rules a scan of `src/` can hold, beside the layers: no error
//! said as a bare `String`, no type named as a standard trait, and the
//! places allowed to start a program, read the environment or print the
//! very ones docs/architecture.md lists. Line scanners, not parsers: each
//! skips comment lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Files that still answer `Result<_, String>`, each with why.
const STRING_ERRORS_KEPT: &[(&str, &str)] = &[];

/// The traits of Rust's prelude, and the formatting, hashing and error
/// traits a type meets in every derive and impl: a type of OCX named as
/// one reads as the trait wherever it is used.
const STD_TRAITS: &[&str] = &[
    "AsMut",
    "AsRef",
    "Clone",
    "Copy",
    "Debug",
    "Default",
    "Display",
    "DoubleEndedIterator",
    "Drop",
    "Eq",
    "Error",
    "ExactSizeIterator",
    "Extend",
    "Fn",
    "FnMut",
    "FnOnce",
    "From",
    "FromIterator",
    "Future",
    "Hash",
    "Into",
    "IntoFuture",
    "IntoIterator",
    "Iterator",
    "Ord",
    "PartialEq",
    "PartialOrd",
    "Send",
    "Sized",
    "Sync",
    "ToOwned",
    "ToString",
    "TryFrom",
    "TryInto",
    "Unpin",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, as a path from the crate's root, with its
/// text, comment lines blanked.
fn sources(dir: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text
                .lines()
                .map(|l| match l.trim_start().starts_with("//") {
                    true => "",
                    false => l,
                })
                .collect::<Vec<_>>()
                .join("\n");
            let name = path.strip_prefix(root()).unwrap().to_string_lossy();
            (name.into_owned(), code)
        })
        .collect()
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The type arguments of each `Result<...>` in `code`, split at the top
/// level, with where each starts (an arrow `->` or `=>` inside is no
/// closing bracket).
fn results(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("Result<") {
        let at = from + found;
        from = at + 7;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let (mut depth, mut args, mut i) = (1, vec![String::new()], at + 7);
        while i < b.len() && depth > 0 {
            let c = b[i];
            let arrow = c == b'>' && i > 0 && matches!(b[i - 1], b'-' | b'=');
            match c {
                b'<' | b'(' | b'[' => depth += 1,
                b'>' | b')' | b']' if !arrow => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            match (c, depth) {
                (b',', 1) => args.push(String::new()),
                _ => args.last_mut().unwrap().push(c as char),
            }
            i += 1;
        }
        out.push((at, args.iter().map(|a| a.trim().to_string()).collect()));
    }
    out
}

#[test]
fn no_error_in_src_is_a_bare_string() {
    let mut found = Vec::new();
    for (file, code) in sources(&root().join("src")) {
        if STRING_ERRORS_KEPT
            .iter()
            .any(|(kept, _)| file.starts_with(kept))
        {
            continue;
        }
        for (at, args) in results(&code) {
            if args.len() == 2 && matches!(args[1].as_str(), "String" | "std::string::String") {
                found.push(format!(
                    "{file}:{}: Result<{}, {}>",
                    line_of(&code, at),
                    args[0],
                    args[1]
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "errors said as a bare String, where a thiserror enum of the layer's says what went wrong and its kind:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_for_string_errors_finds_them_and_no_string_ok() {
    let code = "fn a() -> Result<(), String> {}\n\
                fn b() -> io::Result<BTreeMap<String, String>> {}\n\
                fn c() -> Result<Box<dyn Fn() -> u8>, String> {}\n\
                fn d() -> Result<String, E> {}";
    let strings: Vec<usize> = results(code)
        .into_iter()
        .filter(|(_, a)| a.len() == 2 && a[1] == "String")
        .map(|(at, _)| line_of(code, at))
        .collect();
    assert_eq!(strings, vec![1, 3]);
}

#[test]
fn no_type_in_src_is_named_as_a_standard_trait() {
    let mut found = Vec::new();
    for (file, code) in sources(&root().join("src")) {
        for (n, line) in code.lines().enumerate() {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                if matches!(pair[0], "struct" | "enum" | "type" | "trait" | "union")
                    && STD_TRAITS.contains(&pair[1])
                {
                    found.push(format!("{file}:{}: {} {}", n + 1, pair[0], pair[1]));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "types named as a standard trait, read as the trait wherever they are used:\n{}",
        found.join("\n")
    );
}

/// The files docs/architecture.md names as allowed to start a program,
/// read the environment or print: each `src/...` path in a list item of
/// its section "Programs, the environment, printing".
fn places_documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let start = doc
        .find("### Programs, the environment, printing")
        .expect("docs/architecture.md has its section on programs and the environment");
    let section = &doc[start..];
    let end = section[4..].find("\n#").map_or(section.len(), |e| e + 4);
    // Each list item whole: its first line and the indented ones after it.
    let mut items: Vec<String> = Vec::new();
    for line in section[..end].lines() {
        match (line.strip_prefix("- "), items.last_mut()) {
            (Some(first), _) => items.push(first.to_string()),
            (None, Some(item)) if line.starts_with("  ") => {
                item.push(' ');
                item.push_str(line.trim());
            }
            _ => {}
        }
    }
    let mut named = BTreeSet::new();
    for item in items {
        for (i, part) in item.split('`').enumerate() {
            if i % 2 == 1 && part.starts_with("src/") && part.ends_with(".rs") {
                named.insert(part.to_string());
            }
        }
    }
    named
}

#[test]
fn the_places_allowed_to_start_programs_read_the_environment_or_print_are_the_documented_ones() {
    let allowed: BTreeSet<String> = sources(&root().join("src"))
        .into_iter()
        .filter(|(_, code)| {
            code.contains("allow(clippy::disallowed_methods)")
                || code.contains("allow(clippy::disallowed_macros)")
        })
        .map(|(file, _)| file)
        .collect();
    let documented = places_documented();
    let undocumented: Vec<_> = allowed.difference(&documented).collect();
    let unallowed: Vec<_> = documented.difference(&allowed).collect();
    assert!(
        undocumented.is_empty() && unallowed.is_empty(),
        "docs/architecture.md's places allowed to start a program, read the environment or print, \
         and the #[allow]s in src/, differ:\nallowed but not listed: {undocumented:?}\n\
         listed but allowing nothing: {unallowed:?}"
    );
}
