//! The machine's own login, as its credentials file keeps it (`ocx
//! register` writes it): read never through a link, and only from a file
//! its owner alone may read.

use crate::node::NodeError;
use serde::Deserialize;
use std::path::Path;

/// The machine's login as its credentials file keeps it.
#[derive(Deserialize)]
struct Credentials {
    user: String,
    #[serde(default)]
    password: Option<String>,
}

/// Reads the machine's login and password from `path`: never through a
/// link, and refused when anyone but its owner may read it.
pub fn read_credentials(path: &Path) -> Result<(String, String), NodeError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse = |why: String| NodeError::Credentials {
        path: path.display().to_string(),
        why,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| refuse(e.to_string()))?;
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() || meta.mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw()
    {
        return Err(refuse(
            "is not a regular file its owner alone may read (chmod 600)".into(),
        ));
    }
    let mut text = String::new();
    file.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| refuse(e.to_string()))?;
    let creds: Credentials =
        serde_json::from_str(&text).map_err(|e| refuse(format!("does not read: {e}")))?;
    match creds.password {
        Some(p) if !p.is_empty() => Ok((creds.user, p)),
        _ => Err(refuse(format!(
            "holds no password yet: {} is not approved",
            creds.user
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn credentials_are_read_only_from_a_file_its_owner_alone_may_read_holding_a_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.json");
        std::fs::write(&file, r#"{"user": "node-0a1b2c3d", "password": "pw"}"#).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read_credentials(&file).unwrap(),
            ("node-0a1b2c3d".to_string(), "pw".to_string())
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_credentials(&file).is_err(), "others may read it");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read_credentials(&link).is_err(), "never through a link");
        std::fs::write(&file, r#"{"user": "node-0a1b2c3d", "code": "abc"}"#).unwrap();
        let e = read_credentials(&file).unwrap_err().to_string();
        assert!(e.contains("not approved"), "{e}");
        std::fs::write(&file, "not json").unwrap();
        assert!(read_credentials(&file).is_err());
    }
}
