//! `ocx-cgi`: the page Fossil serves at `/ext/ocx-cgi`, inside its skin.
//! The request comes from the environment Fossil sets and the body on
//! stdin; every tool is reached through the registry, and the page only
//! renders the one Answer (or, with `?json`, prints it). The viewer is
//! proven from the request (its login cookie, or Fossil's own local
//! sign-in), never taken from `FOSSIL_USER` alone, and the page offers no
//! tool that acts on a checkout.

use crate::answer::Answer;
use crate::context::{Context, Who};
use crate::fossil::kept::{Held, Kept};
use crate::fossil::{Fossil, Repository};
use crate::registry;
use crate::stop::Stop;
use crate::tool::{Entry, Reach};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The page listing every tool the page offers; a signed-in person lands
/// on the console instead, the list one link away.
pub const TOOL_LIST: &str = "tools";
/// The name Fossil serves the page under: `/ext/ocx-cgi`.
pub const NAME: &str = "ocx-cgi";

/// The name the release staged as next is served under, beside it.
pub const NEXT_NAME: &str = "ocx-cgi-next";

/// The largest request body taken, in bytes (1 MiB); a larger one is refused.
pub const BODY_LIMIT: usize = 1 << 20;

/// The configuration file, beside the `ocx-cgi` Fossil runs. Its name
/// begins with a dot, so Fossil never serves it as a static file.
pub const CONFIG: &str = ".ocx-cgi.json";

/// The page's configuration, read from [`CONFIG`] when it exists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `fossil` program, by absolute path (default: the first of
    /// `/usr/local/bin/fossil` and `/usr/bin/fossil` of Fossil 2.23 or later).
    #[serde(default)]
    pub fossil: Option<PathBuf>,
    /// The `git` program that serves the git export, by absolute path
    /// (default: the first of `/usr/local/bin/git` and `/usr/bin/git`).
    #[serde(default)]
    pub git: Option<PathBuf>,
}

/// What the page answers: a status, a type and a body.
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body's type.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Response {
    /// The response as CGI output: headers, a blank line, the body. Its
    /// length is among the headers, so Fossil takes the page once the
    /// body has come, without waiting for every holder of its pipe to let
    /// go (the page server's thread, and `ocx-cgi`, which must be given a
    /// turn to let go of its copy; HISTORY 481).
    pub fn to_cgi(&self) -> String {
        let mut more = format!("Content-Length: {}\r\n", self.body.len());
        if self.status == 429 {
            more += &format!("Retry-After: {RETRY_AFTER}\r\n");
        }
        head(self.status, self.content_type, &more) + &self.body
    }
}

/// The seconds a request answered 429 is told to wait before it asks again.
pub const RETRY_AFTER: u64 = 5;

/// A CGI reply's headers and the blank line after them: the status,
/// the body's type, and `more` (each line ending in CRLF).
pub(super) fn head(status: u16, content_type: &str, more: &str) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        _ => "Internal Server Error",
    };
    format!("Status: {status} {reason}\r\nContent-Type: {content_type}\r\n{more}\r\n")
}

/// Answers the request in the environment; always exits 0, since Fossil
/// ignores the exit code and the page says what went wrong.
pub fn main() -> i32 {
    std::panic::set_hook(Box::new(|_| {}));
    let request = Request::from_environment();
    let mut stdin = std::io::stdin().lock();
    super::print(&answer(&request, &mut stdin, None).to_cgi());
    0
}

/// The response to `request`, with the `fossil` its configuration names
/// and its repository from `kept` when a page server keeps it open; a
/// panic inside is answered as an internal error, so neither the program
/// Fossil started nor the page server it handed the request to ends
/// without an answer.
pub fn answer(request: &Request, body: &mut dyn Read, kept: Option<&Arc<Kept>>) -> Response {
    let config = request.config_file();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        respond(request, body, move || configured_fossil(&config), kept)
    }))
    .unwrap_or_else(|_| Response {
        status: 500,
        content_type: "text/html",
        body: page::internal_error(),
    })
}

/// The configuration [`CONFIG`] beside this program holds (none: the
/// defaults); never read from the environment.
pub(crate) fn read_config() -> Result<Config, Stop> {
    read_config_at(&Request::from_environment().config_file())
}

