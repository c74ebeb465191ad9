//! The one exact-match replacement `edit` and `wiki_edit` use: a match
//! found once or refused with where it stands, the closest lines shown
//! when there is none, and lines read by number.

use super::READ_LINES;
use crate::stop::Stop;

/// Where `old` is found in `text`, as `edit` needs it: exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Once, at this byte offset.
    Once(usize),
    /// Nowhere.
    Nowhere,
    /// Several times, starting on these lines (from 1).
    Several(Vec<usize>),
}

/// Looks for `old` in `text`.
pub fn find_once(text: &str, old: &str) -> Found {
    let starts: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    match starts.as_slice() {
        [] => Found::Nowhere,
        [one] => Found::Once(*one),
        many => Found::Several(many.iter().map(|i| line_of(text, *i)).collect()),
    }
}

/// The line (from 1) holding byte `at` of `text`.
pub fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The lines of `text` closest to `old`'s first line that is not blank,
/// for a refusal to show with their numbers: at most three, `N: TEXT`.
pub fn closest_lines(text: &str, old: &str) -> Vec<String> {
    let want = old
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if want.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (distance(l.trim(), want), i + 1, l))
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(3)
        .map(|(_, n, l)| format!("{n}: {l}"))
        .collect()
}

/// The edit distance between `a` and `b`, by characters, capped at 200
/// characters each so a long line costs little.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(200).collect();
    let b: Vec<char> = b.chars().take(200).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Replaces the one place `old` is in `text` with `new` (or, `old` empty,
/// adds `new` at the end); answers the new text and the lines changed
/// (first, last, from 1). `what` names the text in a refusal; the
/// refusal names `old`, with the closest lines or every line it starts on.
pub fn replace_once(
    text: &str,
    old: &str,
    new: &str,
    what: &str,
) -> Result<(String, usize, usize), Stop> {
    if old.is_empty() {
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let first = line_of(&out, out.len());
        out.push_str(new);
        let last = first + new.trim_end_matches('\n').matches('\n').count();
        return Ok((out, first, last));
    }
    match find_once(text, old) {
        Found::Once(at) => {
            let mut out = String::with_capacity(text.len() + new.len());
            out.push_str(&text[..at]);
            out.push_str(new);
            out.push_str(&text[at + old.len()..]);
            let first = line_of(&out, at);
            let last = first + new.trim_end_matches('\n').matches('\n').count();
            Ok((out, first, last))
        }
        Found::Nowhere => {
            let close = closest_lines(text, old);
            let shown = if close.is_empty() {
                String::new()
            } else {
                format!("; the closest lines are {}", close.join(" | "))
            };
            Err(Stop::field("old", format!("not found in {what}{shown}"))
                .next("read the lines again with read and copy old exactly from its text"))
        }
        Found::Several(lines) => Err(Stop::field(
            "old",
            format!(
                "found {} times in {what}, starting on lines {}",
                lines.len(),
                lines
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .next("add a line before or after to old to make it unique")),
    }
}

/// Up to [`READ_LINES`] lines of `text` from line `from` (from 1): the
/// text exactly as it is, the first and last line given, and how many
/// lines `text` has.
pub fn lines_from(text: &str, from: usize) -> (String, usize, usize, usize) {
    let total = text.lines().count();
    let from = from.max(1);
    let mut start = 0;
    let mut line = 1;
    while line < from && start < text.len() {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => start = text.len(),
        }
        line += 1;
    }
    let mut end = start;
    let mut taken = 0;
    while taken < READ_LINES && end < text.len() {
        match text[end..].find('\n') {
            Some(i) => end += i + 1,
            None => end = text.len(),
        }
        taken += 1;
    }
    let last = if taken == 0 {
        from - 1
    } else {
        from + taken - 1
    };
    (text[start..end].to_string(), from, last, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn replaces_only_a_unique_match() {
        let text = "a\nb\nc\nb\n";
        assert!(matches!(find_once(text, "b\n"), Found::Several(ref l) if l == &[2, 4]));
        let (out, first, last) = replace_once(text, "c\n", "C\nD\n", "f").unwrap();
        assert_eq!(out, "a\nb\nC\nD\nb\n");
        assert_eq!((first, last), (3, 4));
        let miss = replace_once(text, "cc", "x", "f").unwrap_err();
        assert!(miss.reason.contains("3: c"), "{}", miss.reason);
        let (out, first, _) = replace_once("x", "", "y\n", "f").unwrap();
        assert_eq!((out.as_str(), first), ("x\ny\n", 2));
    }

    #[test]
    fn reads_lines_exactly() {
        let (t, f, l, n) = lines_from("1\n2\n3\n", 2);
        assert_eq!((t.as_str(), f, l, n), ("2\n3\n", 2, 3, 3));
        let (t, _, l, _) = lines_from("1\n2", 5);
        assert_eq!((t.as_str(), l), ("", 4));
    }
}
