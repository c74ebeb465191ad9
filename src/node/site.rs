//! What the node keeps of its site: a Content-Security-Policy that runs
//! only the scripts Fossil wrote (`fossil::csp`), set when the node is
//! made and set back at each wake when someone loosened it, so no file
//! committed to the repository can act as whoever views it.

use super::NodeError;
use super::log::{Done, Event};
use crate::fossil::{Fossil, Repository, csp};

/// Makes the site's policy run Fossil's scripts alone, keeping every
/// other directive as written; answers what it did, if anything.
pub fn keep_policy(fossil: &Fossil, repo: &Repository) -> Result<Option<Event>, NodeError> {
    let policy = repo.content_security_policy()?;
    if policy.admits_only_fossils_scripts() {
        return Ok(None);
    }
    let strict = policy.strict();
    fossil.config_set(repo.path(), csp::SETTING, &strict)?;
    let why = if policy.fossils_default {
        format!(
            "gave the site the Content-Security-Policy {strict:?}: Fossil's default runs any script committed to the repository"
        )
    } else {
        format!(
            "set the site's Content-Security-Policy back to {strict:?}: {:?} runs scripts Fossil did not write",
            policy.text
        )
    };
    Ok(Some(Event::new(Done::KeptPolicy, why)))
}
