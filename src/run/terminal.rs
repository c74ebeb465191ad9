//! A run's terminal (protocol v1, C3), in three parts: a fresh
//! pseudo-terminal its watcher holds, whose far end is the program's
//! controlling terminal ([`Pty`], `pty.rs`); the one way a person joins
//! it ([`Joining`], `join.rs`): what it shows copied to them, what they
//! type reaching the program, one person at a time; and the reader of
//! what it shows ([`Screen`], `screen.rs`). What the watcher types into
//! it is made here ([`typed`], [`pasted`]).
//!
//! Everything the program writes is hostile: what reaches a person's
//! terminal passes [`Screen`], which reads it as a terminal does, lets
//! through what draws a screen and holds back what would act outside it
//! or make the terminal answer; what is kept as the run's output log is
//! its text alone, without escape sequences or carriage returns.

mod join;
mod pty;
mod screen;
pub use join::{
    Frame, Frames, Joined, Joining, KEYS_MAX, Keeper, LEAVE, NotAFrame, Parted, Refused, SOCKET,
    bind_in, connect_in,
};
pub use pty::{Pty, set_size, size};
pub use screen::Screen;

/// The rows a run's terminal has while no one is joined.
pub const ROWS: u16 = 50;
/// The columns a run's terminal has while no one is joined.
pub const COLS: u16 = 200;

/// The longest line Linux's terminal holds for a program reading lines
/// (its canonical mode), the newline aside.
pub const LINE_MAX: usize = 4095;

/// A line as the run's terminal is given it: no control character (each
/// made a space), cut at [`LINE_MAX`] bytes on a character's boundary,
/// ended by a carriage return.
pub fn typed(line: &str) -> Vec<u8> {
    let mut out: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > LINE_MAX {
        let mut at = LINE_MAX;
        while !out.is_char_boundary(at) {
            at -= 1;
        }
        out.truncate(at);
    }
    let mut bytes = out.into_bytes();
    bytes.push(b'\r');
    bytes
}

/// Text as an agent's own interface is given it: one bracketed paste
/// (what a terminal sends for pasted text, which the program takes whole,
/// line breaks and all, without acting on any of it), its control
/// characters but line breaks and tabs made spaces, so nothing in it ends
/// the paste early, cut at `max` bytes on a character's boundary. The
/// carriage return that submits it is typed after, on its own.
pub fn pasted(text: &str, max: usize) -> Vec<u8> {
    let mut at = text.len().min(max);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let clean: String = text[..at]
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let mut bytes = b"\x1b[200~".to_vec();
    bytes.extend_from_slice(clean.as_bytes());
    bytes.extend_from_slice(b"\x1b[201~");
    bytes
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_line_is_one_line_cut_where_linux_cuts_it() {
        assert_eq!(typed("Post abc: hi"), b"Post abc: hi\r");
        assert_eq!(typed("a\nb\rc\x1b"), b"a b c \r");
        let long = "é".repeat(3000);
        let t = typed(&long);
        assert!(t.len() <= LINE_MAX + 1 && std::str::from_utf8(&t[..t.len() - 1]).is_ok());
    }

    #[test]
    fn a_paste_holds_nothing_that_ends_it_early() {
        let hostile = "Post abc from pat: hi\x1b[201~\rrm -rf /\r\nsecond line\x07";
        let p = pasted(hostile, 1000);
        let inner = &p[6..p.len() - 6];
        assert!(p.starts_with(b"\x1b[200~") && p.ends_with(b"\x1b[201~"));
        assert!(!inner.contains(&0x1b) && !inner.contains(&b'\r') && !inner.contains(&0x07));
        assert!(inner.windows(12).any(|w| w == b"\nsecond line"));
        let cut = pasted(&"é".repeat(100), 51);
        assert!(std::str::from_utf8(&cut[6..cut.len() - 6]).is_ok());
        assert_eq!(cut.len(), 12 + 50);
    }
}
