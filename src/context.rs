//! Where and as whom a tool runs: the repository (named outright, or the
//! checkout's), the caller and their capabilities, and the `fossil`
//! program. Each is found once, when a tool first asks for it; in a
//! long-lived process the repository and the program come from what it
//! keeps ([`Kept`]), and the caller is read afresh on every call.

#![allow(clippy::disallowed_methods)] // the environment's one reader for the layers below the entry points, as docs/architecture.md says

use crate::fossil::caps::Capabilities;
use crate::fossil::kept::{Held, Kept};
use crate::fossil::{Fossil, FossilError, Repository, checkout};
use crate::stop::{Stop, StopKind};
use std::cell::OnceCell;
use std::path::PathBuf;
use std::sync::Arc;

/// The variable naming the run's login in the program's environment.
pub const RUN_USER_VAR: &str = "OCX_RUN_USER";
/// The variable naming the run's record (its full hash).
pub const RECORD_VAR: &str = "OCX_RECORD";
/// The variable naming the pipe an agent's hook tells its watcher through
/// that the agent waits for input again (a run on a terminal).
pub const TURNS_VAR: &str = "OCX_TURNS";
/// The variable naming a no-password run's tool socket (MCP).
pub const MCP_SOCKET_VAR: &str = "OCX_MCP_SOCKET";
/// The variable naming the one branch a run's record lets it check in on.
pub const BRANCH_VAR: &str = "OCX_RUN_BRANCH";

/// How the caller is known.
#[derive(Debug, Clone)]
pub enum Who {
    /// On the command line (and MCP started from it): `--user`, else the
    /// repository's default user as Fossil decides it.
    Local { user: Option<String> },
    /// On the web page: the viewer the page proved (a login cookie the
    /// repository's user table confirms, or Fossil's own local sign-in);
    /// `None`: nobody. Never a name Fossil's environment merely carried.
    Web { user: Option<String> },
    /// A run's tools, served by its watcher on the node: the run's user,
    /// within its record's restrictions.
    Run(RunScope),
}

/// What a run's node socket acts within: its user, its record and place,
/// and the restrictions the node holds it to. Nothing of the run's own
/// files: the node never opens them.
#[derive(Debug, Clone)]
pub struct RunScope {
    /// The run's login.
    pub user: String,
    /// The record's full hash.
    pub record: String,
    /// The record's place.
    pub place: crate::place::Place,
    /// The restrictions its record asks for.
    pub restrict: crate::protocol::kinds::Restrict,
    /// The node's root, poked after a write.
    pub root: PathBuf,
    /// On an agent machine: the served repository the run's tools act on,
    /// as the run's login, whose password its watcher holds (never the run).
    pub server: Option<Box<ServedAs>>,
}

/// The server a run on an agent machine acts on, and as whom.
#[derive(Clone)]
pub struct ServedAs {
    /// The server's URL (no login in it).
    pub url: String,
    /// The run's login.
    pub login: String,
    /// Its password, from the server's `run_login`.
    pub password: String,
    /// The capabilities the server gives it, as its receipt tool says.
    pub capabilities: String,
}

impl std::fmt::Debug for ServedAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedAs")
            .field("url", &self.url)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// The caller: a login of the repository and what it may do there.
#[derive(Debug, Clone)]
pub struct Caller {
    pub login: String,
    pub capabilities: Capabilities,
    /// Whether someone signed in (false only for a web visitor who has not).
    pub signed_in: bool,
}

/// Everything a tool may ask of where it runs.
pub struct Context {
    /// `--repository`, when given.
    pub repository: Option<PathBuf>,
    /// The directory the call was made in, where a checkout is looked for.
    pub cwd: PathBuf,
    /// How the caller is known.
    pub who: Who,
    kept: Option<Arc<Kept>>,
    repo: OnceCell<Result<Held, Stop>>,
    caller: OnceCell<Result<Caller, Stop>>,
    fossil: OnceCell<Result<Fossil, Stop>>,
    locate: Option<Locate>,
    checkout: OnceCell<Option<checkout::Checkout>>,
}

