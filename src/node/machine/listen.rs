//! The machine's listener: one long-poll open on the server's `wait`,
//! asking for the artifacts themselves; when it answers something new,
//! those artifacts stored in the clone (each checked against its hash),
//! or a pull when it could not carry them all, and a wake; while the wait
//! is refused or the server is away, the wait asked again after 1, 2,
//! 4... seconds, at most a minute apart, and a pull once a minute; what
//! it heard last is kept for `ocx status`.

use crate::fossil::artifact;
use crate::fossil::store::Artifacts;
use crate::fossil::{Fossil, Repository};
use crate::node::config::NodeConfig;
use crate::node::page::PageError;
use crate::node::receipts::{Received, Server};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the machine pulls at least, while its server's wait answers
/// (carrying what came) or is refused.
const PULL_AT_LEAST: Duration = Duration::from_secs(60);

/// What the page's `wait` answers.
#[derive(Deserialize)]
struct Waited {
    last: i64,
    /// The receipts of what came after `after` (none from a page older
    /// than this answer).
    #[serde(default)]
    received: Vec<Received>,
    /// Every artifact that came after `after`, when the answer could carry
    /// them all (none from an older page, or when they were too many).
    #[serde(default)]
    artifacts: Option<Vec<Carried>>,
}

/// An artifact as `wait` carries it.
#[derive(Deserialize)]
struct Carried {
    hash: String,
    /// Its bytes, in base64.
    content: String,
}

/// The long-poll: the highest receipt the server holds, answered as soon
/// as it is past `after` or after `within` seconds, with every artifact
/// that came when the answer could carry them; the receipts it told of
/// what came are kept by `server` for the wake that follows.
fn wait(server: &Server, after: i64, within: u64) -> Result<(i64, Option<Artifacts>), PageError> {
    let waited: Waited = server
        .page()
        .get(&format!("wait?after={after}&within={within}&artifacts=1"))?;
    if waited.last > after {
        server.told(waited.received);
    }
    Ok((waited.last, waited.artifacts.and_then(checked)))
}

/// The artifacts carried, each its bytes decoded and named by its hash;
/// `None` when any is not (the machine then pulls).
fn checked(carried: Vec<Carried>) -> Option<Artifacts> {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    carried
        .into_iter()
        .map(|c| {
            let bytes = engine.decode(c.content.as_bytes()).ok()?;
            artifact::names(&c.hash, &bytes).then_some((c.hash, bytes))
        })
        .collect()
}

/// What `ocx status` shows of an agent machine: its last wake and pull.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Heard {
    /// When the server's wait last answered something new (UTC).
    pub last_wake: Option<String>,
    /// When the clone last took what the server received (UTC): by a
    /// pull, or the artifacts the server's wait carried.
    pub last_pull: Option<String>,
    /// Why the last wait or pull failed, when it did.
    pub last_failure: Option<String>,
    /// Whether the server's wait is refused, so the machine pulls once a minute.
    pub polling: bool,
}

impl Heard {
    fn file(root: &Path) -> PathBuf {
        root.join("heard.json")
    }
    /// What was heard last under `root`.
    pub fn load(root: &Path) -> Heard {
        std::fs::read(Self::file(root))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
    /// Writes it unsynced: it is what `status` shows, written again at
    /// the next wait, where a sync would put a disk flush beside every
    /// delivery.
    fn save(&self, root: &Path) {
        let _ = crate::file::write_whole_unsynced(
            &Self::file(root),
            &root.join("heard.json.new"),
            &serde_json::to_vec_pretty(self).unwrap_or_default(),
            0o600,
        );
    }
}

/// The longest the listener waits before it asks a server that gave no
/// answer again: the once a minute it pulls at least.
const AWAY_AT_MOST: Duration = PULL_AT_LEAST;

/// How long the listener waits before it asks again after `failures`
/// waits in a row failed: 1 second, doubled each time, at most a minute.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(AWAY_AT_MOST)
}

