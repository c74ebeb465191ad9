//! `machine`: enrols this host as an agent machine of a served
//! repository, from its own command line alone. It makes the clone named
//! by `--repository` (as nobody in particular) where there is none (one
//! already there, made as any login, is enrolled as it is), asks
//! the server for the clone's node login (`node-` and the first 8 digits
//! of the clone's server-code) as `register` does, keeping the code and
//! then the password in a credentials file under the node's root (0600),
//! and, once an administrator approved it with `approve --node`, names
//! the server in the clone with that login (the URL given on standard
//! input) and writes the node's configuration, so `ocx node start` in the
//! clone starts the machine's node.

use super::register::{self, Register};
use crate::answer::Op;
use crate::fossil::Repository;
use crate::node::config::{self, Machine, NodeConfig};
use crate::node::machine::MACHINE_CAPABILITIES;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `machine`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The served repository's address, as it is cloned (https://host/repo); the clone is the file --repository names.
    #[schemars(extend("x-positional" = true))]
    pub server: String,
}

/// What `machine` did.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The clone the machine's node works in.
    pub clone: String,
    /// The machine's login on the server.
    pub login: String,
    /// The node's root, where its credentials file is kept.
    pub root: String,
    /// `enrolled` once the login is approved and the node configured.
    pub state: String,
}

/// The `machine` tool.
pub struct MachineTool;

impl Tool for MachineTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "machine";
    const SUMMARY: &'static str = "Enrol this host as an agent machine: make its clone, ask the server for its node login, and configure its node once approved.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::CommandLine;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let server = register::server_of(&input.server)?;
        let Some(named) = call.cx.repository.clone() else {
            return Err(
                Stop::field("repository", "names no clone for the agent machine")
                    .next("give the clone's file: ocx machine URL --repository agent.fossil"),
            );
        };
        let path = call.cx.cwd.join(named);
        let fossil = call.fossil()?.clone();
        if !path.exists() {
            if !call.dry_run {
                fossil
                    .clone_anonymous(&server, &path, "ocx-machine")
                    .map_err(|e| {
                        Stop::field("server", format!("cannot clone {server}: {e}")).next(
                            "check the address; where nobody may clone, clone it first as a login that may (fossil clone URL FILE) and run this again: an existing clone is enrolled as it is",
                        )
                    })?;
            }
            call.log(Op::Fossil {
                operation: format!("clone {server} into {}", path.display()),
                done: !call.dry_run,
            });
            if call.dry_run {
                return Err(Stop::new(
                    "a dry run makes no clone, so it can go no further",
                ));
            }
        }
        let repo = Repository::open(&path)?;
        let server_code = repo.server_code()?;
        let login = crate::protocol::found::node_login(&server_code);
        let root = config::default_root(&path);
        make_root(&root)?;
        let credentials = root.join("credentials.json");
        let asked = Register::run(
            register::Input {
                server: server.clone(),
                credentials: credentials.display().to_string(),
                login: Some(login.clone()),
                capabilities: Some(MACHINE_CAPABILITIES.into()),
            },
            call,
        )?;
        let (_, password) = crate::node::machine::read_credentials(&credentials)
            .map_err(|e| Stop::field("credentials", e.to_string()))?;
        if call.dry_run {
            return Ok(Output {
                clone: path.display().to_string(),
                login,
                root: root.display().to_string(),
                state: asked.state,
            });
        }
        let url = crate::fossil::remote::with_login(&server, &login, &password);
        fossil.remote_add_server(&path, &url)?;
        if repo.own_capabilities(&login)?.is_none() {
            fossil.user_new(&path, &login, &crate::node::random_password())?;
        }
        fossil
            .user_capabilities(&path, &login, "s")
            .and_then(|()| fossil.user_default(&path, &login))?;
        call.log(Op::Fossil {
            operation: format!(
                "name {server} in the clone as {login}, the clone's own administrator and default user"
            ),
            done: true,
        });
        let ocx = std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .map_err(|e| Stop::failed(format!("cannot tell where ocx is: {e}")))?;
        NodeConfig {
            repository: path.canonicalize().unwrap_or(path.clone()),
            url: server,
            fossil: fossil.path().to_path_buf(),
            ocx,
            server_code,
            login: login.clone(),
            machine: Some(Machine { credentials }),
            ..NodeConfig::kept(&root)
        }
        .save(&root)
        .map_err(|e| Stop::field("repository", format!("cannot write the node's root: {e}")))?;
        call.log(Op::Fossil {
            operation: format!("configure the machine's node in {}", root.display()),
            done: true,
        });
        Ok(Output {
            clone: path.display().to_string(),
            login,
            root: root.display().to_string(),
            state: "enrolled".into(),
        })
    }
}

/// The node's root, its owner's alone but passable (runs reach their own
/// directories through it).
fn make_root(root: &std::path::Path) -> Result<(), Stop> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(root)
        .and_then(|()| std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711)))
        .map_err(|e| Stop::field("repository", format!("cannot make {}: {e}", root.display())))
}
