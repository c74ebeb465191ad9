//! Fossil's git export as OCX reads it: the directory the repository's
//! `last-git-export-repo` config row names, what `fossil git export` and
//! `fossil git status` print, the check-in the mirror's state last
//! recorded, and Fossil's own export hook (`git export --if-mirrored`).
//! Running the commands is `program.rs`'s; reading what they print is here,
//! as pure functions tested on samples.

use super::FossilError;
use super::Repository;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// The config row (not a setting) where `fossil git export` keeps its mirror's directory.
const EXPORT_ROW: &str = "last-git-export-repo";

/// What `fossil git status` says of the mirror.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitStatus {
    /// The mirror's directory.
    pub mirror: Option<String>,
    /// How many check-ins await export; `None` where Fossil did not say.
    pub awaiting: Option<u64>,
    /// When it last exported, as Fossil writes it.
    pub last_export: Option<String>,
    /// Where it pushes after each export (`off` when nowhere).
    pub autopush: Option<String>,
    /// The git branch Fossil's trunk becomes.
    pub main_branch: Option<String>,
    /// Why what awaits could not be read, when it could not.
    pub unreadable: Option<String>,
}

impl Repository {
    /// The directory the `last-git-export-repo` config row names, if any.
    pub fn git_export_dir(&self) -> Result<Option<PathBuf>, FossilError> {
        Ok(self
            .config(EXPORT_ROW)?
            .filter(|d| !d.trim().is_empty())
            .map(PathBuf::from))
    }

    /// The index and command of each after-receive hook that runs Fossil's
    /// own export (`git export`), which would export outside OCX's lock.
    pub fn fossil_export_hooks(&self) -> Result<Vec<(usize, String)>, FossilError> {
        Ok(self
            .hooks()?
            .into_iter()
            .filter(|h| h.1 == "after-receive" && is_export_command(&h.2))
            .map(|h| (h.0, h.2))
            .collect())
    }

