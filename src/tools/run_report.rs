//! `run_report`: an agent machine tells the served repository's node what
//! its run has said and spent, so the run's page on the server shows the
//! same as it would for a run of the node's own. Taken from the machine's
//! node login alone (on the page to a POST signed in as it), for a record
//! addressed to that machine: the entries are added to the run's
//! transcript under the node's root in the order numbered, each once
//! (those already kept are passed over, a gap is refused), and the spend
//! replaces the one kept. The machine masks every secret it knows before
//! it reports; what it reports is read as any visitor's input: typed,
//! bounded, and written nowhere but the run's own transcript.

use crate::node::config::NodeConfig;
use crate::node::transcript::{self, Entry, Spend};
use crate::protocol::found::node_login;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The one refusal of a caller it is not for, whatever was wrong.
pub const REFUSAL: &str = "no report of this record from this caller: the record is not addressed to an agent machine whose login you signed in as";

/// The most entries one report carries.
pub const ENTRIES_MAX: usize = 500;

/// The most bytes a run's transcript kept from reports grows to.
pub const KEPT_MAX: u64 = 64 << 20;

/// The lock a report holds while it adds to a run's transcript.
const REPORT_LOCK: &str = "report.lock";

/// Input of `run_report`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The record, by its full hash.
    #[schemars(extend("x-positional" = true))]
    pub record: String,
    /// The run's transcript entries, numbered on from those kept (at most 500).
    #[serde(default)]
    pub entries: Vec<Entry>,
    /// What the run has spent, as the machine last measured it.
    #[serde(default)]
    pub spend: Option<Spend>,
}

/// What the node keeps of the run now.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub record: String,
    /// The number of the last entry kept: the next report's entries
    /// follow it.
    pub kept: u64,
    /// How many of this report's entries were added (none on a dry run).
    pub added: usize,
}

/// The `run_report` tool.
pub struct RunReport;

impl Tool for RunReport {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "run_report";
    const SUMMARY: &'static str = "An agent machine's report of its run's transcript and spend, for the run's page on the server; to the machine's node login alone.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::SignedPost;

    fn text(o: &Output) -> String {
        format!(
            "record {}: {} entries added, {} kept",
            o.record, o.added, o.kept
        )
    }

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::logins::on_served(call, Self::NAME)?;
        crate::stop::full_hash("record", &input.record)?;
        if input.entries.len() > ENTRIES_MAX {
            return Err(Stop::field(
                "entries",
                format!("a report carries at most {ENTRIES_MAX} entries"),
            )
            .next("send the rest in the next report"));
        }
        let dir = run_dir_for_caller(call, &input.record)?;
        call.read(format!("the transcript kept for {}", &input.record[..16]));
        // Held from reading what is kept to writing what follows, so two
        // reports at once never both number on from the same entry.
        let _held = match call.dry_run {
            true => None,
            false => crate::node::lock(&dir.join(REPORT_LOCK), true)
                .map_err(|e| Stop::failed(format!("the run's transcript cannot be held: {e}")))?,
        };
        let kept = match transcript::last_seq(&dir) {
            Ok(n) => n,
            Err(transcript::TranscriptError::Missing) => 0,
            Err(e) => return Err(Stop::failed(e.to_string())),
        };
        let new = new_entries(&input.entries, kept)?;
        let lines = transcript::lines(new)
            .map_err(|e| Stop::failed(format!("the entries cannot be written out: {e}")))?;
        let size = std::fs::symlink_metadata(dir.join(transcript::FILE)).map_or(0, |m| m.len());
        if size + lines.len() as u64 > KEPT_MAX {
            return Err(Stop::field(
                "entries",
                format!(
                    "the run's transcript is kept to {} MiB, and is full",
                    KEPT_MAX >> 20
                ),
            )
            .next("the run's later entries stay on its machine"));
        }
        call.log(crate::answer::Op::Fossil {
            operation: format!(
                "keep {} entries and the spend of {}'s run",
                new.len(),
                &input.record[..16]
            ),
            done: !call.dry_run,
        });
        if call.dry_run {
            return Ok(Output {
                record: input.record,
                kept,
                added: 0,
            });
        }
        transcript::keep_reported(&dir, &lines)
            .map_err(|e| Stop::failed(format!("the run's transcript cannot be written: {e}")))?;
        if let Some(spend) = &input.spend {
            transcript::write_spend(&dir, spend)
                .map_err(|e| Stop::failed(format!("the run's spend cannot be written: {e}")))?;
        }
        Ok(Output {
            record: input.record,
            kept: kept + new.len() as u64,
            added: new.len(),
        })
    }
}

