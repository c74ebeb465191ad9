//! Fossil capabilities: the letters a login holds, with what they inherit
//! (`u` from `reader`, `v` from `developer`, everyone from `nobody`, a
//! login from `anonymous`) and what each letter implies.

/// Fossil's own logins, made with every repository: each stands for a
/// kind of visitor or lends its letters to others, never for one actor.
pub const SPECIAL_LOGINS: &[&str] = &["nobody", "anonymous", "reader", "developer"];

/// What admin (`a`) implies, as Fossil 2.28 grants it.
const ADMIN: &str = "bcdefghijklmnopqrtwz234567ACD";

fn implies(c: char) -> &'static str {
    match c {
        's' => "a",
        'a' => "bcdefghijklmnopqrtwz234567ACDio",
        'i' => "o",
        'k' => "jm",
        'w' => "rnc",
        '6' => "5",
        '5' => "4",
        '4' => "3",
        '3' => "2",
        _ => "",
    }
}

/// A set of capability letters, spelled out in Fossil's order (lower case,
/// digits, upper case).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities(String);

impl Capabilities {
    /// The letters `own` grants with inheritance from the special users'
    /// letters (`nobody`, `anonymous`, `reader`, `developer`) and every
    /// implication applied. `logged_in` false leaves `anonymous` out, as
    /// Fossil does for a visitor who has not signed in.
    pub fn effective(own: &str, special: &Special, logged_in: bool) -> Capabilities {
        let mut set: Vec<char> = own.chars().collect();
        set.extend(special.nobody.chars());
        if logged_in {
            set.extend(special.anonymous.chars());
        }
        if set.contains(&'u') {
            set.extend(special.reader.chars());
        }
        if set.contains(&'v') {
            set.extend(special.developer.chars());
        }
        if set.contains(&'u') {
            set.extend(special.reader.chars());
        }
        let mut todo = set.clone();
        while let Some(c) = todo.pop() {
            for d in implies(c).chars() {
                if !set.contains(&d) {
                    set.push(d);
                    todo.push(d);
                }
            }
        }
        Capabilities::exact(&set.into_iter().collect::<String>())
    }

    /// Exactly these letters, nothing inherited or implied.
    pub fn exact(letters: &str) -> Capabilities {
        let mut v: Vec<char> = letters
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        v.sort_by_key(|c| (!c.is_ascii_lowercase(), !c.is_ascii_digit(), *c));
        v.dedup();
        Capabilities(v.into_iter().collect())
    }

    /// Whether the set holds `letter`.
    pub fn has(&self, letter: char) -> bool {
        self.0.contains(letter)
    }

    /// Whether the set holds any of `letters`.
    pub fn has_any(&self, letters: &str) -> bool {
        letters.chars().any(|c| self.has(c))
    }

    /// Whether the set is an administrator's (`a` or `s`).
    pub fn is_admin(&self) -> bool {
        self.has_any("as")
    }

    /// The letters as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The letters of Fossil's special users, from which others inherit.
#[derive(Debug, Clone, Default)]
pub struct Special {
    pub nobody: String,
    pub anonymous: String,
    pub reader: String,
    pub developer: String,
}

/// Whether `letters` names only capabilities Fossil 2.28 defines.
pub fn all_defined(letters: &str) -> bool {
    letters.chars().all(|c| {
        ADMIN.contains(c)
            || "asioxyuvL".contains(c)
            || c.is_ascii_digit() && ('2'..='7').contains(&c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special() -> Special {
        Special {
            nobody: "gjorz".into(),
            anonymous: "hz".into(),
            reader: "kptw".into(),
            developer: "ei".into(),
        }
    }

    #[test]
    fn developer_inheritance_as_fossil_grants_it() {
        assert_eq!(
            Capabilities::effective("v", &special(), true).as_str(),
            "eghijorvz"
        );
    }

    #[test]
    fn forum_and_ticket_implications_spelled_out() {
        let caps = Capabilities::effective("u4", &special(), true);
        assert_eq!(caps.as_str(), "cghjkmnoprtuwz234");
    }

    #[test]
    fn setup_implies_admin_but_not_private_or_unversioned() {
        let caps = Capabilities::effective("s", &special(), true);
        assert!(caps.is_admin() && caps.has('a') && caps.has('i'));
        assert!(!caps.has('x') && !caps.has('y'));
    }
}
