//! The git side of an imported repository's upstream: a bare mirror of the
//! git repository it came from, kept beside it, fetched anew, and its
//! history given to Fossil by git's own `fast-export`, from where the last
//! import stopped (git's marks file, kept in step with Fossil's), one
//! branch at a time under the name Fossil is to give it. Git is started as
//! `upload.rs` starts it: by absolute path, `PATH` alone in its
//! environment (and no prompt for a password), never through a shell, a
//! `--` before each path or URL the person gave.

#![allow(clippy::disallowed_methods)] // git is started in src/git/ alone, as docs/architecture.md says

use super::{Git, GitError};
use std::path::Path;
use std::process::{Command, Stdio};

/// The transports git may use for an upstream: a local directory or
/// `file://`, `git://`, `http://`, `https://` and ssh (`ssh://` or
/// `[user@]host:path`). Not `ext::` (it runs a command), `fd::` (it talks
/// on a descriptor, and waits on it for ever), nor any other remote
/// helper git would start by its name.
pub const TRANSPORTS: &[&str] = &["file", "git", "http", "https", "ssh"];

/// The only variables git is given: no `HOME`, so no config of the
/// caller's is read, and no system config either; no prompt; and
/// [`TRANSPORTS`] as `GIT_ALLOW_PROTOCOL`, which git holds above any
/// `protocol.*.allow` a config sets, so no repository's config (nor a
/// submodule, nor a redirect) gives git another.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_ALLOW_PROTOCOL", "file:git:http:https:ssh"),
];

/// What every git OCX starts here is given on its command line, above
/// what a repository's config says: no hook (a mirror's `hooks/` is
/// OCX's own, but a hook runs as whoever fetches), no file-system monitor
/// (a command), no submodule followed.
const PINNED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
];

/// Why `from` is no upstream OCX gives git, or `None` when it is one: a
/// URL whose scheme is one of [`TRANSPORTS`] (`git+ssh` and `ssh+git`
/// as ssh), an scp-like `[user@]host:path`, or a local directory.
/// Refused: a control character; a leading `-` (an option to git); git's
/// `NAME::ADDRESS` form, which starts the remote helper `NAME` (`ext::`
/// runs the command it names); any other scheme, which git hands to a
/// helper program of that name; an ssh user, host or port beginning with
/// `-` (an option to ssh).
pub fn refused_from(from: &str) -> Option<String> {
    if from.is_empty() {
        return Some("it is empty".into());
    }
    if from.chars().any(char::is_control) {
        return Some("it holds a control character".into());
    }
    if from.starts_with('-') {
        return Some("it begins with -, which git would read as an option".into());
    }
    // Git's own reading: letters, digits and `+-.` up to `::` name a helper.
    let word = from
        .find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .unwrap_or(from.len());
    if from[word..].starts_with("::") {
        return Some(format!(
            "it names git's remote helper {:?} ({}::), which starts a program of its own (ext:: runs a command, fd:: talks on a descriptor); OCX lets git use {} alone",
            &from[..word],
            &from[..word],
            TRANSPORTS.join(", ")
        ));
    }
    if from[word..].starts_with("://") {
        let scheme = from[..word].to_ascii_lowercase();
        let scheme = match scheme.as_str() {
            "git+ssh" | "ssh+git" => "ssh",
            s => s,
        };
        if !TRANSPORTS.contains(&scheme) {
            return Some(format!(
                "its scheme {:?} is no transport OCX lets git use ({}); git would hand it to a helper program of that name",
                &from[..word],
                TRANSPORTS.join(", ")
            ));
        }
        if scheme == "ssh" {
            let rest = &from[word + 3..];
            let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
            return ssh_address(authority);
        }
        return None;
    }
    // Git reads a colon before any slash as ssh's `[user@]host:path`.
    match (from.find(':'), from.find('/')) {
        (Some(colon), slash) if slash.is_none_or(|s| s > colon) => ssh_address(&from[..colon]),
        _ => None,
    }
}

/// Why the ssh address `authority` (`[user@]host[:port]`, a host perhaps
/// in brackets) would be an option to ssh, or `None`.
fn ssh_address(authority: &str) -> Option<String> {
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let host = host.trim_start_matches('[');
    let port = host.rsplit_once(':').map(|(_, p)| p);
    let option = |part: Option<&str>| part.is_some_and(|p| p.starts_with('-'));
    (option(user) || option(Some(host)) || option(port)).then(|| {
        "its ssh user, host or port begins with -, which ssh would read as an option".into()
    })
}

