//! A delivery's text as a run's inbox carries it: one line, a newline as
//! `\n`, a carriage return as `\r`, a backslash as `\\`; and back.

/// The line a delivery's text is written as.
pub fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// An inbox line back to its text, for a runner that takes JSON; a lone
/// or unknown escape stands for itself.
pub fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut it = line.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}
