//! Whether an agent machine's server answers, as the machine last found
//! it: the node's log holds a line each time that changes (the server
//! gone away, the server answering again), never one a try; while the
//! server is away the node wakes only when its listener hears it again.

use crate::node::log::{self, Done, Event};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// Whether the machine's server answers, shared by the node's listener
/// and its wakes.
pub struct Reach {
    root: PathBuf,
    url: String,
    /// Since when the server has given no answer, while it gives none.
    away_since: Mutex<Option<Instant>>,
}

impl Reach {
    /// The server at `url` of the machine whose node's root is `root`,
    /// believed to answer until it is found not to.
    pub fn new(root: &Path, url: &str) -> Reach {
        Reach {
            root: root.to_path_buf(),
            url: url.trim_end_matches('/').to_string(),
            away_since: Mutex::new(None),
        }
    }

    /// Whether the server gave no answer when last asked.
    pub fn is_away(&self) -> bool {
        self.away_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The server gave no answer, as `why` says; logged only when it
    /// answered until now.
    pub fn lost(&self, why: &str) {
        let mut since = self.away_since.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_some() {
            return;
        }
        *since = Some(Instant::now());
        log::write(
            &self.root,
            &[Event::new(
                Done::ServerAway,
                format!(
                    "{why}; the machine asks it again after 1, 2, 4... seconds, then once a minute, and pushes nothing meanwhile"
                ),
            )],
        );
    }

    /// The server answered; logged only when it was away until now.
    pub fn answered(&self) {
        let Some(since) = self
            .away_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        log::write(
            &self.root,
            &[Event::new(
                Done::ServerAnswers,
                format!(
                    "the server {} answers again, after {} seconds away",
                    self.url,
                    since.elapsed().as_secs()
                ),
            )],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_the_servers_answering_is_one_line_however_often_it_is_found() {
        let root = tempfile::tempdir().unwrap();
        let reach = Reach::new(root.path(), "http://127.0.0.1:1/");
        reach.answered();
        assert!(!reach.is_away());
        for _ in 0..5 {
            reach.lost("the server http://127.0.0.1:1 does not answer: refused");
        }
        assert!(reach.is_away());
        reach.answered();
        reach.answered();
        assert!(!reach.is_away());
        let lines = log::last(root.path(), 10).unwrap();
        let done: Vec<String> = lines
            .iter()
            .map(|l| match l {
                log::Logged::Event(e) => e.done.clone(),
                log::Logged::Text(t) => t.clone(),
            })
            .collect();
        assert_eq!(done, ["server away", "server answers"]);
    }
}
