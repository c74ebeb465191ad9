//! A run's life, in the order it is lived: its record's run prepared
//! ([`Watch::prepare`]: the runner's page, the run's uid, budget,
//! filesystem, workspace, tool socket, relay, home, MCP servers and
//! sandbox), its program started ([`Watch::start`]), given its first line
//! and each delivery ([`Watch::deliver`]), waited for and said how it
//! ended ([`Watch::end`]), and the record answered ([`Watch::answer`]).
//! Every way a run ends, started or not, comes to that one answer; only a
//! watcher that cannot go on answers nothing, and its node answers the
//! run as lost.

use super::home::{FreshHome, agents_md, fresh_home, repository_word};
use super::pause::{Gate, LimitsGiven, Pause};
use super::spend;
use super::ways::Ways;
use super::{
    Killed, RunLease, Site, WatchError, agent, feed, file, held, lease, named, no_password_broken,
    on_disk, on_terminal, prepare_without_password, private_log, run_scope, say, served_as, size,
    socket_ready, start_relay, typing, until_ended, watching, workspace,
};
use crate::context::{BRANCH_VAR, MCP_SOCKET_VAR, RECORD_VAR, RUN_USER_VAR, TURNS_VAR};
use crate::fossil::{Fossil, Repository};
use crate::node::config::NodeConfig;
use crate::node::inbox::{Delivery, escape};
use crate::node::runner::{InputMode, RunnerPage};
use crate::node::transcript::{Said, Transcript};
use crate::node::{self};
use crate::protocol::found::StandingRecord;
use crate::protocol::kinds;
use crate::protocol::money::{Money, cost_words};
use crate::run::egress::Refused;
use crate::run::relay::{ModelBudget, Relay, thousands};
use crate::run::terminal::{Joining, Pty};
use crate::run::{Disk, Ended, Limit, Plan, Program, Running, SandboxFields};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a run's record is answered: the response's outcome and its note.
pub(super) struct Outcome {
    outcome: &'static str,
    note: String,
}

/// Why a run's life ended before its program did.
enum Halt {
    /// The run could not start, or be held to its record: answered so.
    Answer(Outcome),
    /// The watcher cannot go on: it answers nothing.
    Fail(WatchError),
}

impl From<WatchError> for Halt {
    fn from(e: WatchError) -> Halt {
        Halt::Fail(e)
    }
}

/// A run answered `outcome`, saying `note`.
fn answered(outcome: &'static str, note: impl std::fmt::Display) -> Halt {
    Halt::Answer(Outcome {
        outcome,
        note: note.to_string(),
    })
}

/// A run that cannot be held to its record, saying why.
fn unenforced(why: impl std::fmt::Display) -> Halt {
    answered("unenforced", why)
}

/// A run whose program never started, saying why.
fn never(why: impl std::fmt::Display) -> Halt {
    answered("exited", format!("never started: {why}"))
}

/// One run as its watcher holds it.
struct Watch<'a> {
    root: &'a Path,
    cfg: &'a NodeConfig,
    fossil: &'a Fossil,
    repo: &'a Repository,
    receipts: &'a node::Receipts<'a>,
    r: &'a StandingRecord,
    dir: &'a Path,
    /// The connections the run's ways out refused, counted in its answer.
    refused: Refused,
    /// The run's transcript, where it can be kept.
    transcript: Option<Arc<Transcript>>,
    /// Its reports to its server, on an agent machine.
    reporter: Option<Arc<super::report::Reporter>>,
    /// Whether its deliveries go on to it, or wait while it is paused.
    gate: Gate,
    /// The wall and CPU time its record's sender gave it, paused there.
    given: LimitsGiven,
}

