//! A run's disk: a filesystem of its own, of the node's ceiling's size, holding everything the
//! run may write (its workspace, its home, its homes' copies, its `/tmp`), so the kernel stops
//! its writes there; its use read, and it unmounted and removed however the run ends.
//!
//! It is a sparse file in the run's directory, formatted ext4 (no journal: it never outlives
//! the run) and loop-mounted with `mount -o loop`, which frees the loop device when it is
//! unmounted. `mkfs.ext4` and `mount` are run by absolute path, with a cleared environment,
//! never through a shell.

#![allow(clippy::disallowed_methods)] // where a run's filesystem is made and mounted, as docs/architecture.md says

use crate::run::Unavailable;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::mount::{MntFlags, umount2};
use nix::unistd::Uid;
use serde::Serialize;

use crate::run::SandboxError;

/// The file in a run's directory that holds its filesystem.
pub const IMAGE: &str = "disk.img";

/// The directory in a run's directory where its filesystem is mounted.
pub const MOUNT: &str = "disk";

/// The least a run's filesystem may be: below it ext4 leaves a run next to nothing.
pub const LEAST: u64 = 16 << 20;

/// Free space below which a run's filesystem counts as full: the run has written its disk.
const FULL_BELOW: u64 = 1 << 20;

const MKFS: [&str; 2] = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"];
const MOUNT_PROGRAM: [&str; 2] = ["/usr/bin/mount", "/bin/mount"];

/// A run's filesystem, mounted while this lives; dropped, it is unmounted (lazily, if a
/// process still holds a file there) and its file removed.
#[derive(Debug)]
pub struct Disk {
    image: PathBuf,
    mount: PathBuf,
    bytes: u64,
}

/// How much of a run's filesystem is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DiskUse {
    /// Bytes in use, the filesystem's own among them.
    pub used: u64,
    /// Whether the run can write (next to) nothing more: less than 1 MiB or no inode left.
    pub full: bool,
}

impl Disk {
    /// Makes a filesystem of `bytes` for the run whose directory is `dir` and mounts it at
    /// `dir/disk`, first clearing what a watcher that ended without unmounting left there.
    /// Its top is root's (0711): the run writes only in the directories made in it for it.
    pub fn make(dir: &Path, bytes: u64) -> Result<Disk, SandboxError> {
        Disk::make_from(dir, bytes, None)
    }

    /// [`Disk::make`], its filesystem taken from `pool` when one of `bytes` is ready there,
    /// made anew otherwise; mounted alike either way.
    pub fn make_from(dir: &Path, bytes: u64, pool: Option<&Pool>) -> Result<Disk, SandboxError> {
        if bytes < LEAST {
            return Err(SandboxError::Disk(format!(
                "cannot be {bytes} bytes, less than the {} MiB it needs",
                LEAST >> 20
            )));
        }
        let (mkfs, mount) =
            programs().map_err(|e| SandboxError::Disk(format!("cannot be made: {e}")))?;
        clear(dir);
        let disk = Disk {
            image: dir.join(IMAGE),
            mount: dir.join(MOUNT),
            bytes,
        };
        let failed = |what: &str, e: io::Error| {
            SandboxError::Disk(format!("could not be made: {what}: {e}"))
        };
        if !pool.is_some_and(|p| p.take(bytes, &disk.image)) {
            format(&mkfs, &disk.image, bytes, Weight::Run)?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&disk.mount)
            .map_err(|e| failed(&disk.mount.display().to_string(), e))?;
        run(
            &mount,
            &["-t", "ext4", "-o", "loop,nosuid,nodev,noinit_itable"],
            &[&disk.image, &disk.mount],
            Weight::Run,
        )?;
        let _ = fs::remove_dir(disk.mount.join("lost+found"));
        fs::set_permissions(&disk.mount, fs::Permissions::from_mode(0o711))
            .map_err(|e| failed(&disk.mount.display().to_string(), e))?;
        Ok(disk)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Its size in bytes: the most the run may write.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        unmount(&self.mount);
        let _ = fs::remove_dir(&self.mount);
        let _ = fs::remove_file(&self.image);
    }
}

/// How a program this module runs shares the processors.
#[derive(Clone, Copy)]
enum Weight {
    /// As the run it is made for, in its watcher's session.
    Run,
    /// In a session of its own weighed least (nice 19, where the kernel
    /// weighs sessions), so a filesystem made ahead never slows a run.
    Least,
}

/// Makes the file `image` (which must not be there yet) of `bytes`, sparse, and formats it.
fn format(mkfs: &Path, image: &Path, bytes: u64, weight: Weight) -> Result<(), SandboxError> {
    format_holding(mkfs, image, bytes, weight, None)
}

