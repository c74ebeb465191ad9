//! The bearer token of MCP over HTTP: one file a repository and login,
//! private to its account, made when missing and refused when others can
//! read it or it was made for another repository or login.

#![allow(clippy::disallowed_methods)] // an entry point: it reads where its user keeps configuration (XDG_CONFIG_HOME, HOME), as docs/architecture.md says

use super::McpError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A bearer token's file: the token, and the repository and login it was
/// made for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    /// The repository's project-code.
    project: String,
    /// The login the token acts as.
    login: String,
    /// The token: 32 random bytes, in hex.
    token: String,
}

/// Where the token for `project` and `login` is kept when `--token-file`
/// names no other file: `$XDG_CONFIG_HOME/ocx/mcp-tokens/` (else
/// `~/.config/ocx/mcp-tokens/`), one file per repository and login.
pub fn default_token_file(project: &str, login: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'@');
    let login = percent_encoding::utf8_percent_encode(login, KEEP).to_string();
    let project: String = project.chars().take(16).collect();
    Some(
        base.join("ocx")
            .join("mcp-tokens")
            .join(format!("{project}-{login}.json")),
    )
}

/// The token kept in `path` for `project` and `login`, made (0600, in a
/// directory made 0700) when the file is not there yet. A file others can
/// read, not this account's, or made for another repository or login is
/// refused.
pub(super) fn token_for(path: &Path, project: &str, login: &str) -> Result<String, McpError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let refuse = |reason: String| McpError::Token {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(refuse("is not a regular file".into()));
            }
            if meta.uid() != nix::unistd::geteuid().as_raw() {
                return Err(refuse("belongs to another account".into()));
            }
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(refuse(format!(
                    "is readable or writable by others (mode {:o}): make it 0600",
                    meta.permissions().mode() & 0o777
                )));
            }
            let kept: TokenFile = std::fs::read(path)
                .map_err(|e| refuse(e.to_string()))
                .and_then(|b| {
                    serde_json::from_slice(&b).map_err(|e| refuse(format!("does not parse: {e}")))
                })?;
            if kept.project != project || kept.login != login {
                return Err(refuse(format!(
                    "was made for login {:?} of project {}, not {login:?} of {project}",
                    kept.login, kept.project
                )));
            }
            if kept.token.len() < 32 {
                return Err(refuse("holds a token too short to keep anyone out".into()));
            }
            Ok(kept.token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                && !dir.is_dir()
            {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| refuse(format!("cannot make its directory: {e}")))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| refuse(e.to_string()))?;
            }
            let mut bytes = [0u8; 32];
            rand::fill(&mut bytes);
            let made = TokenFile {
                project: project.to_string(),
                login: login.to_string(),
                token: hex::encode(bytes),
            };
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| refuse(format!("cannot make it: {e}")))?;
            let text = serde_json::to_string_pretty(&made).unwrap_or_default() + "\n";
            file.write_all(text.as_bytes())
                .map_err(|e| refuse(e.to_string()))?;
            Ok(made.token)
        }
        Err(e) => Err(refuse(e.to_string())),
    }
}