    /// Whether any of `hashes` (as an after-receive hook reads them) is a
    /// check-in, or a control artifact setting a symbolic tag or a branch
    /// on one: what changes the export. A control artifact's rows in
    /// `tagxref` carry its own time (to within the last bit of a double,
    /// as Fossil computes it twice), so they are found through the index
    /// on (tag, time) from the few tags an export carries, never by a scan
    /// of every tag ever set.
    pub fn adds_to_export(&self, hashes: &[String]) -> Result<bool, FossilError> {
        let mut event = self.db.prepare(
            "SELECT b.rid, e.type, e.mtime FROM blob b CROSS JOIN event e ON e.objid=b.rid WHERE b.uuid=?1",
        )?;
        let mut tags = self.db.prepare(
            "SELECT EXISTS(SELECT 1 FROM tag t CROSS JOIN tagxref x INDEXED BY tagxref_i1
               ON x.tagid=t.tagid AND x.mtime BETWEEN ?2-1e-6 AND ?2+1e-6 AND x.srcid=?1
             WHERE (t.tagname GLOB 'sym-*' OR t.tagname='branch')
               AND EXISTS(SELECT 1 FROM event c WHERE c.objid=x.rid AND c.type='ci'))",
        )?;
        for h in hashes {
            let found: Option<(i64, String, f64)> = event
                .query_row([h], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            let changes = match found {
                Some((_, kind, _)) if kind == "ci" => true,
                Some((rid, kind, mtime)) if kind == "g" => {
                    tags.query_row(rusqlite::params![rid, mtime], |r| r.get::<_, bool>(0))?
                }
                _ => false,
            };
            if changes {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Whether `dir` is a git repository as Fossil's export makes one: a
/// `.git` directory holding `HEAD`.
pub fn is_git_mirror(dir: &Path) -> bool {
    let git = dir.join(".git");
    std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir())
        && std::fs::symlink_metadata(git.join("HEAD")).is_ok_and(|m| m.is_file())
}

/// Whether a hook command runs Fossil's own export.
fn is_export_command(command: &str) -> bool {
    let words: Vec<String> = shlex::split(command).unwrap_or_default();
    words.windows(2).any(|w| w[0] == "git" && w[1] == "export")
}

/// The hashes an after-receive hook's input names, one a line (`HASH
/// SUMMARY`); any line not starting with a hash is passed over.
pub fn hook_input_hashes(input: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(input)
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|h| (40..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// The check-in the mirror's state (`.mirror_state/db` in `mirror`)
/// recorded last, read query-only; `None` when it holds none or cannot
/// be read.
pub fn last_exported_checkin(mirror: &Path) -> Option<String> {
    let db = Connection::open_with_flags(
        mirror.join(".mirror_state").join("db"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let _ = db.busy_timeout(std::time::Duration::from_secs(2));
    db.query_row(
        "SELECT uuid FROM mmark WHERE isfile=0 ORDER BY id DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .optional()
    .ok()
    .flatten()
}

/// How many check-ins one `fossil git export` said it added (`N check-ins
/// added to ...`); 0 when it said none (`no changes`).
pub fn parse_added(stdout: &str) -> u64 {
    stdout
        .lines()
        .filter_map(|l| {
            let at = l.find(" check-ins added")?;
            l[..at].split_whitespace().last()?.parse::<u64>().ok()
        })
        .sum()
}

/// Fossil's words for a failed export: its `Database error` line, else
/// git's `fatal:` line, else the first line it printed on its error output,
/// else how it ended.
pub fn export_failure(stdout: &str, stderr: &str, ended: &str) -> String {
    let lines = || stderr.lines().chain(stdout.lines()).map(str::trim);
    lines()
        .find(|l| l.starts_with("Database error"))
        .or_else(|| lines().find(|l| l.starts_with("fatal:")))
        .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(str::to_string)
        .unwrap_or_else(|| format!("fossil git export {ended} without saying why"))
}

/// What `fossil git status` printed, read: each line `Key: value`; the
/// `Status` line says what awaits (`up-to-date`, or `N check-in(s)
/// awaiting export`), and anything else leaves `awaiting` unknown, with
/// `unreadable` saying why.
pub fn parse_git_status(stdout: &str) -> GitStatus {
    let mut s = GitStatus::default();
    let mut said = None;
    for line in stdout.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.trim() {
            "Git mirror" => s.mirror = (value != "none").then_some(value),
            "Last export" => s.last_export = Some(value),
            "Autopush" => s.autopush = Some(value),
            "Main-Branch" => s.main_branch = Some(value),
            "Status" => said = Some(value),
            _ => {}
        }
    }
    match said.as_deref() {
        Some("up-to-date") => s.awaiting = Some(0),
        Some(text) => match text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|_| text.contains("awaiting export"))
        {
            Some(n) => s.awaiting = Some(n),
            None => s.unreadable = Some(format!("fossil git status says {text:?}")),
        },
        None if s.mirror.is_some() => {
            s.unreadable = Some("fossil git status says nothing of what awaits export".into())
        }
        None => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Git mirror:  /srv/mirror\nLast export: 2026-11-30 20:16:07 (5 seconds ago)\nAutopush:    off\nMain-Branch: master\nStatus:      1 check-in awaiting export\nExported:    1 check-ins and 0 file blobs\n";

    #[test]
    fn git_status_reads_each_line() {
        let s = parse_git_status(STATUS);
        assert_eq!(s.mirror.as_deref(), Some("/srv/mirror"));
        assert_eq!(s.awaiting, Some(1));
        assert_eq!(s.autopush.as_deref(), Some("off"));
        assert_eq!(s.main_branch.as_deref(), Some("master"));
        assert!(s.last_export.unwrap().starts_with("2026-11-30"));
        assert_eq!(s.unreadable, None);
        let up = parse_git_status(&STATUS.replace("1 check-in awaiting export", "up-to-date"));
        assert_eq!(up.awaiting, Some(0));
        let many = parse_git_status(&STATUS.replace("1 check-in", "12 check-ins"));
        assert_eq!(many.awaiting, Some(12));
    }

    #[test]
    fn a_status_fossil_cannot_say_is_unreadable() {
        let odd = parse_git_status(&STATUS.replace("1 check-in awaiting export", "confused"));
        assert_eq!(odd.awaiting, None);
        assert!(odd.unreadable.unwrap().contains("confused"));
        let none = parse_git_status("Git mirror:  none\n");
        assert_eq!(none.mirror, None);
        assert_eq!(none.unreadable, None);
        for junk in ["", "::::", "Status:", "Status: -3 awaiting export"] {
            let _ = parse_git_status(junk);
        }
    }

    #[test]
    fn an_export_says_what_it_added() {
        let out = "git fast-import --export-marks=.mirror_state/marks.txt --quiet --done\n1/1      1 check-ins added to the /srv/mirror\ngit update-ref \"refs/heads/master\" f3df\n";
        assert_eq!(parse_added(out), 1);
        assert_eq!(parse_added("no changes\n"), 0);
        assert_eq!(parse_added("7/7      7 check-ins added to the /x\n"), 7);
    }

    #[test]
    fn a_failed_export_is_said_in_fossils_words() {
        let err = "SQLITE_READONLY(8): statement aborts\nSQL: INSERT\nDatabase error: SQL error (8,8: attempt to write a readonly database) while running [INSERT]\nfatal: Unable to create temporary file\n";
        assert!(export_failure("", err, "exited 1").starts_with("Database error: SQL error"));
        assert_eq!(
            export_failure("", "fatal: nope\n", "exited 1"),
            "fatal: nope"
        );
        assert!(export_failure("", "", "exited 1").contains("exited 1"));
    }

    #[test]
    fn fossils_own_export_hook_is_known_by_its_words() {
        assert!(is_export_command(
            "/usr/local/bin/fossil git export --if-mirrored -R repo.fossil"
        ));
        assert!(!is_export_command(
            "/usr/bin/ocx hook-poke /root # ocx-node-hook"
        ));
        assert!(!is_export_command("echo git; echo export"));
    }

    #[test]
    fn hook_input_names_hashes_only() {
        let h = "a".repeat(64);
        let input = format!(
            "{h} check-in to trunk by admin\nnot a line\n\n{} tag x\n",
            "b".repeat(40)
        );
        assert_eq!(hook_input_hashes(input.as_bytes()).len(), 2);
        assert!(hook_input_hashes(b"\xff\xfe").is_empty());
    }
}
