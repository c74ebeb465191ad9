//! What a run's program writes to its terminal, read as a terminal reads
//! it: the text kept for the run's output log, and what may reach a
//! person's terminal when they join.
//!
//! Everything the program writes is hostile. A terminal acts on more than
//! ESC: the C1 controls, written as 8-bit bytes (`0x9d`) or as UTF-8
//! characters (U+009D), are the same commands (`ESC ]`), so each is read
//! as its ESC form before anything is judged, and reaches a person only
//! in that form. What passes draws on the screen: text, cursor movement,
//! colours, scrolling, erasing, modes, a window's title and its prompt
//! marks. Held back whatever its introducer: the clipboard and links
//! (OSC 52, OSC 8, and every OSC not listed), device control, start of
//! string, privacy and application strings (DCS, SOS, PM, APC), window
//! operations and reports (`CSI … t`), and every query a terminal answers
//! by typing into the run: device status and cursor position (DSR, `CSI
//! … n`), device attributes (DA, `CSI … c`, `ESC Z`, `0x9a`), modes and
//! settings asked (DECRQM, DECRQSS, XTVERSION, XTGETTCAP), colours asked
//! (`OSC 4/10/11/12` with `?`), terminal parameters (DECREQTPARM), and the
//! answerback (ENQ).

/// The longest escape sequence kept whole; a longer one is held back.
const SEQUENCE_MAX: usize = 4096;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    Csi,
    Osc,
    OscEscape,
    /// A device control, start of string, privacy or application string:
    /// held back whole, to its string terminator alone.
    Held,
    HeldEscape,
    /// An operating system command too long to keep: held back to its
    /// end (BEL, or the string terminator).
    HeldOsc,
}

/// Reads what a program writes to its terminal, in pieces as they come:
/// its text for the output log, and what may reach a person's terminal.
#[derive(Debug)]
pub struct Screen {
    state: State,
    sequence: Vec<u8>,
    /// The bytes of a UTF-8 character begun and not yet whole.
    partial: Vec<u8>,
}

impl Default for Screen {
    fn default() -> Self {
        Screen {
            state: State::Ground,
            sequence: Vec::new(),
            partial: Vec::new(),
        }
    }
}

/// Operating system commands a person's terminal may be given: the
/// window's title (0, 1, 2), colours set (4, 10–12, 104, 110–112) and a
/// shell's prompt marks (133); a colour asked (`?`) is held back with the
/// clipboard (52), hyperlinks (8) and every other.
const OSC_LET_THROUGH: &[&[u8]] = &[
    b"0", b"1", b"2", b"4", b"10", b"11", b"12", b"104", b"110", b"111", b"112", b"133",
];

/// What one byte of UTF-8 leads to, read with the bytes before it.
enum Decoded {
    /// Nothing yet: a character is under way, or a byte no terminal shows was dropped.
    Nothing,
    /// One whole character (one byte for ASCII), to read as it is.
    Char,
    /// A C1 control (0x80–0x9f, as a byte or a character): read as ESC and this byte.
    C1(u8),
}

impl Screen {
    /// Reads `bytes`: their text (no escape sequence, no carriage return,
    /// no other control but newline and tab) added to `text`, and what a
    /// person's terminal may be shown added to `shown`.
    pub fn read(&mut self, bytes: &[u8], text: &mut Vec<u8>, shown: &mut Vec<u8>) {
        for &b in bytes {
            match self.decode(b) {
                Decoded::Nothing => {}
                Decoded::Char => {
                    let whole = std::mem::take(&mut self.partial);
                    match whole[..] {
                        [ascii] => self.byte(ascii, text, shown),
                        _ => self.wide(&whole, text, shown),
                    }
                }
                Decoded::C1(c) => {
                    self.byte(ESC, text, shown);
                    self.byte(c - 0x40, text, shown);
                }
            }
        }
    }