impl Git {
    /// `git`, as this module's head says it is started, with [`PINNED`]
    /// given, on `git_dir` when given.
    pub(super) fn command(&self, git_dir: Option<&Path>) -> Command {
        let mut c = Command::new(self.path());
        c.env_clear().envs(ENV.iter().copied()).current_dir("/");
        for pin in PINNED {
            c.arg("-c").arg(pin);
        }
        if let Some(d) = git_dir {
            let mut safe = std::ffi::OsString::from("safe.directory=");
            safe.push(d.as_os_str());
            c.arg("-c").arg(safe).arg("--git-dir").arg(d);
        }
        c.stdin(Stdio::null());
        c
    }

    /// Runs `c` to its end; refused in git's own words when it fails.
    pub(super) fn ran(
        &self,
        operation: &'static str,
        c: &mut Command,
    ) -> Result<std::process::Output, GitError> {
        let out = c.output().map_err(|e| GitError::Command {
            operation,
            message: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(GitError::Command {
                operation,
                message: crate::fossil::redact_password(&super::first_said(&out.stderr)),
            });
        }
        Ok(out)
    }

    /// Makes `into` a bare mirror of the git repository `from` (a URL or a
    /// directory), refused in git's own words when git cannot read it. A
    /// directory is read as a URL is (`--no-local`): its objects copied
    /// through git's transport, never linked, and no `alternates` of its
    /// carried into the mirror, so the mirror reads nothing of another
    /// directory after.
    pub fn mirror(&self, from: &str, into: &Path) -> Result<(), GitError> {
        self.ran(
            "clone",
            self.command(None)
                .args(["clone", "--mirror", "--no-local", "--quiet", "--"])
                .arg(from)
                .arg(into)
                .stdout(Stdio::null()),
        )
        .map(drop)
    }

    /// Whether git can read the repository `from` (its branches listed),
    /// refused in git's own words.
    pub fn can_read(&self, from: &str) -> Result<(), GitError> {
        self.ran(
            "ls-remote",
            self.command(None)
                .args(["ls-remote", "--heads", "--"])
                .arg(from)
                .stdout(Stdio::null()),
        )
        .map(drop)
    }

    /// Fetches what the mirror's upstream added since.
    pub fn fetch_mirror(&self, dir: &Path) -> Result<(), GitError> {
        self.ran(
            "fetch",
            self.command(Some(dir))
                .args(["fetch", "--prune", "--quiet", "origin"])
                .stdout(Stdio::null()),
        )
        .map(drop)
    }

    /// The branch the mirror's HEAD names, as its upstream's default.
    pub fn default_branch(&self, dir: &Path) -> Result<Option<String>, GitError> {
        let out = self
            .command(Some(dir))
            .args(["symbolic-ref", "--quiet", "HEAD"])
            .output()
            .map_err(|e| GitError::Command {
                operation: "symbolic-ref",
                message: e.to_string(),
            })?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("refs/heads/")
            .map(str::to_string))
    }