/// Watches the run of `r` in its directory `dir` through its life, holding
/// the run's lock, and answers its record.
pub(super) fn session(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
    receipts: &node::Receipts,
    r: &StandingRecord,
    dir: &Path,
) -> Result<(), WatchError> {
    let Some(_lock) = node::lock(&dir.join("lock"), false).map_err(file("the run's lock"))? else {
        return Err(WatchError::Cannot("another watcher holds this run"));
    };
    watching(dir)?;
    let (tx, deliveries) = std::sync::mpsc::channel::<String>();
    let inbox = dir.to_path_buf();
    let gate = Gate::default();
    let held = gate.clone();
    std::thread::spawn(move || {
        node::read_deliveries(&inbox, |line| {
            held.pass();
            tx.send(line).is_ok()
        })
    });
    let started = Instant::now();
    let transcript = Transcript::open(dir, known_secrets(root, dir))
        .ok()
        .map(Arc::new);
    let w = Watch {
        root,
        cfg,
        fossil,
        repo,
        receipts,
        r,
        dir,
        refused: Refused::default(),
        transcript,
        reporter: super::report::Reporter::of(cfg, &r.hash, dir).map(Arc::new),
        gate,
        given: LimitsGiven::default(),
    };
    match w.life(deliveries, started) {
        Ok(o) | Err(Halt::Answer(o)) => w.answer(o),
        Err(Halt::Fail(e)) => Err(e),
    }
}

/// The secrets the node knows that a run's transcript must never show: the
/// run's password and each credential the node keeps, by name.
fn known_secrets(root: &Path, dir: &Path) -> Vec<(String, String)> {
    let mut known: Vec<(String, String)> = node::credentials::names(root)
        .into_iter()
        .filter_map(|name| {
            let value = node::credentials::read(root, &name).ok()?;
            Some((format!("credential {name}"), String::from_utf8(value).ok()?))
        })
        .collect();
    if let Ok(password) = std::fs::read_to_string(dir.join("password")) {
        known.push(("the run's password".into(), password));
    }
    known
}

/// A run ready to start: all it is given and holds until it ends. Its
/// fields are dropped in the order they are written, the run's terminal
/// first and its uid last.
struct Prepared {
    terminal: Option<(Pty, Joining)>,
    /// The agent's turns pipe, for an agent's own interface.
    turns: Option<File>,
    /// The run's output log.
    out: File,
    plan: Plan,
    /// The run's MCP servers, as `mcpServers` names them.
    servers: Value,
    /// Where the page's homes are copied fresh.
    homes: PathBuf,
    home: FreshHome,
    relay: Option<Relay>,
    disk: Disk,
    lease: Option<RunLease>,
    page: RunnerPage,
    /// A no-password run's node socket.
    socket: Option<PathBuf>,
}

/// A run's program under way, and what the watcher holds of it.
struct Live {
    running: Running,
    prepared: Prepared,
    /// The joining of the run's terminal, once its lines are typed into it.
    joining: Option<Joining>,
    /// Why the agent's driver ended the run, when it did.
    ending: agent::Ending,
    /// What it spends, measured as it goes.
    measuring: spend::Measuring,
}

