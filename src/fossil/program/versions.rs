//! The versions `fossil` programs answered, kept in a small file of the
//! caller's own, so that a process finding the same program does not ask
//! it `fossil version` again. An answer counts only for the very file it
//! was asked of: its path, and the [`FileId`] it had before and after it
//! answered. The file is read only when it is a plain file of this
//! account's that no one else may write, small, and JSON of this shape;
//! anything else is passed over and the program asked.

use super::super::kept::FileId;
use super::super::output::version_at_least;
use super::Home;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name, in its directory.
const NAME: &str = "fossil-versions.json";

/// The most programs remembered (the newest kept).
const ENTRIES: usize = 8;

/// The largest file read; a larger one is no file of OCX's.
const MAX_BYTES: u64 = 16 * 1024;

/// What the file holds.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    programs: Vec<Entry>,
}

/// One program's answer: its absolute path, its file as it stood, and the
/// version it said.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    path: PathBuf,
    file: FileId,
    version: String,
}

/// Where the versions are kept for a program run with `home`: in OCX's own
/// Fossil home when it has one, else in `ocx/` under `cache` (the caller's
/// `XDG_CACHE_HOME`, when absolute) or under `~/.cache`, made private to
/// this account; `None` when that directory is not this account's alone.
pub(super) fn file_for(home: &Home, cache: Option<PathBuf>) -> Option<PathBuf> {
    let dir = match home {
        Home::Own(dir) => dir.clone(),
        Home::User(home) => {
            let base = cache
                .filter(|d| d.is_absolute())
                .unwrap_or_else(|| home.join(".cache"));
            let dir = base.join("ocx");
            if !dir.is_dir() {
                use std::os::unix::fs::DirBuilderExt;
                let _ = std::fs::create_dir_all(&base);
                let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
            }
            dir
        }
    };
    private(&std::fs::symlink_metadata(&dir).ok()?, true).then(|| dir.join(NAME))
}

/// Whether `m` is a directory (or a plain file) of this account's that no
/// other account may write.
fn private(m: &std::fs::Metadata, dir: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let kind = if dir { m.is_dir() } else { m.is_file() };
    kind && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o022 == 0
}

/// The version kept in `file` for the program at `path` when its file is
/// still `id`, and that version is one OCX works with.
pub(super) fn known(file: &Path, path: &Path, id: FileId) -> Option<String> {
    read(file)
        .programs
        .into_iter()
        .find(|e| e.path == path && e.file == id)
        .map(|e| e.version)
        .filter(|v| plausible(v) && version_at_least(v, super::FLOOR))
}

/// Keeps in `file` that the program at `path`, its file `id`, said
/// `version`, replacing what was kept for that path. Nothing is said when
/// it cannot be kept: the program is asked again next time.
pub(super) fn remember(file: &Path, path: &Path, id: FileId, version: &str) {
    use std::io::Write;
    let mut kept = read(file);
    kept.programs.retain(|e| e.path != path);
    kept.programs.push(Entry {
        path: path.to_path_buf(),
        file: id,
        version: version.to_string(),
    });
    let over = kept.programs.len().saturating_sub(ENTRIES);
    kept.programs.drain(..over);
    let (Some(dir), Ok(bytes)) = (file.parent(), serde_json::to_vec(&kept)) else {
        return;
    };
    // No sync: a file cut short by a crash reads as no file, and the
    // program is asked again.
    let _ = tempfile::Builder::new()
        .prefix(".fossil-versions-")
        .tempfile_in(dir)
        .and_then(|mut tmp| {
            tmp.write_all(&bytes)?;
            tmp.persist(file).map_err(|e| e.error)?;
            Ok(())
        });
}

/// What `file` holds, or nothing when it is not there, not this
/// account's alone, too large, or not JSON of this shape.
fn read(file: &Path) -> Kept {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(file);
    let Ok(f) = opened else {
        return Kept::default();
    };
    match f.metadata() {
        Ok(m) if private(&m, false) && m.len() <= MAX_BYTES => {}
        _ => return Kept::default(),
    }
    let mut bytes = Vec::new();
    if f.take(MAX_BYTES + 1).read_to_end(&mut bytes).is_err() {
        return Kept::default();
    }
    serde_json::from_slice(&bytes).unwrap_or_default()
}