    /// The mirror's refs under `prefix` (`refs/heads/`, `refs/tags/`): each
    /// name (without the prefix) and the commit it names (a tag peeled).
    pub fn refs(&self, dir: &Path, prefix: &str) -> Result<Vec<(String, String)>, GitError> {
        let out = self.ran(
            "for-each-ref",
            self.command(Some(dir)).args([
                "for-each-ref",
                "--format=%(refname) %(objectname) %(*objectname)",
                prefix,
            ]),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let name = w.next()?.strip_prefix(prefix)?.to_string();
                let object = w.next()?.to_string();
                let peeled = w.next().map(str::to_string);
                Some((name, peeled.unwrap_or(object)))
            })
            .collect())
    }

    /// Writes to `out` git's fast-export of every branch of `branches`,
    /// what the marks file `marks` does not hold yet, its marks kept
    /// nowhere: the stream read for its paths before any is imported.
    pub fn fast_export_check(
        &self,
        dir: &Path,
        marks: &Path,
        branches: &[&str],
        out: &Path,
    ) -> Result<(), GitError> {
        let mut export = self.fast_export_command(dir, marks, out)?;
        self.ran(
            "fast-export",
            export.args(branches.iter().map(|b| format!("refs/heads/{b}"))),
        )
        .map(drop)
    }

    /// Writes to `out` git's fast-export of `branch`, what its marks file
    /// `marks` does not hold yet (every mark then written to `marks_out`),
    /// the branch named `as_name` in the stream; signed tags stripped.
    pub fn fast_export(
        &self,
        dir: &Path,
        marks: &Path,
        marks_out: &Path,
        branch: &str,
        as_name: &str,
        out: &Path,
    ) -> Result<(), GitError> {
        let mut export_marks = std::ffi::OsString::from("--export-marks=");
        export_marks.push(marks_out.as_os_str());
        let mut export = self.fast_export_command(dir, marks, out)?;
        self.ran(
            "fast-export",
            export
                .arg(export_marks)
                .arg(format!(
                    "--refspec=refs/heads/{branch}:refs/heads/{as_name}"
                ))
                .arg(format!("refs/heads/{branch}")),
        )
        .map(drop)
    }

    /// Git's fast-export in `dir`, signed tags stripped, of what the marks
    /// file `marks` (if there) does not hold, writing its stream to `out`;
    /// what it exports is named after.
    fn fast_export_command(
        &self,
        dir: &Path,
        marks: &Path,
        out: &Path,
    ) -> Result<Command, GitError> {
        let file = std::fs::File::create(out).map_err(|error| GitError::Io {
            what: "write the export's stream",
            dir: out.to_path_buf(),
            error,
        })?;
        let mut import = std::ffi::OsString::from("--import-marks-if-exists=");
        import.push(marks.as_os_str());
        let mut export = self.command(Some(dir));
        export
            .args(["fast-export", "--signed-tags=strip", "--reencode=yes"])
            .arg(import)
            .stdout(file);
        Ok(export)
    }
}

/// The config row naming how often the node brings the repository up to
/// its upstream (a whole number, then s, m, h or d; empty: never).
pub const EVERY_ROW: &str = "ocx-upstream-every";

/// When the last run ended (the time `upstream.json` was last written),
/// when there was one.
pub fn last_run_at(repository: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir_of(repository).join(KEPT))
        .and_then(|m| m.modified())
        .ok()
}

/// Where an imported repository keeps its upstream: beside it, named for
/// it (`REPO.fossil.upstream/`), its owner's alone.
pub fn dir_of(repository: &Path) -> std::path::PathBuf {
    let mut name = repository.as_os_str().to_os_string();
    name.push(".upstream");
    std::path::PathBuf::from(name)
}

/// What an imported repository keeps of its upstream (`upstream.json`).
#[derive(
    Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema, PartialEq, Eq,
)]
pub struct Kept {
    /// The git repository it came from, a URL (its password hidden) or a directory.
    pub from: String,
    /// The upstream's default branch, which Fossil's trunk is.
    pub default_branch: String,
    /// What the last run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Brought>,
}

/// What one run bringing the repository up to its upstream did.
#[derive(
    Debug, Clone, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema, PartialEq, Eq,
)]
pub struct Brought {
    /// When it ended (UTC).
    pub when: String,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
    /// Each branch that had something new: where it went and how many commits.
    pub branches: Vec<BranchBrought>,
    /// The tags added.
    pub tags: Vec<String>,
    /// Why it failed, in git's or Fossil's words; absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// One branch brought up.
#[derive(
    Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema, PartialEq, Eq,
)]
pub struct BranchBrought {
    /// The upstream's branch.
    pub branch: String,
    /// The Fossil branch its commits went onto: its own name (trunk for the
    /// default), or `upstream/NAME` where Fossil's branch has check-ins of its own.
    pub onto: String,
    /// How many commits it brought.
    pub commits: u64,
}

/// The Fossil branch an upstream branch is imported as: trunk for the
/// default branch, else its own name.
pub fn fossil_name(branch: &str, default: &str) -> String {
    if branch == default {
        "trunk".into()
    } else {
        branch.to_string()
    }
}

/// An imported repository's upstream, as kept beside it.
pub struct Upstream {
    pub dir: std::path::PathBuf,
    pub kept: Kept,
}

