//! `node`: starts the node's process for this repository (answering
//! `lost` for each open session whose watcher is gone), detached or in the
//! foreground (for systemd and the like), or stops it, saying which runs
//! still go (runs outlive their node) or ending them too, or shows the
//! last events of its log, a line each. A node started as
//! root is refused when another node of the host holds host uids
//! overlapping its `run_uids`.

use crate::answer::Op;
use crate::node::{self, config::NodeConfig};
use crate::stop::{Stop, StopKind};
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to do.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NodeAction {
    /// Start the node (if it is not running) after answering `lost` for runs whose watcher is gone.
    Start,
    /// Stop the node's process (runs go on; their watchers answer them).
    Stop,
    /// Show the last events of the node's log, a line each (`--json`: the events themselves).
    Log,
}

/// Input of `node`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// start or stop.
    pub action: NodeAction,
    /// With start: run the node in this process until it is killed, its log on stderr too (for systemd and the like); exits non-zero on a fatal error.
    #[serde(default)]
    pub foreground: bool,
    /// With stop: end every run still going too, each answered `stopped` with a note saying its node ended it.
    #[serde(default)]
    pub runs: bool,
    /// With log: how many of the last events to show (20 unless given).
    #[serde(default)]
    pub last: Option<usize>,
    /// With start: the loopback address to serve the node's metrics at, for Prometheus (127.0.0.1:PORT), kept in its configuration; `off` serves none.
    #[serde(default)]
    pub metrics: Option<String>,
    /// With start: the OTLP/HTTP endpoint to send each run's trace to (http://HOST:4318), kept in its configuration; `off` sends none.
    #[serde(default)]
    pub otlp: Option<String>,
}

/// How many events `node log` shows unless told.
const LAST: usize = 20;

/// What `node` did.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The node's root directory.
    pub root: String,
    /// The records answered `lost`.
    pub lost: Vec<String>,
    /// Whether the node's process runs now.
    pub running: bool,
    /// The runs still going (records), which outlive their node; `--runs` ends them.
    pub runs: Vec<String>,
    /// The runs this call ended, each answered `stopped`.
    pub ended: Vec<String>,
    /// What start found of the node's served URL: where it serves no OCX
    /// page, runs that hold their password cannot learn who sent what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// With log: the log's last lines, oldest first: each an event, or
    /// the text of a line that holds none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<Vec<node::log::Logged>>,
}

/// The `node` tool.
pub struct NodeTool;

impl Tool for NodeTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "node";
    const SUMMARY: &'static str = "Start the node's process (answering `lost` for runs whose watcher is gone), stop it, or show its log's last events.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;

    fn text(output: &Output) -> String {
        match &output.log {
            Some(lines) => lines.iter().map(|l| l.line() + "\n").collect(),
            None => crate::answer::value_text(&serde_json::to_value(output).unwrap_or_default()),
        }
    }

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let (root, cfg) = node_root(call)?;
        check_flags(&input)?;
        let cfg = configure(&root, cfg, &input, call)?;
        match input.action {
            NodeAction::Log => log(&root, input.last.unwrap_or(LAST)),
            NodeAction::Stop => stop(&root, input.runs, call),
            NodeAction::Start if input.foreground && !call.dry_run => start_foreground(&root),
            NodeAction::Start => start(&root, &cfg, call),
        }
    }
}

/// The node's root and configuration, refused when the repository is no
/// node or its root holds no configuration.
fn node_root(call: &Call) -> Result<(PathBuf, NodeConfig), Stop> {
    let repo = call.repo()?;
    let root = node::root_of(repo)
        .map_err(Stop::internal)?
        .or_else(|| node::machine_root(repo))
        .ok_or_else(|| {
            Stop::new("this repository is no node").next(format!(
                "install the hook first ({}, URL where it is served), or enrol this clone as an agent machine (ocx machine URL --repository CLONE)",
                super::as_run_next(call, "ocx hook install --url URL")
            ))
        })?;
    let cfg = NodeConfig::load(&root).ok_or_else(|| {
        Stop::new(format!(
            "the node's root {} holds no node.json",
            root.display()
        ))
        .next(format!(
            "run {} again",
            super::as_run_next(call, "ocx hook install --url URL")
        ))
    })?;
    Ok((root, cfg))
}