/// Whether `v` reads as a version Fossil prints: dotted numbers, short.
fn plausible(v: &str) -> bool {
    v.len() <= 16
        && v.split('.')
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::super::{Fossil, Home};
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `fossil` that answers `version` as `version` and counts
    /// how often it was run; written beside and renamed into place, as an
    /// upgrade is.
    fn program(dir: &Path, version: &str) -> PathBuf {
        let path = dir.join("fossil");
        let next = dir.join("fossil.new");
        std::fs::write(&next, script(dir, version)).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::rename(&next, &path).unwrap();
        path
    }

    fn script(dir: &Path, version: &str) -> String {
        format!(
            "#!/bin/sh\necho x >> '{}'\necho 'This is fossil version {version} [0123456789] 2026-01-01'\n",
            dir.join("runs").display()
        )
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The version a new process would find for the program at `path`,
    /// the versions kept in `dir`.
    fn found(dir: &Path, path: &Path) -> Option<String> {
        Fossil::asked(path, Home::Own(dir.to_path_buf()), Some(&dir.join(NAME)))
            .ok()
            .map(|f| f.version)
    }

    /// The kept file's first entry changed by `change`.
    fn forge(dir: &Path, change: impl FnOnce(&mut serde_json::Value)) {
        let file = dir.join(NAME);
        let mut kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        change(&mut kept["programs"][0]);
        std::fs::write(&file, kept.to_string()).unwrap();
    }

    #[test]
    fn a_program_is_asked_once_and_again_when_its_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let path = program(d, "2.27");
        assert_eq!(found(d, &path).as_deref(), Some("2.27"));
        assert_eq!(found(d, &path).as_deref(), Some("2.27"));
        assert_eq!(runs(d), 1, "the second process asks nothing");

        program(d, "2.29");
        assert_eq!(found(d, &path).as_deref(), Some("2.29"), "another file");
        assert_eq!(runs(d), 2);

        std::fs::write(&path, script(d, "2.30") + "# longer\n").unwrap();
        assert_eq!(
            found(d, &path).as_deref(),
            Some("2.30"),
            "rewritten in place"
        );
        assert_eq!(runs(d), 3);

        // The same size, its modification time put back: only the change
        // time tells, which moves on the clock's next tick.
        let before = std::fs::metadata(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(&path, script(d, "2.31") + "# longer\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(before.modified()?))
            .unwrap();
        assert_eq!(found(d, &path).as_deref(), Some("2.31"), "touched back");
        assert_eq!(runs(d), 4);

        program(d, "2.1");
        assert_eq!(found(d, &path), None, "below the floor, refused");
        assert_eq!(found(d, &path), None, "and asked again");
        assert_eq!(runs(d), 6);
    }

    #[test]
    fn a_corrupt_or_foreign_file_of_versions_is_passed_over_and_the_program_asked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join(NAME);
        let path = program(d, "2.27");
        let asked = std::cell::Cell::new(0);
        let expect_asked = |why: &str| {
            assert_eq!(found(d, &path).as_deref(), Some("2.27"), "{why}");
            asked.set(asked.get() + 1);
            assert_eq!(runs(d), asked.get(), "{why}: asked");
        };

        std::fs::write(&file, b"{\"programs\": [{\"path\": ").unwrap();
        expect_asked("a file cut short");
        assert_eq!(found(d, &path).as_deref(), Some("2.27"));
        assert_eq!(runs(d), asked.get(), "written whole again");

        forge(d, |e| {
            e["file"]["ino"] = (e["file"]["ino"].as_u64().unwrap() + 1).into()
        });
        forge(d, |e| e["version"] = "2.99".into());
        expect_asked("an entry for another file");

        forge(d, |e| e["version"] = "2.1".into());
        expect_asked("an entry below the floor");

        forge(d, |e| e["version"] = "2.27; rm -rf".into());
        expect_asked("a version Fossil never prints");

        forge(d, |e| e["extra"] = true.into());
        expect_asked("a field OCX never writes");

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        expect_asked("a file others may write");

        let elsewhere = d.join("elsewhere.json");
        std::fs::rename(&file, &elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        expect_asked("a link");

        std::fs::remove_file(&file).unwrap();
        std::fs::rename(&elsewhere, &file).unwrap();
        let mut large = std::fs::read(&file).unwrap();
        large.resize(MAX_BYTES as usize + 1, b' ');
        std::fs::write(&file, large).unwrap();
        expect_asked("a file too large, whatever it holds");
    }
}