const KEPT: &str = "upstream.json";
const MIRROR: &str = "mirror.git";
const GIT_MARKS: &str = "git.marks";
const FOSSIL_MARKS: &str = "fossil.marks";
const STREAM: &str = "stream";
/// The lock one run at a time holds.
pub const LOCK: &str = "lock";

impl Upstream {
    /// The upstream `repository` keeps, if it was imported from git.
    pub fn of(repository: &Path) -> Option<Upstream> {
        let dir = dir_of(repository);
        let kept: Kept = serde_json::from_slice(&std::fs::read(dir.join(KEPT)).ok()?).ok()?;
        Some(Upstream { dir, kept })
    }

    fn keep(&self) -> Result<(), GitError> {
        let bytes = serde_json::to_vec_pretty(&self.kept).unwrap_or_default();
        crate::file::write_whole(
            &self.dir.join(KEPT),
            &self.dir.join(".upstream.json.tmp"),
            &bytes,
            0o600,
        )
        .map_err(|error| GitError::Io {
            what: "keep what was brought",
            dir: self.dir.clone(),
            error,
        })
    }

    /// Mirrors `from` beside `repository` and imports its whole history
    /// into `repository`, made new with `admin` its administrator: the
    /// default branch as trunk, every other branch by its name, each tag
    /// on its commit, as `admin`. Refused in git's words when git cannot
    /// read `from`.
    pub fn import_new(
        git: &Git,
        fossil: &crate::fossil::Fossil,
        repository: &Path,
        from: &str,
        admin: &str,
    ) -> Result<(Upstream, Brought), GitError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = dir_of(repository);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| GitError::Io {
                what: "make the upstream's directory",
                dir: dir.clone(),
                error,
            })?;
        let existed = repository.exists();
        let made = (|| {
            git.mirror(from, &dir.join(MIRROR))?;
            let default = git
                .default_branch(&dir.join(MIRROR))?
                .unwrap_or_else(|| "main".into());
            if !plain_ref(&default) {
                return Err(GitError::Refused(format!(
                    "the upstream's default branch {default:?} is no name OCX gives Fossil (a control character, a space, .., or a leading - or /)"
                )));
            }
            let mut up = Upstream {
                dir: dir.clone(),
                kept: Kept {
                    from: crate::fossil::redact_password(from),
                    default_branch: default,
                    last: None,
                },
            };
            let brought = up.bring(git, fossil, repository, admin, true)?;
            up.kept.last = Some(brought.clone());
            up.keep()?;
            Ok((up, brought))
        })();
        if made.is_err() {
            // Nothing half made is left: the directory was made above, and
            // the repository, when it was not there before, by the import.
            let _ = std::fs::remove_dir_all(&dir);
            if !existed {
                let _ = std::fs::remove_file(repository);
            }
        }
        made
    }

    /// Fetches what the upstream added since and brings it into
    /// `repository`: each branch onto its own Fossil branch where Fossil
    /// has not moved past what was imported, else onto `upstream/NAME`;
    /// each new tag on its commit, as `admin`. What it did is kept, its
    /// failure too.
    pub fn bring_up(
        &mut self,
        git: &Git,
        fossil: &crate::fossil::Fossil,
        repository: &Path,
        admin: &str,
    ) -> Result<Brought, GitError> {
        let started = std::time::Instant::now();
        let done = git
            .fetch_mirror(&self.dir.join(MIRROR))
            .and_then(|()| self.bring(git, fossil, repository, admin, false));
        let brought = match &done {
            Ok(b) => b.clone(),
            Err(e) => Brought {
                when: crate::fossil::artifact::now(),
                took_ms: started.elapsed().as_millis() as u64,
                failure: Some(e.to_string()),
                ..Brought::default()
            },
        };
        self.kept.last = Some(brought);
        self.keep()?;
        done
    }

    /// Where each upstream branch would go now: its name and its Fossil branch.
    pub fn plan(
        &self,
        git: &Git,
        repo: &crate::fossil::Repository,
    ) -> Result<Vec<(String, String)>, GitError> {
        let imported = fossil_marks(&self.dir.join(FOSSIL_MARKS));
        let mut out = Vec::new();
        let mut branches = git.refs(&self.dir.join(MIRROR), "refs/heads/")?;
        branches.sort_by_key(|(b, _)| (*b != self.kept.default_branch, b.clone()));
        for (branch, _) in branches {
            if !plain_ref(&branch) {
                continue;
            }
            let name = fossil_name(&branch, &self.kept.default_branch);
            let moved = match repo.branch_tip(&name)? {
                Some(tip) => !imported.contains(&repo.hash_of(tip)?),
                None => false,
            };
            let onto = if moved {
                format!("upstream/{name}")
            } else {
                name
            };
            out.push((branch, onto));
        }
        Ok(out)
    }

    fn bring(
        &self,
        git: &Git,
        fossil: &crate::fossil::Fossil,
        repository: &Path,
        admin: &str,
        new: bool,
    ) -> Result<Brought, GitError> {
        let started = std::time::Instant::now();
        let mirror = self.dir.join(MIRROR);
        let stream = self.dir.join(STREAM);
        let (git_marks, fossil_marks_file) =
            (self.dir.join(GIT_MARKS), self.dir.join(FOSSIL_MARKS));
        let mut brought = Brought::default();
        let mut first = new;
        let plan = match new {
            true => {
                let mut b = git.refs(&mirror, "refs/heads/")?;
                b.retain(|(name, _)| plain_ref(name));
                b.sort_by_key(|(n, _)| (*n != self.kept.default_branch, n.clone()));
                b.into_iter()
                    .map(|(n, _)| {
                        let f = fossil_name(&n, &self.kept.default_branch);
                        (n, f)
                    })
                    .collect()
            }
            false => self.plan(git, &crate::fossil::Repository::open(repository)?)?,
        };
        let (git_next, fossil_next) = (
            self.dir.join("git.marks.next"),
            self.dir.join("fossil.marks.next"),
        );
        // Every path the new commits name is read before Fossil takes any.
        let tips: Vec<&str> = plan.iter().map(|(b, _)| b.as_str()).collect();
        if !tips.is_empty() {
            git.fast_export_check(&mirror, &git_marks, &tips, &stream)?;
            let read = std::fs::File::open(&stream)
                .map(|f| read_stream(std::io::BufReader::new(f)))
                .map_err(|error| GitError::Io {
                    what: "read the export's stream",
                    dir: stream.clone(),
                    error,
                })?;
            if let Some(path) = read.unplain {
                let _ = std::fs::remove_file(&stream);
                return Err(GitError::Refused(format!(
                    "the upstream names a file {path:?}, which is no plain path (a control character, or an empty, . or .. part): nothing of it was imported"
                )));
            }
        }
        let moved = |from: &Path, to: &Path| {
            std::fs::rename(from, to).map_err(|error| GitError::Io {
                what: "keep the marks of what was imported",
                dir: to.to_path_buf(),
                error,
            })
        };
        for (branch, onto) in plan {
            git.fast_export(&mirror, &git_marks, &git_next, &branch, &onto, &stream)?;
            let commits = std::fs::File::open(&stream)
                .map(|f| read_stream(std::io::BufReader::new(f)).commits)
                .map_err(|error| GitError::Io {
                    what: "read the export's stream",
                    dir: stream.clone(),
                    error,
                })?;
            if commits == 0 && !first {
                let _ = std::fs::remove_file(&git_next);
                continue;
            }
            // Each side's marks move on only once Fossil took the stream:
            // a failed import leaves both as they were, to be tried again.
            fossil.import_git(
                repository,
                &stream,
                &fossil_marks_file,
                &fossil_next,
                !first,
                admin,
            )?;
            moved(&fossil_next, &fossil_marks_file)?;
            moved(&git_next, &git_marks)?;
            first = false;
            if onto != "trunk" {
                cancel_inherited(fossil, repository, &onto, admin)?;
            }
            if commits > 0 {
                brought.branches.push(BranchBrought {
                    branch,
                    onto,
                    commits,
                });
            }
        }
        let _ = std::fs::remove_file(&stream);
        brought.tags = self.tag(git, fossil, repository, admin)?;
        brought.when = crate::fossil::artifact::now();
        brought.took_ms = started.elapsed().as_millis() as u64;
        Ok(brought)
    }

    /// Tags each commit of Fossil's that the upstream tags and Fossil does
    /// not yet, as `admin`; the tags added.
    fn tag(
        &self,
        git: &Git,
        fossil: &crate::fossil::Fossil,
        repository: &Path,
        admin: &str,
    ) -> Result<Vec<String>, GitError> {
        use crate::fossil::artifact::{TagChange, control, now};
        let repo = crate::fossil::Repository::open(repository)?;
        let by_sha = git_marks(&self.dir.join(GIT_MARKS));
        let by_mark = fossil_mark_uuids(&self.dir.join(FOSSIL_MARKS));
        let mut tags = Vec::new();
        let mut added = Vec::new();
        for (tag, sha) in git.refs(&self.dir.join(MIRROR), "refs/tags/")? {
            if !plain_ref(&tag) || !repo.tagged(&format!("sym-{tag}"))?.is_empty() {
                continue;
            }
            let Some(uuid) = by_sha.get(&sha).and_then(|m| by_mark.get(m)) else {
                continue;
            };
            tags.push(TagChange {
                op: '+',
                name: format!("sym-{tag}"),
                target: uuid.clone(),
                value: None,
            });
            added.push(tag);
        }
        if !tags.is_empty() {
            let mut batch = crate::fossil::store::Batch::default();
            batch.add("tags", control(&now(), admin, &tags), repo.hash_policy()?);
            crate::fossil::store::store(fossil, &repo, admin, &batch, true)?;
        }
        Ok(added)
    }
}