/// The run's directory under this node's root, made when it is not yet,
/// when the caller is the node login of the agent machine the record is
/// addressed to; else the one refusal.
fn run_dir_for_caller(call: &mut Call, record: &str) -> Result<std::path::PathBuf, Stop> {
    let refused =
        || Stop::new(REFUSAL).next("sign in as the agent machine's node login the record names");
    let caller = call.caller()?.clone();
    let repo = call.repo()?;
    if !caller.signed_in || !repo.is_node_login(&caller.login)? {
        return Err(refused());
    }
    let Some(receipt) = repo.receipt(record)? else {
        return Err(refused());
    };
    let Some(r) = crate::protocol::found::record(repo, receipt.rid, record)? else {
        return Err(refused());
    };
    if node_login(&r.record.node) != caller.login {
        return Err(refused());
    }
    let root = crate::node::hook::root_of(repo)?.ok_or_else(|| {
        Stop::new("this repository is no node here: there is no node's root to keep the report in")
            .next("report to the served repository whose node installed its hook")
    })?;
    let dir = NodeConfig::run_dir(&root, &r.hash);
    if !call.dry_run {
        crate::node::spool::make_run_dir(&dir)
            .map_err(|e| Stop::failed(format!("the run's directory cannot be made: {e}")))?;
    }
    Ok(dir)
}

/// The entries of `given` after `kept`, in order, each numbered one past
/// the one before; an entry kept already is passed over, a gap refused.
fn new_entries(given: &[Entry], kept: u64) -> Result<&[Entry], Stop> {
    let from = given
        .iter()
        .position(|e| e.seq > kept)
        .unwrap_or(given.len());
    let new = &given[from..];
    for (i, e) in new.iter().enumerate() {
        let next = kept.saturating_add(1 + i as u64);
        if e.seq != next {
            return Err(Stop::field(
                format!("entries[{}].seq", from + i),
                format!("is {}, where {next} comes next", e.seq),
            )
            .next("send the entries numbered on from the report's `kept`"));
        }
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::transcript::Said;

    fn entries(seqs: &[u64]) -> Vec<Entry> {
        seqs.iter()
            .map(|&seq| Entry {
                seq,
                at: "2026-12-05T00:00:00Z".into(),
                said: Said::Words { text: "w".into() },
            })
            .collect()
    }

    #[test]
    fn entries_kept_already_are_passed_over_and_a_gap_or_a_disorder_is_refused() {
        let seqs = |e: &[Entry]| e.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(
            seqs(new_entries(&entries(&[1, 2, 3]), 0).unwrap()),
            [1, 2, 3]
        );
        assert_eq!(
            seqs(new_entries(&entries(&[1, 2, 3, 4]), 2).unwrap()),
            [3, 4]
        );
        assert!(new_entries(&entries(&[1, 2]), 5).unwrap().is_empty());
        for (given, kept, field) in [
            (&[4, 5][..], 2, "entries[0].seq"),
            (&[3, 5], 2, "entries[1].seq"),
            (&[1, 3, 3], 2, "entries[2].seq"),
            (&[u64::MAX, 5], u64::MAX - 1, "entries[1].seq"),
        ] {
            let refused = new_entries(&entries(given), kept).unwrap_err();
            assert_eq!(refused.field.as_deref(), Some(field), "{given:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_numbering_reads_without_panic(
            seqs in proptest::collection::vec(proptest::num::u64::ANY, 0..20),
            kept in proptest::num::u64::ANY,
        ) {
            let _ = new_entries(&entries(&seqs), kept);
        }
    }
}