    /// Adds `b` to the character under way (`partial`), as UTF-8 reads.
    fn decode(&mut self, b: u8) -> Decoded {
        if let Some(&lead) = self.partial.first() {
            let second = self.partial.len() == 1;
            let fits = match (lead, second) {
                (0xe0, true) => (0xa0..=0xbf).contains(&b),
                (0xed, true) => (0x80..=0x9f).contains(&b),
                (0xf0, true) => (0x90..=0xbf).contains(&b),
                (0xf4, true) => (0x80..=0x8f).contains(&b),
                _ => (0x80..=0xbf).contains(&b),
            };
            if !fits {
                // A character cut short is no character: dropped, and `b` read afresh.
                self.partial.clear();
                return self.decode(b);
            }
            self.partial.push(b);
            let whole = match lead {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            if self.partial.len() < whole {
                return Decoded::Nothing;
            }
            if lead == 0xc2 && (0x80..=0x9f).contains(&b) {
                self.partial.clear();
                return Decoded::C1(b);
            }
            return Decoded::Char;
        }
        match b {
            0x00..=0x7f => {
                self.partial.push(b);
                Decoded::Char
            }
            0x80..=0x9f => Decoded::C1(b),
            0xc2..=0xf4 => {
                self.partial.push(b);
                Decoded::Nothing
            }
            _ => Decoded::Nothing,
        }
    }

    /// Reads one character beyond ASCII, `c` its UTF-8 bytes: text, part
    /// of a command's string, or the end of a sequence it cannot be in.
    fn wide(&mut self, c: &[u8], text: &mut Vec<u8>, shown: &mut Vec<u8>) {
        match self.state {
            State::Osc if self.sequence.len() + c.len() <= SEQUENCE_MAX => {
                self.sequence.extend_from_slice(c)
            }
            State::Osc => {
                self.sequence.clear();
                self.state = State::HeldOsc;
            }
            State::Held | State::HeldOsc => {}
            State::HeldEscape => self.state = State::Held,
            State::Ground | State::Escape | State::Csi | State::OscEscape => {
                self.drop_sequence();
                text.extend_from_slice(c);
                shown.extend_from_slice(c);
            }
        }
    }

    fn byte(&mut self, b: u8, text: &mut Vec<u8>, shown: &mut Vec<u8>) {
        match self.state {
            State::Ground => match b {
                ESC => {
                    self.sequence.clear();
                    self.sequence.push(b);
                    self.state = State::Escape;
                }
                b'\n' | b'\t' => {
                    text.push(b);
                    shown.push(b);
                }
                // Bell, backspace, vertical tab, form feed and carriage
                // return draw; ENQ asks for the answerback, the shifts
                // change the character set, the rest do nothing.
                BEL | 0x08 | 0x0b | 0x0c | b'\r' => shown.push(b),
                0x00..=0x1f | 0x7f => {}
                _ => {
                    text.push(b);
                    shown.push(b);
                }
            },
            State::Escape => {
                self.sequence.push(b);
                match b {
                    b'[' => self.state = State::Csi,
                    b']' => self.state = State::Osc,
                    b'P' | b'X' | b'^' | b'_' => {
                        self.sequence.clear();
                        self.state = State::Held;
                    }
                    0x20..=0x2f if self.sequence.len() < 8 => {}
                    ESC => {
                        self.sequence.clear();
                        self.sequence.push(ESC);
                    }
                    // DECID: the terminal answers with its attributes.
                    b'Z' if self.sequence.len() == 2 => self.drop_sequence(),
                    0x30..=0x7e => self.pass(shown),
                    _ => self.drop_sequence(),
                }
            }
            State::Csi => {
                self.sequence.push(b);
                match b {
                    0x40..=0x7e => {
                        if draws(&self.sequence[2..]) {
                            self.pass(shown);
                        } else {
                            self.drop_sequence();
                        }
                    }
                    0x20..=0x3f if self.sequence.len() < 64 => {}
                    ESC => {
                        self.sequence.clear();
                        self.sequence.push(ESC);
                        self.state = State::Escape;
                    }
                    _ => self.drop_sequence(),
                }
            }
            State::Osc => match b {
                BEL => {
                    self.sequence.push(b);
                    self.end_osc(shown);
                }
                ESC => self.state = State::OscEscape,
                // A terminal ends a command at CAN or SUB and shows what follows.
                0x00..=0x1f => self.drop_sequence(),
                _ if self.sequence.len() >= SEQUENCE_MAX => {
                    self.sequence.clear();
                    self.state = State::HeldOsc;
                }
                _ => self.sequence.push(b),
            },
            State::OscEscape => {
                if b == b'\\' {
                    self.sequence.extend_from_slice(b"\x1b\\");
                    self.end_osc(shown);
                } else {
                    // Another sequence began inside: this one is held back.
                    self.sequence.clear();
                    self.sequence.push(ESC);
                    self.state = State::Escape;
                    self.byte(b, text, shown);
                }
            }
            State::Held => {
                if b == ESC {
                    self.state = State::HeldEscape;
                }
            }
            State::HeldOsc => match b {
                ESC => self.state = State::HeldEscape,
                BEL => self.state = State::Ground,
                _ => {}
            },
            State::HeldEscape => {
                self.state = if b == b'\\' {
                    State::Ground
                } else if b == ESC {
                    State::HeldEscape
                } else {
                    State::Held
                };
            }
        }
    }

    fn pass(&mut self, shown: &mut Vec<u8>) {
        shown.extend_from_slice(&self.sequence);
        self.drop_sequence();
    }

    fn drop_sequence(&mut self) {
        self.sequence.clear();
        self.state = State::Ground;
    }

    fn end_osc(&mut self, shown: &mut Vec<u8>) {
        let body = &self.sequence[2..];
        let body = body
            .strip_suffix(b"\x1b\\")
            .or_else(|| body.strip_suffix(&[BEL]))
            .unwrap_or(body);
        let mut fields = body.split(|&c| c == b';');
        let number = fields.next().unwrap_or_default();
        let asks = fields.any(|f| f == b"?");
        if OSC_LET_THROUGH.contains(&number) && !asks {
            self.pass(shown);
        } else {
            self.drop_sequence();
        }
    }
}

/// Whether a control sequence (what follows `ESC [`: its parameters, any
/// intermediates and its final byte) only draws on the screen, never
/// asking the terminal anything nor acting outside it.
fn draws(body: &[u8]) -> bool {
    let Some((&last, rest)) = body.split_last() else {
        return false;
    };
    let (private, rest) = match rest.first() {
        Some(&p @ 0x3c..=0x3f) => (Some(p), &rest[1..]),
        _ => (None, rest),
    };
    let parameters = rest
        .iter()
        .take_while(|b| (0x30..=0x3b).contains(*b))
        .count();
    let intermediates = &rest[parameters..];
    if intermediates.iter().any(|b| !(0x20..=0x2f).contains(b)) {
        return false;
    }
    match (private, intermediates, last) {
        // Cursor, erase, insert and delete, scroll, tabs, repeat,
        // character attributes, modes, margins, cursor saved and restored.
        (
            None,
            [],
            b'@'
            | b'A'..=b'M'
            | b'P'
            | b'S'
            | b'T'
            | b'X'
            | b'Z'
            | b'`'
            | b'a'..=b'h'
            | b'l'
            | b'm'
            | b'r'
            | b's'
            | b'u',
        ) => last != b'c',
        (Some(b'?'), [], b'h' | b'l' | b'J' | b'K') => true,
        // The cursor's shape; a soft reset.
        (None, [b' '], b'q') | (None, [b'!'], b'p') => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (mut text, mut shown) = (Vec::new(), Vec::new());
        Screen::default().read(bytes, &mut text, &mut shown);
        (text, shown)
    }

    #[test]
    fn the_log_keeps_text_without_escapes_or_carriage_returns() {
        let (text, shown) =
            read(b"\x1b[2J\x1b[1;1Hhello\r\n\x1b[31mred\x1b[0m\x1b]0;title\x07 done\r\n");
        assert_eq!(String::from_utf8_lossy(&text), "hello\nred done\n");
        assert!(shown.starts_with(b"\x1b[2J\x1b[1;1Hhello\r\n"));
        assert!(
            shown.windows(10).any(|w| w == b"\x1b]0;title\x07"),
            "a title reaches the person"
        );
    }

    #[test]
    fn what_acts_outside_the_screen_never_reaches_a_person() {
        for hostile in [
            &b"\x1b]52;c;ZWNobyBwd25lZA==\x07"[..],
            b"\x1b]52;c;ZWNobyBwd25lZA==\x1b\\",
            b"\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\",
            b"\x1b_hidden application string\x1b\\",
            b"\x1b[21t",
            b"\x1b[8;100;300t",
            b"\x1b]8;;file:///etc/passwd\x1b\\",
        ] {
            let (text, shown) = read(&[b"a", hostile, b"b"].concat());
            assert_eq!(shown, b"ab", "{hostile:?}");
            assert_eq!(text, b"ab", "{hostile:?}");
        }
    }

    /// `sequence` with its ESC introducer (`ESC [`, `ESC ]`, `ESC P`…) and
    /// its string terminator written as C1, in 8-bit bytes and in UTF-8.
    fn c1_forms(sequence: &[u8]) -> [Vec<u8>; 2] {
        let mut eight = Vec::new();
        let mut utf8 = Vec::new();
        let mut i = 0;
        while i < sequence.len() {
            if sequence[i] == ESC
                && i + 1 < sequence.len()
                && (0x40..=0x5f).contains(&sequence[i + 1])
            {
                let c1 = sequence[i + 1] + 0x40;
                eight.push(c1);
                utf8.extend_from_slice(&[0xc2, c1]);
                i += 2;
            } else {
                eight.push(sequence[i]);
                utf8.push(sequence[i]);
                i += 1;
            }
        }
        [eight, utf8]
    }

    #[test]
    fn a_c1_control_is_its_esc_form_in_8_bits_and_in_utf_8() {
        for hostile in [
            &b"\x1b]52;c;ZWNobyBwd25lZA==\x07"[..],
            b"\x1b]52;c;ZWNobyBwd25lZA==\x1b\\",
            b"\x1b]8;;http://example.org/\x1b\\",
            b"\x1bP$qm\x1b\\",
            b"\x1b_application\x1b\\",
            b"\x1b^privacy\x1b\\",
            b"\x1bXstart of string\x1b\\",
            b"\x1b[21t",
            b"\x1b[6n",
            b"\x1b[c",
        ] {
            for form in c1_forms(hostile) {
                let (text, shown) = read(&[b"a", &form[..], b"b"].concat());
                assert_eq!(shown, b"ab", "{form:?}");
                assert!(!text.iter().any(|&c| c == ESC || (0x80..=0x9f).contains(&c)));
            }
        }
        // What draws, written as C1, reaches the person in its ESC form alone.
        let [eight, utf8] = c1_forms(b"\x1b[31mred\x1b[0m");
        for form in [eight, utf8] {
            assert_eq!(read(&form).1, b"\x1b[31mred\x1b[0m");
        }
    }

    #[test]
    fn no_query_a_terminal_answers_by_typing_reaches_a_person() {
        for query in [
            &b"\x1b[6n"[..],
            b"\x1b[5n",
            b"\x1b[?6n",
            b"\x1b[c",
            b"\x1b[0c",
            b"\x1b[>c",
            b"\x1b[=c",
            b"\x1bZ",
            b"\x9a",
            b"\x1bP$qm\x1b\\",
            b"\x1bP+q544e\x1b\\",
            b"\x1b[?2004$p",
            b"\x1b[>q",
            b"\x1b[x",
            b"\x1b[14t",
            b"\x1b[18t",
            b"\x1b]11;?\x07",
            b"\x1b]10;?\x1b\\",
            b"\x1b]4;1;?\x07",
            b"\x1b]12;?\x07",
            b"\x05",
            b"\x1b[?u",
            b"\x1b[?1;2S",
        ] {
            let (_, shown) = read(&[b"a", query, b"b"].concat());
            assert_eq!(shown, b"ab", "{query:?}");
        }
    }

    #[test]
    fn text_in_any_language_and_what_draws_pass_whole() {
        let drawn = "é€😀 日本 \x1b[1;31mbold\x1b[0m\x1b[?1049h\x1b[?25l\x1b[2 q\x1b]11;#000000\x07\x1b[H\x1b[2J";
        let (text, shown) = read(drawn.as_bytes());
        assert_eq!(shown, drawn.as_bytes());
        assert_eq!(String::from_utf8(text).unwrap(), "é€😀 日本 bold");
        // A character cut across two reads is read whole.
        let mut screen = Screen::default();
        let (mut text, mut shown) = (Vec::new(), Vec::new());
        let euro = "€".as_bytes();
        screen.read(&euro[..1], &mut text, &mut shown);
        screen.read(&euro[1..], &mut text, &mut shown);
        assert_eq!(shown, euro);
        // A byte of no character is shown as nothing.
        assert_eq!(read(b"a\xff\xc0\xe2\x82b").1, b"ab");
    }

    #[test]
    fn a_sequence_cut_across_reads_is_read_whole() {
        let mut screen = Screen::default();
        let (mut text, mut shown) = (Vec::new(), Vec::new());
        for piece in [
            &b"x\x1b]5"[..],
            b"2;c;eA",
            b"==\x07y\x1b[3",
            b"1mz",
            b"\xc2",
            b"\x9d52;c;eA\x07w",
        ] {
            screen.read(piece, &mut text, &mut shown);
        }
        assert_eq!(text, b"xyzw");
        assert_eq!(shown, b"xy\x1b[31mzw");
    }

    proptest! {
        #[test]
        fn no_bytes_put_a_clipboard_a_passthrough_a_query_or_a_c1_before_a_person(
            bytes in proptest::collection::vec(any::<u8>(), 0..2000),
            cut in 0usize..2000,
        ) {
            let mut screen = Screen::default();
            let (mut text, mut shown) = (Vec::new(), Vec::new());
            let cut = cut.min(bytes.len());
            screen.read(&bytes[..cut], &mut text, &mut shown);
            screen.read(&bytes[cut..], &mut text, &mut shown);
            prop_assert!(!text.contains(&ESC) && !text.contains(&b'\r'));
            prop_assert!(!shown.windows(4).any(|w| w == b"\x1b]52"));
            prop_assert!(!shown.windows(2).any(|w| w == b"\x1bP" || w == b"\x1b_" || w == b"\x1b^" || w == b"\x1bX" || w == b"\x1bZ"));
            prop_assert!(!shown.contains(&0x05));
            // Nothing shown is a C1 control: shown is UTF-8 and holds none.
            let shown_text = std::str::from_utf8(&shown);
            prop_assert!(shown_text.is_ok());
            let c1 = shown_text.unwrap().chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c));
            prop_assert!(!c1);
        }

        #[test]
        fn a_c1_written_any_way_is_held_as_its_esc_form(
            body in "[a-z0-9;=]{0,20}",
            introducer in prop::sample::select(vec![0x90u8, 0x98, 0x9d, 0x9e, 0x9f]),
            utf8 in any::<bool>(),
        ) {
            let mut bytes = b"a".to_vec();
            if utf8 { bytes.push(0xc2); }
            bytes.push(introducer);
            bytes.extend_from_slice(body.as_bytes());
            if utf8 { bytes.push(0xc2); }
            bytes.push(0x9c);
            bytes.push(b'b');
            let shown = read(&bytes).1;
            // An OSC the list lets through passes in its ESC form; nothing else does.
            let mut fields = body.split(';');
            let listed = OSC_LET_THROUGH.contains(&fields.next().unwrap_or_default().as_bytes());
            let expected = if introducer == 0x9d && listed && !fields.any(|f| f == "?") {
                format!("a\x1b]{body}\x1b\\b").into_bytes()
            } else {
                b"ab".to_vec()
            };
            prop_assert_eq!(shown, expected);
        }
    }
}