/// The configuration in `file` (none: the defaults).
fn read_config_at(file: &Path) -> Result<Config, Stop> {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice::<Config>(&bytes).map_err(|e| {
            Stop::field("fossil", format!("{CONFIG} does not parse: {e}")).next(format!(
                "write {CONFIG} as {{\"fossil\": \"/absolute/path/to/fossil\"}}"
            ))
        }),
        Err(_) => Ok(Config::default()),
    }
}

/// The `fossil` program as the configuration in `file` names it, else
/// as [`Fossil::locate_for_web`] finds it; never from the environment.
fn configured_fossil(file: &Path) -> Result<Fossil, Stop> {
    let config = read_config_at(file)?;
    Fossil::locate_for_web(config.fossil.as_deref()).map_err(|_| {
        let reason = match &config.fossil {
            Some(p) => format!(
                "{} (named in {CONFIG}) is not an absolute path to fossil 2.23 or later",
                p.display()
            ),
            None => "no fossil 2.23 or later at /usr/local/bin/fossil or /usr/bin/fossil".into(),
        };
        Stop::field("fossil", reason).next(format!(
            "install Fossil 2.23 or later as /usr/local/bin/fossil, or name it in {CONFIG} beside ocx-cgi"
        ))
    })
}

/// The response to `request` with its body on `body`; `fossil` finds the
/// program any write is stored with, when a call first needs it.
pub fn respond(
    request: &Request,
    body: &mut dyn Read,
    fossil: impl Fn() -> Result<Fossil, Stop> + Send + Sync + 'static,
    kept: Option<&Arc<Kept>>,
) -> Response {
    let json = request.wants_json();
    let (request, cx) = match viewed(request, json, fossil, kept) {
        Ok(viewed) => viewed,
        Err(refused) => return refused,
    };
    let response = respond_viewed(&request, body, &cx, json);
    if let Ok(repo) = cx.repo() {
        repo.end_reading();
    }
    count(&request, &cx, &response);
    response
}

/// Counts `request` in its node's metrics: the page or tool it asked, its
/// status, and for a `wait` the login that waited (an agent machine
/// keeps one open).
fn count(request: &Request, cx: &Context, response: &Response) {
    let path = request.path_info.trim_matches('/');
    let page = match path {
        "" => "landing",
        TOOL_LIST => TOOL_LIST,
        "wait" => "wait",
        "console" => "console",
        p if p.starts_with("run/") => "run",
        p => registry::find(p).map_or("other", |t| t.name()),
    };
    let waiter = request.user.as_deref().filter(|_| page == "wait");
    if let Ok(repo) = cx.repo() {
        crate::node::metrics::page_request(repo, page, response.status, waiter);
    }
}

/// The response to `request` from the viewer `cx` proved.
fn respond_viewed(request: &Request, body: &mut dyn Read, cx: &Context, json: bool) -> Response {
    let path = request.path_info.trim_matches('/');
    if path.is_empty() {
        return landing(request, body, cx, json);
    }
    if path == TOOL_LIST && !json {
        return index(request, cx);
    }
    if path == "wait" {
        return wait::wait(request, cx);
    }
    if path == "console" && !json {
        return console(request, body, cx);
    }
    if let Some(record) = path.strip_prefix("run/") {
        return run_page(request, cx, record, json);
    }
    let Some(tool) = registry::find(path) else {
        let stop = Stop::field("tool", format!("there is no tool {path:?}"))
            .next("the OCX page lists every tool");
        return refusal(request, json, 404, Some(cx), stop);
    };
    if let Some((status, stop)) = not_here(tool, request) {
        return refusal(request, json, status, Some(cx), stop);
    }
    call_tool(tool, request, body, cx, json)
}

