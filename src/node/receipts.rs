//! Who received what, and what that login may do: asked of the served
//! repository itself (its own `rcvfrom` receipts and user table) or of its
//! server over HTTP (OCX's page's `receipt`, [`AT_ONCE`] artifacts at a
//! time, each received one asked once while it is kept). The rule
//! "believe the served repository's receipt" lives here once: a clone's
//! own receipts name whoever pulled, so a reader in a clone, and an agent
//! machine's node, reach only the server's ([`Receipts::of`],
//! [`Receipts::of_node`]).

use super::NodeError;
use super::config::NodeConfig;
use super::page::{Page, PageError};
use super::runner::{self, RunnerPage};
use super::wake::PlaceKey;
use crate::fossil::Repository;
use crate::fossil::caps::Capabilities;
use crate::fossil::repo::Said;
use crate::place::Place;
use crate::protocol::found::{self, Found, Sender, StandingRecord};
use crate::protocol::kinds::{Kind, Message};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// At most this many artifacts are asked of a server at once.
pub const AT_ONCE: usize = 64;

/// At most this many receipts a server told of are kept: past it, those
/// kept are forgotten and asked again when needed, so a wake reading every
/// artifact again holds no more than a few batches' worth.
const KEPT_AT_MOST: usize = 4096;

/// One artifact's receipt: whether it was received, from which login, and
/// what that login may do there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Received {
    /// The hash asked about.
    pub hash: String,
    /// Whether the repository received it (a phantom it has only heard of was not).
    pub received: bool,
    /// The login its receipt names: its sender.
    pub user: Option<String>,
    /// That login's capabilities, inherited ones included.
    pub capabilities: Option<String>,
    /// Whether that login speaks for a node there: the repository's own
    /// node's login, or an agent machine's `approve --node` marked.
    pub node: bool,
    /// The receipt's number.
    pub rcvid: Option<i64>,
    /// The artifact's row, which orders the artifacts of one receipt.
    pub rid: Option<i64>,
    /// Whether the artifact is private (an unmoderated post, say); known
    /// of the served repository alone, never said over HTTP.
    #[serde(skip)]
    #[schemars(skip)]
    pub private: bool,
}

impl Received {
    /// The receipt of `hash` where it was not received.
    pub fn unreceived(hash: &str) -> Received {
        Received {
            hash: hash.to_string(),
            ..Received::default()
        }
    }

    /// Its sender, when it was received.
    pub fn sender(&self) -> Option<&str> {
        self.user.as_deref().filter(|_| self.received)
    }

    /// Whether it was received from a login holding admin or setup there.
    pub fn from_admin(&self) -> bool {
        self.sender().is_some()
            && self
                .capabilities
                .as_deref()
                .is_some_and(|c| Capabilities::exact(c).is_admin())
    }

    /// Where it stands in the received order (receipt, then row); `None`
    /// when it was not received.
    pub fn order(&self) -> Option<(i64, i64)> {
        self.received
            .then(|| (self.rcvid.unwrap_or(0), self.rid.unwrap_or(0)))
    }
}

/// What the page's `receipt` answers.
#[derive(Deserialize)]
struct Answered {
    #[serde(default)]
    artifacts: Vec<Received>,
    #[serde(default)]
    capabilities_of: Option<CapabilitiesOf>,
}

#[derive(Deserialize)]
struct CapabilitiesOf {
    capabilities: Option<String>,
}

/// The served repository's server, asked over HTTP through OCX's page:
/// unsigned for a person's clone, signed in as an agent machine's login.
/// What it says is kept until a wake forgets it: a receipt never changes
/// once the artifact is received, but what its sender may do does, so a
/// node that keeps its server between wakes forgets it at each; it keeps
/// [`KEPT_AT_MOST`] receipts at most.
pub struct Server {
    page: Page,
    kept: Mutex<HashMap<String, Received>>,
    capabilities: Mutex<HashMap<String, Option<Capabilities>>>,
    /// What its `wait` told last, for the next wake to believe rather
    /// than ask ([`Server::told`]).
    told: Mutex<Option<Vec<Received>>>,
}

