//! The Content-Security-Policy a served repository's site sends: Fossil
//! puts its `default-csp` setting (with `$nonce` replaced by a nonce new
//! each request) in the header of every reply, pages and raw files alike,
//! and gives the nonce to every script it writes. A policy whose scripts
//! are Fossil's nonce alone runs nothing a committer wrote: not a script
//! beside a committed page, not one inside an SVG, not one served by
//! `/raw?m=text/html`. Fossil's own default also admits `'self'`, which is
//! every file of the repository.

use super::{FossilError, Repository};

/// The setting Fossil reads its policy from.
pub const SETTING: &str = "default-csp";

/// The policy OCX gives a node's site: Fossil's default, its scripts
/// Fossil's nonce alone.
pub const POLICY: &str = "default-src 'self' data:; script-src 'nonce-$nonce'; style-src 'self' 'unsafe-inline'; img-src * data:";

/// The policy Fossil sends when the setting is empty or missing.
pub const FOSSILS_DEFAULT: &str = "default-src 'self' data:; script-src 'self' 'nonce-$nonce'; style-src 'self' 'unsafe-inline'; img-src * data:";

/// The directives that say where scripts may come from, most specific
/// first: a browser takes the first present for a `<script>` element.
const SCRIPT_DIRECTIVES: [&str; 3] = ["script-src-elem", "script-src", "default-src"];

/// What a site's policy says of scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The policy as the setting holds it (Fossil's default when unset).
    pub text: String,
    /// Whether the setting is unset, so Fossil's default is sent.
    pub fossils_default: bool,
}

impl Policy {
    /// The policy `text` from the setting (empty: Fossil's default).
    pub fn of(setting: Option<&str>) -> Policy {
        match setting.map(str::trim).filter(|t| !t.is_empty()) {
            Some(text) => Policy {
                text: text.to_string(),
                fossils_default: false,
            },
            None => Policy {
                text: FOSSILS_DEFAULT.to_string(),
                fossils_default: true,
            },
        }
    }

    /// Whether scripts run only with Fossil's nonce: every directive a
    /// browser may take for a script element or a script attribute
    /// admits the nonce and nothing else.
    pub fn admits_only_fossils_scripts(&self) -> bool {
        let directives = directives(&self.text);
        let find = |name: &str| directives.iter().find(|(n, _)| n == name);
        let element = SCRIPT_DIRECTIVES.iter().find_map(|n| find(n));
        let attribute = ["script-src-attr", "script-src", "default-src"]
            .iter()
            .find_map(|n| find(n));
        let only_nonce = |d: Option<&(String, Vec<String>)>| {
            d.is_some_and(|(_, sources)| {
                !sources.is_empty()
                    && sources
                        .iter()
                        .all(|s| s == "'nonce-$nonce'" || s == "'none'" || s == "'strict-dynamic'")
            })
        };
        only_nonce(element) && only_nonce(attribute)
    }

    /// The policy with its script directives made Fossil's nonce alone,
    /// every other directive kept as written.
    pub fn strict(&self) -> String {
        let mut kept: Vec<String> = directives(&self.text)
            .into_iter()
            .filter(|(name, _)| !name.starts_with("script-src"))
            .map(|(name, sources)| {
                std::iter::once(name)
                    .chain(sources)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let at = kept
            .iter()
            .position(|d| d.starts_with("default-src"))
            .map_or(0, |i| i + 1);
        kept.insert(at, "script-src 'nonce-$nonce'".to_string());
        kept.join("; ")
    }
}

/// The directives of a policy, each its lower-cased name and its sources;
/// a repeated directive counts once, as a browser takes the first.
fn directives(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for directive in text.split([';', ',']) {
        let mut words = directive.split_ascii_whitespace();
        let Some(name) = words.next() else { continue };
        let name = name.to_ascii_lowercase();
        if out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let sources = words.map(|w| w.to_ascii_lowercase()).collect();
        out.push((name, sources));
    }
    out
}

impl Repository {
    /// The policy the site sends, from the repository's own setting.
    pub fn content_security_policy(&self) -> Result<Policy, FossilError> {
        Ok(Policy::of(self.config(SETTING)?.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fossils_default_admits_every_file_of_the_site_and_ocxs_only_the_nonce() {
        assert!(!Policy::of(None).admits_only_fossils_scripts());
        assert!(Policy::of(None).fossils_default);
        assert!(!Policy::of(Some(FOSSILS_DEFAULT)).admits_only_fossils_scripts());
        assert!(Policy::of(Some(POLICY)).admits_only_fossils_scripts());
        assert_eq!(Policy::of(None).strict(), POLICY);
    }

    #[test]
    fn a_policy_without_script_src_is_judged_by_default_src() {
        assert!(!Policy::of(Some("default-src 'self'")).admits_only_fossils_scripts());
        assert!(Policy::of(Some("default-src 'nonce-$nonce'")).admits_only_fossils_scripts());
        assert!(
            !Policy::of(Some("img-src *")).admits_only_fossils_scripts(),
            "no directive for scripts admits every script"
        );
    }

    #[test]
    fn script_src_elem_and_attr_are_read_before_script_src() {
        let elem = "default-src 'self'; script-src 'nonce-$nonce'; script-src-elem 'self'";
        assert!(!Policy::of(Some(elem)).admits_only_fossils_scripts());
        let attr = "script-src 'nonce-$nonce'; script-src-attr 'unsafe-inline'";
        assert!(!Policy::of(Some(attr)).admits_only_fossils_scripts());
        let strict = Policy::of(Some(elem)).strict();
        assert_eq!(strict, "default-src 'self'; script-src 'nonce-$nonce'");
        assert!(Policy::of(Some(&strict)).admits_only_fossils_scripts());
    }

    #[test]
    fn a_cdn_or_unsafe_inline_beside_the_nonce_is_not_fossils_alone() {
        for extra in [
            "https://cdn.example.org",
            "'unsafe-inline'",
            "*",
            "'self'",
            "data:",
        ] {
            let p = format!("default-src 'self'; script-src 'nonce-$nonce' {extra}");
            assert!(!Policy::of(Some(&p)).admits_only_fossils_scripts(), "{p}");
        }
    }

    #[test]
    fn strict_keeps_every_other_directive_an_administrator_wrote() {
        let p = Policy::of(Some(
            "default-src 'self' data:; script-src 'self' https://cdn.example.org; img-src * data:; style-src 'self'",
        ));
        assert_eq!(
            p.strict(),
            "default-src 'self' data:; script-src 'nonce-$nonce'; img-src * data:; style-src 'self'"
        );
    }

    proptest! {
        #[test]
        fn any_policy_made_strict_admits_only_fossils_scripts(text in ".{0,200}") {
            let strict = Policy::of(Some(&text)).strict();
            prop_assert!(Policy::of(Some(&strict)).admits_only_fossils_scripts(), "{}", strict);
        }
    }
}