/// [`format`], the filesystem made holding a copy of what the directory `tree` holds
/// (`mkfs.ext4 -d`), owners and modes as they are there, when it is given.
fn format_holding(
    mkfs: &Path,
    image: &Path,
    bytes: u64,
    weight: Weight,
    tree: Option<&Path>,
) -> Result<(), SandboxError> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(image)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| SandboxError::Disk(format!("could not be made: {}: {e}", image.display())))?;
    let mut paths: Vec<&Path> = Vec::new();
    if let Some(tree) = tree {
        paths.extend([Path::new("-d"), tree]);
    }
    paths.push(image);
    run(
        mkfs,
        &[
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-T",
            "default",
            "-E",
            "lazy_itable_init=1,nodiscard",
        ],
        &paths,
        weight,
    )
}

/// Run filesystems made ahead, formatted and never mounted, in a directory of root's alone
/// (0700) on the same filesystem as the runs' directories: a run takes one by renaming it into
/// its own directory, so a filesystem is never given twice, and its `mkfs.ext4` was run off the
/// path of its start. Each is named by its size, and made under a name of its own first, so a
/// half-made one is never taken.
#[derive(Debug, Clone)]
pub struct Pool {
    dir: PathBuf,
}

/// The suffix of a ready filesystem's file in a [`Pool`].
const READY: &str = ".img";

/// The suffix of a filesystem's file in a [`Pool`] while it is made.
const PART: &str = ".part";

/// The suffix of the directory in a [`Pool`] whose copy a filesystem made there holds.
const TREE: &str = ".tree";

impl Pool {
    /// The pool kept in `dir`.
    pub fn at(dir: &Path) -> Pool {
        Pool {
            dir: dir.to_path_buf(),
        }
    }

    /// The ready filesystems of `bytes`, by file.
    fn ready(&self, bytes: u64) -> Vec<PathBuf> {
        let prefix = format!("{bytes}-");
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(&prefix) && name.ends_with(READY)
            })
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .collect()
    }

    /// Has `format` make the filesystem `name` holding what `furnish` wrote in a directory
    /// of its own, or, when it wrote nothing or what it wrote cannot be held, holding nothing.
    fn furnished(
        &self,
        name: &str,
        furnish: &dyn Fn(&Path) -> bool,
        format: impl Fn(Option<&Path>) -> Result<(), SandboxError>,
    ) -> Result<(), SandboxError> {
        let tree = self.dir.join(format!("{name}{TREE}"));
        let _ = fs::remove_dir_all(&tree);
        let made = fs::DirBuilder::new().mode(0o700).create(&tree).is_ok();
        let held = made && furnish(&tree) && format(Some(&tree)).is_ok();
        let _ = fs::remove_dir_all(&tree);
        if held { Ok(()) } else { format(None) }
    }

    /// Moves a ready filesystem of `bytes` to `to`; false when none could be had.
    fn take(&self, bytes: u64, to: &Path) -> bool {
        self.ready(bytes)
            .iter()
            .any(|from| fs::rename(from, to).is_ok())
    }

    /// Makes filesystems of `bytes` until `count` are ready, removing those of any other size
    /// (made before the ceiling changed); each holds what `furnish`, given an empty directory
    /// of root's alone beside it, wrote there when it answers true. How many it made.
    pub fn fill(
        &self,
        bytes: u64,
        count: usize,
        furnish: &dyn Fn(&Path) -> bool,
    ) -> Result<usize, SandboxError> {
        let (mkfs, _) =
            programs().map_err(|e| SandboxError::Disk(format!("cannot be made: {e}")))?;
        match fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(SandboxError::Disk(format!(
                    "could not be made ahead: {}: {e}",
                    self.dir.display()
                )));
            }
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            let prefix = format!("{bytes}-");
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(READY) && !name.starts_with(&prefix) {
                    let _ = fs::remove_file(e.path());
                } else if name.ends_with(TREE) {
                    // What a furnisher left when the node ended meanwhile.
                    let _ = fs::remove_dir_all(e.path());
                } else if name.ends_with(PART) {
                    // Half made by a node that ended meanwhile: none is being made now.
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let mut made = 0;
        while self.ready(bytes).len() < count {
            static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{bytes}-{}-{n}", std::process::id());
            let part = self.dir.join(format!("{name}{PART}"));
            let formatted = self.furnished(&name, furnish, |tree| {
                let _ = fs::remove_file(&part);
                format_holding(&mkfs, &part, bytes, Weight::Least, tree)
            });
            if let Err(e) = formatted.and_then(|()| {
                fs::rename(&part, self.dir.join(format!("{name}{READY}")))
                    .map_err(|e| SandboxError::Disk(format!("could not be made ahead: {e}")))
            }) {
                let _ = fs::remove_file(&part);
                return Err(e);
            }
            made += 1;
        }
        Ok(made)
    }
}