/// Ends, at the first check-ins of branch `onto`, the branch names they
/// inherit from their parent, as `fossil branch new` does, as `admin`.
fn cancel_inherited(
    fossil: &crate::fossil::Fossil,
    repository: &Path,
    onto: &str,
    admin: &str,
) -> Result<(), GitError> {
    use crate::fossil::artifact::{TagChange, control, now};
    let repo = crate::fossil::Repository::open(repository)?;
    let cancels: Vec<TagChange> = repo
        .branch_roots_inheriting(onto)?
        .into_iter()
        .map(|(target, name)| TagChange {
            op: '-',
            name,
            target,
            value: None,
        })
        .collect();
    if cancels.is_empty() {
        return Ok(());
    }
    let mut batch = crate::fossil::store::Batch::default();
    batch.add(
        "branch names ended",
        control(&now(), admin, &cancels),
        repo.hash_policy()?,
    );
    Ok(crate::fossil::store::store(
        fossil, &repo, admin, &batch, true,
    )?)
}

/// The check-ins Fossil's marks file says were imported, by full hash.
fn fossil_marks(path: &Path) -> std::collections::HashSet<String> {
    fossil_mark_uuids(path).into_values().collect()
}

/// Fossil's marks file read: each check-in's mark (`:N`) and full hash.
fn fossil_mark_uuids(path: &Path) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with('c'))
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            let mark = w.next().filter(|m| m.starts_with(':'))?.to_string();
            let uuid = w
                .next()
                .filter(|u| u.bytes().all(|b| b.is_ascii_hexdigit()))?;
            Some((mark, uuid.to_string()))
        })
        .collect()
}

