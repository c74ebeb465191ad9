//! An agent machine's node: the node on a clone of the served repository,
//! acting on the records addressed to the clone's server-code. It signs in
//! to the server with the machine's own login (a login cookie) for all it
//! reads there: who sent each artifact and what that login may do (the
//! server's `receipt`), the run's login and password (`run_login`), and the
//! long-poll `wait` that wakes it. Its responses are written in the clone
//! as the machine's login, pushed, and count only once the server's
//! receipt names that login; one not yet confirmed is kept under the root
//! and pushed again until it is, never written twice.

use super::config::NodeConfig;
use crate::fossil::caps::Capabilities;
use crate::fossil::store::{self, Batch};
use crate::fossil::{Fossil, FossilError, Repository};
use crate::place::Place;
use crate::protocol::found::{self, Found, StandingRecord};
use crate::protocol::kinds::{Kind, Message};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// OCX's page on the server.
pub const PAGE: &str = "ocx-cgi";

/// The capabilities an agent machine asks for: clone, read, check in (its
/// pushes need it), and post to the forum unmoderated.
pub const MACHINE_CAPABILITIES: &str = "gio24";

/// What can go wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// The server could not be reached, or answered otherwise than OCX.
    #[error("the server {server}: {why}")]
    Server { server: String, why: String },
    /// The server answered, refusing what was asked.
    #[error("the server {server} refused {tool}: {why}")]
    Refused {
        server: String,
        tool: String,
        why: String,
    },
    /// The credentials file could not be used.
    #[error("the credentials file {path}: {why}")]
    Credentials { path: String, why: String },
}

/// The machine's login as its credentials file keeps it.
#[derive(Deserialize)]
struct Credentials {
    user: String,
    #[serde(default)]
    password: Option<String>,
}

/// Reads the machine's login and password from `path`: never through a
/// link, and refused when anyone but its owner may read it.
pub fn read_credentials(path: &Path) -> Result<(String, String), MachineError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse = |why: String| MachineError::Credentials {
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

/// One artifact's receipt, as the server answers it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Receipt {
    pub hash: String,
    pub received: bool,
    pub user: Option<String>,
    pub capabilities: Option<String>,
}

/// The served repository, as the machine's login reaches it over HTTP.
pub struct Server {
    /// The server's address, no trailing `/`.
    pub url: String,
    /// The machine's login.
    pub login: String,
    password: String,
    agent: ureq::Agent,
    cookie: Mutex<Option<String>>,
    receipts: Mutex<HashMap<String, Receipt>>,
    capabilities: Mutex<HashMap<String, Option<Capabilities>>>,
}

impl Server {
    /// The server of the machine node `cfg`, signed in as its login.
    pub fn of(cfg: &NodeConfig) -> Result<Option<Server>, MachineError> {
        let Some(m) = &cfg.machine else {
            return Ok(None);
        };
        let (login, password) = read_credentials(&m.credentials)?;
        Ok(Some(Server::new(&cfg.url, &login, &password)))
    }

    /// The server at `url`, to be signed in to as `login`.
    pub fn new(url: &str, login: &str, password: &str) -> Server {
        let agent = crate::http::agent(Some(Duration::from_secs(75)));
        Server {
            url: url.trim_end_matches('/').to_string(),
            login: login.to_string(),
            password: password.to_string(),
            agent,
            cookie: Mutex::new(None),
            receipts: Mutex::new(HashMap::new()),
            capabilities: Mutex::new(HashMap::new()),
        }
    }

    fn failed(&self, why: impl std::fmt::Display) -> MachineError {
        MachineError::Server {
            server: self.url.clone(),
            why: why.to_string(),
        }
    }

    /// Signs in (Fossil's `/login`), keeping the login cookie it sets.
    fn sign_in(&self) -> Result<String, MachineError> {
        let response = self
            .agent
            .post(&format!("{}/login", self.url))
            .send_form([
                ("u", self.login.as_str()),
                ("p", self.password.as_str()),
                ("in", "Login"),
            ])
            .map_err(|e| self.failed(e))?;
        let cookie = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .find(|c| c.starts_with("fossil-") && c.contains('='))
            .map(str::to_string)
            .ok_or_else(|| {
                self.failed(format!(
                    "signing in as {} set no login cookie (HTTP {})",
                    self.login,
                    response.status().as_u16()
                ))
            })?;
        *self.cookie.lock().unwrap_or_else(|e| e.into_inner()) = Some(cookie.clone());
        Ok(cookie)
    }

