//! What the agent's tools share: the checkout they act on, paths confined
//! to it (each file opened once, beneath the checkout's top, never through
//! a symbolic link), the tests its `ocx-tests.json` names, the state kept
//! between calls (which tests passed since the last edit) in
//! `.ocx/agent.json`, and the one exact-match replacement `edit` and
//! `wiki_edit` use. The node serving a run never acts on its workspace.

use crate::stop::Stop;
use crate::tool::Call;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// The file in a checkout's top directory naming its tests.
pub const TESTS_FILE: &str = "ocx-tests.json";
/// The directory, in the checkout's top, where the tools keep their state;
/// Fossil passes over it, as over every name starting with a dot.
pub const STATE_DIR: &str = ".ocx";
/// The state file inside [`STATE_DIR`].
pub const STATE_FILE: &str = "agent.json";
/// How many lines `read` gives at most.
pub const READ_LINES: usize = 200;
/// How many matches `find` gives at most.
pub const FIND_MATCHES: usize = 50;
/// How many of a test's last lines `test` gives.
pub const TEST_LINES: usize = 100;

/// The checkout the call is made in: its top directory, made canonical.
pub fn root(call: &Call) -> Result<PathBuf, Stop> {
    if call.cx.run().is_some() {
        return Err(Stop::new(
            "the node does not act on a run's workspace: its tools run inside the run's sandbox",
        )
        .next("call this tool on the run's own server (ocx --mcp in the workspace)"));
    }
    let c = call.cx.checkout().ok_or_else(|| {
        Stop::new("this directory is in no Fossil checkout")
            .next("start OCX inside a checkout (`fossil open REPO`), then call the tool again")
    })?;
    c.root
        .canonicalize()
        .map_err(|e| Stop::failed(format!("cannot read the checkout: {e}")))
}

/// A path given in `field`, confined to the checkout at `root`: relative,
/// without `..`, outside Fossil's and OCX's own files, and leading nowhere
/// outside the checkout through a symbolic link. The file itself need not
/// exist; the directory holding it must be inside.
pub fn confine(root: &Path, field: &str, given: &str) -> Result<PathBuf, Stop> {
    let rel = relative(field, given)?;
    let refuse = |why: &str| {
        Stop::field(field, format!("{given:?} {why}")).next(
            "give a path inside the checkout, relative to its top, as find or context shows it",
        )
    };
    let full = root.join(&rel);
    let mut existing = full.as_path();
    while std::fs::symlink_metadata(existing).is_err() {
        existing = match existing.parent() {
            Some(p) => p,
            None => return Err(refuse("cannot be resolved")),
        };
    }
    let real = existing
        .canonicalize()
        .map_err(|_| refuse("leads through a link that goes nowhere"))?;
    if !real.starts_with(root) {
        return Err(refuse("leads outside the checkout"));
    }
    match full.strip_prefix(existing) {
        Ok(rest) if !rest.as_os_str().is_empty() => Ok(real.join(rest)),
        _ => Ok(real),
    }
}

/// A path given in `field` as the checkout sees it: relative, without
/// `..`, naming neither the checkout itself nor Fossil's or OCX's own
/// files. Judged by its text alone; [`open_file`] and [`create_file`] then
/// reach it without following any link.
pub fn relative(field: &str, given: &str) -> Result<PathBuf, Stop> {
    let refuse = |why: &str| {
        Stop::field(field, format!("{given:?} {why}")).next(
            "give a path inside the checkout, relative to its top, as find or context shows it",
        )
    };
    if given.trim().is_empty() {
        return Err(refuse("is empty"));
    }
    let p = Path::new(given);
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse("climbs out with ..")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("is absolute"));
            }
        }
    }
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    if rel.as_os_str().is_empty() {
        return Err(refuse("names the checkout itself, not a file"));
    }
    if crate::fossil::checkout::FILES.contains(&first.as_str()) || first == STATE_DIR {
        return Err(refuse("is Fossil's or OCX's own file"));
    }
    Ok(rel)
}