/// Git's marks file read: each commit's full hash and its mark (`:N`).
fn git_marks(path: &Path) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (mark, sha) = l.split_once(' ')?;
            mark.starts_with(':')
                .then(|| (sha.trim().to_string(), mark.to_string()))
        })
        .collect()
}

/// Whether `name` can name a git branch or tag OCX gives Fossil: no
/// control character, no space, no `..`, not beginning with `-` or `/`.
pub fn plain_ref(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['-', '/'])
        && !name.contains("..")
        && !name.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// What [`read_stream`] found in a fast-export stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StreamRead {
    /// Its `commit` commands.
    pub commits: u64,
    /// The first path a file command names that is not [`plain_path`],
    /// unquoted and read as UTF-8 (each byte that is not, U+FFFD).
    pub unplain: Option<String>,
}

/// Reads the fast-export stream `stream`: its `commit` commands counted,
/// each `data` block passed over unread (a commit's message or a file may
/// hold a line that begins `commit ` or `M `), and the path of each file
/// command (`M`, `D`, `C`, `R`) read, unquoted as git quotes it. A stream
/// cut short is read as far as it goes.
pub fn read_stream(mut stream: impl std::io::BufRead) -> StreamRead {
    use std::io::Read;
    let mut read = StreamRead::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stream.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return read,
            Ok(_) => {}
        }
        let command = line.strip_suffix(b"\n").unwrap_or(&line);
        if command.starts_with(b"commit ") {
            read.commits += 1;
        } else if let Some(size) = command.strip_prefix(b"data ") {
            if let Some(delimiter) = size.strip_prefix(b"<<") {
                let delimiter = delimiter.to_vec();
                loop {
                    line.clear();
                    match stream.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return read,
                        Ok(_) if line.strip_suffix(b"\n").unwrap_or(&line) == delimiter => break,
                        Ok(_) => {}
                    }
                }
            } else {
                let Some(n) = std::str::from_utf8(size)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                if std::io::copy(&mut stream.by_ref().take(n), &mut std::io::sink()).ok() != Some(n)
                {
                    return read;
                }
            }
        } else if read.unplain.is_none() {
            read.unplain = file_paths(command)
                .into_iter()
                .map(|p| String::from_utf8_lossy(&p).into_owned())
                .find(|p| !plain_path(p));
        }
    }
}