    fn cookie(&self) -> Result<String, MachineError> {
        let kept = self
            .cookie
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match kept {
            Some(c) => Ok(c),
            None => self.sign_in(),
        }
    }

    /// Sends one request to OCX's page (signed in, signing in again once
    /// when the page does not know the cookie); its status and body.
    fn page(&self, path: &str, body: Option<&Value>) -> Result<(u16, String), MachineError> {
        let url = format!("{}/ext/{PAGE}/{path}", self.url);
        for attempt in 0..2 {
            let cookie = if attempt == 0 {
                self.cookie()?
            } else {
                self.sign_in()?
            };
            let sent = match body {
                Some(b) => self
                    .agent
                    .post(&url)
                    .header("Cookie", &cookie)
                    .header("Referer", &url)
                    .header("Content-Type", "application/json")
                    .send(b.to_string().as_bytes()),
                None => self.agent.get(&url).header("Cookie", &cookie).call(),
            };
            let mut response = sent.map_err(|e| self.failed(e))?;
            let status = response.status().as_u16();
            let text = response
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_string()
                .map_err(|e| self.failed(e))?;
            if attempt == 0 && (status == 401 || status == 403 || not_signed_in(&text)) {
                continue;
            }
            return Ok((status, text));
        }
        Err(self.failed(format!("it does not take {}'s sign-in", self.login)))
    }

    /// Calls `tool` on OCX's page with `input`: its result, or why not.
    fn call(&self, tool: &str, input: Value) -> Result<Value, MachineError> {
        let (status, text) = self.page(&format!("{tool}?json"), Some(&input))?;
        let answer: Value = serde_json::from_str(&text)
            .map_err(|_| self.failed(format!("its {tool} (HTTP {status}) is not OCX's answer")))?;
        if answer["ok"] == Value::Bool(true) {
            return Ok(answer["result"].clone());
        }
        Err(MachineError::Refused {
            server: self.url.clone(),
            tool: tool.to_string(),
            why: answer["stopped"]["reason"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string(),
        })
    }

    /// The long-poll: the highest receipt the server holds, answered as
    /// soon as it is past `after` or after `within` seconds.
    pub fn wait(&self, after: i64, within: u64) -> Result<i64, MachineError> {
        let (status, text) = self.page(&format!("wait?after={after}&within={within}"), None)?;
        if status != 200 {
            return Err(self.failed(format!("its wait answered HTTP {status}")));
        }
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["last"].as_i64())
            .ok_or_else(|| self.failed("its wait did not answer {\"last\": N}"))
    }

    /// The server's receipts of `hashes`, in order, asked 500 at a time;
    /// each once (a receipt never changes once the artifact is received).
    pub fn receipts(&self, hashes: &[String]) -> Result<Vec<Receipt>, MachineError> {
        let asked: Vec<String> = {
            let kept = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
            hashes
                .iter()
                .filter(|h| !kept.contains_key(*h))
                .cloned()
                .collect()
        };
        for chunk in asked.chunks(500) {
            let result = self.call("receipt", json!({"artifacts": chunk}))?;
            let got: Vec<Receipt> = serde_json::from_value(result["artifacts"].clone())
                .map_err(|_| self.failed("its receipt answered no artifacts"))?;
            if got.len() != chunk.len() || got.iter().zip(chunk).any(|(r, h)| &r.hash != h) {
                return Err(self.failed("its receipt answered other artifacts than asked"));
            }
            let mut kept = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
            let mut caps = self.capabilities.lock().unwrap_or_else(|e| e.into_inner());
            for r in got {
                if let (Some(u), Some(c)) = (&r.user, &r.capabilities) {
                    caps.insert(u.clone(), Some(Capabilities::exact(c)));
                }
                if r.received {
                    kept.insert(r.hash.clone(), r);
                }
            }
        }
        let kept = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
        Ok(hashes
            .iter()
            .map(|h| {
                kept.get(h).cloned().unwrap_or(Receipt {
                    hash: h.clone(),
                    ..Receipt::default()
                })
            })
            .collect())
    }