impl Server {
    /// The server whose page is `page`.
    pub fn new(page: Page) -> Server {
        Server {
            page,
            kept: Mutex::new(HashMap::new()),
            capabilities: Mutex::new(HashMap::new()),
            told: Mutex::new(None),
        }
    }

    /// The server of the agent machine node `cfg`, signed in as its login;
    /// `None` for a node on the served repository.
    pub fn of(cfg: &NodeConfig) -> Result<Option<Server>, NodeError> {
        let Some(m) = &cfg.machine else {
            return Ok(None);
        };
        let (login, password) = super::machine::read_credentials(&m.credentials)?;
        let page = Page::signed_in(&cfg.url, &login, &password, Duration::from_secs(75));
        Ok(Some(Server::new(page)))
    }

    /// Forgets every receipt and capability it was told, keeping its page
    /// (and the login cookie it holds), so what is asked next is asked anew.
    fn forget(&self) {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Keeps `received`, the receipts its `wait` answered with just now,
    /// for the next wake to believe without asking: what came, from whom,
    /// and what they may do now. One that names no artifact by a full
    /// hash is passed over. What a wake under way holds is left as it is.
    pub fn told(&self, received: Vec<Received>) {
        let received = received
            .into_iter()
            .filter(|r| crate::stop::full_hash("received", &r.hash).is_ok())
            .collect();
        *self.told.lock().unwrap_or_else(|e| e.into_inner()) = Some(received);
    }

    /// Readies it for a wake: it forgets what it was told before, keeping
    /// only what its `wait` told since the last wake.
    fn ready_for_wake(&self) {
        self.forget();
        let told = self.told.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(told) = told {
            self.keep(told);
        }
    }

    /// Keeps what the server said of these receipts, and of their senders.
    /// Past [`KEPT_AT_MOST`], those kept before are forgotten.
    fn keep(&self, said: Vec<Received>) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() + said.len() > KEPT_AT_MOST {
            kept.clear();
        }
        let mut caps = self.capabilities.lock().unwrap_or_else(|e| e.into_inner());
        for r in said {
            if let (Some(u), Some(c)) = (&r.user, &r.capabilities) {
                caps.insert(u.clone(), Some(Capabilities::exact(c)));
            }
            if r.received {
                kept.insert(r.hash.clone(), r);
            }
        }
    }

    /// Its page.
    pub fn page(&self) -> &Page {
        &self.page
    }

    /// The server's address, no trailing `/`.
    pub fn url(&self) -> &str {
        self.page.url()
    }

    /// The receipts of `hashes`, in the order asked.
    pub fn received(&self, hashes: &[String]) -> Result<Vec<Received>, PageError> {
        let mut known: HashMap<String, Received> = HashMap::new();
        let asked: Vec<String> = {
            let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let mut asked = Vec::new();
            for h in hashes {
                match kept.get(h) {
                    Some(r) => {
                        known.insert(h.clone(), r.clone());
                    }
                    None => asked.push(h.clone()),
                }
            }
            asked.sort();
            asked.dedup();
            asked
        };
        for chunk in asked.chunks(AT_ONCE) {
            let got: Answered = self.page.call("receipt", &json!({ "artifacts": chunk }))?;
            let said = got.artifacts;
            if said.len() != chunk.len() || said.iter().zip(chunk).any(|(r, h)| &r.hash != h) {
                return Err(PageError::Unreachable {
                    server: self.url().to_string(),
                    why: "its receipt answered for other artifacts than those asked, or in another order".into(),
                });
            }
            known.extend(
                said.iter()
                    .filter(|r| r.received)
                    .map(|r| (r.hash.clone(), r.clone())),
            );
            self.keep(said);
        }
        Ok(hashes
            .iter()
            .map(|h| {
                known
                    .get(h)
                    .cloned()
                    .unwrap_or_else(|| Received::unreceived(h))
            })
            .collect())
    }