/// The request with its viewer proven from the repository it names, and
/// the context its calls are made in: a run's when the viewer is the
/// login of a run on an agent machine; refused when Fossil named no
/// repository.
fn viewed(
    request: &Request,
    json: bool,
    fossil: impl Fn() -> Result<Fossil, Stop> + Send + Sync + 'static,
    kept: Option<&Arc<Kept>>,
) -> Result<(Request, Context), Response> {
    let Some(repository) = request.repository.clone() else {
        let stop = Stop::field("repository", "Fossil named no repository").next(
            "serve the page with fossil server --extroot DIR (or fossil http, or a CGI script)",
        );
        return Err(refusal(request, json, 500, None, stop));
    };
    let cwd = request.cwd.clone();
    let path = cwd.join(&repository);
    let opened = match kept {
        Some(kept) => kept.repository(&path).ok(),
        None => Repository::open(&path).ok().map(Held::from),
    };
    if let Some(repo) = opened.as_ref().filter(|_| request.reads_at_once()) {
        let _ = repo.begin_reading();
    }
    let viewer = opened.as_ref().and_then(|repo| request.prove_viewer(repo));
    let request = Request {
        user: viewer,
        ..request.clone()
    };
    // The login of a run on an agent machine held to no_password acts as
    // that run, held to its record's restrictions, as on a node's socket.
    let run = match (&opened, &request.user) {
        (Some(repo), Some(login)) => crate::node::remote::scope_of(repo, login).ok().flatten(),
        _ => None,
    };
    let who = match run {
        Some(scope) => Who::Run(scope),
        None => Who::Web {
            user: request.user.clone(),
        },
    };
    let mut cx = Context::new(Some(PathBuf::from(repository)), cwd, who).with_fossil(fossil);
    if let Some(repo) = opened {
        cx = cx.with_held(repo);
    }
    Ok((request, cx))
}

/// The page's own address: with `?json`, the tools the page offers; the
/// console to a person signed in; else the list of tools.
fn landing(request: &Request, body: &mut dyn Read, cx: &Context, json: bool) -> Response {
    if json {
        let mut answer = registry::call("list", Ok(Value::Object(Map::new())), cx, false);
        if let Some(Value::Array(tools)) = answer.result.as_mut().and_then(|r| r.get_mut("tools")) {
            tools.retain(|t| {
                t["name"]
                    .as_str()
                    .and_then(registry::find)
                    .is_some_and(offered)
            });
        }
        return json_response(status_of(&answer, false), &answer);
    }
    if request.signed_in() {
        return console(request, body, cx);
    }
    index(request, cx)
}

/// The page listing every tool the page offers.
fn index(request: &Request, cx: &Context) -> Response {
    Response {
        status: 200,
        content_type: "text/html",
        body: page::index(request, cx),
    }
}

/// Why `tool` is not called by this request, with its status: a tool
/// called elsewhere than the page, one answering only a POST asked
/// otherwise, or one acting on a checkout.
fn not_here(tool: &dyn Entry, request: &Request) -> Option<(u16, Stop)> {
    let elsewhere = match tool.reach() {
        Reach::NotPage => Some((
            "from the command line or MCP, never on the web page: its work outlasts a page's request",
            "on the host that serves this repository",
        )),
        Reach::CommandLine => Some((
            "from the asker's own command line alone, never on the web page",
            "on your own machine",
        )),
        _ => None,
    };
    if let Some((why, where_to)) = elsewhere {
        let name = tool.name();
        let stop = Stop::field("tool", format!("{name} is called {why}"))
            .next(format!("run `ocx {name}` {where_to}"));
        return Some((403, stop));
    }
    if tool.reach() == Reach::UnsignedPost && !request.is_post() {
        let stop = Stop::field(
            "tool",
            format!(
                "{} answers only a POST, which `ocx register` sends",
                tool.name()
            ),
        )
        .next("run `ocx register` on the machine that asked for the login");
        return Some((400, stop));
    }
    if tool.reach() == Reach::SignedPost && !request.is_post() {
        let stop = Stop::field(
            "tool",
            format!(
                "{} answers only a POST, signed in with the login cookie",
                tool.name()
            ),
        )
        .next("send a POST with the login cookie of the login it names");
        return Some((400, stop));
    }
    if !offered(tool) {
        let stop = Stop::field(
            "tool",
            format!(
                "{} acts on a checkout, and the web page offers no tool that does: whatever checkout its server runs in is no visitor's",
                tool.name()
            ),
        )
        .next("call it from the command line or MCP in a checkout of your own");
        return Some((403, stop));
    }
    None
}