/// The machine's listener: keeps one long-poll open on the server's
/// `wait`; when it answers something new, stores the artifacts it carried
/// in the clone, or pulls when it carried none or they would not store,
/// and sends `wake`; pulls once a minute at least, for what no receipt
/// tells; when the wait is refused or the server is away, asks again
/// after 1, 2, 4... seconds, at most a minute apart, and pulls once a
/// minute, waking the node only when the pull went through (and for
/// unconfirmed responses once the wait answers again). `reach` learns
/// whether the server answers from each wait.
pub fn listen(
    root: &Path,
    cfg: &NodeConfig,
    server: &Server,
    reach: &super::Reach,
    wake: impl Fn() -> bool,
) {
    let Ok(fossil) = Fossil::at(&cfg.fossil) else {
        return;
    };
    let mut heard = Heard::load(root);
    let mut after: Option<i64> = None;
    let mut failures = 0u32;
    let mut pulled_at: Option<std::time::Instant> = None;
    loop {
        match wait(server, after.unwrap_or(0), 50) {
            Ok((last, carried)) => {
                failures = 0;
                heard.polling = false;
                reach.answered();
                if after.is_none_or(|a| last > a) {
                    heard.last_wake = Some(crate::fossil::artifact::now());
                    let stored = after.is_some()
                        && carried.is_some_and(|c| store(&fossil, cfg, &mut heard, &c));
                    if !stored {
                        pull(&fossil, cfg, &mut heard);
                        pulled_at = Some(std::time::Instant::now());
                    }
                    after = Some(last);
                    if !wake() {
                        return;
                    }
                    heard.save(root);
                } else if super::any_unconfirmed(root) && !wake() {
                    return;
                }
                // What no receipt tells, a post held for moderation and
                // approved since (its receipt is the old one), only a
                // pull brings.
                if pulled_at.is_none_or(|t| t.elapsed() >= PULL_AT_LEAST) {
                    pull(&fossil, cfg, &mut heard);
                    pulled_at = Some(std::time::Instant::now());
                    heard.save(root);
                    if !wake() {
                        return;
                    }
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                after = None;
                heard.polling = true;
                heard.last_failure = Some(e.to_string());
                if e.away() {
                    reach.lost(&e.to_string());
                }
                if pulled_at.is_none_or(|t| t.elapsed() >= PULL_AT_LEAST) {
                    let pulled = pull(&fossil, cfg, &mut heard);
                    pulled_at = Some(std::time::Instant::now());
                    if pulled && !wake() {
                        return;
                    }
                }
                heard.save(root);
                std::thread::sleep(backoff(failures));
            }
        }
    }
}

/// Pulls into the clone what the server holds; whether it went through.
fn pull(fossil: &Fossil, cfg: &NodeConfig, heard: &mut Heard) -> bool {
    match fossil.pull_server(&cfg.repository) {
        Ok(()) => {
            heard.last_pull = Some(artifact::now());
            true
        }
        Err(e) => {
            heard.last_failure = Some(format!("pull: {e}"));
            false
        }
    }
}

/// Stores in the clone the artifacts the server's wait carried, as a pull
/// would have brought them, in one `fossil bundle import`; whether the
/// clone now holds all the server received (not when it holds a phantom,
/// which the server may have filled).
fn store(
    fossil: &Fossil,
    cfg: &NodeConfig,
    heard: &mut Heard,
    carried: &[(String, Vec<u8>)],
) -> bool {
    let stored = Repository::open(&cfg.repository).and_then(|clone| {
        // A phantom of the clone may have been filled on the server, in
        // its old row, which no wait carries: only a pull brings it.
        if clone.has_phantoms()? {
            return Ok(false);
        }
        if !carried.is_empty() {
            crate::fossil::store::store_checked(fossil, &clone, &cfg.login, carried, true)?;
        }
        Ok(true)
    });
    match stored {
        Ok(false) => false,
        Ok(true) => {
            heard.last_pull = Some(artifact::now());
            true
        }
        Err(e) => {
            heard.last_failure = Some(format!("storing what the server's wait carried: {e}"));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn carried(hash: &str, bytes: &[u8]) -> Carried {
        Carried {
            hash: hash.to_string(),
            content: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    #[test]
    fn a_server_that_gives_no_answer_is_asked_again_a_second_later_then_twice_as_late_to_a_minute()
    {
        let waits: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn takes_only_artifacts_their_hashes_name() {
        let post = b"D 2026-12-02T00:00:00\nU pat\n".to_vec();
        let sha3 = artifact::HashPolicy::Sha3.name(&post);
        let sha1 = artifact::HashPolicy::Sha1.name(&post);
        assert_eq!(
            checked(vec![carried(&sha3, &post), carried(&sha1, &post)]),
            Some(vec![
                (sha3.clone(), post.clone()),
                (sha1.clone(), post.clone())
            ])
        );
        let mut other = post.clone();
        other.push(b'\n');
        assert_eq!(
            checked(vec![carried(&sha3, &post), carried(&sha1, &other)]),
            None
        );
        assert_eq!(checked(vec![carried(&sha3.to_uppercase(), &post)]), None);
        assert_eq!(checked(vec![carried(&sha3[..40], &post)]), None);
        let bad = Carried {
            hash: sha3,
            content: "not base64!".into(),
        };
        assert_eq!(checked(vec![bad]), None);
        assert_eq!(checked(Vec::new()), Some(Vec::new()));
    }
}
