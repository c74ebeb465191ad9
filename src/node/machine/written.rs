//! What a call an agent machine made on its server as a run's login
//! wrote there, and whether the server's receipts name that login as its
//! sender: a write counts as the run's only then.

use crate::node::page::PageError;
use crate::node::receipts::Server;
use serde_json::Value;

/// The hashes a write's result names as written: `hash`, and `checkins`.
pub fn written(result: Option<&Value>) -> Vec<String> {
    let Some(r) = result else {
        return Vec::new();
    };
    let mut out: Vec<String> = r["hash"].as_str().map(String::from).into_iter().collect();
    out.extend(
        r["checkins"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from),
    );
    out.retain(|h| crate::stop::full_hash("hash", h).is_ok());
    out
}

/// Why a write the server's page answered is not counted as the run's.
#[derive(Debug, thiserror::Error)]
pub enum Unconfirmed {
    /// The server's receipts could not be asked for.
    #[error(transparent)]
    Asked(#[from] PageError),
    /// The server holds the artifact, but as another sender's.
    #[error("{hash} is written but the server's receipt names {}, not {login}", sender.as_deref().unwrap_or("no one"))]
    Sender {
        hash: String,
        sender: Option<String>,
        login: String,
    },
}

/// Whether the server received each of `hashes` from `login`; why not.
pub fn confirm(server: &Server, hashes: &[String], login: &str) -> Result<(), Unconfirmed> {
    for r in server.received(hashes)? {
        if r.sender() != Some(login) {
            return Err(Unconfirmed::Sender {
                hash: r.hash.clone(),
                sender: r.sender().map(String::from),
                login: login.to_string(),
            });
        }
    }
    Ok(())
}
