//! Fossil's git export as OCX reads it: the directory the repository's
//! `last-git-export-repo` config row names, what `fossil git export`
//! prints, the mirror's own state (`.mirror_state/db`: which check-in each
//! git commit was made from, and the watermark), what of the repository
//! that state lacks, each branch's head, and Fossil's own export hook (`git
//! export --if-mirrored`). Running the commands is `program.rs`'s; reading
//! what they print is here, as pure functions tested on samples.
//!
//! Fossil's export sends only check-ins dated after its watermark, the
//! newest time it exported, and points each branch at the check-in dated
//! newest: a check-in dated earlier than one exported before it (an
//! import, a clock set wrong) is passed over for good, and a branch whose
//! newest check-in is dated before its parent is left at the parent.
//! [`BesideMirror`] says what the mirror lacks and where each branch should
//! stand, by the marks both sides keep, whatever the dates;
//! `crate::git::export` mends it.

use super::FossilError;
use super::Repository;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// The config row (not a setting) where `fossil git export` keeps its mirror's directory.
const EXPORT_ROW: &str = "last-git-export-repo";

/// The mirror's own state, `.mirror_state/db` in its directory, as Fossil's
/// export keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MirrorState {
    /// The watermark: the newest check-in time (a Julian day) Fossil
    /// exported; it sends only what is dated after it.
    pub start: Option<f64>,
    /// The watermark as a time (UTC, `YYYY-MM-DD HH:MM:SS`), which `fossil
    /// git status` calls the last export.
    pub last_export: Option<String>,
    /// Where Fossil pushes after each export (`off` when nowhere).
    pub autopush: String,
    /// The git branch Fossil's trunk becomes.
    pub main_branch: String,
    /// The check-in it recorded last, when it holds one.
    pub last_checkin: Option<String>,
}

/// A check-in the mirror has no commit of.
#[derive(Debug, Clone, PartialEq)]
pub struct Unexported {
    /// Its full hash.
    pub hash: String,
    /// Its time, a Julian day.
    pub mtime: f64,
}

/// The name the mirror's state is attached under, for one check.
const ATTACHED: &str = "ocx_mirror";

/// The mirror state's file in the mirror `dir`.
fn state_file(dir: &Path) -> PathBuf {
    dir.join(".mirror_state").join("db")
}

/// A repository read beside its git export's state, attached to its
/// connection (still query-only) for as long as this lives.
pub struct BesideMirror<'r> {
    repo: &'r Repository,
    file: PathBuf,
}

impl Drop for BesideMirror<'_> {
    fn drop(&mut self) {
        let _ = self
            .repo
            .db
            .execute_batch(&format!("DETACH DATABASE {ATTACHED}"));
    }
}