/// How a file under the checkout is reached: beneath its top, never
/// through a symbolic link at any component (`openat2`).
fn beneath(flags: OFlag, mode: Mode) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS)
}

fn open_top(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// Why a file under the checkout cannot be reached, for a refusal.
fn unreachable(e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(c) if c == Errno::ELOOP as i32 => "leads through a symbolic link".into(),
        Some(c) if c == Errno::EXDEV as i32 => "leads outside the checkout".into(),
        _ => e.to_string(),
    }
}

/// Opens `rel` (from [`relative`]) under the checkout at `root`, once,
/// without following a link: for reading, or with `write` for reading and
/// writing. `None` when there is no such file; refused naming `field` when
/// a link is on the way or it is not a regular file.
pub fn open_file(
    root: &Path,
    rel: &Path,
    field: &str,
    write: bool,
) -> Result<Option<std::fs::File>, Stop> {
    let given = rel.display();
    let refuse = |why: String| {
        Stop::field(field, format!("{given} {why}"))
            .next("give a file the checkout holds; context and find show paths")
    };
    let top = open_top(root).map_err(|e| refuse(e.to_string()))?;
    let flags = if write {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    };
    let fd = match nix::fcntl::openat2(&top, rel, beneath(flags, Mode::empty())) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::EISDIR) => return Err(refuse("is a directory".into())),
        Err(e) => return Err(refuse(unreachable(e.into()))),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if meta.is_dir() {
        return Err(refuse("is a directory".into()));
    }
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    Ok(Some(file))
}

/// Opens the directory `rel` under the checkout at `root`, making it and
/// those above it when missing, never through a link.
fn open_dir(root: &Path, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut dir = open_top(root)?;
    for part in rel.components() {
        let how = beneath(OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty());
        let next = match nix::fcntl::openat2(&dir, part.as_os_str(), how) {
            Err(Errno::ENOENT) => {
                match nix::sys::stat::mkdirat(
                    &dir,
                    part.as_os_str(),
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                nix::fcntl::openat2(&dir, part.as_os_str(), how)?
            }
            other => other?,
        };
        dir = next;
    }
    Ok(dir)
}

/// Makes the new file `rel` under the checkout at `root` (and the
/// directories above it), never through a link and never over a file.
pub fn create_file(root: &Path, rel: &Path, field: &str) -> Result<std::fs::File, Stop> {
    let refuse = |why: String| {
        Stop::field(field, format!("{} {why}", rel.display()))
            .next("give a path inside the checkout, as find or context shows it")
    };
    let name = rel
        .file_name()
        .ok_or_else(|| refuse("names no file".into()))?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = open_dir(root, parent).map_err(|e| refuse(unreachable(e)))?;
    let how = beneath(
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o644),
    );
    let fd = nix::fcntl::openat2(&dir, name, how).map_err(|e| refuse(unreachable(e.into())))?;
    Ok(std::fs::File::from(fd))
}

/// A path inside `root` as the tools show it: relative, with `/`.
pub fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// One test the checkout names: `{"name": "unit", "command": "cargo test"}`,
/// the command run by `/bin/sh -c` in the checkout's top.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestDef {
    /// The test's name, as `test` takes it.
    pub name: String,
    /// The command, run by `/bin/sh -c` in the checkout's top.
    pub command: String,
}

/// `ocx-tests.json`: `{"tests": [{"name", "command"}, ...]}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestsFile {
    tests: Vec<TestDef>,
}