/// `tool` called with the request's form or body, and its answer
/// rendered; a GET naming none of a tool's required fields is given the
/// form to fill in.
fn call_tool(
    tool: &'static dyn Entry,
    request: &Request,
    body: &mut dyn Read,
    cx: &Context,
    json: bool,
) -> Response {
    let flags = form_fields(tool);
    let input = if request.is_post() {
        read_body(request, body).and_then(|b| post_input(request, tool, flags, &b))
    } else {
        form_input(tool, flags, request.query.as_bytes(), true)
    };
    let bad_input = input.is_err();
    let given = input.as_ref().ok().cloned();
    let nothing_given = given
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty);
    if !json && !request.is_post() && nothing_given && flags.iter().any(|f| f.required) {
        return Response {
            status: 200,
            content_type: "text/html",
            body: page::fill_in(request, cx, tool),
        };
    }
    let notice = dry_run_notice(tool, request, cx);
    let shown = if json {
        registry::Shown::Json
    } else {
        registry::Shown::Both
    };
    let (answer, text) = registry::call_shown(tool.name(), input, cx, notice.is_some(), shown);
    let lacks = lacks_capability(tool, cx);
    let status = if bad_input {
        400
    } else {
        status_of(&answer, lacks)
    };
    if json {
        return json_response(status, &answer);
    }
    let refill = (answer.dry_run || !answer.ok)
        .then_some(given.as_ref())
        .flatten();
    Response {
        status,
        content_type: "text/html",
        body: page::answer(request, cx, tool, notice, &answer, text, refill),
    }
}

/// Why a tool that writes runs as its dry run for this request (a GET,
/// nobody signed in, a request from elsewhere than OCX's own page, a
/// loose policy), or none when it runs for real. A tool any unsigned POST
/// may call has none.
fn dry_run_notice(tool: &dyn Entry, request: &Request, cx: &Context) -> Option<&'static str> {
    if !tool.writes() || tool.reach() == Reach::UnsignedPost {
        None
    } else if !request.is_post() {
        Some("a GET changes nothing, so this is its dry run: use the form to change something")
    } else if !request.signed_in() {
        Some("nobody is signed in, so this is its dry run: sign in to change something")
    } else if !request.from_own_page() {
        Some(
            "the request did not come from OCX's own page, so this is its dry run and nothing was written",
        )
    } else if !runs_only_fossils_scripts(cx) {
        Some(LOOSE_POLICY)
    } else {
        None
    }
}

/// The console's page; a POST from it decides a question as the viewer
/// (only signed in, from OCX's own page; otherwise its dry run) and the
/// page says what was written.
fn console(request: &Request, body: &mut dyn Read, cx: &Context) -> Response {
    let mut written = None;
    if request.is_post() {
        let decide = registry::find("decide").expect("decide is a tool");
        let input = read_body(request, body)
            .and_then(|b| post_input(request, decide, form_fields(decide), &b));
        let loose = !runs_only_fossils_scripts(cx);
        let dry = !request.signed_in() || !request.from_own_page() || loose;
        let answer = registry::call("decide", input, cx, dry);
        written = Some(match (&answer.stopped, &answer.result) {
            (Some(s), _) => maud::html! { "Nothing was written: " (s.reason) },
            (None, _) if answer.dry_run && loose => {
                maud::html! { "Nothing was written: " (LOOSE_POLICY) }
            }
            (None, _) if answer.dry_run => maud::html! {
                "Nothing was written: a decision is written only from this page, signed in"
            },
            (None, Some(r)) => maud::html! {
                "Written: your decision \"" (r["note"].as_str().unwrap_or("")) "\" ("
                (r["counts"].as_str().unwrap_or("")) "), post "
                (r["hash"].as_str().map(|h| &h[..10.min(h.len())]).unwrap_or(""))
            },
            (None, None) => maud::html! { "Nothing was written" },
        });
    }
    let view = registry::call("console", Ok(Value::Object(Map::new())), cx, false);
    let new_run = may_send_runs(cx).then(|| new_run(cx));
    Response {
        status: 200,
        content_type: "text/html",
        body: page::console(request, cx, &view, written, new_run.as_deref()),
    }
}

/// Whether the viewer may send runs: admin, setup or OCX's `R`.
fn may_send_runs(cx: &Context) -> bool {
    cx.caller().is_ok_and(|c| c.capabilities.has_any("asR"))
}

/// The console's "New run": each pattern that counts, with the record
/// `create` would write from it as the viewer (its dry run).
fn new_run(cx: &Context) -> Vec<(Value, Answer)> {
    let listed = registry::call("patterns", Ok(Value::Object(Map::new())), cx, false);
    listed
        .result
        .as_ref()
        .and_then(|r| r.get("patterns"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default();
            let input = serde_json::json!({"pattern": name});
            (p.clone(), registry::call("create", Ok(input), cx, true))
        })
        .collect()
}

