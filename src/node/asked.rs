//! A run whose budget asks (`budget.ask`): the question its watcher posts,
//! as the node's login, to the record's sender when the run reaches its
//! budget, and the decision on it the node hands its watcher. The node
//! sees every decision in its wake; it hands one over only when the
//! question is its own and names an open run, and the decision's sender,
//! by receipt, is the login the question waits on (the record's sender).

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file of a run's directory a decision on its budget is handed over in.
pub const DECISION: &str = "budget-decision";

/// The options a budget's question offers, the first recommended: each
/// decision's note begins with the one chosen.
pub const OPTIONS: [&str; 3] = ["the same again", "end it", "more, the figure in the note"];

/// A decision on a run's budget, as the node hands it to the run's watcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// The question it decides, by full hash.
    pub question: String,
    /// The decision's post, by full hash.
    pub decision: String,
    /// Its sender, by receipt.
    pub from: String,
    /// Its note: the option chosen, then any words of the sender's.
    pub note: String,
}

/// What a decision on a run's budget asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raise {
    /// The record's budget again, on top.
    Same,
    /// The run ended at its budget.
    End,
    /// This much more, as written (tokens, or an amount of the prices'
    /// currency), read by the budget it raises.
    More(String),
}

/// Reads a decision's note: an option by its words, else the last figure
/// in it (digits, with commas between thousands and a decimal point);
/// `None` when it says neither.
pub fn read_note(note: &str) -> Option<Raise> {
    let n = note.trim().to_ascii_lowercase();
    if n.starts_with(OPTIONS[1]) {
        return Some(Raise::End);
    }
    let figure = n
        .split(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
        .map(|w| w.trim_matches(|c| c == ',' || c == '.').replace(',', ""))
        .rfind(|w| w.bytes().any(|b| b.is_ascii_digit()));
    match figure {
        Some(f) if !n.starts_with(OPTIONS[0]) => Some(Raise::More(f)),
        _ if n.starts_with(OPTIONS[0]) => Some(Raise::Same),
        _ => None,
    }
}

/// Reads the last duration in a decision's note, in seconds: a figure
/// (commas between thousands) with a unit after it, `s`, `m`, `h` or `d`
/// or a word starting so (`30m`, `2 hours`), or seconds where none
/// follows; `None` when it holds no figure.
pub fn read_seconds(note: &str) -> Option<u64> {
    let n = note.to_ascii_lowercase();
    let b = n.as_bytes();
    let mut last = None;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut figure: u64 = 0;
        while i < b.len()
            && (b[i].is_ascii_digit()
                || (b[i] == b',' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
        {
            if b[i] != b',' {
                figure = figure
                    .checked_mul(10)?
                    .checked_add(u64::from(b[i] - b'0'))?;
            }
            i += 1;
        }
        let mut j = i;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        let unit = match b.get(j) {
            Some(b'm') => 60,
            Some(b'h') => 3600,
            Some(b'd') => 86400,
            _ => 1,
        };
        last = Some(figure.checked_mul(unit)?);
    }
    last
}

/// Hands `d` to the run whose directory is `dir`, whole.
pub fn hand(dir: &Path, d: &Decided) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(d).map_err(std::io::Error::other)?;
    super::write_whole(
        &dir.join(DECISION),
        &dir.join(format!(".{DECISION}")),
        &bytes,
    )
}

/// Takes the decision handed to the run in `dir`, if one is there.
pub fn take(dir: &Path) -> Option<Decided> {
    let path = dir.join(DECISION);
    let bytes = std::fs::read(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_reads_as_its_option_or_its_figure() {
        assert_eq!(read_note("the same again"), Some(Raise::Same));
        assert_eq!(read_note("The same again: thanks"), Some(Raise::Same));
        assert_eq!(read_note("end it"), Some(Raise::End));
        assert_eq!(
            read_note("more, the figure in the note: 5,000"),
            Some(Raise::More("5000".into()))
        );
        assert_eq!(read_note("0.25"), Some(Raise::More("0.25".into())));
        assert_eq!(read_note("give it 3000."), Some(Raise::More("3000".into())));
        assert_eq!(read_note("no idea"), None);
        assert_eq!(read_note(""), None);
    }

    #[test]
    fn a_note_reads_as_its_last_duration() {
        assert_eq!(read_seconds("more, the figure in the note: 90"), Some(90));
        assert_eq!(read_seconds("more: 30m"), Some(1800));
        assert_eq!(read_seconds("give it 2 hours"), Some(7200));
        assert_eq!(read_seconds("1d"), Some(86400));
        assert_eq!(read_seconds("1,200 seconds"), Some(1200));
        assert_eq!(read_seconds("5m, then 45s"), Some(45));
        assert_eq!(read_seconds("the same again"), None);
        assert_eq!(read_seconds("99999999999999999999d"), None);
    }
}
