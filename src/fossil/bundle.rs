//! Fossil bundles: the SQLite file `fossil bundle import` reads, holding
//! the project-code and each artifact in the form `blob.content` has (its
//! zlib stream of stored blocks, [`delta::compress`]).

use super::{FossilError, delta};
use rusqlite::Connection;
use std::path::Path;

/// Writes a new bundle at `path` holding `artifacts` (each its full hash
/// and bytes) for the project `project_code`.
pub fn write(
    path: &Path,
    project_code: &str,
    artifacts: &[(String, Vec<u8>)],
) -> Result<(), FossilError> {
    let fail = FossilError::Bundle;
    let _ = std::fs::remove_file(path);
    let mut db = Connection::open(path).map_err(fail)?;
    // A bundle is a file of the moment, read once by `fossil bundle import`
    // and removed: it needs no journal and no sync to survive a crash.
    db.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
        .map_err(fail)?;
    let tx = db.transaction().map_err(fail)?;
    tx.execute_batch(
        "CREATE TABLE bconfig(bcname TEXT, bcvalue ANY);
         CREATE TABLE bblob(blobid INTEGER PRIMARY KEY, uuid TEXT NOT NULL, sz INT NOT NULL,
                            delta ANY, notes TEXT, data BLOB);",
    )
    .map_err(fail)?;
    tx.execute(
        "INSERT INTO bconfig VALUES('project-code', ?1)",
        [project_code],
    )
    .map_err(fail)?;
    for (hash, bytes) in artifacts {
        tx.execute(
            "INSERT INTO bblob(uuid, sz, delta, notes, data) VALUES(?1, ?2, NULL, 'ocx', ?3)",
            rusqlite::params![hash, bytes.len() as i64, delta::compress(bytes)],
        )
        .map_err(fail)?;
    }
    tx.commit().map_err(fail)
}