    /// What `login` may do on the server, as it grants it now.
    fn capabilities(&self, login: &str) -> Result<Option<Capabilities>, PageError> {
        if let Some(c) = self
            .capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(login)
        {
            return Ok(c.clone());
        }
        let got: Answered = self.page.call(
            "receipt",
            &json!({ "artifacts": [], "capabilities_of": login }),
        )?;
        let caps = got
            .capabilities_of
            .and_then(|c| c.capabilities)
            .map(|c| Capabilities::exact(&c));
        self.capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(login.to_string(), caps.clone());
        Ok(caps)
    }

    /// Whether the server lets one unsigned read its receipts: its
    /// `receipt` gives nobody's capabilities only to a caller holding Read (o).
    pub fn unsigned_may_read(&self) -> bool {
        self.capabilities("nobody").is_ok_and(|c| c.is_some())
    }
}

/// What a wake of the node's daemon asks who received what: the served
/// repository itself, or, on an agent machine, its server, which the
/// daemon keeps signed in for its life.
#[derive(Clone, Copy)]
pub enum Asks<'a> {
    /// The node serves its repository: its own receipts.
    Served,
    /// The node is an agent machine: its server's receipts.
    Machine(&'a Server),
}

/// Where receipts are read.
enum Source<'a> {
    /// The served repository itself.
    Served(&'a Repository),
    /// Its server, over HTTP, made for these receipts.
    Server(Box<Server>),
    /// Its server, over HTTP, kept by whoever lent it (the node's daemon).
    Lent(&'a Server),
}

/// Who received what, and what they may do: the served repository's own
/// receipts, or its server's. Made only by [`Receipts::served`] for the
/// repository a server serves, and by [`Receipts::of`] and
/// [`Receipts::of_node`], which give a clone its server's and nothing else.
pub struct Receipts<'a> {
    from: Source<'a>,
}

impl<'a> Receipts<'a> {
    /// The receipts of `repo`, the repository its server serves (the
    /// node's, the page's, or one named outright).
    pub fn served(repo: &'a Repository) -> Receipts<'a> {
        Receipts {
            from: Source::Served(repo),
        }
    }

    /// The receipts of `server`, asked over HTTP.
    pub fn server(server: Server) -> Receipts<'a> {
        Receipts {
            from: Source::Server(Box::new(server)),
        }
    }

    /// The receipts node `cfg` believes, `repo` its repository: its own on
    /// the served repository; on an agent machine, its server's, signed in.
    pub fn of_node(cfg: &NodeConfig, repo: &'a Repository) -> Result<Receipts<'a>, NodeError> {
        Ok(match Server::of(cfg)? {
            Some(s) => Receipts::server(s),
            None => Receipts::served(repo),
        })
    }

    /// The receipts a wake of node `cfg` believes, `repo` its repository,
    /// as `asks` says: the served repository's own, or an agent machine's
    /// server the daemon keeps signed in for its life, forgetting what it
    /// was told before its last `wait` answered (each wake learns anew
    /// what a sender may do). Refused when `cfg`, read anew at each wake,
    /// no longer says the node is what its daemon was started as.
    pub fn of_wake(
        cfg: &NodeConfig,
        repo: &'a Repository,
        asks: Asks<'a>,
    ) -> Result<Receipts<'a>, NodeError> {
        match (asks, &cfg.machine) {
            (Asks::Served, None) => Ok(Receipts::served(repo)),
            (Asks::Machine(s), Some(_)) => {
                s.ready_for_wake();
                Ok(Receipts {
                    from: Source::Lent(s),
                })
            }
            (Asks::Served, Some(_)) => Err(NodeError::Reconfigured("an agent machine")),
            (Asks::Machine(_), None) => Err(NodeError::Reconfigured("no agent machine")),
        }
    }