/// Each flag refused unless given with the action it is for.
fn check_flags(input: &Input) -> Result<(), Stop> {
    if input.foreground && input.action != NodeAction::Start {
        return Err(
            Stop::field("foreground", "is for start only").next("ocx node start --foreground")
        );
    }
    if input.runs && input.action != NodeAction::Stop {
        return Err(Stop::field("runs", "is for stop only").next("ocx node stop --runs"));
    }
    if input.last.is_some() && input.action != NodeAction::Log {
        return Err(Stop::field("last", "is for log only").next("ocx node log --last 50"));
    }
    if input.metrics.is_some() && input.action != NodeAction::Start {
        return Err(Stop::field("metrics", "is for start only")
            .next("ocx node start --metrics 127.0.0.1:9464"));
    }
    if input.otlp.is_some() && input.action != NodeAction::Start {
        return Err(Stop::field("otlp", "is for start only")
            .next("ocx node start --otlp http://127.0.0.1:4318"));
    }
    Ok(())
}

/// The node's configuration with the metrics' address and the OTLP
/// endpoint start was given, kept under `root` (a node already running
/// takes a new address when it starts again); each refused naming its
/// field when it is none.
fn configure(
    root: &Path,
    cfg: NodeConfig,
    input: &Input,
    call: &mut Call,
) -> Result<NodeConfig, Stop> {
    let mut new = cfg.clone();
    if let Some(m) = input.metrics.as_deref() {
        new.metrics = match m {
            "off" => None,
            m => Some(metrics_address(m)?),
        };
    }
    if let Some(o) = input.otlp.as_deref() {
        new.otlp = match o {
            "off" => None,
            o => Some(otlp_endpoint(o)?),
        };
    }
    if new == cfg {
        return Ok(cfg);
    }
    if !call.dry_run {
        new.save(root).map_err(|e| {
            Stop::failed(format!(
                "cannot write {}: {e}",
                NodeConfig::file(root).display()
            ))
        })?;
    }
    call.log(Op::Fossil {
        operation: format!(
            "keep the metrics' address and the OTLP endpoint in {}",
            NodeConfig::file(root).display()
        ),
        done: !call.dry_run,
    });
    Ok(new)
}

/// `metrics`' address: an IP address and port on the loopback, so only
/// this host reads what the node's runs spend.
fn metrics_address(text: &str) -> Result<std::net::SocketAddr, Stop> {
    let next = "ocx node start --metrics 127.0.0.1:9464";
    let addr: std::net::SocketAddr = text.parse().map_err(|_| {
        Stop::field(
            "metrics",
            format!("{text:?} is no address and port (127.0.0.1:PORT)"),
        )
        .next(next)
    })?;
    if !addr.ip().is_loopback() {
        return Err(Stop::field(
            "metrics",
            format!("{addr} is not on the loopback: the metrics are served to this host alone"),
        )
        .next(next));
    }
    Ok(addr)
}

/// `otlp`'s endpoint: an http or https URL, its traces path added where
/// the URL names none.
fn otlp_endpoint(text: &str) -> Result<String, Stop> {
    let next = "ocx node start --otlp http://127.0.0.1:4318";
    let url = url::Url::parse(text)
        .map_err(|e| Stop::field("otlp", format!("{text:?} is no URL: {e}")).next(next))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Stop::field(
            "otlp",
            format!("{text:?} is no http or https URL of a collector"),
        )
        .next(next));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Stop::field(
            "otlp",
            "holds a password: the node's configuration keeps no secret",
        )
        .next(next));
    }
    Ok(match url.path() {
        "" | "/" => format!(
            "{}v1/traces",
            url.as_str().trim_end_matches('/').to_string() + "/"
        ),
        _ => url.to_string(),
    })
}

/// Whether the node's process at `root` runs: its lock is held.
fn running(root: &Path) -> bool {
    matches!(node::lock(&root.join("node.lock"), false), Ok(None))
}

/// The node's report with nothing else in it: its root and whether it runs.
fn report(root: &Path) -> Output {
    Output {
        root: root.display().to_string(),
        lost: Vec::new(),
        running: running(root),
        runs: Vec::new(),
        ended: Vec::new(),
        warning: None,
        log: None,
    }
}