/// Why a signed-in viewer's write is only a dry run on a site whose
/// policy runs scripts Fossil did not write.
const LOOSE_POLICY: &str = "this site's Content-Security-Policy runs scripts Fossil did not write (any file committed to the repository), and such a script could act as you here, so this is its dry run and nothing was written: an administrator runs `ocx hook install` on the node, which makes the policy run Fossil's own scripts alone";

/// Whether the site's policy runs only the scripts Fossil wrote, so a
/// request from OCX's own page was made by its viewer's hand; a policy
/// that cannot be read counts as one that runs any.
fn runs_only_fossils_scripts(cx: &Context) -> bool {
    cx.repo()
        .ok()
        .and_then(|repo| repo.content_security_policy().ok())
        .is_some_and(|p| p.admits_only_fossils_scripts())
}

/// Whether the page offers `tool`: every tool but those acting on a
/// checkout and those of the asker's own command line alone.
fn offered(tool: &dyn Entry) -> bool {
    !tool.checkout() && !matches!(tool.reach(), Reach::CommandLine | Reach::NotPage)
}

/// A run's page (`run/RECORD`): the `run` tool's answer drawn, or as
/// JSON with the query's `after` and `within` (the page's own long-poll
/// for what the transcript says next) or `entry` (a folded output the
/// page fetches once opened); a value that is no whole number is given
/// to the tool as it came, which refuses it naming its field.
fn run_page(request: &Request, cx: &Context, record: &str, json: bool) -> Response {
    let given = |key: &str| -> Option<Value> {
        let v = request
            .query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)?;
        Some(
            v.parse::<u64>()
                .map_or_else(|_| Value::from(v), Value::from),
        )
    };
    let mut input = serde_json::json!({ "record": record, "after": given("after").unwrap_or(Value::from(0u64)) });
    if json {
        for key in ["within", "entry", "last"] {
            if let Some(v) = given(key) {
                input[key] = v;
            }
        }
    } else if request.nonce.is_some() {
        // A page whose script fetches the earlier entries reads only the
        // last it draws.
        input["last"] = Value::from(page::SHOWN);
    }
    let answer = registry::call_typed::<crate::tools::run::RunTool>(Ok(input), cx);
    let lacks =
        answer.stopped.is_some() && registry::find("run").is_some_and(|t| lacks_capability(t, cx));
    if json {
        return json_response(status_of(&answer, lacks), &answer);
    }
    Response {
        status: status_of(&answer, lacks),
        content_type: "text/html",
        body: page::run(request, cx, answer),
    }
}

/// The status an answer is given: 200 when the tool did its work, 403 when
/// the viewer lacks what the tool needs, 400 for any other refusal.
fn status_of<R>(answer: &Answer<R>, lacks: bool) -> u16 {
    match (&answer.stopped, lacks) {
        (None, _) => 200,
        (Some(s), _) if s.kind == crate::stop::StopKind::Failed => 500,
        (Some(_), true) => 403,
        (Some(_), false) => 400,
    }
}

fn lacks_capability(tool: &dyn Entry, cx: &Context) -> bool {
    match tool.needs().letters() {
        None => false,
        Some(_) if tool.needs().allows_run(cx) => false,
        Some(letters) => cx
            .caller()
            .map(|c| !c.capabilities.has_any(letters))
            .unwrap_or(true),
    }
}

fn json_response(status: u16, answer: &Answer<impl serde::Serialize>) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: format!(
            "{}\n",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        ),
    }
}

/// A refusal made before any tool was found: as JSON, or on the page.
fn refusal(
    request: &Request,
    json: bool,
    status: u16,
    cx: Option<&Context>,
    stop: Stop,
) -> Response {
    let answer = Answer {
        ok: false,
        tool: String::new(),
        dry_run: false,
        log: Vec::new(),
        result: None,
        stopped: Some(crate::answer::Stopped {
            kind: stop.kind,
            field: stop.field.clone(),
            reason: stop.reason.clone(),
        }),
        next_step: stop.next_step.clone(),
        took_ms: 0,
    };
    if json {
        return json_response(status, &answer);
    }
    Response {
        status,
        content_type: "text/html",
        body: page::refusal(request, cx, &answer),
    }
}

pub mod handoff;
mod page;
pub(super) mod request;
pub mod server;
pub mod wait;

pub use request::Request;
use request::{form_fields, form_input, post_input, read_body};
