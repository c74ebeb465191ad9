//! The node's credentials: what a runner's runs are given to log in to
//! their model service (Claude Code's login, an API key, Codex's
//! `auth.json`), kept under the node's root in `credentials/NAME`, the
//! directory 0700 and each file 0600, so only the node's account reads
//! them. A runner page names them by name alone; each run gets a fresh copy
//! in its own home (or a variable), removed with the run. Nothing here is
//! ever shown but by name.

use std::path::{Path, PathBuf};

/// Why a credential could not be kept, given, or read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The name cannot name a credential.
    #[error("{0:?} is not a credential's name (a-z, 0-9, - and _, at most 40)")]
    Name(String),
    /// The node keeps no credential of that name.
    #[error("the node keeps no credential {0:?} (ocx credential --name {0} --file FILE keeps one)")]
    Missing(String),
    /// The file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file at fault.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: std::io::Error,
    },
}

/// The directory the node keeps its credentials in.
pub fn dir(root: &Path) -> PathBuf {
    root.join("credentials")
}

fn path_of(root: &Path, name: &str) -> Result<PathBuf, CredentialError> {
    if !super::runner::valid_name(name) {
        return Err(CredentialError::Name(name.to_string()));
    }
    Ok(dir(root).join(name))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError + '_ {
    move |source| CredentialError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Keeps `bytes` as the credential `name`, in place of any kept before.
pub fn keep(root: &Path, name: &str, bytes: &[u8]) -> Result<(), CredentialError> {
    use std::os::unix::fs::PermissionsExt;
    let path = path_of(root, name)?;
    let d = dir(root);
    std::fs::create_dir_all(&d).map_err(io(&d))?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).map_err(io(&d))?;
    crate::file::write_whole(&path, &d.join(format!(".{name}.new")), bytes, 0o600)
        .map_err(io(&path))
}

/// Removes the credential `name`; answers whether one was kept.
pub fn remove(root: &Path, name: &str) -> Result<bool, CredentialError> {
    let path = path_of(root, name)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(&path)(e)),
    }
}

/// The credential `name`'s bytes, opened without following a link.
pub fn read(root: &Path, name: &str) -> Result<Vec<u8>, CredentialError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = path_of(root, name)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CredentialError::Missing(name.to_string()),
            _ => io(&path)(e),
        })?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(io(&path))?;
    Ok(bytes)
}

/// The names of the credentials the node keeps, sorted.
pub fn names(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir(root))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| super::runner::valid_name(n))
        .collect();
    out.sort();
    out
}

/// A credential given to one run: a file's bytes at a path in its home,
/// or a variable's value.
#[derive(Debug)]
pub enum Given {
    /// Written at this path relative to the run's home, 0600.
    File(String, Vec<u8>),
    /// Given as this variable, its value trimmed of a final newline.
    Env(String, String),
}

/// What `uses` give a run, each read afresh from the node's keeping.
pub fn give(
    root: &Path,
    uses: &[super::runner::CredentialUse],
) -> Result<Vec<Given>, CredentialError> {
    uses.iter()
        .map(|u| {
            let bytes = read(root, &u.name)?;
            Ok(match (&u.file, &u.env) {
                (Some(f), _) => Given::File(f.clone(), bytes),
                (None, Some(v)) => {
                    let text = String::from_utf8_lossy(&bytes);
                    Given::Env(v.clone(), text.trim_end_matches(['\n', '\r']).to_string())
                }
                (None, None) => Given::Env(String::new(), String::new()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_credential_is_kept_its_owners_alone_and_named_only() {
        let t = tempfile::tempdir().unwrap();
        keep(t.path(), "claude-login", b"{\"secret\": 1}\n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir(t.path())), 0o700);
        assert_eq!(mode(&dir(t.path()).join("claude-login")), 0o600);
        assert_eq!(names(t.path()), vec!["claude-login".to_string()]);
        assert_eq!(
            read(t.path(), "claude-login").unwrap(),
            b"{\"secret\": 1}\n"
        );
        assert!(matches!(
            read(t.path(), "other"),
            Err(CredentialError::Missing(_))
        ));
        assert!(matches!(
            keep(t.path(), "../x", b"x"),
            Err(CredentialError::Name(_))
        ));
        assert!(remove(t.path(), "claude-login").unwrap());
        assert!(names(t.path()).is_empty());
    }

    #[test]
    fn a_link_in_place_of_a_credential_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        keep(t.path(), "k", b"x").unwrap();
        let secret = t.path().join("elsewhere");
        std::fs::write(&secret, b"not yours").unwrap();
        std::fs::remove_file(dir(t.path()).join("k")).unwrap();
        std::os::unix::fs::symlink(&secret, dir(t.path()).join("k")).unwrap();
        assert!(read(t.path(), "k").is_err());
    }
}
