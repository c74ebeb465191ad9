//! Unversioned files, as `fossil uv` lists, exports and adds them (a
//! file's bytes through a temporary file of OCX's own).

use super::{Fossil, plain};
use crate::fossil::FossilError;
use crate::fossil::output::{UvFile, parse_uv_list};
use std::path::Path;

impl Fossil {
    /// The unversioned files of `repository`: name, size, hash prefix and
    /// when each was last changed.
    pub fn uv_list(&self, repository: &Path) -> Result<Vec<UvFile>, FossilError> {
        let out = self.run_in(
            None,
            "uv list",
            &[
                "uv".as_ref(),
                "list".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        Ok(parse_uv_list(&out))
    }

    /// The bytes of unversioned file `name` in `repository`.
    pub fn uv_get(&self, repository: &Path, name: &str) -> Result<Vec<u8>, FossilError> {
        let dir = tempfile::Builder::new()
            .prefix("ocx-uv-")
            .tempdir()
            .map_err(|e| FossilError::Command {
                operation: "uv export",
                message: e.to_string(),
            })?;
        let file = dir.path().join("file");
        self.run_in(
            None,
            "uv export",
            &[
                "uv".as_ref(),
                "export".as_ref(),
                plain("uv export", "the name", name)?,
                file.as_os_str(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        std::fs::read(&file).map_err(|e| FossilError::Command {
            operation: "uv export",
            message: e.to_string(),
        })
    }

    /// Stores `bytes` as unversioned file `name` in `repository`, as
    /// `user`, so its receipt names `user`.
    pub fn uv_put(
        &self,
        repository: &Path,
        name: &str,
        bytes: &[u8],
        user: &str,
    ) -> Result<(), FossilError> {
        let failed = |e: std::io::Error| FossilError::Command {
            operation: "uv add",
            message: e.to_string(),
        };
        let dir = tempfile::Builder::new()
            .prefix("ocx-uv-")
            .tempdir()
            .map_err(failed)?;
        let file = dir.path().join("file");
        std::fs::write(&file, bytes).map_err(failed)?;
        self.run_in(
            None,
            "uv add",
            &[
                "uv".as_ref(),
                "add".as_ref(),
                file.as_os_str(),
                "--as".as_ref(),
                plain("uv add", "the name", name)?,
                "-R".as_ref(),
                repository.as_os_str(),
                "--user".as_ref(),
                plain("uv add", "the login", user)?,
            ],
        )
        .map(|_| ())
    }
}
