//! Fossil's artifact formats, composed and read by OCX: forum posts (D G H
//! I N P U W Z), control artifacts that set tags (D T U Z) and ticket
//! changes (D J K U Z). Cards go in strictly increasing letter order, card
//! arguments are "fossilized", and the Z card is the MD5 of all before it.

use md5::{Digest, Md5};
use sha1::Sha1;
use sha3::Sha3_256;

/// Which hash names new artifacts, from the repository's `hash-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashPolicy {
    /// SHA1 (policies `sha1` and `auto`).
    Sha1,
    /// SHA3-256 (every other policy).
    Sha3,
}

impl HashPolicy {
    /// The policy a `hash-policy` config value (0 to 4) names.
    pub fn from_config(value: Option<&str>) -> HashPolicy {
        match value.map(str::trim) {
            Some("0") | Some("1") => HashPolicy::Sha1,
            _ => HashPolicy::Sha3,
        }
    }

    /// The artifact's name under this policy: the hash of its exact bytes.
    pub fn name(self, artifact: &[u8]) -> String {
        match self {
            HashPolicy::Sha1 => hex::encode(Sha1::digest(artifact)),
            HashPolicy::Sha3 => hex::encode(Sha3_256::digest(artifact)),
        }
    }
}

/// Whether `hash` names `bytes`: the SHA1 of them when it has 40 hex
/// digits, their SHA3-256 when it has 64, in lower case as Fossil writes
/// them; no other hash names anything.
pub fn names(hash: &str, bytes: &[u8]) -> bool {
    let policy = match hash.len() {
        40 => HashPolicy::Sha1,
        64 => HashPolicy::Sha3,
        _ => return false,
    };
    policy.name(bytes) == hash
}

/// Encodes a card argument as Fossil does: backslash, space, newline, tab,
/// CR, FF, VT and NUL escaped; everything else as it is.
pub fn fossilize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' => out.push_str("\\s"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out
}

/// Decodes a fossilized card argument.
pub fn defossilize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('s') => out.push(' '),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some('0') => out.push('\0'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// The time now as a D card writes it: UTC, milliseconds.
pub fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// The cards `cards` ends with a post or page's `U` (`user`) and `W`
/// (`text`) cards, then its `Z`.
fn with_text(mut cards: String, user: &str, text: &str) -> Vec<u8> {
    cards += &format!("U {}\nW {}\n", fossilize(user), text.len());
    let mut b = cards.into_bytes();
    b.extend_from_slice(text.as_bytes());
    b.push(b'\n');
    finish(b)
}

fn finish(mut body: Vec<u8>) -> Vec<u8> {
    let z = hex::encode(Md5::digest(&body));
    body.extend_from_slice(b"Z ");
    body.extend_from_slice(z.as_bytes());
    body.push(b'\n');
    body
}

/// A forum post: a thread's first post (with a title), or a reply.
#[derive(Debug, Clone)]
pub struct ForumPost<'a> {
    /// When it was written, as [`now`] gives it.
    pub date: &'a str,
    /// For a reply: the thread's first post, and the post it answers.
    pub reply: Option<(&'a str, &'a str)>,
    /// For a thread's first post: its title.
    pub title: Option<&'a str>,
    /// The text's mimetype (`text/x-markdown` for OCX).
    pub mimetype: &'a str,
    /// The login written inside it (the sender is whoever stores it).
    pub user: &'a str,
    /// The text, stored as it is.
    pub text: &'a str,
}

impl ForumPost<'_> {
    /// The artifact's bytes.
    pub fn compose(&self) -> Vec<u8> {
        let mut s = format!("D {}\n", self.date);
        if let Some((root, _)) = self.reply {
            s += &format!("G {root}\n");
        }
        if let Some(t) = self.title {
            s += &format!("H {}\n", fossilize(t));
        }
        if let Some((_, to)) = self.reply {
            s += &format!("I {to}\n");
        }
        if self.mimetype != "text/x-fossil-wiki" {
            s += &format!("N {}\n", fossilize(self.mimetype));
        }
        with_text(s, self.user, self.text)
    }
}