impl Watch<'_> {
    /// The run's life, from its record to how it ended.
    fn life(&self, deliveries: Receiver<String>, started: Instant) -> Result<Outcome, Halt> {
        let prepared = self.prepare()?;
        let mut live = self.start(prepared, started)?;
        self.deliver(&mut live, deliveries)?;
        self.end(live, started)
    }

    /// Prepares the run, in order: its runner's page, its uid, budget and
    /// filesystem, workspace and tool socket, relay and home, program and
    /// sandbox, and its input.
    fn prepare(&self) -> Result<Prepared, Halt> {
        let page = self.page()?;
        let lease = lease(self.root, self.dir).map_err(|e| unenforced(format!("run_uids: {e}")))?;
        let (mut sandbox, budget) = node::limits(&self.r.record);
        let budget = held(self.root, self.cfg, &budget).map_err(unenforced)?;
        let disk = on_disk(self.root, self.dir, &budget).map_err(unenforced)?;
        let ws = disk.path().join(crate::node::ahead::WORKSPACE);
        let socket = self.workspace(&ws)?;
        let relay = self.relay(&page, &ws)?;
        let home = FreshHome(disk.path().join("home"));
        let given = fresh_home(self.root, &home.0, &page).map_err(unenforced)?;
        if let Some(t) = &self.transcript {
            if let Some(relay) = &relay {
                t.mask_also("the relay's token", relay.token());
                t.count_turns(relay.meter(), self.dir);
            }
            for (name, value) in &given {
                t.mask_also(name, value);
            }
        }
        if page.input.is_claude() {
            repository_word(&home.0, &ws).map_err(|e| never(format!("the run's home: {e}")))?;
        }
        let ways = self.ways(&ws, relay.as_ref());
        let mut env = page.env.clone();
        env.extend(given);
        if let Some(w) = &ways {
            env.extend(w.env());
        }
        let (program, servers) =
            self.program(&page, &ws, &home, socket.as_deref(), relay.as_ref(), env)?;
        // OCX itself, for its MCP server and the forwarder inside: the program
        // alone, not the directory it lies in, which may be a build's, holding
        // everything the build made.
        sandbox.read_only.push(self.cfg.ocx.clone());
        let site = Site::of(self.cfg, self.root, &disk, lease.as_ref());
        let plan = self.plan(&site, &ws, &sandbox, &budget, &program)?;
        let homes = disk.path().join("homes");
        let mut prepared = Prepared {
            terminal: None,
            turns: None,
            out: private_log(&self.dir.join("output.log"), true)?,
            plan,
            servers,
            homes,
            home,
            relay,
            disk,
            lease,
            page,
            socket,
        };
        prepared.plan.copy_homes(&prepared.homes);
        self.input(&mut prepared, &ws, ways.as_ref())?;
        Ok(prepared)
    }

    /// The runner's page the record names, as counted when the record
    /// arrived; a run that asks `budget.tokens` of a page naming no model
    /// service, which alone counts them, or `budget.cost` of a page giving
    /// no prices to reckon it at, is refused.
    fn page(&self) -> Result<RunnerPage, Halt> {
        let runner = &self.r.record.runner;
        let page = match self.receipts.runner(self.repo, runner) {
            Ok(offered) => offered
                .counting(runner)
                .map_err(|p| unenforced(format!("{}: {}", p.field, p.reason)))?,
            Err(e) => {
                return Err(unenforced(format!(
                    "runner: the page sandbox/{runner} could not be read: {e}"
                )));
            }
        };
        if self.r.record.budget.tokens.is_some() && page.model.is_none() {
            return Err(unenforced(format!(
                "budget.tokens: the runner's page sandbox/{runner} names no model service, so nothing counts its tokens"
            )));
        }
        if self.r.record.budget.cost.is_some() && page.prices.is_none() {
            return Err(unenforced(format!(
                "budget.cost: the runner's page sandbox/{runner} gives no prices, so nothing reckons its cost"
            )));
        }
        Ok(page)
    }

    /// Prepares the run's workspace at `ws`; a no-password run's with its
    /// node socket served, answered once it is ready.
    fn workspace(&self, ws: &Path) -> Result<Option<PathBuf>, Halt> {
        let user = &self.r.record.user;
        let no_password = self.r.record.restrict.no_password == Some(true);
        let prepared = if no_password {
            prepare_without_password(self.fossil, self.cfg, ws, user)
        } else {
            workspace(self.fossil, self.cfg, self.dir, ws, user, None)
        };
        prepared.map_err(|e| never(format!("the workspace could not be prepared: {e}")))?;
        if !no_password {
            return Ok(None);
        }
        let socket = ws.join(".ocx").join("mcp.sock");
        let server = served_as(self.cfg, self.receipts, self.r, self.dir).map_err(never)?;
        let caller = crate::entry::mcp::Caller {
            repository: Some(self.cfg.repository.clone()),
            user: None,
            cwd: self.root.to_path_buf(),
            run: Some(crate::context::RunScope {
                server,
                ..run_scope(self.root, self.r)
            }),
        };
        let path = socket.clone();
        std::thread::spawn(move || crate::entry::mcp::serve_unix(&path, caller));
        let until = Instant::now() + Duration::from_secs(10);
        while !socket_ready(&socket) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !socket_ready(&socket) {
            return Err(never("the run's tool socket could not be made"));
        }
        Ok(Some(socket))
    }

    /// The run's model relay, when its runner's page names a model service.
    fn relay(&self, page: &RunnerPage, ws: &Path) -> Result<Option<Relay>, Halt> {
        let Some(m) = &page.model else {
            return Ok(None);
        };
        let (prices, budget) = (page.prices.clone(), &self.r.record.budget);
        let relay = start_relay(self.root, self.cfg, m, prices, budget, self.dir, ws);
        relay.map(Some).map_err(unenforced)
    }

    /// A `sandbox.hosts` run's ways out, the relay's passage among them.
    fn ways(&self, ws: &Path, relay: Option<&Relay>) -> Option<Ways> {
        let hosts = self.r.record.sandbox.hosts.as_ref()?;
        let mut w = Ways::plan(&self.cfg.url, hosts, &ws.join(".ocx"));
        if let Some(relay) = relay {
            w.pass(crate::run::egress::Passage {
                port: relay.port(),
                socket: relay.socket().to_path_buf(),
            });
        }
        Some(w)
    }

    /// The run's program (its command and variables, given `env` so far;
    /// its homes, and `home` its own) and its MCP servers, named in the
    /// workspace `ws` for its agent.
    fn program(
        &self,
        page: &RunnerPage,
        ws: &Path,
        home: &FreshHome,
        socket: Option<&Path>,
        relay: Option<&Relay>,
        mut env: BTreeMap<String, String>,
    ) -> Result<(Program, Value), Halt> {
        let r = self.r;
        env.insert(RUN_USER_VAR.into(), r.record.user.clone());
        env.insert(RECORD_VAR.into(), r.hash.clone());
        let mut command = page.command.clone();
        if let Some(relay) = relay {
            env.extend(relay.env());
            if matches!(
                page.input,
                InputMode::CodexAppServer | InputMode::CodexInteractive
            ) {
                command.extend(relay.codex_args());
            }
        }
        if let Some(socket) = socket {
            env.insert(MCP_SOCKET_VAR.into(), socket.display().to_string());
            if let Some(only) = &r.record.restrict.branch {
                env.insert(BRANCH_VAR.into(), only.clone());
            }
        }
        let servers = self.servers(&env, socket);
        let config = ws.join(".ocx").join("mcp.json");
        let written = std::fs::create_dir_all(ws.join(".ocx")).and_then(|()| {
            std::fs::write(
                &config,
                serde_json::to_vec_pretty(&json!({"mcpServers": servers})).unwrap_or_default(),
            )
        });
        written.map_err(|e| never(format!("the run's MCP servers could not be named: {e}")))?;
        command.extend(agent_words(page, &servers, &config));
        if r.record.remote {
            command.extend(page.remote.iter().cloned());
        }
        if page.input == InputMode::CodexInteractive {
            command.push(self.first_line());
        }
        let program = Program {
            command,
            env,
            homes: page
                .homes
                .iter()
                .filter(|h| h.starts_with('/'))
                .map(PathBuf::from)
                .collect(),
            home: Some(home.0.clone()),
        };
        Ok((program, servers))
    }

    /// The run's MCP servers: OCX's own, and a no-password run's node
    /// socket. The run's variables go to them by name too: an agent may
    /// start them with less of its own environment than it has.
    fn servers(&self, env: &BTreeMap<String, String>, socket: Option<&Path>) -> Value {
        let ocx = &self.cfg.ocx;
        let run_vars: serde_json::Map<String, Value> = env
            .iter()
            .filter(|(k, _)| {
                [RUN_USER_VAR, RECORD_VAR, MCP_SOCKET_VAR, BRANCH_VAR].contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut servers = json!({"ocx": {"command": ocx, "args": ["--mcp"], "env": run_vars}});
        if let Some(socket) = socket {
            servers["ocx-node"] = json!({"command": ocx,
                "args": ["--mcp", "--connect", socket], "env": run_vars});
        }
        servers
    }

    /// `Record HASH: OBJECTIVE`, the run's first line.
    fn first_line(&self) -> String {
        Delivery::Record {
            record: self.r.hash.clone(),
            objective: self.r.record.objective.clone(),
        }
        .line()
    }

    /// `program` planned at `site` in `ws`, confined by `sandbox` within `budget`.
    fn plan(
        &self,
        site: &Site,
        ws: &Path,
        sandbox: &SandboxFields,
        budget: &crate::run::BudgetLimits,
        program: &Program,
    ) -> Result<Plan, Halt> {
        let run_name = format!("run-{}", &self.r.hash[..16]);
        site.plan(&run_name, ws, sandbox, budget, program)
            .map_err(|e| unenforced(named(&e)))
    }

    /// Makes ready how the run is given its lines: its ways out served, an
    /// agent's turns pipe and home, and its terminal.
    fn input(&self, p: &mut Prepared, ws: &Path, ways: Option<&Ways>) -> Result<(), Halt> {
        if let Some(w) = ways {
            p.plan.before_program(&w.forwarder(&self.cfg.ocx));
            let served = std::fs::create_dir_all(ws.join(".ocx"))
                .and_then(|()| p.out.try_clone())
                .and_then(|log| w.serve(log, self.refused.clone()));
            served.map_err(|e| {
                never(format!(
                    "the run's ways out (sandbox.hosts) could not be made: {e}"
                ))
            })?;
        }
        let mode = p.page.input;
        if mode.is_interactive() {
            let uid = p.lease.as_ref().map(|l| l.lease.account.uid);
            let turns = typing::turns_pipe(&ws.join(".ocx"), uid)
                .map_err(|e| never(format!("the run's turns pipe could not be made: {e}")))?;
            let inside = p.plan.workspace.join(".ocx").join(typing::TURNS);
            p.plan
                .env
                .insert(TURNS_VAR.into(), inside.display().to_string());
            p.turns = Some(turns);
        }
        typing::prepare_home(mode, &p.home.0, &p.plan.workspace, &p.plan.env).map_err(|e| {
            never(format!(
                "the run's home could not be made ready for its agent: {e}"
            ))
        })?;
        if p.page.terminal {
            let t = on_terminal(self.root, self.r, self.dir, &p.out)
                .map_err(|e| never(format!("the run's terminal could not be made: {e}")))?;
            p.terminal = Some(t);
        }
        Ok(())
    }

    /// Starts the run's program: on its terminal, else on pipes (its
    /// output to the run's log, or read as an agent's events).
    fn start(&self, mut p: Prepared, started: Instant) -> Result<Live, Halt> {
        let stdio = match &p.terminal {
            Some((pty, _)) => pty.stdio().map(|[i, o, e]| (i, o, e)),
            None => p.out.try_clone().and_then(|err| {
                let stdout = match p.page.input.is_agent() {
                    true => Stdio::piped(),
                    false => Stdio::from(p.out.try_clone()?),
                };
                Ok((Stdio::piped(), stdout, Stdio::from(err)))
            }),
        };
        let (stdin, stdout, stderr) = stdio.map_err(file("the program's input and output"))?;
        if p.terminal.is_some() {
            p.plan.on_terminal();
        }
        let running = match crate::run::spawn(&p.plan, stdin, stdout, stderr) {
            Ok(r) => r,
            Err(e) => {
                if let Some((_, joining)) = &p.terminal {
                    joining.end();
                }
                let _ = std::fs::remove_dir_all(&p.homes);
                return Err(unenforced(named(&e)));
            }
        };
        say(&format!(
            "started run-{} as {}",
            &self.r.hash[..16],
            self.r.record.user
        ));
        let killer = running.killer();
        if self.r.record.budget.ask == Some(true) {
            let pause = Arc::new(Pause {
                root: self.root.to_path_buf(),
                dir: self.dir.to_path_buf(),
                r: self.r.clone(),
                killer: killer.clone(),
                meter: p.relay.as_ref().map(Relay::meter),
                gate: self.gate.clone(),
                given: self.given.clone(),
                asking: Default::default(),
            });
            let at_limit = pause.clone();
            killer.on_limit(move |limit| at_limit.at_limit(limit));
            if let Some(relay) = &p.relay {
                relay.on_reached(move || pause.begin());
            }
        } else if let Some(relay) = &p.relay {
            relay.on_reached(move || killer.kill());
        }
        let measuring = spend::measure(spend::Gauges {
            dir: self.dir.to_path_buf(),
            started,
            killer: running.killer(),
            meter: p.relay.as_ref().map(Relay::meter),
            refused: self
                .r
                .record
                .sandbox
                .hosts
                .is_some()
                .then(|| self.refused.clone()),
            reporter: self.reporter.clone(),
        });
        Ok(Live {
            running,
            prepared: p,
            joining: None,
            ending: Default::default(),
            measuring,
        })
    }

    /// Gives the run its first line and then each delivery, on threads of
    /// their own: typed into its terminal, as an agent's turns, or as lines
    /// on its standard input.
    fn deliver(&self, live: &mut Live, deliveries: Receiver<String>) -> Result<(), Halt> {
        let first = self.first_line();
        let deliveries = self.noted(&first, deliveries);
        let mode = live.prepared.page.input;
        if let Some((mut pty, j)) = live.prepared.terminal.take() {
            pty.given();
            let first = (mode != InputMode::CodexInteractive).then(|| escape(&first));
            typing::type_lines(
                j.clone(),
                mode,
                first,
                deliveries,
                live.prepared.turns.take(),
            );
            live.joining = Some(j);
        } else if mode.is_agent() {
            self.drive(live, deliveries, escape(&first))?;
        } else {
            let mut stdin = live
                .running
                .stdin()
                .ok_or(WatchError::Cannot("the program has no stdin"))?;
            std::thread::spawn(move || {
                if feed(&mut stdin, &escape(&first)).is_err() {
                    return;
                }
                while let Ok(line) = deliveries.recv() {
                    if feed(&mut stdin, &line).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(())
    }

    /// Notes the run's first line and then each delivery in its transcript
    /// as they are given on: the deliveries as the run is given them.
    fn noted(&self, first: &str, deliveries: Receiver<String>) -> Receiver<String> {
        let Some(t) = self.transcript.clone() else {
            return deliveries;
        };
        t.add(Said::Delivery {
            text: first.to_string(),
        });
        let (tx, noted) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            while let Ok(line) = deliveries.recv() {
                t.add(Said::Delivery { text: line.clone() });
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        noted
    }

    /// Drives the agent's session ([`agent::drive`]) from its first line
    /// `first` and each delivery, its output read as its events.
    fn drive(
        &self,
        live: &mut Live,
        deliveries: Receiver<String>,
        first: String,
    ) -> Result<(), Halt> {
        let mode = live.prepared.page.input;
        let stdin = live
            .running
            .stdin()
            .ok_or(WatchError::Cannot("the program has no stdin"))?;
        let out = live.prepared.out.try_clone().map_err(file("output.log"))?;
        let log: agent::Log = Arc::new(Mutex::new(out));
        let stdin = Arc::new(Mutex::new(stdin));
        let stdout = live
            .running
            .stdout()
            .ok_or(WatchError::Cannot("the program has no stdout"))?;
        let (etx, erx) = std::sync::mpsc::channel();
        {
            let (log, stdin) = (log.clone(), stdin.clone());
            let transcript = self.transcript.clone();
            std::thread::spawn(move || {
                agent::read_output(mode, stdout, log, transcript, stdin, etx)
            });
        }
        let driving = agent::Driving {
            mode,
            record: self.r.hash.clone(),
            first,
            workspace: live.prepared.plan.workspace.clone(),
            servers: live.prepared.servers.clone(),
            instructions: (mode == InputMode::CodexAppServer)
                .then(|| agents_md(self.repo))
                .flatten(),
            speaker: agent::Speaker {
                repository: self.cfg.repository.clone(),
                root: self.root.to_path_buf(),
                scope: run_scope(self.root, self.r),
                dir: self.dir.to_path_buf(),
                on_machine: self.receipts.asked().is_some(),
            },
            log,
        };
        let (ending, killer) = (live.ending.clone(), live.running.killer());
        std::thread::spawn(move || {
            agent::drive(driving, stdin, erx, deliveries, ending, move || {
                killer.kill()
            })
        });
        Ok(())
    }

    /// Waits for the run's program to end (killed by a stop, or when a
    /// no-password run's tool socket is gone), lets go of all the run held,
    /// and says how it ended.
    fn end(&self, live: Live, started: Instant) -> Result<Outcome, Halt> {
        let Live {
            running,
            prepared: p,
            joining,
            ending,
            measuring,
        } = live;
        let socket = p.socket.clone();
        let watched = socket.as_deref().and_then(Path::parent);
        let (ended, killed) = until_ended(running, watched, || {
            socket.as_deref().and_then(no_password_broken)
        });
        measuring.finish();
        if let Some(j) = &joining {
            j.end();
        }
        let Prepared {
            homes,
            home,
            relay,
            disk,
            lease,
            ..
        } = p;
        let _ = std::fs::remove_dir_all(&homes);
        drop(home);
        let disk_bytes = disk.bytes();
        drop(disk);
        drop(lease);
        let ended = ended.map_err(WatchError::from)?;
        let how = How {
            secs: started.elapsed().as_secs(),
            killed,
            cannot_work: ending.lock().ok().and_then(|e| e.clone()),
            spent: relay.as_ref().map(|r| r.spent()),
            cost: relay
                .as_ref()
                .and_then(|r| r.prices().map(|p| (r.cost(), p.currency.clone()))),
            budget_reached: relay.as_ref().and_then(Relay::reached_by),
            raised: relay.as_ref().filter(|r| !r.given().is_empty()).map(|r| {
                (
                    r.budget_said(ModelBudget::Tokens),
                    r.prices().map(|_| r.budget_said(ModelBudget::Cost)),
                )
            }),
            disk_bytes,
        };
        drop(relay);
        let mut outcome = self.outcome(&ended, how);
        outcome.note.push_str(&self.limits_given_said());
        Ok(outcome)
    }

    /// What its record's sender gave the run at its wall and CPU limits,
    /// as its note says it: `, its wall 60 s + 60 s given by stone`.
    fn limits_given_said(&self) -> String {
        let given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        let b = &self.r.record.budget;
        let mut said = String::new();
        for (limit, name, base) in [
            (
                Limit::Wall,
                "wall",
                kinds::wall_seconds(&b.wall).unwrap_or(0),
            ),
            (Limit::Cpu, "CPU", b.cpu.unwrap_or(0)),
        ] {
            let mut of: Vec<String> = given
                .iter()
                .filter(|g| g.limit == limit)
                .map(|g| format!("{} s given by {}", g.secs, g.by))
                .collect();
            if !of.is_empty() {
                of.insert(0, format!("{base} s"));
                said.push_str(&format!(", its {name} {}", of.join(" + ")));
            }
        }
        said
    }

    /// How the run ended, as its answer says it.
    fn outcome(&self, ended: &Ended, how: How) -> Outcome {
        let How {
            secs, spent, cost, ..
        } = how;
        let cost_said = |budget| {
            cost.as_ref()
                .map(|(c, currency)| cost_words(*c, budget, currency))
                .unwrap_or_default()
        };
        let (tokens_of, cost_of) = match &how.raised {
            Some((t, c)) => (Some(t.clone()), c.clone()),
            None => (None, None),
        };
        let of = tokens_of
            .as_ref()
            .map(|t| format!(" of {t}"))
            .unwrap_or_default();
        let tokens = match (spent, &cost) {
            (Some(n), Some(_)) => format!(", {}{of} tokens, {}", thousands(n), cost_said(None)),
            (Some(n), None) => format!(", {}{of} tokens", thousands(n)),
            (None, _) => String::new(),
        };
        let cost_budget_said = || match (&cost_of, &cost) {
            (Some(c), Some((spent, _))) => format!("{spent} of {c}"),
            _ => cost_said(self.r.record.budget.cost),
        };
        let o = |outcome, note: String| Outcome { outcome, note };
        match how.killed {
            Some(Killed::Stopped) if self.dir.join(node::ENDED_BY_NODE).exists() => o(
                "stopped",
                format!("ended by its node (ocx node stop --runs) after {secs} seconds{tokens}"),
            ),
            Some(Killed::Stopped) => o(
                "stopped",
                format!("stopped by a stop after {secs} seconds{tokens}"),
            ),
            Some(Killed::Broken(why)) => o(
                "unenforced",
                format!("restrict.no_password: {why} after {secs} seconds{tokens}"),
            ),
            None if how.budget_reached == Some(ModelBudget::Cost) => o(
                "budget",
                format!(
                    "cost limit reached after {secs} seconds: {}, {} tokens",
                    cost_budget_said(),
                    thousands(spent.unwrap_or(0)),
                ),
            ),
            None if how.budget_reached.is_some() => o(
                "budget",
                format!(
                    "tokens limit reached after {secs} seconds: {} of {} tokens{}",
                    thousands(spent.unwrap_or(0)),
                    tokens_of
                        .clone()
                        .unwrap_or_else(|| thousands(self.r.record.budget.tokens.unwrap_or(0))),
                    cost.as_ref()
                        .map(|_| format!(", {}", cost_said(None)))
                        .unwrap_or_default()
                ),
            ),
            None => match (ended.limit, how.cannot_work) {
                (Some(limit), _) => {
                    let what = match (limit, ended.disk_used) {
                        (Limit::Disk, Some(used)) => format!(
                            ": the run wrote {} of its disk budget of {} (its workspace, home and /tmp together)",
                            size(used),
                            size(how.disk_bytes)
                        ),
                        _ => String::new(),
                    };
                    o(
                        "budget",
                        format!("{limit} limit reached after {secs} seconds{what}{tokens}"),
                    )
                }
                (None, Some(why)) => o(
                    "exited",
                    format!("{why} (ended after {secs} seconds{tokens})"),
                ),
                (None, None) => {
                    let code = ended
                        .code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "none".into());
                    o(
                        "exited",
                        format!("exit {code} after {secs} seconds{tokens}"),
                    )
                }
            },
        }
    }

    /// Answers the record as `o` says, the connections the run's ways out
    /// refused counted in its note, and wakes the node.
    fn answer(&self, o: Outcome) -> Result<(), WatchError> {
        let Outcome { outcome, note } = o;
        let note = match self.refused.count() {
            0 => note,
            1 => format!("{note}, 1 connection refused"),
            n => format!("{note}, {n} connections refused"),
        };
        if let Some(t) = &self.transcript {
            t.add(Said::Ended {
                outcome: outcome.to_string(),
                note: note.clone(),
            });
        }
        if let Some(reporter) = &self.reporter {
            reporter.send(true);
        }
        let (root, cfg, r) = (self.root, self.cfg, self.r);
        let answered = node::answer(
            root,
            cfg,
            self.fossil,
            self.repo,
            self.receipts,
            r,
            outcome,
            &note,
            true,
        )?;
        match answered {
            Some(_) => say(&format!("answered {outcome}: {note}")),
            None => say(&format!(
                "ended {outcome}: {note}; the response waits for the check-ins the run pushed to reach the server, which gives no answer"
            )),
        }
        let _ = node::poke(root);
        self.send_trace(outcome);
        Ok(())
    }

    /// Sends the run's trace, where the node's configuration names a
    /// collector, saying its id in the run's log and the node's.
    fn send_trace(&self, outcome: &str) {
        use node::log::{Done, Event};
        let r = self.r;
        let told = (r.record.runner.as_str(), r.said.from.as_deref(), outcome);
        let event = match node::trace::send_run(self.root, self.cfg, self.repo, &r.hash, told) {
            Ok(None) => return,
            Ok(Some((id, spans))) => {
                say(&format!("trace {id} sent, {spans} spans"));
                Event::new(Done::Traced, format!("{spans} spans")).trace(&id)
            }
            Err(e) => {
                say(&format!("trace not sent: {e}"));
                let mut event = Event::new(Done::Failed, format!("the run's trace: {e}"));
                event.trace = node::trace::trace_id(&r.hash);
                event
            }
        };
        node::log::write(self.root, &[event.record(&r.hash)]);
    }
}

/// What the watcher knows of a run once its program ended, besides how
/// it exited.
struct How {
    /// Its seconds from its watcher's start.
    secs: u64,
    /// Why it was killed, if it was.
    killed: Option<Killed>,
    /// Why its agent could not work, when its driver ended it.
    cannot_work: Option<String>,
    /// The tokens it spent, when its relay counted them.
    spent: Option<u64>,
    /// What they cost and in which currency, when its runner's page gives
    /// prices.
    cost: Option<(Money, String)>,
    /// The budget its relay ended it at, if it did.
    budget_reached: Option<ModelBudget>,
    /// Its token budget and its cost budget as its note says them, when
    /// its record's sender gave it more (`budget.ask`): `2,000 + 2,000
    /// given by stone`.
    raised: Option<(String, Option<String>)>,
    /// Its disk budget.
    disk_bytes: u64,
}

/// The words an agent's command line is given to name its MCP servers
/// (`servers`, written to `config`) and take none of its own.
fn agent_words(page: &RunnerPage, servers: &Value, config: &Path) -> Vec<String> {
    let mut words = Vec::new();
    if page.input.is_claude() {
        let allowed: Vec<String> = servers
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .map(|name| format!("mcp__{name}"))
            .collect();
        words.extend([
            "--mcp-config".to_string(),
            config.display().to_string(),
            "--strict-mcp-config".to_string(),
            "--allowedTools".to_string(),
            allowed.join(","),
            "--setting-sources".to_string(),
            "user".to_string(),
        ]);
    }
    if page.input == InputMode::CodexInteractive {
        for (name, server) in servers.as_object().into_iter().flatten() {
            words.extend([
                "-c".to_string(),
                format!("mcp_servers.{name}={}", typing::toml_inline(server)),
            ]);
        }
    }
    words
}
