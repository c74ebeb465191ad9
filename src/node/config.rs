//! What `ocx hook install` records for the node under its root directory:
//! the served repository, its URL, the `fossil` and `ocx` programs, the
//! node's own login, the host uids its runs run as, the ceiling on each
//! run's memory, processes and disk, the authorities its model relays
//! trust, where its metrics are served and its runs' traces sent, and
//! how long the page's server waits for its next request.
//! Operational state only: it may be lost, and
//! `ocx hook install` makes it again (keeping the uids and the ceiling).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The node's configuration, `ROOT/node.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeConfig {
    /// The served repository file, absolute.
    pub repository: PathBuf,
    /// The URL the repository is served at, which runs clone.
    pub url: String,
    /// The `fossil` program, absolute.
    pub fossil: PathBuf,
    /// The `ocx` program, absolute.
    pub ocx: PathBuf,
    /// The repository's server-code, by which records name this node.
    pub server_code: String,
    /// The node's own login.
    pub login: String,
    /// The host uids its runs run as, one each, when the node runs as root;
    /// when none is set, a free block is picked at start.
    #[serde(default)]
    pub run_uids: Option<crate::run::uids::UidRange>,
    /// The ceiling on each run's memory, processes and disk.
    #[serde(default)]
    pub ceiling: crate::run::Ceiling,
    /// The host paths a record from a sender without admin or setup (holding
    /// `R`) may bind into its run's sandbox, each with what lies under it; none
    /// unless set. An administrator's record binds what it names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindable: Vec<PathBuf>,
    /// A PEM file of certificate authorities its runs' model relays trust
    /// for their upstreams, beside the host's own (none unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ca: Option<PathBuf>,
    /// Set on an agent machine: `repository` is then a clone of the served
    /// repository at `url`, and `login` the machine's own login there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// How many days an ended run's transcript is kept (30 unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_days: Option<u64>,
    /// The loopback address the node serves its metrics at, for
    /// Prometheus (none unless set: `ocx node start --metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<std::net::SocketAddr>,
    /// The OTLP/HTTP endpoint each run's trace is sent to (none unless
    /// set: `ocx node start --otlp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<String>,
    /// How many seconds the page's server (`ocx page-server`) lives on
    /// after its last request for this repository ([`PAGE_IDLE`] unless
    /// set; at most [`PAGE_IDLE_MAX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_idle_seconds: Option<u64>,
}

/// How long the page's server lives on after its last request unless the
/// node's configuration says otherwise: a minute, so a page followed by
/// another is fast while a server no one asks gives its memory back.
pub const PAGE_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// The longest `page_idle_seconds` is taken to be: a day.
pub const PAGE_IDLE_MAX: std::time::Duration = std::time::Duration::from_secs(86_400);

/// What an agent machine's node keeps beside its configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Machine {
    /// The file keeping the machine's login and password (0600), as
    /// `register` wrote it.
    pub credentials: PathBuf,
}

/// The node's root directory for a repository: beside it, named for it.
pub fn default_root(repository: &Path) -> PathBuf {
    let mut name = repository.file_name().unwrap_or_default().to_os_string();
    name.push(".ocx-node");
    repository.with_file_name(name)
}

impl NodeConfig {
    /// The file it is kept in.
    pub fn file(root: &Path) -> PathBuf {
        root.join("node.json")
    }

    /// Reads it from `root`.
    pub fn load(root: &Path) -> Option<NodeConfig> {
        serde_json::from_slice(&std::fs::read(Self::file(root)).ok()?).ok()
    }

    /// What an operator set under `root` before (the run uids, the
    /// bindable paths, the ceiling), to be kept when the node's
    /// configuration is written anew; empty where nothing is kept.
    pub fn kept(root: &Path) -> NodeConfig {
        Self::load(root).unwrap_or_default()
    }

    /// Writes it under `root`, readable by its owner alone.
    pub fn save(&self, root: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(root)?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?;
        super::write_whole(
            &Self::file(root),
            &root.join("node.json.new"),
            &serde_json::to_vec_pretty(self).unwrap_or_default(),
        )
    }

    /// How long the page's server lives on after a request for this
    /// node's repository.
    pub fn page_idle(&self) -> std::time::Duration {
        self.page_idle_seconds
            .map_or(PAGE_IDLE, std::time::Duration::from_secs)
            .min(PAGE_IDLE_MAX)
    }

    /// The socket the node listens on for pokes.
    pub fn socket(root: &Path) -> PathBuf {
        root.join("node.sock")
    }

    /// Where the node's runs keep that this host holds the memory and the
    /// process controllers (`Ceiling::held_here_kept`).
    pub fn cgroups_held(root: &Path) -> PathBuf {
        root.join("cgroups-held.json")
    }

    /// Where the node keeps its runs' filesystems made ahead.
    pub fn disks(root: &Path) -> PathBuf {
        root.join("disks")
    }

    /// The directory of one record's run.
    pub fn run_dir(root: &Path, record: &str) -> PathBuf {
        root.join("runs").join(&record[..record.len().min(16)])
    }
}
