//! An agent machine's node: the node on a clone of the served repository,
//! acting on the records addressed to the clone's server-code. It signs in
//! to the server with the machine's own login for all it reads there (its
//! credentials file: [`login`]): who sent each artifact and what that login
//! may do (the server's receipts, [`super::receipts`]), the run's login and
//! password ([`run_login`]), and the long-poll `wait` that wakes it
//! ([`listen`]). Its responses are written in the clone as the machine's
//! login, pushed, and count only once the server's receipt names that
//! login; one not yet confirmed is kept under the root and pushed again
//! until it is, never written twice ([`unconfirmed`]), and only after the
//! check-ins its run pushed while the server gave no answer ([`checkins`]).
//! While the server gives none, the node waits for its listener to hear
//! it again, and says so once ([`reach`]).

pub mod checkins;
pub mod listen;
pub mod login;
pub mod reach;
pub mod unconfirmed;
pub mod written;

pub use listen::{Heard, listen};
pub use login::read_credentials;
pub use reach::Reach;
pub use unconfirmed::{Responded, answered_here, any_unconfirmed, push_unconfirmed, respond};

use super::receipts::Server;
use crate::node::page::PageError;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// The capabilities an agent machine asks for: clone, read, check in (its
/// pushes need it), and post to the forum unmoderated.
pub const MACHINE_CAPABILITIES: &str = "gio24";

/// What the server's `run_login` answers.
#[derive(Deserialize)]
struct RunLogin {
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
}

/// The run login's name and password for `record` addressed to this
/// machine, as the served side made it; asked again for a few seconds
/// while the server has not made it yet, and not again when the server
/// gives no answer (the record is then acted on once it does).
pub fn run_login(server: &Server, record: &str) -> Result<(String, String), PageError> {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match server
            .page()
            .call::<RunLogin>("run_login", &json!({ "record": record }))
        {
            Ok(v) if v.user.is_empty() || v.password.is_empty() => {
                return Err(PageError::Unreachable {
                    server: server.url().to_string(),
                    why: "its run_login answered no login".into(),
                });
            }
            Ok(v) => return Ok((v.user, v.password)),
            Err(e) if e.away() || std::time::Instant::now() >= until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}