/// A version of a wiki page: its name, its text, the version it follows.
#[derive(Debug, Clone)]
pub struct WikiPage<'a> {
    /// When it was written, as [`now`] gives it.
    pub date: &'a str,
    /// The page's name.
    pub name: &'a str,
    /// The text's mimetype; `text/x-fossil-wiki` is written as no N card.
    pub mimetype: &'a str,
    /// The full hash of the version it replaces, if any.
    pub parent: Option<&'a str>,
    /// The login written inside it (the sender is whoever stores it).
    pub user: &'a str,
    /// The page's whole text.
    pub text: &'a str,
}

impl WikiPage<'_> {
    /// The artifact's bytes: `D L N? P? U W Z`.
    pub fn compose(&self) -> Vec<u8> {
        let mut s = format!("D {}\nL {}\n", self.date, fossilize(self.name));
        if self.mimetype != "text/x-fossil-wiki" {
            s += &format!("N {}\n", fossilize(self.mimetype));
        }
        if let Some(p) = self.parent {
            s += &format!("P {p}\n");
        }
        with_text(s, self.user, self.text)
    }
}

/// One tag change inside a control artifact.
#[derive(Debug, Clone)]
pub struct TagChange {
    /// `+` singleton, `*` propagating, `-` cancel.
    pub op: char,
    /// The tag's full name (raw, or with its `sym-` prefix).
    pub name: String,
    /// The full hash of the tagged artifact.
    pub target: String,
    /// The value, if any (a cancel carries none).
    pub value: Option<String>,
}

/// A control artifact: tag changes, in the order Fossil requires.
pub fn control(date: &str, user: &str, tags: &[TagChange]) -> Vec<u8> {
    let mut lines: Vec<(String, &str, String)> = tags
        .iter()
        .map(|t| {
            let mut l = format!("T {}{} {}", t.op, fossilize(&t.name), t.target);
            if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty() && t.op != '-') {
                l += " ";
                l += &fossilize(v);
            }
            (format!("{}{}", t.op, t.name), t.target.as_str(), l)
        })
        .collect();
    lines.sort_by(|a, b| (a.0.as_bytes(), a.1).cmp(&(b.0.as_bytes(), b.1)));
    let mut s = format!("D {date}\n");
    for (_, _, l) in &lines {
        s += l;
        s.push('\n');
    }
    s += &format!("U {}\n", fossilize(user));
    finish(s.into_bytes())
}

/// A ticket change: fields set (or appended, a name starting with `+`).
pub fn ticket_change(date: &str, ticket: &str, user: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut sorted: Vec<&(&str, &str)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut s = format!("D {date}\n");
    for (name, value) in sorted {
        if value.is_empty() {
            s += &format!("J {name}\n");
        } else {
            s += &format!("J {name} {}\n", fossilize(value));
        }
    }
    s += &format!("K {ticket}\nU {}\n", fossilize(user));
    finish(s.into_bytes())
}

/// One card of an artifact as read back: its letter and its raw arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    pub letter: u8,
    pub args: Vec<String>,
}

/// An artifact read into its cards and its W text, or `None` when it is not
/// a well-formed card artifact (a file, say): cards in order, a W card's
/// length right, and the Z card's checksum matching.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub cards: Vec<Card>,
    pub text: Option<Vec<u8>>,
}

impl Parsed {
    /// The first card with `letter`.
    pub fn card(&self, letter: u8) -> Option<&Card> {
        self.cards.iter().find(|c| c.letter == letter)
    }

    /// The first argument of the first card with `letter`, decoded.
    pub fn arg(&self, letter: u8) -> Option<String> {
        self.card(letter)
            .and_then(|c| c.args.first())
            .map(|a| defossilize(a))
    }

