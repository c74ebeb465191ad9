//! A run on a terminal of its own (a runner page's `"terminal": true`):
//! who may join it and what each joining leaves ([`Attachments`]), and the
//! run's lines typed into it ([`type_lines`]): the first line and each
//! delivery, each ended by a carriage return, one after the other as its
//! mode allows. A program reading lines is typed each as it comes; an
//! agent's own interface is typed the next only once it says it waits for
//! input again, by a byte its hook writes to the run's turns pipe.

use super::say;
use crate::node::attached::{self, Attachment, Ended};
use crate::node::runner::InputMode;
use crate::protocol::found::StandingRecord;
use crate::run::terminal::{self, Joined, Joining, Parted};
use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};

/// The pipe in the workspace's `.ocx` an agent's hook writes a byte to
/// each time it waits for input again.
pub const TURNS: &str = "turns";

/// The most bytes of one delivery typed into an agent's own interface
/// (a program reading lines takes at most [`terminal::LINE_MAX`]).
const AGENT_LINE_MAX: usize = 16 << 10;

/// The watcher's word on who joins its run's terminal: a login holding
/// admin or setup, as the node's receipts say; each joining kept in the
/// run's directory while it lasts, and posted by the node when it ends.
pub struct Attachments {
    pub root: PathBuf,
    pub record: StandingRecord,
    pub dir: PathBuf,
}

impl Attachments {
    /// `then` given the node as it stands now; none when its repository
    /// cannot be read.
    fn with_node<T>(
        &self,
        then: impl FnOnce(
            &crate::node::config::NodeConfig,
            &crate::fossil::Fossil,
            &crate::fossil::Repository,
            &crate::node::Receipts,
        ) -> T,
    ) -> Option<T> {
        let (cfg, fossil, repo) = crate::node::respond::open(&self.root)?;
        let receipts = crate::node::Receipts::of_node(&cfg, &repo).ok()?;
        Some(then(&cfg, &fossil, &repo, &receipts))
    }
}

impl terminal::Keeper for Attachments {
    fn may_join(&self, login: &str) -> Result<(), String> {
        self.with_node(|_, _, _, receipts| attached::may_attach(receipts, login))
            .unwrap_or_else(|| Err("the node's repository could not be read".into()))
    }

    fn joined(&self, joined: &Joined) {
        let a = Attachment {
            record: self.record.hash.clone(),
            login: joined.login.clone(),
            at: joined.at.clone(),
            since: attached::now_seconds(),
        };
        if let Err(e) = attached::began(&self.dir, &a) {
            say(&format!(
                "the attachment of {} could not be kept: {e}",
                a.login
            ));
        }
        say(&format!("{} attached to the run's terminal", a.login));
    }

    fn parted(&self, joined: &Joined, seconds: u64, how: Parted) {
        let a = Attachment {
            record: self.record.hash.clone(),
            login: joined.login.clone(),
            at: joined.at.clone(),
            since: attached::now_seconds().saturating_sub(seconds),
        };
        let how = match how {
            Parted::Left => Ended::Left,
            Parted::Ended => Ended::WithTheRun,
        };
        let posted = self.with_node(|cfg, fossil, repo, receipts| {
            attached::ended(
                cfg,
                fossil,
                repo,
                receipts,
                &self.record,
                &self.dir,
                &a,
                seconds,
                how,
            )
        });
        match posted {
            Some(Ok(hash)) => say(&format!(
                "{} left the run's terminal after {seconds} seconds: posted {}",
                a.login,
                &hash[..hash.len().min(16)]
            )),
            Some(Err(e)) => say(&format!(
                "the attachment of {} could not be posted: {e}",
                a.login
            )),
            None => {
                say("the attachment could not be posted: the node's repository could not be read")
            }
        }
    }
}

/// The turns pipe in `own` (the workspace's `.ocx`), made for the run's
/// account `uid` (none: the watcher's own) to write, and opened here for
/// reading and writing, so it never reads an end and no hook ever waits
/// to open it.
pub fn turns_pipe(own: &Path, uid: Option<u32>) -> std::io::Result<std::fs::File> {
    use nix::sys::stat::Mode;
    let path = own.join(TURNS);
    let _ = std::fs::remove_file(&path);
    nix::unistd::mkfifo(&path, Mode::S_IRUSR | Mode::S_IWUSR)?;
    if let Some(uid) = uid {
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(uid)), None)?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags_nofollow()
        .open(&path)
}

/// Opening a path without following a symbolic link at its end.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
    }
}

/// What the typist hears of.
enum Heard {
    /// A delivery's line, escaped as the inbox keeps it.
    Line(String),
    /// The agent waits for input again.
    Waiting,
}

/// A line as it is typed for `mode`: cut where it may be, ended by a
/// carriage return.
fn typed(mode: InputMode, line: &str) -> Vec<u8> {
    if mode.is_interactive() {
        let mut at = line.len().min(AGENT_LINE_MAX);
        while !line.is_char_boundary(at) {
            at -= 1;
        }
        terminal::typed(&line[..at])
    } else {
        terminal::typed(line)
    }
}

/// Types the run's lines into its terminal, on threads of their own:
/// `first` (none: the program was given it on its command line) and then
/// each delivery from `deliveries`; for an agent's own interface, each
/// only once `turns` said it waits for input again.
pub fn type_lines(
    joining: Joining,
    mode: InputMode,
    first: Option<String>,
    deliveries: Receiver<String>,
    turns: Option<std::fs::File>,
) {
    let (tx, heard) = channel::<Heard>();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            while let Ok(line) = deliveries.recv() {
                if tx.send(Heard::Line(line)).is_err() {
                    return;
                }
            }
        });
    }
    if let Some(mut turns) = turns {
        std::thread::spawn(move || {
            let mut bytes = [0u8; 64];
            loop {
                match turns.read(&mut bytes) {
                    Ok(0) => return,
                    Ok(n) => {
                        for _ in 0..n {
                            if tx.send(Heard::Waiting).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
    }
    std::thread::spawn(move || {
        let gated = mode.is_interactive();
        // Whether the program takes a line now: a program reading lines
        // always does; an agent only once it says it waits for input (its
        // first turn, the line it was started with, under way until then).
        let mut free = !gated;
        let mut waiting: VecDeque<String> = first.into_iter().collect();
        let give = |line: String, free: &mut bool| -> bool {
            *free = !gated;
            joining.type_in(&typed(mode, &line)).is_ok()
        };
        while free && let Some(line) = waiting.pop_front() {
            if !give(line, &mut free) {
                return;
            }
        }
        while let Ok(h) = heard.recv() {
            match h {
                Heard::Line(line) => waiting.push_back(line),
                Heard::Waiting => free = true,
            }
            while free && let Some(line) = waiting.pop_front() {
                if !give(line, &mut free) {
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_is_typed_more_than_a_line_reader_takes() {
        let long = "x".repeat(10_000);
        assert_eq!(typed(InputMode::Lines, &long).len(), terminal::LINE_MAX + 1);
        assert_eq!(typed(InputMode::ClaudeInteractive, &long).len(), 10_001);
        let cut = typed(InputMode::CodexInteractive, &"é".repeat(20_000));
        assert!(cut.len() <= AGENT_LINE_MAX + 1);
        assert!(std::str::from_utf8(&cut[..cut.len() - 1]).is_ok());
    }
}