/// The paths a fast-export file command names, unquoted: `M MODE REF
/// PATH`, `D PATH`, `C FROM TO`, `R FROM TO`; none for any other line. A
/// path git could not have written (a quote unclosed) is read as it is.
fn file_paths(command: &[u8]) -> Vec<Vec<u8>> {
    let Some((&op, rest)) = command.split_first() else {
        return Vec::new();
    };
    let Some(rest) = rest.strip_prefix(b" ") else {
        return Vec::new();
    };
    match op {
        b'M' => {
            let mut parts = rest.splitn(3, |&b| b == b' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(_), Some(_), Some(path)) => vec![path_of(path, true).0],
                _ => Vec::new(),
            }
        }
        b'D' => vec![path_of(rest, true).0],
        b'C' | b'R' => {
            let (from, after) = path_of(rest, false);
            let to = after.strip_prefix(b" ").unwrap_or(after);
            vec![from, path_of(to, true).0]
        }
        _ => Vec::new(),
    }
}

/// The path at the start of `s` and what follows it: a quoted path
/// unquoted (git's C quoting: `\\`, `\"`, `\a` `\b` `\f` `\n` `\r` `\t`
/// `\v`, three octal digits), else all of `s` when it ends the command
/// (`whole`), or up to the first space.
fn path_of(s: &[u8], whole: bool) -> (Vec<u8>, &[u8]) {
    let Some(mut rest) = s.strip_prefix(b"\"") else {
        return match s.iter().position(|&b| b == b' ').filter(|_| !whole) {
            Some(i) => (s[..i].to_vec(), &s[i..]),
            None => (s.to_vec(), &[]),
        };
    };
    let mut out = Vec::new();
    while let Some((&b, after)) = rest.split_first() {
        rest = after;
        match b {
            b'"' => return (out, rest),
            b'\\' => {
                let Some((&e, after)) = rest.split_first() else {
                    break;
                };
                rest = after;
                match e {
                    b'a' => out.push(7),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'v' => out.push(11),
                    b'0'..=b'3' if rest.len() >= 2 => {
                        let digits = [e, rest[0], rest[1]];
                        rest = &rest[2..];
                        out.push(digits.iter().fold(0u8, |n, d| {
                            n.wrapping_mul(8).wrapping_add(d.wrapping_sub(b'0'))
                        }));
                    }
                    other => out.push(other),
                }
            }
            other => out.push(other),
        }
    }
    (s.to_vec(), &[])
}