/// Whether this process runs inside a no-password run's sandbox: its
/// node's socket is named (`OCX_MCP_SOCKET`), and the node makes its writes.
pub fn in_a_runs_sandbox() -> bool {
    std::env::var_os(MCP_SOCKET_VAR).is_some_and(|s| !s.is_empty())
}

/// How a context finds its `fossil` program when it first needs it.
type Locate = Box<dyn Fn() -> Result<Fossil, Stop> + Send + Sync>;

impl Context {
    /// A context for a call made at `cwd`.
    pub fn new(repository: Option<PathBuf>, cwd: PathBuf, who: Who) -> Context {
        Context {
            repository,
            cwd,
            who,
            kept: None,
            repo: OnceCell::new(),
            caller: OnceCell::new(),
            fossil: OnceCell::new(),
            locate: None,
            checkout: OnceCell::new(),
        }
    }

    /// The same context finding its `fossil` program by `locate`, the first
    /// time a call needs it (the web page finds it from its own
    /// configuration, not the environment), so a call that never starts
    /// Fossil never asks the program its version.
    pub fn with_fossil(
        mut self,
        locate: impl Fn() -> Result<Fossil, Stop> + Send + Sync + 'static,
    ) -> Context {
        self.locate = Some(Box::new(locate));
        self
    }

    /// The same context with its `fossil` program already found.
    pub fn with_found_fossil(self, fossil: Fossil) -> Context {
        let _ = self.fossil.set(Ok(fossil));
        self
    }

    /// The same context with its repository already opened, from the file
    /// it names (`--repository`, or the checkout's), so a process that
    /// opened it first to learn who is asking does not open it again.
    pub fn with_repository(self, repo: Repository) -> Context {
        self.with_held(Held::from(repo))
    }

    /// The same context with its repository already opened or lent.
    pub fn with_held(self, repo: Held) -> Context {
        let _ = self.repo.set(Ok(repo));
        self
    }

    /// The same context taking its repository and `fossil` from what a
    /// long-lived process keeps, rather than opening and asking anew.
    pub fn keeping(mut self, kept: Arc<Kept>) -> Context {
        self.kept = Some(kept);
        self
    }

    /// The run this call is made for, when a run's watcher serves it.
    pub fn run(&self) -> Option<&RunScope> {
        match &self.who {
            Who::Run(scope) => Some(scope),
            _ => None,
        }
    }

    /// The checkout the call was made in, if any. The web page has none
    /// (its server may have been started in one), and neither has the node
    /// serving a run: it never opens what the run can write.
    pub fn checkout(&self) -> Option<&checkout::Checkout> {
        self.checkout
            .get_or_init(|| match self.who {
                Who::Web { .. } | Who::Run(_) => None,
                _ => checkout::find(&self.cwd),
            })
            .as_ref()
    }

    /// Inside a no-password run's sandbox: the socket its node serves the
    /// run's login on (`OCX_MCP_SOCKET`), through which `push` and `save`
    /// publish.
    pub fn node_socket(&self) -> Option<PathBuf> {
        match self.who {
            Who::Local { .. } if in_a_runs_sandbox() => {
                std::env::var_os(MCP_SOCKET_VAR).map(PathBuf::from)
            }
            _ => None,
        }
    }

    /// Inside a run's sandbox: the one branch its record lets it check in
    /// on (`OCX_RUN_BRANCH`), if it names one.
    pub fn run_branch(&self) -> Option<String> {
        match self.who {
            Who::Local { .. } => std::env::var(BRANCH_VAR).ok().filter(|s| !s.is_empty()),
            _ => None,
        }
    }

