//! A delivery's text as a run's inbox carries it: one line, a newline as
//! `\n`, a carriage return as `\r`, a backslash as `\\`; and back. The
//! lines a run reads are `Record HASH: OBJECTIVE` first, then each delivery:
//! `Post HASH from LOGIN: TEXT`, `Change HASH to TICKET from LOGIN: TEXT`
//! or `Check-in HASH on BRANCH by LOGIN`; [`read`] reads one back, with
//! where an answer to it goes.

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

/// One line of the run's input, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line's text, as the model is given it (unescaped).
    pub text: String,
    /// Where the model's last words go: the delivered post or ticket
    /// change, else the record (the run's place).
    pub reply_to: String,
}

/// Reads a run's line: the first must be `Record HASH: OBJECTIVE`, every
/// later one `Post HASH from …`, `Change HASH to …` or `Check-in HASH on …`.
pub fn read(line: &str, record: Option<&str>) -> Result<Line, String> {
    let hash_of = |rest: &str, sep: &str| -> Option<String> {
        let (hash, _) = rest.split_once(sep)?;
        let ok = matches!(hash.len(), 40 | 64) && hash.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| hash.to_ascii_lowercase())
    };
    let text = unescape(line);
    let reply_to = match record {
        None => line
            .strip_prefix("Record ")
            .and_then(|r| hash_of(r, ": "))
            .ok_or("the first line is not `Record HASH: OBJECTIVE`")?,
        Some(record) => {
            if let Some(rest) = line.strip_prefix("Post ") {
                hash_of(rest, " from ").ok_or("a `Post` line names no post")?
            } else if let Some(rest) = line.strip_prefix("Change ") {
                hash_of(rest, " to ").ok_or("a `Change` line names no ticket change")?
            } else if let Some(rest) = line.strip_prefix("Check-in ") {
                hash_of(rest, " on ").ok_or("a `Check-in` line names no check-in")?;
                record.to_string()
            } else {
                return Err("the line is no delivery (`Post`, `Change` or `Check-in`)".into());
            }
        }
    };
    Ok(Line { text, reply_to })
}