/// Whether `path` is a file's path OCX gives Fossil: not empty, relative,
/// no control character (C0, DEL or C1, which a terminal may read as a
/// command), no part empty, `.` or `..`.
pub fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && !path.chars().any(char::is_control)
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commits_are_counted_by_command_never_inside_data() {
        let message = "fix\ncommit refs/heads/main\ncommit x\n";
        let file = "commit y\ncommit z\n";
        let stream = format!(
            "blob\nmark :1\ndata {}\n{file}\ncommit refs/heads/main\nmark :2\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\ndata {}\n{message}M 100644 :1 f\n\ncommit refs/heads/main\nmark :3\ncommitter A <a@b> 2 +0000\ndata <<END\ncommit inside\nEND\nfrom :2\n\n",
            file.len(),
            message.len()
        );
        assert_eq!(read_stream(stream.as_bytes()).commits, 2);
        assert_eq!(read_stream(stream.as_bytes()).unplain, None);
        assert_eq!(read_stream(&b""[..]).commits, 0);
        assert_eq!(
            read_stream(&b"commit refs/heads/a\ndata 999\ncommit b\n"[..]).commits,
            1
        );
    }

    proptest! {
        #[test]
        fn any_stream_is_counted_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let n = read_stream(&bytes[..]).commits;
            prop_assert!(n as usize <= bytes.len() / 7 + 1);
        }

        #[test]
        fn a_commit_message_of_any_lines_counts_once(lines in proptest::collection::vec("[a-z ]{0,12}", 0..6)) {
            let message = lines.iter().map(|l| format!("commit {l}\n")).collect::<String>();
            let stream = format!("commit refs/heads/main\nmark :1\ncommitter A <a@b> 1 +0000\ndata {}\n{message}\n", message.len());
            prop_assert_eq!(read_stream(stream.as_bytes()).commits, 1);
        }
    }

    #[test]
    fn every_path_a_file_command_names_is_read_unquoted() {
        let read = |s: &str| read_stream(s.as_bytes()).unplain;
        assert_eq!(read("M 100644 :1 a b/c d.txt\nD \"x y\"\n"), None);
        assert_eq!(read("M 100644 :1 \"caf\\303\\251\"\n"), None);
        assert_eq!(read("M 100644 :1 ../x\n"), Some("../x".into()));
        assert_eq!(read("D a/./b\n"), Some("a/./b".into()));
        assert_eq!(read("M 100644 :1 /etc/x\n"), Some("/etc/x".into()));
        assert_eq!(read("M 100644 :1 \"a\\nb\"\n"), Some("a\nb".into()));
        assert_eq!(
            read("M 100644 inline \"e\\033]0;t\\a\"\ndata 0\n"),
            Some("e\u{1b}]0;t\u{7}".into())
        );
        assert_eq!(
            read("M 100644 :1 \"\\302\\233\"\n"),
            Some("\u{9b}".into()),
            "C1's CSI in UTF-8"
        );
        assert_eq!(read("R \"a b\" ok/../x\n"), Some("ok/../x".into()));
        assert_eq!(
            read("commit refs/heads/a\ndata 12\nM 1 :1 ../x\n\n"),
            None,
            "a message is no command"
        );
    }

    #[test]
    fn the_transports_git_is_allowed_are_those_named() {
        let allowed = ENV.iter().find(|(k, _)| *k == "GIT_ALLOW_PROTOCOL");
        assert_eq!(
            allowed.map(|(_, v)| *v),
            Some(TRANSPORTS.join(":").as_str())
        );
    }

    #[test]
    fn a_from_is_a_transport_git_may_use_or_refused() {
        for ok in [
            "https://example.org/a.git",
            "http://u:p@example.org/a",
            "ssh://git@example.org:22/a.git",
            "git+ssh://example.org/a",
            "git://example.org/a",
            "file:///srv/a.git",
            "git@example.org:a/b.git",
            "/srv/a",
            "./a:b",
            "a",
        ] {
            assert_eq!(refused_from(ok), None, "{ok:?}");
        }
        for bad in [
            "",
            "ext::sh -c touch% x",
            "fd::0",
            "fd::1,0",
            "testgit::/x",
            "FD::0",
            "ftp://example.org/a",
            "testgit://x",
            "-u/x",
            "ssh://-oProxyCommand=x/a",
            "ssh://-oProxyCommand=x@h/a",
            "ssh://h:-p/a",
            "-oProxyCommand=x:a",
            "u@-oProxyCommand=x:a",
            "[-x]:a",
            "a\nb",
            "a\u{1b}b",
        ] {
            assert!(refused_from(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn a_ref_is_plain_or_refused() {
        assert!(plain_ref("dev"));
        assert!(plain_ref("feature/x-1"));
        for bad in ["", "-x", "/x", "a..b", "a b", "a\nb"] {
            assert!(!plain_ref(bad), "{bad:?}");
        }
    }
}