    /// The receipts a reader of `repo` believes: its own when it is the
    /// served repository (`named` outright, its node's by OCX's hook, or
    /// remembering no server it was cloned from); else, in a clone, its
    /// server's, asked unsigned, each request answered within `within`.
    /// A clone whose server is not an http or https one is refused: its
    /// own receipts name whoever pulled.
    pub fn of(
        repo: &'a Repository,
        named: bool,
        within: Duration,
    ) -> Result<Receipts<'a>, NodeError> {
        if named || super::is_node(repo)? {
            return Ok(Receipts::served(repo));
        }
        let Some(remote) = repo.remote_url()? else {
            return Ok(Receipts::served(repo));
        };
        let server = crate::fossil::remote::page_of(&remote, &[])
            .map(|u| u.trim_end_matches('/').to_string())
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .ok_or_else(|| PageError::Unreachable {
                server: crate::fossil::redact_password(&remote),
                why: "it is no http or https server, so who sent what cannot be learned from it (this clone's own receipts name only whoever pulled)".into(),
            })?;
        Ok(Receipts::server(Server::new(Page::unsigned(
            &server, within,
        ))))
    }

    /// The server asked, when it is not the served repository itself.
    pub fn asked(&self) -> Option<&Server> {
        match &self.from {
            Source::Served(_) => None,
            Source::Server(s) => Some(s),
            Source::Lent(s) => Some(s),
        }
    }

    /// The receipts of `hashes`, in the order asked.
    pub fn received(&self, hashes: &[String]) -> Result<Vec<Received>, NodeError> {
        let repo = match &self.from {
            Source::Served(repo) => *repo,
            Source::Server(s) => return Ok(s.received(hashes)?),
            Source::Lent(s) => return Ok(s.received(hashes)?),
        };
        let own_node = found::node_login(&repo.server_code()?);
        let mut out = Vec::with_capacity(hashes.len());
        for hash in hashes {
            let Some(r) = repo.receipt(hash)? else {
                out.push(Received::unreceived(hash));
                continue;
            };
            let (capabilities, node) = match &r.login {
                Some(l) => (
                    repo.capabilities(l)?.map(|c| c.to_string()),
                    *l == own_node || repo.is_node_login(l)?,
                ),
                None => (None, false),
            };
            out.push(Received {
                hash: hash.clone(),
                received: true,
                user: r.login,
                capabilities,
                node,
                rcvid: Some(r.rcvid),
                rid: Some(r.rid),
                private: r.private,
            });
        }
        Ok(out)
    }

    /// The receipts of `hashes`, each asked once, by hash.
    pub fn by_hash(&self, hashes: &[String]) -> Result<HashMap<String, Received>, NodeError> {
        let mut asked = hashes.to_vec();
        asked.sort();
        asked.dedup();
        Ok(self
            .received(&asked)?
            .into_iter()
            .map(|r| (r.hash.clone(), r))
            .collect())
    }

    /// Who `hash` was received from, if it was received.
    pub fn sender(&self, hash: &str) -> Result<Option<String>, NodeError> {
        Ok(self
            .received(&[hash.to_string()])?
            .pop()
            .and_then(|r| r.sender().map(str::to_string)))
    }

    /// What `login` may do, as the served repository grants it now.
    pub fn capabilities(&self, login: &str) -> Result<Option<Capabilities>, NodeError> {
        Ok(match &self.from {
            Source::Served(repo) => repo.capabilities(login)?,
            Source::Server(s) => s.capabilities(login)?,
            Source::Lent(s) => s.capabilities(login)?,
        })
    }

    /// The response to record `record` (for node `node`) at `place`,
    /// read in `repo`, that counts by these receipts ([`response_of`]).
    pub fn response(
        &self,
        repo: &Repository,
        place: &Place,
        record: &str,
        node: &str,
    ) -> Result<Option<Found>, NodeError> {
        Ok(self
            .responses(repo, &[(place, record, node)])?
            .pop()
            .flatten())
    }

    /// [`Receipts::response`] of each record of `asked` (its place, its
    /// hash, its node), the receipts of all their places asked at once.
    pub fn responses(
        &self,
        repo: &Repository,
        asked: &[(&Place, &str, &str)],
    ) -> Result<Vec<Option<Found>>, NodeError> {
        // Each place is read once, however many of the records asked are
        // in it: a thread holding hundreds of records is not read again
        // for each. A record's place names its own post too, so places are
        // matched by their thread or ticket alone.
        let mut read: Vec<(&Place, Vec<Found>)> = Vec::new();
        let mut places = Vec::with_capacity(asked.len());
        let mut hashes = Vec::new();
        for (place, record, _) in asked {
            let key = PlaceKey::of(place);
            let at = match read.iter().position(|(p, _)| PlaceKey::of(p) == key) {
                Some(at) => at,
                None => {
                    read.push((place, found::at(repo, place)?));
                    read.len() - 1
                }
            };
            let here: Vec<Found> = read[at]
                .1
                .iter()
                .filter(|f| f.said.hash == *record || answers(f, record))
                .cloned()
                .collect();
            hashes.extend(here.iter().map(|f| f.said.hash.clone()));
            places.push(here);
        }
        hashes.sort_unstable();
        hashes.dedup();
        let got = self.by_hash(&hashes)?;
        Ok(asked
            .iter()
            .zip(places)
            .map(|((_, record, node), here)| {
                let here = in_received_order(&got, here, |f| &mut f.said);
                response_of(&got, record, node, here)
            })
            .collect())
    }

    /// Record `r`, read in `repo`, as these receipts say it was received:
    /// its sender theirs, and the response that counts by them.
    pub fn record_as_received(
        &self,
        repo: &Repository,
        r: &mut StandingRecord,
    ) -> Result<RecordReceived, NodeError> {
        let got = self.by_hash(std::slice::from_ref(&r.hash))?;
        resent(&got, &mut r.said);
        Ok(RecordReceived {
            received: got.get(&r.hash).is_some_and(|x| x.received),
            response: self.response(repo, &r.place, &r.hash, &r.record.node)?,
        })
    }

    /// Runner `name`'s page, read in `repo`: the newest of its versions
    /// received from a login holding admin or setup, when its first fenced
    /// JSON block reads.
    pub fn runner_page(
        &self,
        repo: &Repository,
        name: &str,
    ) -> Result<Option<RunnerPage>, NodeError> {
        Ok(self.runner(repo, name)?.page())
    }

    /// Runner `name` as this node finds it in `repo`: the counting version
    /// of its page read, or why it offers none.
    pub fn runner(&self, repo: &Repository, name: &str) -> Result<runner::Offered, NodeError> {
        let Some(counting) = self.counting_version(repo, &runner::page_name(name))? else {
            return Ok(runner::Offered::NoPage);
        };
        Ok(match runner::read_page(&counting.text) {
            Ok(p) => runner::Offered::Page(p),
            Err(p) => runner::Offered::Refused(p),
        })
    }

    /// The version of wiki page `page` that counts: the newest, in the
    /// order this repository (or the clone's server) received them, of
    /// those a login holding admin or setup sent; every other version is
    /// ignored, whatever date its writer gave it.
    pub fn counting_version(
        &self,
        repo: &Repository,
        page: &str,
    ) -> Result<Option<CountingVersion>, NodeError> {
        let mut versions = Vec::new();
        for (rid, _) in repo.wiki_versions_received(page)? {
            versions.push((rid, repo.hash_of(rid)?));
        }
        let hashes: Vec<String> = versions.iter().map(|(_, h)| h.clone()).collect();
        let got = self.by_hash(&hashes)?;
        let counting = versions
            .into_iter()
            .filter_map(|(rid, h)| {
                let r = got.get(&h).filter(|r| r.from_admin())?;
                Some((r.order()?, rid, h, r.sender()?.to_string()))
            })
            .max();
        let Some((_, rid, hash, sender)) = counting else {
            return Ok(None);
        };
        let parsed = repo.parsed(rid)?;
        let written = parsed
            .as_ref()
            .and_then(|p| p.arg(b'D'))
            .unwrap_or_default();
        let text = parsed.and_then(|p| p.text).unwrap_or_default();
        Ok(Some(CountingVersion {
            hash,
            sender,
            written,
            text,
        }))
    }
}