    /// Who the server received `hash` from, if it received it.
    pub fn sender(&self, hash: &str) -> Result<Option<String>, MachineError> {
        Ok(self
            .receipts(&[hash.to_string()])?
            .pop()
            .and_then(|r| r.user))
    }

    /// What `login` may do on the server, as it grants it now (kept for
    /// this wake).
    pub fn capabilities(&self, login: &str) -> Result<Option<Capabilities>, MachineError> {
        if let Some(c) = self
            .capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(login)
        {
            return Ok(c.clone());
        }
        let result = self.call(
            "receipt",
            json!({"artifacts": [], "capabilities_of": login}),
        )?;
        let caps = result["capabilities_of"]["capabilities"]
            .as_str()
            .map(Capabilities::exact);
        self.capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(login.to_string(), caps.clone());
        Ok(caps)
    }

    /// The run login's name and password for `record` addressed to this
    /// machine, as the served side made it; asked again for a few seconds
    /// while the server has not made it yet.
    pub fn run_login(&self, record: &str) -> Result<(String, String), MachineError> {
        let until = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            match self.call("run_login", json!({"record": record})) {
                Ok(v) => {
                    let user = v["user"].as_str().unwrap_or_default().to_string();
                    let password = v["password"].as_str().unwrap_or_default().to_string();
                    if user.is_empty() || password.is_empty() {
                        return Err(self.failed("its run_login answered no login"));
                    }
                    return Ok((user, password));
                }
                Err(e) if std::time::Instant::now() >= until => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        }
    }
}

/// Whether a page's text says the caller is not signed in (an answer
/// refusing nobody), so a fresh sign-in is worth one more try.
fn not_signed_in(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["stopped"]["reason"].as_str().map(str::to_string))
        .is_some_and(|r| r.contains("nobody") || r.contains("sign in"))
}

