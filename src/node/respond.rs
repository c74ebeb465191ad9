//! The node's answers (C4): one response per record, as the node's own
//! login, at the record's place, with its `ocx-message` tag; then the run
//! user's capabilities withdrawn (C5).

use super::config::NodeConfig;
use crate::fossil::store::{self, Batch};
use crate::fossil::{Fossil, FossilError, Repository};
use crate::place::{self, Where};
use crate::protocol::found::StandingRecord;
use crate::protocol::kinds::Response;
use crate::protocol::message;

/// The outcomes of C4, in the order the first that applies is chosen.
pub const OUTCOMES: &[&str] = &[
    "refused",
    "stopped",
    "budget",
    "unenforced",
    "lost",
    "exited",
];

/// Writes the response `outcome` with `note` to `record`, as `as_login`
/// (the node's login, or an administrator answering `lost` in its stead);
/// answers the response's hash. `withdraw` takes the run user's
/// capabilities away after it, as for every record the node opened; a
/// login that is not a run's is never touched.
pub fn respond(
    fossil: &Fossil,
    repo: &Repository,
    record: &StandingRecord,
    as_login: &str,
    outcome: &str,
    note: &str,
    withdraw: bool,
) -> Result<String, FossilError> {
    let batch = compose(repo, record, as_login, outcome, note)?;
    store::store(fossil, repo, as_login, &batch, true)?;
    let user = &record.record.user;
    let marked = matches!(
        super::run_user::check(repo, user, Some(as_login), true)?,
        Ok(super::run_user::Standing::Marked)
    );
    if withdraw && marked {
        fossil.user_capabilities(repo.path(), user, "")?;
    }
    Ok(batch.artifacts[0].1.clone())
}

/// The response as it would be written, without storing it.
pub fn compose(
    repo: &Repository,
    record: &StandingRecord,
    as_login: &str,
    outcome: &str,
    note: &str,
) -> Result<Batch, FossilError> {
    let response = Response {
        ocx: message::VERSION,
        kind: "response".into(),
        node: record.record.node.clone(),
        answers: record.hash.clone(),
        outcome: outcome.into(),
        note: note.into(),
    };
    let fields = serde_json::to_value(&response).unwrap_or_default();
    let text = format!(
        "OCX response: the run of this record ended: {outcome}.\n\n{}",
        message::write(fields.as_object().expect("an object"))
    );
    let mut batch = Batch::default();
    place::compose_message(
        &mut batch,
        repo.hash_policy()?,
        as_login,
        &Where::At(record.place.clone()),
        &text,
        "response",
    );
    Ok(batch)
}

/// The node's configuration and repository, opened.
pub fn open(root: &std::path::Path) -> Option<(NodeConfig, Fossil, Repository)> {
    let cfg = NodeConfig::load(root)?;
    let fossil = Fossil::at(&cfg.fossil).ok()?;
    let repo = Repository::open(&cfg.repository).ok()?;
    Some((cfg, fossil, repo))
}
