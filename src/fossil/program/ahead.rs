//! A `fossil` started ahead of its command: `fossil --args -`, waiting on
//! its standard input for the words of a command it has not been given
//! yet. Its start (the program loaded, its libraries linked) is made on
//! another processor while OCX still reads the repository and composes
//! what the command will store; a person's `ocx post` then waits for the
//! import alone, not for Fossil's start too.
//!
//! Fossil reads `--args` a line a word, with three changes: a line that
//! begins with `-` and holds a space is two words, `\r` before a line's end
//! is dropped, and text that is not UTF-8 is read as CP1252; and it reads
//! `--args` once. A command is given this way only when each of its words
//! comes back unchanged and means what it would on a command line; any
//! other is started afresh, as always.

use std::ffi::OsStr;
use std::io::Write;
use std::process::{Child, Command, Output, Stdio};

/// A started `fossil --args -`, waiting for its command.
#[derive(Debug)]
pub(super) struct Ahead {
    /// The program, until it is given its command.
    child: Option<Child>,
}

impl Ahead {
    /// Starts `program` (a command built as every `fossil` OCX runs is),
    /// waiting for its words; `None` when it cannot be started.
    pub(super) fn start(mut program: Command) -> Option<Ahead> {
        program
            .args(["--args", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .ok()
            .map(|child| Ahead { child: Some(child) })
    }

    /// Its process id, while it waits.
    #[cfg(test)]
    pub(super) fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Gives it `words` and waits for its end: what it wrote and how it
    /// ended; `None` when it could not be given them (it had ended), so
    /// the command was not run and may be started afresh.
    pub(super) fn run(mut self, words: &[u8]) -> Option<std::io::Result<Output>> {
        let mut child = self.child.take()?;
        let given = child.stdin.take().map(|mut stdin| stdin.write_all(words));
        match given {
            Some(Ok(())) => Some(child.wait_with_output()),
            _ => {
                end(&mut child);
                None
            }
        }
    }
}

impl Drop for Ahead {
    /// A program never given its command is ended, not left to read an
    /// empty command and print its usage.
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            end(child);
        }
    }
}

/// Ends `child` and reaps it.
fn end(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `args` as the lines `--args` reads back as exactly these words, or
/// `None` when one of them would come back changed (empty, not UTF-8,
/// holding a line's end or NUL, or beginning with `-` and holding a space)
/// or would mean something else: `--args` among words read from `--args`
/// is not read again, as it would be on a command line.
pub(super) fn lines(args: &[&OsStr]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for arg in args {
        let word = arg.to_str()?;
        let changed = word.is_empty()
            || word.contains(['\n', '\r', '\0'])
            || word.starts_with('\u{feff}')
            || (word.starts_with('-') && word.contains(is_fossil_space))
            || word == "--args"
            || word == "-args";
        if changed {
            return None;
        }
        out.extend_from_slice(word.as_bytes());
        out.push(b'\n');
    }
    Some(out)
}

/// Fossil's `fossil_isspace`: the characters a line beginning with `-` is
/// split at.
fn is_fossil_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r')
}
