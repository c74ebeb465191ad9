//! Verdicts (V1) and reading them (V2): a raw tag `audited` or `ci` on a
//! check-in, valued `pass: REASON (against X)`; each sender's latest
//! counts when the sender neither sent the check-in nor is the user
//! written in it, and a record it is against names the check-in's branch.

use super::found;
use crate::fossil::repo::{CheckIn, TagChanges, TagSet};
use crate::fossil::{FossilError, Repository};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The verdict tags.
pub const TAGS: &[&str] = &["audited", "ci"];

/// A verdict's value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub pass: bool,
    pub reason: String,
    pub against: String,
}

/// A verdict's value as V1 writes it.
pub fn format(pass: bool, reason: &str, against: &str) -> String {
    format!(
        "{}: {reason} (against {against})",
        if pass { "pass" } else { "fail" }
    )
}

/// Reads a verdict's value, or `None` when it is not of V1's form.
pub fn parse(value: &str) -> Option<Value> {
    let (pass, rest) = if let Some(r) = value.strip_prefix("pass: ") {
        (true, r)
    } else {
        (false, value.strip_prefix("fail: ")?)
    };
    let rest = rest.strip_suffix(')')?;
    let at = rest.rfind(" (against ")?;
    let (reason, against) = (&rest[..at], &rest[at + " (against ".len()..]);
    if reason.trim().is_empty() || against.trim().is_empty() || value.contains(['\n', '\r']) {
        return None;
    }
    Some(Value {
        pass,
        reason: reason.to_string(),
        against: against.to_string(),
    })
}

/// One sender's latest verdict of one tag on a check-in, and whether it counts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Judged {
    /// `audited` or `ci`.
    pub tag: String,
    /// Its sender, by receipt.
    pub from: Option<String>,
    /// When its writer says it was written (RFC 3339, UTC).
    pub when: String,
    /// The tag artifact's full hash.
    pub hash: String,
    /// `pass` or `fail`, when the value reads.
    pub verdict: Option<String>,
    pub reason: Option<String>,
    pub against: Option<String>,
    /// The value as stored.
    pub value: Option<String>,
    /// Why it does not count, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

/// Every sender's latest verdict of each tag on `checkin`, from the tag
/// changes given (in received order), each judged by V2's rules.
pub fn judge(
    repo: &Repository,
    checkin: &CheckIn,
    changes: &[TagChanges],
    records: &mut RecordCache,
) -> Result<Vec<Judged>, FossilError> {
    type Latest<'a> = ((String, Option<String>), &'a TagChanges, &'a TagSet);
    let mut latest: Vec<Latest> = Vec::new();
    for c in changes.iter().filter(|c| c.target == checkin.hash) {
        for t in &c.tags {
            if !TAGS.contains(&t.name.as_str()) {
                continue;
            }
            let key = (t.name.clone(), c.sender.clone());
            match latest.iter_mut().find(|l| l.0 == key) {
                Some(l) => {
                    l.1 = c;
                    l.2 = t;
                }
                None => latest.push((key, c, t)),
            }
        }
    }
    let mut out = Vec::new();
    for ((tag, from), change, set) in latest {
        let value = if set.op == '-' {
            None
        } else {
            set.value.clone()
        };
        let parsed = value.as_deref().and_then(parse);
        let own = from
            .as_deref()
            .is_some_and(|f| Some(f) == checkin.sender.as_deref() || f == checkin.user);
        let why_not = if set.op == '-' {
            Some("withdrawn: its sender cancelled the tag".to_string())
        } else if parsed.is_none() {
            Some("malformed: not \"pass: REASON (against X)\" or \"fail: ...\"".to_string())
        } else if from.is_none() {
            Some("no receipt names its sender".to_string())
        } else if from
            .as_deref()
            .map(|f| is_a_node(repo, f))
            .transpose()?
            .unwrap_or(false)
        {
            Some(
                "a node's own login: the served node's, or an agent machine's `approve --node` marked; a node runs others' work and judges none"
                    .to_string(),
            )
        } else if own {
            Some(
                "the author's own: its sender sent the check-in or is the user written in it"
                    .to_string(),
            )
        } else {
            let against = &parsed.as_ref().expect("parsed").against;
            if is_full_hash(against) {
                match records.branches(repo, against)? {
                    None => Some("against a hash that names no record".to_string()),
                    Some(branches) => {
                        let on = checkin.branch.as_deref().unwrap_or("");
                        (!branches.iter().any(|b| b == on))
                            .then(|| format!("against a record not about its branch ({on})"))
                    }
                }
            } else {
                None
            }
        };
        out.push(Judged {
            tag,
            from,
            when: crate::fossil::repo::julian_to_rfc3339(change.when),
            hash: change.hash.clone(),
            verdict: parsed
                .as_ref()
                .map(|p| if p.pass { "pass" } else { "fail" }.to_string()),
            reason: parsed.as_ref().map(|p| p.reason.clone()),
            against: parsed.as_ref().map(|p| p.against.clone()),
            value,
            why_not,
        });
    }
    Ok(out)
}

/// Whether `login` is a node's own here: the served node's, or one
/// `approve --node` marked as an agent machine's.
fn is_a_node(repo: &Repository, login: &str) -> Result<bool, FossilError> {
    Ok(login == found::node_login(&repo.server_code()?) || repo.is_node_login(login)?)
}

fn is_full_hash(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The `checkins` of each record a verdict names, read once each.
#[derive(Default)]
pub struct RecordCache(HashMap<String, Option<Vec<String>>>);

impl RecordCache {
    /// The branches record `hash` names in `checkins`, or `None` when it names no record.
    pub fn branches(
        &mut self,
        repo: &Repository,
        hash: &str,
    ) -> Result<Option<Vec<String>>, FossilError> {
        if let Some(v) = self.0.get(hash) {
            return Ok(v.clone());
        }
        let found = match repo.receipt(hash)? {
            Some(r) => found::record(repo, r.rid, hash)?.map(|s| s.record.checkins),
            None => None,
        };
        self.0.insert(hash.to_string(), found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_written() {
        let v = format(true, "builds (and tests pass)", "PLAN.md");
        assert_eq!(v, "pass: builds (and tests pass) (against PLAN.md)");
        assert_eq!(
            parse(&v),
            Some(Value {
                pass: true,
                reason: "builds (and tests pass)".into(),
                against: "PLAN.md".into()
            })
        );
        for bad in [
            "pass:x (against y)",
            "ok: x (against y)",
            "pass: x",
            "fail:  (against y)",
            "pass: x (against )",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