/// The version of a wiki page that counts ([`Receipts::counting_version`]).
#[derive(Debug, Clone)]
pub struct CountingVersion {
    /// Its full hash.
    pub hash: String,
    /// Who sent it, by receipt.
    pub sender: String,
    /// When its writer says it was written (its D card).
    pub written: String,
    /// Its text.
    pub text: Vec<u8>,
}

/// A record as the served repository received it.
pub struct RecordReceived {
    /// Whether the served repository received the record.
    pub received: bool,
    /// The response to it that counts there, if one does.
    pub response: Option<Found>,
}

/// `items` as the served repository received each (`got`, its receipts):
/// the sender of each one's `Said` the login its receipt names and its
/// receipt the served repository's (no one and none where it has not
/// received it), in its received order, what it has not received last.
pub fn in_received_order<T>(
    got: &HashMap<String, Received>,
    items: Vec<T>,
    said: impl Fn(&mut T) -> &mut Said,
) -> Vec<T> {
    let mut out: Vec<(Option<(i64, i64)>, T)> = items
        .into_iter()
        .map(|mut item| (resent(got, said(&mut item)), item))
        .collect();
    out.sort_by_key(|(order, _)| order.map_or((1, 0, 0), |(c, r)| (0, c, r)));
    out.into_iter().map(|(_, item)| item).collect()
}

