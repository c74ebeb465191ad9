//! The machine's listener: one long-poll open on the server's `wait`, a
//! pull and a wake when it answers something new, and a pull once a
//! minute while the wait is refused or the server is away; what it heard
//! last is kept for `ocx status`.

use crate::fossil::Fossil;
use crate::node::config::NodeConfig;
use crate::node::page::PageError;
use crate::node::receipts::{Received, Server};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What the page's `wait` answers.
#[derive(Deserialize)]
struct Waited {
    last: i64,
    /// The receipts of what came after `after` (none from a page older
    /// than this answer).
    #[serde(default)]
    received: Vec<Received>,
}

/// The long-poll: the highest receipt the server holds, answered as soon
/// as it is past `after` or after `within` seconds; the receipts it told
/// of what came are kept by `server` for the wake that follows.
fn wait(server: &Server, after: i64, within: u64) -> Result<i64, PageError> {
    let waited: Waited = server
        .page()
        .get(&format!("wait?after={after}&within={within}"))?;
    if waited.last > after {
        server.told(waited.received);
    }
    Ok(waited.last)
}

/// What `ocx status` shows of an agent machine: its last wake and pull.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Heard {
    /// When the server's wait last answered something new (UTC).
    pub last_wake: Option<String>,
    /// When the clone last pulled from the server (UTC).
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
    fn save(&self, root: &Path) {
        let _ = crate::node::write_whole(
            &Self::file(root),
            &root.join("heard.json.new"),
            &serde_json::to_vec_pretty(self).unwrap_or_default(),
        );
    }
}

/// The machine's listener: keeps one long-poll open on the server's
/// `wait`, pulls when it answers something new and sends `wake`; when the
/// wait is refused or the server is away, pulls once a minute (trying
/// the wait again each time) and keeps waking for unconfirmed responses.
/// `pulling` is set while a pull is under way, so the node passes over
/// the changes the pull itself writes.
pub fn listen(
    root: &Path,
    cfg: &NodeConfig,
    server: &Server,
    pulling: &AtomicBool,
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
            Ok(last) => {
                failures = 0;
                heard.polling = false;
                if after.is_none_or(|a| last > a) {
                    heard.last_wake = Some(crate::fossil::artifact::now());
                    pull(&fossil, cfg, &mut heard, root, pulling);
                    pulled_at = Some(std::time::Instant::now());
                    after = Some(last);
                    if !wake() {
                        return;
                    }
                } else if super::any_unconfirmed(root) && !wake() {
                    return;
                }
            }
            Err(e) => {
                failures += 1;
                heard.polling = true;
                heard.last_failure = Some(e.to_string());
                heard.save(root);
                if pulled_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    pull(&fossil, cfg, &mut heard, root, pulling);
                    pulled_at = Some(std::time::Instant::now());
                    if !wake() {
                        return;
                    }
                }
                after = None;
                std::thread::sleep(
                    Duration::from_secs(1u64 << failures.min(6)).min(Duration::from_secs(60)),
                );
            }
        }
    }
}

fn pull(fossil: &Fossil, cfg: &NodeConfig, heard: &mut Heard, root: &Path, pulling: &AtomicBool) {
    pulling.store(true, Ordering::Release);
    let pulled = fossil.pull_server(&cfg.repository);
    pulling.store(false, Ordering::Release);
    match pulled {
        Ok(()) => heard.last_pull = Some(crate::fossil::artifact::now()),
        Err(e) => heard.last_failure = Some(format!("pull: {e}")),
    }
    heard.save(root);
}