/// The last `last` events of the node's log.
fn log(root: &Path, last: usize) -> Result<Output, Stop> {
    let log = node::log::last(root, last).map_err(|e| {
        Stop::failed(format!(
            "cannot read {}: {e}",
            node::log::file(root).display()
        ))
    })?;
    Ok(Output {
        log: Some(log),
        ..report(root)
    })
}

/// The node's process stopped (told to, then waited for up to 5 seconds)
/// and, with `runs`, each of its runs ended; the runs still going named.
fn stop(root: &Path, runs: bool, call: &mut Call) -> Result<Output, Stop> {
    if !call.dry_run
        && let Some(pid) = std::fs::read_to_string(root.join("node.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        && running(root)
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        let until = Instant::now() + Duration::from_secs(5);
        while running(root) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    call.log(Op::Fossil {
        operation: "stop the node's process".into(),
        done: !call.dry_run,
    });
    let mut ended = Vec::new();
    if runs {
        for (record, dir) in node::runs_going(root) {
            let done = !call.dry_run && node::end_run(&dir);
            call.log(Op::Fossil {
                operation: format!("end the run of {record}, answered stopped"),
                done,
            });
            if done {
                ended.push(record);
            }
        }
    }
    Ok(Output {
        runs: node::runs_going(root).into_iter().map(|(r, _)| r).collect(),
        ended,
        ..report(root)
    })
}

/// The node run in this process until it stops, unless one runs already.
fn start_foreground(root: &Path) -> Result<Output, Stop> {
    if running(root) {
        return Err(Stop::new(format!(
            "a node's process runs at {} already",
            root.display()
        ))
        .next("stop it first: ocx node stop"));
    }
    node::daemon::run_foreground(root).map_err(|e| {
        Stop::failed(format!("the node stopped: {e}")).next("see its log: ocx node log")
    })?;
    Ok(Output {
        running: false,
        ..report(root)
    })
}

/// The node's process started, detached, unless it runs already: first
/// `lost` answered for each open session whose watcher is gone.
fn start(root: &Path, cfg: &NodeConfig, call: &mut Call) -> Result<Output, Stop> {
    if call.dry_run {
        call.log(Op::Fossil {
            operation: "answer lost for each open session whose watcher is gone".into(),
            done: false,
        });
        call.log(Op::Fossil {
            operation: "start the node's process".into(),
            done: false,
        });
        return Ok(Output {
            warning: super::served::page_warning(&cfg.url),
            ..report(root)
        });
    }
    let lost = node::daemon::sweep_lost(root).map_err(Stop::from)?;
    for e in &lost {
        call.log(Op::Fossil {
            operation: e.line(),
            done: true,
        });
    }
    let lost = lost.into_iter().filter_map(|e| e.record).collect();
    if !running(root) {
        spawn_node(root, cfg)?;
    }
    call.log(Op::Fossil {
        operation: "start the node's process".into(),
        done: true,
    });
    Ok(Output {
        lost,
        warning: super::served::page_warning(&cfg.url),
        ..report(root)
    })
}

/// The node's process started detached, its host uids claimed first, its
/// output appended to its log; waited for up to 10 seconds to listen.
fn spawn_node(root: &Path, cfg: &NodeConfig) -> Result<(), Stop> {
    drop(
        node::daemon::claim_uids(root, cfg).map_err(|e| match e.kind() {
            StopKind::Failed => Stop::from(e),
            StopKind::Refused => Stop::field("run_uids", e.to_string()).next(format!(
                "set run_uids in {} to a range no other node holds, or remove it to have one picked",
                NodeConfig::file(root).display()
            )),
        })?,
    );
    let log = crate::node::spawn::own_log(&node::log::file(root))
        .map_err(|e| Stop::failed(e.to_string()))?;
    let args = [
        "node-daemon".into(),
        "--root".into(),
        root.to_path_buf().into(),
    ];
    crate::node::spawn_own(&cfg.ocx, &args, log)
        .map_err(|e| Stop::failed(format!("cannot start the node: {e}")))?;
    let until = Instant::now() + Duration::from_secs(10);
    while !(running(root) && NodeConfig::socket(root).exists()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