/// The response to `record` at `place` that counts, by the server's
/// receipts: one the server received from the record's node login, or a
/// `lost` from an administrator once the run's wall has passed.
pub fn response(
    repo: &Repository,
    server: &Server,
    place: &Place,
    record: &str,
    node: &str,
) -> Result<Option<Found>, NodeMachineError> {
    let node_user = found::node_login(node);
    let all = found::at(repo, place)?;
    let deadline = all
        .iter()
        .find(|f| f.said.hash == record)
        .and_then(|f| match &f.kind {
            Kind::Known(Message::Record(r)) => crate::protocol::kinds::wall_seconds(&r.budget.wall)
                .map(|w| f.said.when + w as f64 / 86400.0),
            _ => None,
        });
    let answers: Vec<Found> = all
        .into_iter()
        .filter(|f| matches!(&f.kind, Kind::Known(Message::Response(r)) if r.answers == record && r.node == node))
        .collect();
    let hashes: Vec<String> = answers.iter().map(|f| f.said.hash.clone()).collect();
    let receipts = server.receipts(&hashes)?;
    for (f, r) in answers.into_iter().zip(receipts) {
        let Some(from) = r.user.filter(|_| r.received) else {
            continue;
        };
        if from == node_user {
            return Ok(Some(f));
        }
        let lost = matches!(&f.kind, Kind::Known(Message::Response(x)) if x.outcome == "lost");
        let admin = server.capabilities(&from)?.is_some_and(|c| c.is_admin());
        if lost && admin && deadline.is_some_and(|d| f.said.when >= d) {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// What can go wrong reading or writing on an agent machine.
#[derive(Debug, thiserror::Error)]
pub enum NodeMachineError {
    #[error(transparent)]
    Fossil(#[from] FossilError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("the node's files: {0}")]
    Io(#[from] std::io::Error),
}

/// Runner `name`'s page in the clone: its newest version, in the clone's
/// order, that the server received from a login holding admin or setup.
pub fn runner_page(
    repo: &Repository,
    server: &Server,
    name: &str,
) -> Result<Option<super::runner::RunnerPage>, NodeMachineError> {
    let versions = repo.wiki_versions_received(&super::runner::page_name(name))?;
    let hashes: Vec<String> = versions
        .iter()
        .map(|(rid, _)| repo.hash_of(*rid))
        .collect::<Result<_, _>>()?;
    let receipts = server.receipts(&hashes)?;
    for ((rid, _), r) in versions.iter().zip(receipts) {
        let Some(from) = r.user.filter(|_| r.received) else {
            continue;
        };
        if server.capabilities(&from)?.is_some_and(|c| c.is_admin()) {
            let Some(text) = repo.parsed(*rid)?.and_then(|p| p.text) else {
                return Ok(None);
            };
            return Ok(super::runner::read_page(&text).ok());
        }
    }
    Ok(None)
}

/// The directory of responses written in the clone and not yet confirmed
/// by the server's receipt, one file each, named by the record.
fn unconfirmed_dir(root: &Path) -> PathBuf {
    root.join("unconfirmed")
}

/// A response kept until the server confirms it.
#[derive(Serialize, Deserialize)]
struct Unconfirmed {
    record: String,
    response: String,
}

/// Answers `record` with `outcome` and `note` as the machine's login: the
/// response this machine wrote already when there is one (never a second),
/// else a new one written in the clone; then pushed and confirmed. Answers
/// the response's hash and whether the server's receipt confirmed it; an
/// unconfirmed one is pushed again by [`push_unconfirmed`].
#[allow(clippy::too_many_arguments)]
pub fn respond(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
    server: &Server,
    record: &StandingRecord,
    outcome: &str,
    note: &str,
) -> Result<(String, bool), NodeMachineError> {
    let _lock = super::lock(&root.join("respond.lock"), true)?;
    let kept =
        kept_unconfirmed(root, &record.hash).filter(|h| repo.receipt(h).ok().flatten().is_some());
    let hash = match kept {
        Some(h) => h,
        None => match own_response(repo, server, record, &cfg.server_code).unwrap_or(None) {
            Some(h) => {
                keep_unconfirmed(root, &record.hash, &h)?;
                h
            }
            None => {
                let batch: Batch =
                    super::respond::compose(repo, record, &cfg.login, outcome, note)?;
                let hash = batch.artifacts[0].1.clone();
                keep_unconfirmed(root, &record.hash, &hash)?;
                store::store(fossil, repo, &cfg.login, &batch, true)?;
                hash
            }
        },
    };
    let confirmed = push_and_confirm(root, cfg, fossil, server, &record.hash, &hash);
    Ok((hash, confirmed))
}

/// The response to `record` this machine wrote already: one in the clone
/// that the server received from the machine's login, or has not received
/// at all (written here and not yet pushed).
fn own_response(
    repo: &Repository,
    server: &Server,
    record: &StandingRecord,
    node: &str,
) -> Result<Option<String>, NodeMachineError> {
    let answers: Vec<String> = found::at(repo, &record.place)?
        .into_iter()
        .filter(|f| matches!(&f.kind, Kind::Known(Message::Response(r)) if r.answers == record.hash && r.node == node))
        .map(|f| f.said.hash)
        .collect();
    for r in server.receipts(&answers)? {
        if !r.received || r.user.as_deref() == Some(server.login.as_str()) {
            return Ok(Some(r.hash));
        }
    }
    Ok(None)
}

/// The response to `record` kept as not yet confirmed, if any.
fn kept_unconfirmed(root: &Path, record: &str) -> Option<String> {
    let path = unconfirmed_dir(root).join(&record[..record.len().min(16)]);
    let kept: Unconfirmed = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (kept.record == record).then_some(kept.response)
}

fn keep_unconfirmed(root: &Path, record: &str, response: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = unconfirmed_dir(root);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let name = &record[..record.len().min(16)];
    let kept = Unconfirmed {
        record: record.to_string(),
        response: response.to_string(),
    };
    super::write_whole(
        &dir.join(name),
        &dir.join(format!(".{name}")),
        &serde_json::to_vec(&kept).unwrap_or_default(),
    )
}

/// Pushes the clone and asks the server's receipt of `response`: true
/// once it names the machine's login, and the kept file is then removed.
fn push_and_confirm(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    server: &Server,
    record: &str,
    response: &str,
) -> bool {
    if fossil.push_server(&cfg.repository).is_err() {
        return false;
    }
    let confirmed = server
        .receipts(&[response.to_string()])
        .ok()
        .and_then(|mut r| r.pop())
        .is_some_and(|r| r.received && r.user.as_deref() == Some(server.login.as_str()));
    if confirmed {
        let _ = std::fs::remove_file(unconfirmed_dir(root).join(&record[..record.len().min(16)]));
    }
    confirmed
}

/// Pushes again each response not yet confirmed; answers what it did.
pub fn push_unconfirmed(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    server: &Server,
) -> Vec<super::log::Event> {
    let Ok(entries) = std::fs::read_dir(unconfirmed_dir(root)) else {
        return Vec::new();
    };
    let mut done = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Some(kept) = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<Unconfirmed>(&b).ok())
        else {
            continue;
        };
        if push_and_confirm(root, cfg, fossil, server, &kept.record, &kept.response) {
            done.push(
                super::log::Event::new(
                    super::log::Done::Confirmed,
                    "the server holds the response pushed to it",
                )
                .record(&kept.record),
            );
        }
    }
    done
}

/// Whether responses wait for the server's receipt.
pub fn any_unconfirmed(root: &Path) -> bool {
    std::fs::read_dir(unconfirmed_dir(root)).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
    })
}

/// What `ocx status` shows of an agent machine: its last wake and pull.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Heard {
    /// When the server's wait last answered something new (UTC).
    pub last_wake: Option<String>,
    /// When the clone last pulled from the server (UTC).
    pub last_pull: Option<String>,
    /// Why the last wait or pull failed, when it did.
    pub last_failure: Option<String>,
    /// Whether the server's wait is refused, so the machine pulls once a minute.
    pub polling: bool,
}

