//! `git upload-pack` behind two typed operations, the refs advertised and
//! one fetch answered, over git's stateless smart HTTP. Git is found by
//! absolute path (never from `PATH`), started with `PATH` alone in its
//! environment, never through a shell, and told the export is safe to read
//! (`-c safe.directory=`), since another account may own it. Its answer is
//! read whole before anyone writes a header of it.

#![allow(clippy::disallowed_methods)] // the one place git is started, as docs/architecture.md says

use super::GitError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where `git` is looked for when nothing names it.
pub const CANDIDATES: &[&str] = &["/usr/local/bin/git", "/usr/bin/git"];

/// The only variable git is given.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A `git` program, by absolute path.
#[derive(Debug, Clone)]
pub struct Git {
    path: PathBuf,
}

impl Git {
    /// `configured` when given (an absolute path to a file), else the first of [`CANDIDATES`].
    pub fn locate(configured: Option<&Path>) -> Result<Git, GitError> {
        if let Some(p) = configured {
            if !p.is_absolute() || !p.is_file() {
                return Err(GitError::NoProgram(p.display().to_string()));
            }
            return Ok(Git {
                path: p.to_path_buf(),
            });
        }
        CANDIDATES
            .iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .map(|p| Git {
                path: p.to_path_buf(),
            })
            .ok_or_else(|| GitError::NoProgram(CANDIDATES.join(" or ")))
    }

    /// The program's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The refs of the git repository `git_dir`, as git's smart HTTP
    /// advertises them to a fetch (`info/refs?service=git-upload-pack`,
    /// without the service line the server puts first).
    pub fn advertise_refs(&self, git_dir: &Path) -> Result<Vec<u8>, GitError> {
        self.upload_pack(
            git_dir,
            &["--advertise-refs"],
            &[],
            "upload-pack --advertise-refs",
        )
    }

    /// Git's answer to one fetch request (`git-upload-pack`'s body, whole).
    pub fn fetch(&self, git_dir: &Path, request: &[u8]) -> Result<Vec<u8>, GitError> {
        self.upload_pack(git_dir, &[], request, "upload-pack")
    }

    fn upload_pack(
        &self,
        git_dir: &Path,
        extra: &[&str],
        input: &[u8],
        operation: &'static str,
    ) -> Result<Vec<u8>, GitError> {
        let failed = |message: String| GitError::Command { operation, message };
        let work_tree = git_dir.parent().unwrap_or(git_dir);
        let safe = |dir: &Path| {
            let mut s = std::ffi::OsString::from("safe.directory=");
            s.push(dir.as_os_str());
            s
        };
        let mut c = Command::new(&self.path);
        c.env_clear()
            .env("PATH", PATH)
            .arg("-c")
            .arg(safe(git_dir))
            .arg("-c")
            .arg(safe(work_tree))
            .args(["upload-pack", "--stateless-rpc", "--strict"])
            .args(extra)
            .arg("--")
            .arg(git_dir)
            .current_dir("/")
            .stdin(if input.is_empty() {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| failed(e.to_string()))?;
        let writer = child.stdin.take().map(|mut stdin| {
            let input = input.to_vec();
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            })
        });
        let out = child
            .wait_with_output()
            .map_err(|e| failed(e.to_string()))?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        if !out.status.success() {
            let line = super::first_said(&out.stderr);
            return Err(failed(format!("{line} ({})", out.status)));
        }
        Ok(out.stdout)
    }
}