/// The tests the checkout's `ocx-tests.json` names (none without the file).
/// A symbolic link there is refused: tests are read from the checkout's own file.
pub fn tests(root: &Path) -> Result<Vec<TestDef>, Stop> {
    let refuse = |why: String| {
        Stop::new(format!("cannot read {TESTS_FILE}: {why}"))
            .next(format!("make {TESTS_FILE} a file of the checkout"))
    };
    let top = open_top(root).map_err(|e| refuse(e.to_string()))?;
    let how = beneath(OFlag::O_RDONLY, Mode::empty());
    let mut file = match nix::fcntl::openat2(&top, TESTS_FILE, how) {
        Ok(fd) => std::fs::File::from(fd),
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(refuse(unreachable(e.into()))),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(refuse("it is not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| refuse(e.to_string()))?;
    let file: TestsFile = serde_json::from_slice(&bytes).map_err(|e| {
        Stop::new(format!("{TESTS_FILE} does not read: {e}")).next(format!(
            "write {TESTS_FILE} as {{\"tests\": [{{\"name\": \"NAME\", \"command\": \"COMMAND\"}}]}}"
        ))
    })?;
    Ok(file.tests)
}

/// What the tools keep between calls, in `.ocx/agent.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// How many edits the tools have made here; each edit adds one.
    pub edits: u64,
    /// Each test that passed, with the edit count it passed at.
    pub passed: BTreeMap<String, u64>,
}

impl State {
    /// The state kept in the checkout at `root` (empty when none is).
    pub fn load(root: &Path) -> State {
        let path = Path::new(STATE_DIR).join(STATE_FILE);
        let mut bytes = Vec::new();
        open_top(root)
            .ok()
            .and_then(|top| {
                nix::fcntl::openat2(&top, &path, beneath(OFlag::O_RDONLY, Mode::empty())).ok()
            })
            .map(std::fs::File::from)
            .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
            .and_then(|mut f| f.read_to_end(&mut bytes).ok())
            .and_then(|_| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Keeps the state in the checkout at `root`: written to a new file of
    /// its own (never through a link, never over another file) in `.ocx`
    /// (reached without following a link), then renamed into place.
    pub fn save(&self, root: &Path) -> Result<(), Stop> {
        let failed = |e: std::io::Error| {
            Stop::failed(format!("cannot keep the tools' state: {}", unreachable(e)))
        };
        let dir = open_dir(root, Path::new(STATE_DIR)).map_err(failed)?;
        let tmp = format!(
            "{STATE_FILE}.{}.tmp",
            hex::encode(rand::random::<[u8; 8]>())
        );
        let how = beneath(
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o600),
        );
        let fd = nix::fcntl::openat2(&dir, tmp.as_str(), how).map_err(|e| failed(e.into()))?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(&serde_json::to_vec_pretty(self).unwrap_or_default())
            .and_then(|_| file.sync_all());
        let renamed = written.and_then(|_| {
            nix::fcntl::renameat(&dir, tmp.as_str(), &dir, STATE_FILE).map_err(Into::into)
        });
        if renamed.is_err() {
            let _ =
                nix::unistd::unlinkat(&dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        renamed.map_err(failed)
    }

    /// Whether test `name` passed since the last edit.
    pub fn passed_since_edit(&self, name: &str) -> bool {
        self.passed.get(name) == Some(&self.edits)
    }
}

/// Where `old` is found in `text`, as `edit` needs it: exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Once, at this byte offset.
    Once(usize),
    /// Nowhere.
    Nowhere,
    /// Several times, starting on these lines (from 1).
    Several(Vec<usize>),
}

/// Looks for `old` in `text`.
pub fn find_once(text: &str, old: &str) -> Found {
    let starts: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    match starts.as_slice() {
        [] => Found::Nowhere,
        [one] => Found::Once(*one),
        many => Found::Several(many.iter().map(|i| line_of(text, *i)).collect()),
    }
}

/// The line (from 1) holding byte `at` of `text`.
pub fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The lines of `text` closest to `old`'s first line that is not blank,
/// for a refusal to show with their numbers: at most three, `N: TEXT`.
pub fn closest_lines(text: &str, old: &str) -> Vec<String> {
    let want = old
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if want.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (distance(l.trim(), want), i + 1, l))
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(3)
        .map(|(_, n, l)| format!("{n}: {l}"))
        .collect()
}

/// The edit distance between `a` and `b`, by characters, capped at 200
/// characters each so a long line costs little.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(200).collect();
    let b: Vec<char> = b.chars().take(200).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Replaces the one place `old` is in `text` with `new` (or, `old` empty,
/// adds `new` at the end); answers the new text and the lines changed
/// (first, last, from 1). `what` names the text in a refusal; the
/// refusal names `old`, with the closest lines or every line it starts on.
pub fn replace_once(
    text: &str,
    old: &str,
    new: &str,
    what: &str,
) -> Result<(String, usize, usize), Stop> {
    if old.is_empty() {
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let first = line_of(&out, out.len());
        out.push_str(new);
        let last = first + new.trim_end_matches('\n').matches('\n').count();
        return Ok((out, first, last));
    }
    match find_once(text, old) {
        Found::Once(at) => {
            let mut out = String::with_capacity(text.len() + new.len());
            out.push_str(&text[..at]);
            out.push_str(new);
            out.push_str(&text[at + old.len()..]);
            let first = line_of(&out, at);
            let last = first + new.trim_end_matches('\n').matches('\n').count();
            Ok((out, first, last))
        }
        Found::Nowhere => {
            let close = closest_lines(text, old);
            let shown = if close.is_empty() {
                String::new()
            } else {
                format!("; the closest lines are {}", close.join(" | "))
            };
            Err(Stop::field("old", format!("not found in {what}{shown}"))
                .next("read the lines again with read and copy old exactly from its text"))
        }
        Found::Several(lines) => Err(Stop::field(
            "old",
            format!(
                "found {} times in {what}, starting on lines {}",
                lines.len(),
                lines
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .next("add a line before or after to old to make it unique")),
    }
}

/// Up to [`READ_LINES`] lines of `text` from line `from` (from 1): the
/// text exactly as it is, the first and last line given, and how many
/// lines `text` has.
pub fn lines_from(text: &str, from: usize) -> (String, usize, usize, usize) {
    let total = text.lines().count();
    let from = from.max(1);
    let mut start = 0;
    let mut line = 1;
    while line < from && start < text.len() {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => start = text.len(),
        }
        line += 1;
    }
    let mut end = start;
    let mut taken = 0;
    while taken < READ_LINES && end < text.len() {
        match text[end..].find('\n') {
            Some(i) => end += i + 1,
            None => end = text.len(),
        }
        taken += 1;
    }
    let last = if taken == 0 {
        from - 1
    } else {
        from + taken - 1
    };
    (text[start..end].to_string(), from, last, total)
}

/// Logs a change to the checkout's files (or, on a dry run, one it would make).
pub fn log_change(call: &mut Call, what: String) {
    let done = !call.dry_run;
    call.log(crate::answer::Op::Fossil {
        operation: what,
        done,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_a_unique_match() {
        let text = "a\nb\nc\nb\n";
        assert!(matches!(find_once(text, "b\n"), Found::Several(ref l) if l == &[2, 4]));
        let (out, first, last) = replace_once(text, "c\n", "C\nD\n", "f").unwrap();
        assert_eq!(out, "a\nb\nC\nD\nb\n");
        assert_eq!((first, last), (3, 4));
        let miss = replace_once(text, "cc", "x", "f").unwrap_err();
        assert!(miss.reason.contains("3: c"), "{}", miss.reason);
        let (out, first, _) = replace_once("x", "", "y\n", "f").unwrap();
        assert_eq!((out.as_str(), first), ("x\ny\n", 2));
    }

    #[test]
    fn reads_lines_exactly() {
        let (t, f, l, n) = lines_from("1\n2\n3\n", 2);
        assert_eq!((t.as_str(), f, l, n), ("2\n3\n", 2, 3, 3));
        let (t, _, l, _) = lines_from("1\n2", 5);
        assert_eq!((t.as_str(), l), ("", 4));
    }

    #[test]
    fn paths_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        assert!(confine(&root, "path", "src/new.rs").is_ok());
        assert!(confine(&root, "path", "../x").is_err());
        assert!(confine(&root, "path", "/etc/passwd").is_err());
        assert!(confine(&root, "path", ".fslckout").is_err());
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        assert!(confine(&root, "path", "out/passwd").is_err());
        assert!(confine(&root, "path", "out/nothing/here").is_err());
    }
}
