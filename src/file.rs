//! A file written whole: into a temporary name beside it (made anew, never
//! reached through a link), synced, then renamed over it, so a reader, or a
//! writer killed midway, finds the old text or the new and never a part.
//! The node's state, configuration and spool, an agent machine's kept
//! responses and the git export's last run are written this way; what an
//! agent machine last heard, shown by `status` alone, is written so but
//! not synced.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to `path` whole, through `tmp` (beside it), with
/// permissions `mode`.
pub fn write_whole(path: &Path, tmp: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_then_rename(path, tmp, bytes, mode, true)
}

/// As [`write_whole`], without the sync: for a file that only shows how
/// things stand and is written again soon, which a crash may leave at
/// its older content (never cut short), where a sync would wait on the
/// disk each time.
pub fn write_whole_unsynced(
    path: &Path,
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    write_then_rename(path, tmp, bytes, mode, false)
}

fn write_then_rename(
    path: &Path,
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
    sync: bool,
) -> std::io::Result<()> {
    let _ = std::fs::remove_file(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            match sync {
                true => f.sync_data(),
                false => Ok(()),
            }
        })
        .and_then(|()| std::fs::rename(tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written
}