impl BesideMirror<'_> {
    fn failed(&self, e: rusqlite::Error) -> FossilError {
        FossilError::MirrorState {
            path: self.file.clone(),
            source: e,
        }
    }

    /// What the mirror's state says of itself.
    pub fn state(&self) -> Result<MirrorState, FossilError> {
        let db = &self.repo.db;
        let config = |key: &str| -> Result<Option<String>, FossilError> {
            db.query_row(
                &format!("SELECT CAST(value AS TEXT) FROM {ATTACHED}.mconfig WHERE key=?1"),
                [key],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.failed(e))
        };
        let (start, last_export) = db
            .query_row(
                &format!(
                    "SELECT CAST(value AS REAL), datetime(value) FROM {ATTACHED}.mconfig WHERE key='start'"
                ),
                [],
                |r| Ok((r.get::<_, Option<f64>>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional()
            .map_err(|e| self.failed(e))?
            .unwrap_or((None, None));
        let last_checkin = db
            .query_row(
                &format!(
                    "SELECT uuid FROM {ATTACHED}.mmark WHERE isfile=0 ORDER BY id DESC LIMIT 1"
                ),
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.failed(e))?;
        Ok(MirrorState {
            start,
            last_export,
            last_checkin,
            autopush: config("autopush")?.unwrap_or_else(|| "off".into()),
            main_branch: config("mainbranch")?.unwrap_or_else(|| "master".into()),
        })
    }

    /// The check-ins Fossil's export sends (every one not private) that
    /// the mirror has no commit of, oldest first.
    pub fn unexported(&self) -> Result<Vec<Unexported>, FossilError> {
        let mut st = self
            .repo
            .db
            .prepare(&format!(
                "SELECT b.uuid, e.mtime FROM event e CROSS JOIN blob b ON b.rid=e.objid
                 WHERE e.type='ci' AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=e.objid)
                   AND NOT EXISTS(SELECT 1 FROM {ATTACHED}.mmark m
                                  WHERE m.uuid=b.uuid AND m.isfile=0 AND m.githash IS NOT NULL)
                 ORDER BY e.mtime"
            ))
            .map_err(|e| self.failed(e))?;
        st.query_map([], |r| {
            Ok(Unexported {
                hash: r.get(0)?,
                mtime: r.get(1)?,
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| self.failed(e))
    }

    /// The Fossil branch of the check-in the git commit `commit` was
    /// exported from, when it was.
    pub fn branch_of(&self, commit: &str) -> Result<Option<String>, FossilError> {
        // Tag 8 is Fossil's `branch` tag; its value on a check-in names its branch.
        self.repo
            .db
            .query_row(
                &format!(
                    "SELECT x.value FROM {ATTACHED}.mmark m CROSS JOIN blob b ON b.uuid=m.uuid
                     CROSS JOIN tagxref x ON x.rid=b.rid AND x.tagid=8 AND x.tagtype>0
                     WHERE m.githash=?1 AND m.isfile=0"
                ),
                [commit],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.failed(e))
    }

    /// The git commit of `branch`'s head: its leaf dated newest among those
    /// exported (what `fossil update BRANCH` takes), not private.
    pub fn head(&self, branch: &str) -> Result<Option<String>, FossilError> {
        self.repo
            .db
            .query_row(
                &format!(
                    "SELECT m.githash FROM tagxref x CROSS JOIN leaf l ON l.rid=x.rid
                     CROSS JOIN event e ON e.objid=l.rid CROSS JOIN blob b ON b.rid=l.rid
                     CROSS JOIN {ATTACHED}.mmark m ON m.uuid=b.uuid AND m.isfile=0
                     WHERE x.tagid=8 AND x.tagtype>0 AND x.value=?1 AND m.githash IS NOT NULL
                       AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=l.rid)
                     ORDER BY e.mtime DESC LIMIT 1"
                ),
                [branch],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.failed(e))
    }
}

/// Sets the watermark of the mirror `dir` to `start` (a Julian day), so
/// Fossil's next export sends what is dated after it and not yet sent.
pub fn set_watermark(dir: &Path, start: f64) -> Result<(), FossilError> {
    let file = state_file(dir);
    let failed = |source: rusqlite::Error| FossilError::MirrorState {
        path: file.clone(),
        source,
    };
    let db = Connection::open_with_flags(
        &file,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    db.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(failed)?;
    db.execute(
        "REPLACE INTO mconfig(key, value) VALUES('start', ?1)",
        [start],
    )
    .map_err(failed)?;
    Ok(())
}

impl Repository {
    /// The directory the `last-git-export-repo` config row names, if any.
    pub fn git_export_dir(&self) -> Result<Option<PathBuf>, FossilError> {
        Ok(self
            .config(EXPORT_ROW)?
            .filter(|d| !d.trim().is_empty())
            .map(PathBuf::from))
    }

    /// This repository read beside the state of the git export in `dir`;
    /// refused when Fossil keeps none there (no export was made there, or
    /// its state was removed).
    pub fn beside_mirror(&self, dir: &Path) -> Result<BesideMirror<'_>, FossilError> {
        let file = state_file(dir);
        let beside = BesideMirror {
            repo: self,
            file: file.clone(),
        };
        // SQLite would make a file that is not there: the state must be Fossil's.
        if !std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            return Err(FossilError::NoMirrorState(file));
        }
        self.db
            .execute(
                &format!("ATTACH DATABASE ?1 AS {ATTACHED}"),
                [file.to_string_lossy()],
            )
            .map_err(|e| beside.failed(e))?;
        Ok(beside)
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

#[cfg(test)]
mod tests {
    use super::*;

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