impl Heard {
    fn file(root: &Path) -> PathBuf {
        root.join("heard.json")
    }
    /// What was heard last under `root`.
    pub fn load(root: &Path) -> Heard {
        std::fs::read(Self::file(root))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
    fn save(&self, root: &Path) {
        let _ = super::write_whole(
            &Self::file(root),
            &root.join("heard.json.new"),
            &serde_json::to_vec_pretty(self).unwrap_or_default(),
        );
    }
}

/// The machine's listener: keeps one long-poll open on the server's
/// `wait`, pulls when it answers something new and sends `wake`; when the
/// wait is refused or the server is away, pulls once a minute (trying
/// the wait again each time) and keeps waking for unconfirmed responses.
pub fn listen(root: &Path, cfg: &NodeConfig, server: &Server, wake: impl Fn() -> bool) {
    let Ok(fossil) = Fossil::at(&cfg.fossil) else {
        return;
    };
    let mut heard = Heard::load(root);
    let mut after: Option<i64> = None;
    let mut failures = 0u32;
    let mut pulled_at: Option<std::time::Instant> = None;
    loop {
        match server.wait(after.unwrap_or(0), 50) {
            Ok(last) => {
                failures = 0;
                heard.polling = false;
                if after.is_none_or(|a| last > a) {
                    heard.last_wake = Some(crate::fossil::artifact::now());
                    pull(&fossil, cfg, &mut heard, root);
                    pulled_at = Some(std::time::Instant::now());
                    after = Some(last);
                    if !wake() {
                        return;
                    }
                } else if super::machine::any_unconfirmed(root) && !wake() {
                    return;
                }
            }
            Err(e) => {
                failures += 1;
                heard.polling = true;
                heard.last_failure = Some(e.to_string());
                heard.save(root);
                if pulled_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    pull(&fossil, cfg, &mut heard, root);
                    pulled_at = Some(std::time::Instant::now());
                    if !wake() {
                        return;
                    }
                }
                after = None;
                std::thread::sleep(
                    Duration::from_secs(1u64 << failures.min(6)).min(Duration::from_secs(60)),
                );
            }
        }
    }
}

fn pull(fossil: &Fossil, cfg: &NodeConfig, heard: &mut Heard, root: &Path) {
    match fossil.pull_server(&cfg.repository) {
        Ok(()) => heard.last_pull = Some(crate::fossil::artifact::now()),
        Err(e) => heard.last_failure = Some(format!("pull: {e}")),
    }
    heard.save(root);
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

    #[test]
    fn a_page_refusing_nobody_asks_for_a_new_sign_in_and_nothing_else_does() {
        assert!(not_signed_in(
            r#"{"ok": false, "stopped": {"reason": "nobody may read here"}}"#
        ));
        assert!(!not_signed_in(r#"{"ok": true, "result": {}}"#));
        assert!(!not_signed_in("<html>"));
        assert!(!not_signed_in(""));
    }
}
