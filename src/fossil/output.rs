//! Fossil's output read back: pure functions over the text a `fossil`
//! command printed, each tested against a sample of it.

/// One unversioned file as `uv list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UvFile {
    /// Its name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// The first digits of its hash.
    pub hash: String,
    /// When it was last changed, `YYYY-MM-DD HH:MM:SS` in UTC.
    pub changed: String,
}

/// Whether a `fossil` command that failed said its SQLite found the
/// repository held by another writer (`SQLITE_BUSY`, `SQLITE_LOCKED`).
/// Fossil prints SQLite's own words, never its code: these are read once,
/// here, into [`super::FossilError::Busy`].
pub fn held_by_another(stdout: &str, stderr: &str) -> bool {
    [stdout, stderr].iter().any(|text| {
        [
            "SQLITE_BUSY",
            "SQLITE_LOCKED",
            "database is locked",
            "database is busy",
            "database table is locked",
        ]
        .iter()
        .any(|said| text.contains(said))
    })
}

/// `uv list`'s lines: `HASH DATE TIME SIZE STORED NAME`.
pub fn parse_uv_list(text: &str) -> Vec<UvFile> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(6, ' ').filter(|p| !p.is_empty());
            let hash = parts.next()?.to_string();
            let date = parts.next()?;
            let time = parts.next()?;
            let rest: Vec<&str> = l.split_whitespace().skip(3).collect::<Vec<_>>();
            let size = rest.first()?.parse().ok()?;
            let name_at = l.find(rest.get(2)?)?;
            Some(UvFile {
                name: l[name_at..].to_string(),
                size,
                hash,
                changed: format!("{date} {time}"),
            })
        })
        .collect()
}

/// Why a sync failed although Fossil answered 0: an error it wrote, or no
/// round trip made; `None` when it went through.
pub fn sync_failure(stdout: &str, stderr: &str) -> Option<String> {
    stderr
        .lines()
        .chain(stdout.lines().filter(|l| l.starts_with("Error")))
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .or_else(|| {
            stdout
                .contains("Round-trips: 0")
                .then(|| "no round trip was made with the server".to_string())
        })
}

/// `changes`' lines: `STATE    PATH`.
pub fn parse_changes(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (state, path) = l.split_once(char::is_whitespace)?;
            let path = path.trim();
            (!path.is_empty()).then(|| (state.to_string(), path.to_string()))
        })
        .collect()
}

/// The hash in `commit`'s `New_Version: HASH` line.
pub fn parse_new_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("New_Version: "))
        .map(|h| h.trim().to_string())
}

/// The version number in `fossil version`'s answer: "This is fossil version 2.28 [...]".
pub fn parse_version(text: &str) -> Option<String> {
    let rest = text.split("version ").nth(1)?;
    let v: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Whether dotted version `v` is `floor` or later.
pub fn version_at_least(v: &str, floor: &str) -> bool {
    let parts = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(v) >= parts(floor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fossil::FLOOR;

    #[test]
    fn reads_fossils_version_line() {
        let line = "This is fossil version 2.28 [52445a27f1] 2026-03-11 11:31:46 UTC\n";
        assert_eq!(parse_version(line).as_deref(), Some("2.28"));
        assert!(version_at_least("2.28", FLOOR));
        assert!(version_at_least("2.23", FLOOR));
        assert!(!version_at_least("2.21", FLOOR));
        assert!(version_at_least("2.100", "2.23"));
    }

    #[test]
    fn reads_uv_list_changes_and_commit() {
        let uv = parse_uv_list("bea18fb8e107 2026-11-29 17:44:41       11       11 docs/a b.txt\n");
        assert_eq!(uv[0].name, "docs/a b.txt");
        assert_eq!(uv[0].size, 11);
        assert_eq!(uv[0].changed, "2026-11-29 17:44:41");
        let ch = parse_changes("EDITED     src/a.rs\nADDED      new file.txt\n");
        assert_eq!(ch[1], ("ADDED".into(), "new file.txt".into()));
        assert_eq!(
            parse_new_version("New_Version: abc123\n").as_deref(),
            Some("abc123")
        );
        let done = "Push to http://a@h/\nRound-trips: 1   Artifacts sent: 0  received: 0\n";
        assert_eq!(sync_failure(done, ""), None);
        assert!(sync_failure("Error: login failed\nRound-trips: 1\n", "").is_some());
        assert!(sync_failure("Round-trips: 0\n", "cannot connect to host").is_some());
    }

    #[test]
    fn a_repository_held_by_another_writer_is_read_from_what_fossil_prints() {
        assert!(held_by_another(
            "",
            "SQLITE_BUSY: database is locked\nDatabase error: database is locked: {COMMIT}\n"
        ));
        assert!(held_by_another("Database error: database is locked\n", ""));
        assert!(!held_by_another("", "not a valid bundle\n"));
    }
}