    /// Every card with `letter`.
    pub fn all(&self, letter: u8) -> impl Iterator<Item = &Card> {
        self.cards.iter().filter(move |c| c.letter == letter)
    }
}

/// Reads an artifact's cards; see [`Parsed`].
pub fn parse(bytes: &[u8]) -> Option<Parsed> {
    let zpos = bytes.len().checked_sub(35)?;
    if &bytes[zpos..zpos + 2] != b"Z " || bytes.last() != Some(&b'\n') {
        return None;
    }
    if hex::encode(Md5::digest(&bytes[..zpos])).as_bytes() != &bytes[zpos + 2..zpos + 34] {
        return None;
    }
    let mut cards = Vec::new();
    let mut text = None;
    let mut i = 0;
    let mut last = 0u8;
    while i < zpos {
        let end = i + bytes[i..zpos].iter().position(|b| *b == b'\n')?;
        let line = std::str::from_utf8(&bytes[i..end]).ok()?;
        let letter = *line.as_bytes().first()?;
        if !letter.is_ascii_uppercase()
            || line.as_bytes().get(1) != Some(&b' ') && line.len() > 1
            || letter < last
        {
            return None;
        }
        last = letter;
        let args: Vec<String> = line
            .get(2..)
            .unwrap_or("")
            .split(' ')
            .map(str::to_string)
            .collect();
        i = end + 1;
        if letter == b'W' {
            let n: usize = args.first()?.parse().ok()?;
            let after = i.checked_add(n).filter(|a| *a < zpos)?;
            if bytes[after] != b'\n' {
                return None;
            }
            text = Some(bytes[i..after].to_vec());
            i = after + 1;
        }
        cards.push(Card { letter, args });
    }
    Some(Parsed { cards, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fossilize_round_trips_every_escape() {
        let s = "a b\\c\nd\te\r\u{c}\u{b}\0é";
        assert_eq!(fossilize(s), "a\\sb\\\\c\\nd\\te\\r\\f\\v\\0é");
        assert_eq!(defossilize(&fossilize(s)), s);
    }

    #[test]
    fn forum_root_matches_fossils_own_bytes() {
        // Section 4.2 of the verified facts: this artifact was accepted by Fossil 2.28.
        let post = ForumPost {
            date: "2026-11-29T17:40:38.094",
            reply: None,
            title: Some("First thread: spaces & \"quotes\""),
            mimetype: "text/x-markdown",
            user: "alice",
            text: "Hello *world*.\nSecond line with a \\ backslash.",
        };
        let bytes = post.compose();
        assert!(bytes.ends_with(b"Z 3e113f36f47e0cd45400aecd1555326e\n"));
        let parsed = parse(&bytes).unwrap();
        assert_eq!(
            parsed.arg(b'H').unwrap(),
            "First thread: spaces & \"quotes\""
        );
        assert_eq!(parsed.text.unwrap(), post.text.as_bytes());
    }

    #[test]
    fn control_sorts_t_cards_by_name_with_prefix() {
        let t = |op, name: &str| TagChange {
            op,
            name: name.into(),
            target: "ab".repeat(32),
            value: Some("v w".into()),
        };
        let bytes = control(
            "2026-11-29T17:41:48.409",
            "bob",
            &[t('+', "sym-x"), t('*', "ci")],
        );
        let text = String::from_utf8(bytes.clone()).unwrap();
        let star = text.find("T *ci").unwrap();
        let plus = text.find("T +sym-x").unwrap();
        assert!(star < plus, "'*' (0x2a) sorts before '+' (0x2b)");
        assert!(parse(&bytes).is_some());
    }

    #[test]
    fn a_bad_checksum_does_not_parse() {
        let mut bytes = control("2026-11-29T17:41:48.409", "bob", &[]);
        let n = bytes.len();
        bytes[n - 2] = if bytes[n - 2] == b'0' { b'1' } else { b'0' };
        assert!(parse(&bytes).is_none());
    }
}