/// `s` as the served repository received it (`got`): its sender and
/// receipt those of the receipt, none where it was not received; where it
/// stands in the received order.
pub fn resent(got: &HashMap<String, Received>, s: &mut Said) -> Option<(i64, i64)> {
    let r = got.get(&s.hash).filter(|r| r.received);
    s.from = r.and_then(|r| r.user.clone());
    s.rcvid = r.and_then(|r| r.rcvid).unwrap_or(0);
    r.and_then(Received::order)
}

/// Whether `f` is a response to record `record`.
fn answers(f: &Found, record: &str) -> bool {
    matches!(&f.kind, Kind::Known(Message::Response(resp)) if resp.answers == record)
}

/// Of `here`, the messages at a record's place in the received order, the
/// response to `record` (for node `node`) that counts by the receipts
/// `got`: one received from the node's login, that login speaking for a
/// node; or a `lost` received from an administrator once the run's wall
/// passed. What was not received counts for nothing.
pub fn response_of(
    got: &HashMap<String, Received>,
    record: &str,
    node: &str,
    here: Vec<Found>,
) -> Option<Found> {
    let received = |f: &Found| got.get(&f.said.hash).filter(|x| x.received);
    let kept: Vec<Found> = here
        .into_iter()
        .filter(|f| f.said.hash == record || (answers(f, record) && received(f).is_some()))
        .collect();
    let counted = found::counting_response(kept, record, node, |f| {
        let x = received(f);
        Ok::<_, std::convert::Infallible>(Sender {
            login: x.and_then(|x| x.user.clone()),
            admin: x.is_some_and(Received::from_admin),
            node: x.is_some_and(|x| x.node),
        })
    });
    match counted {
        Ok(found) => found,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_names_a_sender_and_a_place_in_order_only_when_received() {
        let from = |received: bool, caps: &str| Received {
            hash: "h".into(),
            received,
            user: Some("pat".into()),
            capabilities: Some(caps.into()),
            node: false,
            rcvid: Some(7),
            rid: Some(3),
            private: false,
        };
        assert_eq!(from(true, "ei").sender(), Some("pat"));
        assert_eq!(from(true, "ei").order(), Some((7, 3)));
        assert!(!from(true, "ei").from_admin());
        assert!(from(true, "s").from_admin());
        assert_eq!(
            from(false, "s").sender(),
            None,
            "an unreceived one has no sender"
        );
        assert!(!from(false, "s").from_admin());
        assert_eq!(from(false, "s").order(), None);
        assert_eq!(Received::unreceived("h").sender(), None);
    }

    #[test]
    fn a_receipt_said_over_http_never_says_it_is_private() {
        let mut r = Received::unreceived("h");
        r.private = true;
        let said = serde_json::to_value(&r).unwrap();
        assert!(said.get("private").is_none(), "{said}");
        let read: Received = serde_json::from_value(said).unwrap();
        assert!(!read.private);
    }
}
