//! The check-ins a run on the machine handed to `push` while its server
//! gave no answer: kept in the run's directory as the run sent them (each
//! artifact checked by the machine already), forgotten once a later push
//! of the run's reaches the server, else pushed again as the run's login
//! before its response is written, which names each check-in the server
//! then did not take. What a run committed and never pushed stays in its
//! clone, as on the node.

use crate::node::page::{Page, PageError};
use crate::node::receipts::Server;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file in a run's directory keeping what it pushed while its server
/// gave no answer.
const KEPT: &str = "unpushed.json";

/// How long the server is given to take a push again.
const WITHIN: Duration = Duration::from_secs(120);

/// What a run pushed while its server gave no answer.
#[derive(Default, Serialize, Deserialize)]
struct Unpushed {
    /// Each artifact the run sent, by its full hash: its bytes in base64,
    /// as sent.
    artifacts: BTreeMap<String, String>,
    /// The check-ins among them, by full hash, in the order pushed.
    checkins: Vec<String>,
}

fn file(dir: &Path) -> PathBuf {
    dir.join(KEPT)
}

fn load(dir: &Path) -> Unpushed {
    std::fs::read(file(dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes `kept` whole, its owner's alone; removes the file when it keeps
/// nothing.
fn save(dir: &Path, kept: &Unpushed) -> std::io::Result<()> {
    if kept.artifacts.is_empty() {
        return match std::fs::remove_file(file(dir)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    crate::node::write_whole(
        &file(dir),
        &dir.join(format!(".{KEPT}")),
        &serde_json::to_vec(kept).unwrap_or_default(),
    )
}

/// Keeps for the run whose directory is `dir` a push its server gave no
/// answer to: `artifacts` as the run sent them (full hash, bytes in
/// base64), `checkins` the check-ins among them. What an earlier push
/// kept stays.
pub fn keep(
    dir: &Path,
    artifacts: &[(String, String)],
    checkins: &[String],
) -> std::io::Result<()> {
    let _held = crate::node::lock(&dir.join("unpushed.lock"), true)?;
    let mut kept = load(dir);
    for (hash, content) in artifacts {
        kept.artifacts.insert(hash.clone(), content.clone());
    }
    for c in checkins {
        if !kept.checkins.contains(c) {
            kept.checkins.push(c.clone());
        }
    }
    save(dir, &kept)
}

/// Forgets each of `hashes` the run in `dir` kept: a later push of the
/// run's took them to the server.
pub fn taken(dir: &Path, hashes: &[String]) -> std::io::Result<()> {
    let _held = crate::node::lock(&dir.join("unpushed.lock"), true)?;
    let mut kept = load(dir);
    if kept.artifacts.is_empty() {
        return Ok(());
    }
    kept.artifacts.retain(|h, _| !hashes.contains(h));
    kept.checkins.retain(|c| kept.artifacts.contains_key(c));
    save(dir, &kept)
}

/// The check-ins the run in `dir` kept, by full hash; `None` when it
/// kept nothing.
pub fn kept(dir: &Path) -> Option<Vec<String>> {
    let kept = load(dir);
    (!kept.artifacts.is_empty()).then_some(kept.checkins)
}

/// Forgets all the run in `dir` kept: its response is written.
pub fn forget(dir: &Path) -> std::io::Result<()> {
    save(dir, &Unpushed::default())
}

/// A check-in of the run's that the server did not take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    /// The check-in, by full hash.
    pub checkin: String,
    /// Why, in the server's words where it gave them.
    pub why: String,
}

/// Pushes again, as the run's login `user` on the server at `url` (its
/// password in `dir`), what the run in `dir` pushed while its server gave
/// no answer; answers the check-ins the server did not take (none when
/// nothing was kept, or its receipt names `user` for each). Fails only
/// when the server gives no answer again; what was kept is kept until
/// [`forget`].
pub fn push_again(url: &str, dir: &Path, user: &str) -> Result<Vec<Missed>, PageError> {
    let kept = load(dir);
    if kept.artifacts.is_empty() {
        return Ok(Vec::new());
    }
    let all_missed = |why: String| -> Vec<Missed> {
        kept.checkins
            .iter()
            .map(|c| Missed {
                checkin: c.clone(),
                why: why.clone(),
            })
            .collect()
    };
    let password = match std::fs::read_to_string(dir.join("password")) {
        Ok(p) => p,
        Err(e) => {
            return Ok(all_missed(format!(
                "the run's password could not be read: {e}"
            )));
        }
    };
    let server = Server::new(Page::signed_in(url, user, password.trim(), WITHIN));
    let artifacts: Vec<serde_json::Value> = kept
        .artifacts
        .iter()
        .map(|(hash, content)| json!({"hash": hash, "content": content}))
        .collect();
    match server
        .page()
        .answer("push", &json!({ "artifacts": artifacts }))
    {
        Err(e) if e.away() => return Err(e),
        Err(e) => return Ok(all_missed(e.to_string())),
        Ok(a) if !a.ok => {
            let why = a
                .stopped
                .map(|s| s.reason)
                .unwrap_or_else(|| "the server refused the push".into());
            return Ok(all_missed(format!("the server refused it: {why}")));
        }
        Ok(_) => {}
    }
    let said = match server.received(&kept.checkins) {
        Ok(said) => said,
        Err(e) if e.away() => return Err(e),
        Err(e) => return Ok(all_missed(e.to_string())),
    };
    Ok(said
        .into_iter()
        .filter(|r| r.sender() != Some(user))
        .map(|r| Missed {
            why: match r.sender() {
                None => "the server did not receive it".into(),
                Some(other) => format!("the server's receipt names {other}, not {user}"),
            },
            checkin: r.hash,
        })
        .collect())
}

/// `note` naming each of `missed`, a check-in the server did not take,
/// with why: those of one reason together.
pub fn naming(note: &str, missed: &[Missed]) -> String {
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for m in missed {
        match reasons.iter_mut().find(|(why, _)| *why == m.why) {
            Some((_, checkins)) => checkins.push(&m.checkin),
            None => reasons.push((&m.why, vec![&m.checkin])),
        }
    }
    let mut out = note.to_string();
    for (why, checkins) in reasons {
        let which = match checkins.len() {
            1 => "check-in",
            _ => "check-ins",
        };
        out.push_str(&format!(
            "; the run's {which} {} did not reach the server: {why}",
            checkins.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_run_pushed_in_vain_is_kept_across_pushes_until_a_later_push_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = ("a".repeat(64), "QQ==".to_string());
        let f = ("f".repeat(64), "Rg==".to_string());
        let b = ("b".repeat(64), "Qg==".to_string());
        keep(
            dir.path(),
            &[a.clone(), f.clone()],
            std::slice::from_ref(&a.0),
        )
        .unwrap();
        keep(
            dir.path(),
            &[a.clone(), f.clone(), b.clone()],
            &[a.0.clone(), b.0.clone()],
        )
        .unwrap();
        let kept = load(dir.path());
        assert_eq!(kept.artifacts.len(), 3);
        assert_eq!(kept.checkins, [a.0.clone(), b.0.clone()]);
        taken(dir.path(), &[a.0.clone(), f.0.clone()]).unwrap();
        let kept = load(dir.path());
        assert_eq!(kept.checkins, vec![b.0.clone()]);
        taken(dir.path(), std::slice::from_ref(&b.0)).unwrap();
        assert!(!file(dir.path()).exists(), "nothing kept, no file");
        keep(
            dir.path(),
            std::slice::from_ref(&a),
            std::slice::from_ref(&a.0),
        )
        .unwrap();
        forget(dir.path()).unwrap();
        assert!(!file(dir.path()).exists());
        assert_eq!(
            push_again("http://127.0.0.1:1", dir.path(), "run").unwrap(),
            []
        );
    }

    #[test]
    fn a_note_names_each_check_in_that_did_not_reach_the_server() {
        let missed = |c: &str, why: &str| Missed {
            checkin: c.into(),
            why: why.into(),
        };
        assert_eq!(
            naming("exit 0 after 3 seconds", &[]),
            "exit 0 after 3 seconds"
        );
        assert_eq!(
            naming(
                "exit 0 after 3 seconds",
                &[missed("c1", "no"), missed("c2", "gone"), missed("c3", "no")]
            ),
            "exit 0 after 3 seconds; the run's check-ins c1, c3 did not reach the server: no; \
             the run's check-in c2 did not reach the server: gone"
        );
    }
}
