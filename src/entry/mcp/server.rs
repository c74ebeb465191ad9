//! The MCP server every transport serves: which tools it offers where it
//! serves ([`Inside`]), and each call handed to the registry as the
//! caller would make it on the command line.

#![allow(clippy::disallowed_methods)] // an entry point: it reads the run's variables to learn where it serves, as docs/architecture.md says

use super::Caller;
use super::elicit::client_elicits;
use super::schema::{listed, result};
use crate::fossil::kept::Kept;
use crate::registry;
use crate::stop::Stop;
use crate::tool::Reach;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;

/// The tools a run's node socket serves: those that need the run's login
/// on the served repository. The agent's workspace tools (context, find,
/// read, edit, test, save) run inside the run's sandbox instead.
pub const NODE_TOOLS: &[&str] = &[
    "audit",
    "post",
    "push",
    "receipt",
    "stage",
    "status",
    "thread",
    "unaudited",
    "unversioned_get",
    "unversioned_list",
    "unversioned_put",
    "verdicts",
    "wiki_edit",
    "wiki_read",
];

/// The agent's workspace tools: they act on the run's checkout, and run
/// inside its sandbox as the run's own processes.
pub const WORKSPACE_TOOLS: &[&str] = &["context", "find", "read", "edit", "test", "save"];

/// Where an MCP server serves, which decides the tools that can work there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inside {
    /// Not in a run: every tool.
    Nowhere,
    /// A run's node socket, served by its watcher: [`NODE_TOOLS`].
    NodeSocket,
    /// A no-password run's sandbox: the workspace tools, and `push`, which
    /// hands the clone's new artifacts to the node's socket; the tools that
    /// need the run's login are the node socket's.
    RunWithoutPassword,
    /// The sandbox of a run holding its password: the workspace tools and
    /// those the run's login can use from its clone.
    RunWithPassword,
}

impl Inside {
    /// Where this process is, as its environment says: a run's program
    /// finds its record (and, without a password, its socket) there.
    pub fn here() -> Inside {
        let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
        if set(crate::context::MCP_SOCKET_VAR) {
            Inside::RunWithoutPassword
        } else if set(crate::context::RECORD_VAR) {
            Inside::RunWithPassword
        } else {
            Inside::Nowhere
        }
    }

    /// Whether the tool `name` can work here.
    pub fn offers(self, name: &str) -> bool {
        match self {
            Inside::Nowhere => true,
            Inside::NodeSocket => NODE_TOOLS.contains(&name),
            Inside::RunWithoutPassword => WORKSPACE_TOOLS.contains(&name) || name == "push",
            Inside::RunWithPassword => {
                WORKSPACE_TOOLS.contains(&name) || (NODE_TOOLS.contains(&name) && name != "push")
            }
        }
    }
}

/// The MCP server: lists the registry's tools and calls them. Every
/// session of one server shares what it keeps: the repository opened once
/// and `fossil` learned once; each call reads its caller afresh.
#[derive(Clone)]
pub struct Server {
    pub(super) caller: Arc<Caller>,
    pub(super) kept: Arc<Kept>,
    /// Whether it may ask its client to elicit a choice from a person: over
    /// stdio, where the server can send requests (never over stateless HTTP).
    elicits: bool,
}

impl Server {
    /// A server whose calls act as `caller`.
    pub fn new(caller: Caller) -> Server {
        Server::keeping(caller, Kept::new())
    }

    /// A server on stdio, which may ask its client to elicit a choice.
    pub(super) fn eliciting(caller: Caller) -> Server {
        Server {
            elicits: true,
            ..Server::new(caller)
        }
    }

    /// A server whose calls act as `caller`, keeping what `kept` holds.
    pub(super) fn keeping(caller: Caller, kept: Arc<Kept>) -> Server {
        Server {
            caller: Arc::new(caller),
            kept,
            elicits: false,
        }
    }

    /// Whether this server offers the tool `name`: every tool offered
    /// over MCP (not `register`, `approve` or `collect`), and where it
    /// serves a run only those that work there ([`Inside::offers`]).
    fn offers(&self, name: &str) -> bool {
        let everywhere = registry::find(name)
            .is_some_and(|t| matches!(t.reach(), Reach::Everywhere | Reach::NotPage));
        let inside = match self.caller.run {
            Some(_) => Inside::NodeSocket,
            None => Inside::here(),
        };
        everywhere && inside.offers(name)
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ocx", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "OCX: every tool answers {ok, tool, dry_run, log, result, stopped, next_step, took_ms}; \
                 a refusal names the field at fault and says what to do instead.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            listed()
                .iter()
                .filter(|(name, _)| self.offers(name))
                .map(|(_, t)| t.clone())
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let entry = request
            .name
            .strip_prefix("ocx_")
            .and_then(registry::find)
            .filter(|e| self.offers(e.name()))
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "there is no tool {:?}; tools/list names every tool",
                        request.name
                    ),
                    None,
                )
            })?;
        let mut input: Result<Value, Stop> =
            Ok(Value::Object(request.arguments.unwrap_or_default()));
        let name = entry.name();
        if name == "decide" && self.elicits && client_elicits(&context) {
            input = self.elicit_decision(input, &context).await;
        }
        let caller = self.caller.clone();
        let kept = self.kept.clone();
        let (answer, text) = tokio::task::spawn_blocking(move || {
            let cx = caller.context().keeping(kept);
            registry::call_shown(name, input, &cx, false, registry::Shown::Both)
        })
        .await
        .map_err(|_| ErrorData::internal_error("the tool call did not finish", None))?;
        Ok(CallToolResponse::Complete(result(&answer, text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_socket_offers_no_workspace_tool() {
        for name in NODE_TOOLS {
            assert!(registry::find(name).is_some(), "{name} is a tool");
        }
        for name in WORKSPACE_TOOLS {
            assert!(registry::find(name).is_some(), "{name} is a tool");
            assert!(!NODE_TOOLS.contains(name), "{name}");
        }
    }

    #[test]
    fn a_run_s_sandbox_offers_only_what_works_there() {
        assert!(Inside::RunWithoutPassword.offers("edit"));
        assert!(Inside::RunWithoutPassword.offers("push"));
        assert!(!Inside::RunWithoutPassword.offers("post"));
        assert!(Inside::RunWithPassword.offers("post"));
        assert!(Inside::RunWithPassword.offers("save"));
        assert!(!Inside::RunWithPassword.offers("push"));
        for host_only in [
            "hook", "node", "create", "stop", "approve", "export", "adopt",
        ] {
            assert!(!Inside::RunWithPassword.offers(host_only), "{host_only}");
            assert!(!Inside::RunWithoutPassword.offers(host_only), "{host_only}");
        }
        assert!(Inside::Nowhere.offers("hook"));
    }
}