    /// The repository: `--repository` when given, else the checkout's.
    pub fn repo(&self) -> Result<&Repository, Stop> {
        self.repo
            .get_or_init(|| {
                let (path, field) = match &self.repository {
                    Some(p) => (self.cwd.join(p), "repository"),
                    None => match self.checkout() {
                        Some(c) => (c.repository.clone(), "repository"),
                        None => {
                            return Err(Stop::field(
                                "repository",
                                "no repository: this directory is in no Fossil checkout",
                            )
                            .next("run it in a checkout, or name the repository with --repository FILE"));
                        }
                    },
                };
                let opened = match &self.kept {
                    Some(kept) => kept.repository(&path),
                    None => Repository::open(&path).map(Held::from),
                };
                opened.map_err(|e| match (e.kind(), &e) {
                    (StopKind::Failed, _) => Stop::from(e),
                    (StopKind::Refused, FossilError::NoRepository(p)) => Stop::field(field, format!("no repository at {}", p.display()))
                        .next("name an existing repository file with --repository FILE"),
                    (StopKind::Refused, _) => Stop::field(field, e.to_string())
                        .next("name a Fossil repository file with --repository FILE"),
                })
            })
            .as_ref()
            .map(|held| &**held)
            .map_err(Clone::clone)
    }

    /// The `fossil` program.
    pub fn fossil(&self) -> Result<&Fossil, Stop> {
        self.fossil
            .get_or_init(|| {
                if let Some(locate) = &self.locate {
                    return locate();
                }
                let found = match &self.kept {
                    Some(kept) => kept.fossil(),
                    None => Fossil::locate(),
                };
                found.map_err(|e| {
                    Stop::said(e.kind(), e).next("install Fossil 2.23 or later (scripts/setup.sh)")
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Ends a `fossil` started ahead that the call did not need.
    pub fn end_fossil_ahead(&self) {
        if let Some(Ok(fossil)) = self.fossil.get() {
            fossil.end_ahead();
        }
    }

    /// The caller, with their capabilities in this repository.
    pub fn caller(&self) -> Result<&Caller, Stop> {
        self.caller
            .get_or_init(|| self.find_caller())
            .as_ref()
            .map_err(Clone::clone)
    }

    fn find_caller(&self) -> Result<Caller, Stop> {
        let repo = self.repo()?;
        let (login, field) = match &self.who {
            Who::Web { user: None } => {
                let special = repo.special()?;
                return Ok(Caller {
                    login: "nobody".into(),
                    capabilities: Capabilities::effective("", &special, false),
                    signed_in: false,
                });
            }
            Who::Web { user: Some(u) } => (u.clone(), "user"),
            Who::Run(RunScope {
                user,
                server: Some(served),
                ..
            }) => {
                return Ok(Caller {
                    login: user.clone(),
                    capabilities: Capabilities::exact(&served.capabilities),
                    signed_in: true,
                });
            }
            Who::Run(scope) => (scope.user.clone(), "user"),
            Who::Local { user: Some(u) } => (u.clone(), "user"),
            Who::Local { user: None } => (self.default_user(repo)?, "user"),
        };
        match repo.capabilities(&login)? {
            Some(capabilities) => Ok(Caller {
                login,
                capabilities,
                signed_in: true,
            }),
            None => Err(
                Stop::field(field, format!("the repository has no login {login:?}"))
                    .next("name a login of this repository with --user LOGIN"),
            ),
        }
    }

    /// The user Fossil would act as here: the checkout's default user, the
    /// repository's, then FOSSIL_USER, USER, LOGNAME and USERNAME: the first
    /// that is a login of the repository, as Fossil chooses.
    fn default_user(&self, repo: &Repository) -> Result<String, Stop> {
        let from_checkout = self
            .repository
            .is_none()
            .then(|| self.checkout().and_then(|c| c.default_user.clone()))
            .flatten();
        let candidates = [
            from_checkout,
            repo.default_user()?,
            std::env::var("FOSSIL_USER").ok(),
            std::env::var("USER").ok(),
            std::env::var("LOGNAME").ok(),
            std::env::var("USERNAME").ok(),
        ];
        for login in candidates.into_iter().flatten().filter(|u| !u.is_empty()) {
            if repo.own_capabilities(&login)?.is_some() {
                return Ok(login);
            }
        }
        Err(Stop::field(
            "user",
            "cannot tell who you are: no --user and no default user that is a login here",
        )
        .next("name yourself with --user LOGIN, or set one with `fossil user default LOGIN`"))
    }
}