/// Has `cmd` start in a session of its own weighed least (nice 19, where the kernel weighs
/// sessions), as a filesystem made ahead is made, so it never slows a run.
pub fn weigh_least(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid, open, write and close are async-signal-safe and
    // allocate nothing; the path and the value are static.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            let fd = nix::libc::open(c"/proc/self/autogroup".as_ptr(), nix::libc::O_WRONLY);
            if fd >= 0 {
                nix::libc::write(fd, b"19".as_ptr().cast(), 2);
                nix::libc::close(fd);
            }
            Ok(())
        });
    }
}

/// How much of the filesystem mounted at `mount` is written, read with `statvfs`.
pub fn usage(mount: &Path) -> Option<DiskUse> {
    let s = nix::sys::statvfs::statvfs(mount).ok()?;
    let frsize = s.fragment_size() as u64;
    let total = s.blocks() as u64 * frsize;
    let free = s.blocks_free() as u64 * frsize;
    let available = s.blocks_available() as u64 * frsize;
    Some(DiskUse {
        used: total.saturating_sub(free),
        full: available < FULL_BELOW || (s.files() > 0 && s.files_available() == 0),
    })
}

/// Clears what a run's filesystem left in `dir` when its watcher ended without unmounting it:
/// the mount (detached, should a process still hold it), its directory and its file. Call it
/// only while no watcher holds the run.
pub fn clear(dir: &Path) {
    let mount = dir.join(MOUNT);
    unmount(&mount);
    let _ = fs::remove_dir(&mount);
    let _ = fs::remove_file(dir.join(IMAGE));
}

/// Unmounts every filesystem mounted at `mount`, never following a link there: at once when
/// nothing holds it, else detached, to go when the last file there is closed.
fn unmount(mount: &Path) {
    for _ in 0..8 {
        match umount2(mount, MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            Err(nix::Error::EBUSY) => {
                if umount2(mount, MntFlags::UMOUNT_NOFOLLOW | MntFlags::MNT_DETACH).is_ok() {
                    continue;
                }
                return;
            }
            Err(_) => return,
        }
    }
}

/// Runs `program` with `args`, then `paths`, with nothing of this process's environment;
/// its words on failure.
fn run(program: &Path, args: &[&str], paths: &[&Path], weight: Weight) -> Result<(), SandboxError> {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .args(paths)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null());
    if let Weight::Least = weight {
        weigh_least(&mut cmd);
    }
    let out = cmd
        .output()
        .map_err(|e| SandboxError::Disk(format!("could not be made: {name}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr)
        .trim()
        .replace('\n', " ");
    Err(SandboxError::Disk(format!(
        "could not be made: {name} failed ({}): {said}",
        out.status
    )))
}

fn found(candidates: &[&str], what: &str) -> Result<PathBuf, Unavailable> {
    candidates
        .iter()
        .map(Path::new)
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            Unavailable(format!(
                "{what} is not installed (looked for {})",
                candidates.join(", ")
            ))
        })
}

/// `mkfs.ext4` and `mount`, by absolute path; the reason a run's filesystem cannot be made
/// when one is missing or this process is not root.
fn programs() -> Result<(PathBuf, PathBuf), Unavailable> {
    if !Uid::effective().is_root() {
        return Err(Unavailable(format!(
            "a loop-mounted filesystem needs root, and this process runs as uid {}",
            Uid::effective()
        )));
    }
    Ok((
        found(&MKFS, "mkfs.ext4 (e2fsprogs)")?,
        found(&MOUNT_PROGRAM, "mount (util-linux)")?,
    ))
}

/// Whether this host can give a run a filesystem of its own now: root, `mkfs.ext4`, `mount`,
/// and a loop device free (asked of `/dev/loop-control`); how, or why not.
pub(crate) fn probe() -> Result<String, Unavailable> {
    let (mkfs, mount) = programs()?;
    let control = "/dev/loop-control";
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(control)
        .map_err(|e| Unavailable(format!("no loop device can be had: {control}: {e}")))?;
    const LOOP_CTL_GET_FREE: nix::libc::c_ulong = 0x4C82;
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and only answers a number.
    let free =
        unsafe { nix::libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), LOOP_CTL_GET_FREE as _) };
    if free < 0 {
        return Err(Unavailable(format!(
            "no loop device can be had: {control}: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(format!(
        "a filesystem of its own: a sparse file formatted ext4 ({}) and loop-mounted ({})",
        mkfs.display(),
        mount.display()
    ))
}
