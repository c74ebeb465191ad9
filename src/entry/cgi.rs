//! `ocx-cgi`: the page Fossil serves at `/ext/ocx-cgi`, inside its skin.
//! The request comes from the environment Fossil sets and the body on
//! stdin; every tool is reached through the registry, and the page only
//! renders the one Answer (or, with `?json`, prints it). The viewer is
//! proven from the request (its login cookie, or Fossil's own local
//! sign-in), never taken from `FOSSIL_USER` alone, and the page offers no
//! tool that acts on a checkout.

use crate::answer::Answer;
use crate::context::{Context, Who};
use crate::fields::{Flag, Kind, flags_of, set, to_json};
use crate::fossil::{Fossil, Repository};
use crate::registry::{self, Entry, Needs, Stop, TOOLS};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The name Fossil serves the page under: `/ext/ocx-cgi`.
pub const NAME: &str = "ocx-cgi";

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
}

/// What the page reads of a request: each variable Fossil sets that it
/// uses, by value, and no other.
#[derive(Debug, Default, Clone)]
pub struct Request {
    /// `FOSSIL_REPOSITORY`: the repository file.
    pub repository: Option<String>,
    /// `FOSSIL_USER`: whom Fossil names. Fossil passes on its own
    /// environment's when no one signed in, so it is believed only as
    /// [`Request::prove_viewer`] allows.
    pub fossil_user: Option<String>,
    /// The viewer, once [`Request::prove_viewer`] proved one; `None`: nobody.
    pub user: Option<String>,
    /// `FOSSIL_CAPABILITIES`: shown, and compared when Fossil signed the
    /// viewer in itself; never used to decide what a tool may do.
    pub capabilities: Option<String>,
    /// `HTTP_COOKIE`: where the login cookie is.
    pub cookie: Option<String>,
    /// `REMOTE_ADDR`: where the request came from.
    pub remote_addr: Option<String>,
    /// `FOSSIL_NONCE`: what a script would carry (the page has none).
    pub nonce: Option<String>,
    /// `FOSSIL_URI`: the site's path below its host (empty at the root).
    pub uri: String,
    /// `REQUEST_METHOD`.
    pub method: String,
    /// `QUERY_STRING`.
    pub query: String,
    /// `PATH_INFO`: `/TOOL`, or nothing for the OCX page.
    pub path_info: String,
    /// `CONTENT_LENGTH`.
    pub content_length: Option<String>,
    /// `CONTENT_TYPE`.
    pub content_type: Option<String>,
    /// Whether `HTTPS` is `on`.
    pub https: bool,
    /// `HTTP_HOST`.
    pub host: Option<String>,
    /// `HTTP_REFERER`.
    pub referer: Option<String>,
    /// `HTTP_ACCEPT`, which `fossil server` does not pass.
    pub accept: Option<String>,
}

impl Request {
    /// The request as Fossil gives it in the environment.
    pub fn from_environment() -> Request {
        let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        Request {
            repository: var("FOSSIL_REPOSITORY").filter(|r| !r.is_empty()),
            fossil_user: var("FOSSIL_USER").filter(|u| !u.is_empty()),
            user: None,
            capabilities: var("FOSSIL_CAPABILITIES"),
            cookie: var("HTTP_COOKIE").filter(|c| !c.is_empty()),
            remote_addr: var("REMOTE_ADDR"),
            nonce: var("FOSSIL_NONCE"),
            uri: var("FOSSIL_URI").unwrap_or_default(),
            method: var("REQUEST_METHOD").unwrap_or_else(|| "GET".into()),
            query: var("QUERY_STRING").unwrap_or_default(),
            path_info: var("PATH_INFO").unwrap_or_default(),
            content_length: var("CONTENT_LENGTH"),
            content_type: var("CONTENT_TYPE"),
            https: var("HTTPS").is_some_and(|v| v.eq_ignore_ascii_case("on")),
            host: var("HTTP_HOST").filter(|h| !h.is_empty()),
            referer: var("HTTP_REFERER"),
            accept: var("HTTP_ACCEPT"),
        }
    }

    /// The viewer, proven against `repo`: the login whose login cookie the
    /// user table confirms, unexpired; with none, the login Fossil signed
    /// in itself without a cookie (its local `ui` sign-in: a loopback
    /// address, plain HTTP, and `FOSSIL_CAPABILITIES` exactly what the
    /// repository grants that login, more than nobody's); else nobody.
    pub fn prove_viewer(&self, repo: &Repository) -> Option<String> {
        if let Some(header) = self.cookie.as_deref()
            && let Ok(Some(login)) = repo.login_by_cookie(header)
        {
            return Some(login);
        }
        let login = self.fossil_user.as_deref()?;
        let shown = self.capabilities.as_deref()?;
        if self.https || !self.is_loopback() {
            return None;
        }
        repo.shows_own_capabilities(login, shown)
            .unwrap_or(false)
            .then(|| login.to_string())
    }

    /// Whether `REMOTE_ADDR` is a loopback address.
    fn is_loopback(&self) -> bool {
        match self
            .remote_addr
            .as_deref()
            .and_then(|a| a.parse::<std::net::IpAddr>().ok())
        {
            Some(std::net::IpAddr::V6(v6)) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            Some(ip) => ip.is_loopback(),
            None => false,
        }
    }

    /// OCX's own page: the site's base URL (https when the site is), then
    /// `/ext/ocx-cgi`.
    pub fn own_page(&self) -> Option<String> {
        let host = self.host.as_deref()?;
        let scheme = if self.https { "https" } else { "http" };
        Some(format!("{scheme}://{host}{}/ext/{NAME}", self.uri))
    }

    /// Whether the request came from OCX's own page: its Referer is that
    /// page followed by nothing, `/` or `?`. Any other page of the site
    /// (a committed file under `/doc`, say) does not count.
    pub fn from_own_page(&self) -> bool {
        let (Some(base), Some(referer)) = (self.own_page(), self.referer.as_deref()) else {
            return false;
        };
        match referer.strip_prefix(&base) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'),
            None => false,
        }
    }

    /// Whether a person signed in: a viewer was proven, and not `anonymous`.
    pub fn signed_in(&self) -> bool {
        self.user.as_deref().is_some_and(|u| u != "anonymous")
    }

    /// Whether the answer is wanted as JSON: `?json`, or an Accept header
    /// asking for it.
    pub fn wants_json(&self) -> bool {
        self.query
            .split('&')
            .any(|p| p == "json" || p.starts_with("json="))
            || self
                .accept
                .as_deref()
                .is_some_and(|a| a.contains("application/json"))
    }

    fn is_post(&self) -> bool {
        self.method.eq_ignore_ascii_case("POST")
    }

    fn link(&self, tool: Option<&str>) -> String {
        match tool {
            Some(t) => format!("{}/ext/{NAME}/{t}", self.uri),
            None => format!("{}/ext/{NAME}", self.uri),
        }
    }
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
    /// The response as CGI output: headers, a blank line, the body.
    pub fn to_cgi(&self) -> String {
        format!(
            "Status: {} {}\r\nContent-Type: {}\r\n\r\n{}",
            self.status,
            reason_phrase(self.status),
            self.content_type,
            self.body
        )
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Internal Server Error",
    }
}

/// Answers the request in the environment; always exits 0, since Fossil
/// ignores the exit code and the page says what went wrong.
pub fn main() -> i32 {
    std::panic::set_hook(Box::new(|_| {}));
    let response = std::panic::catch_unwind(|| {
        let request = Request::from_environment();
        let fossil = configured_fossil();
        let mut stdin = std::io::stdin().lock();
        respond(&request, &mut stdin, fossil)
    })
    .unwrap_or_else(|_| Response {
        status: 500,
        content_type: "text/html",
        body: page("OCX", "<p>internal error: the page could not be made</p>"),
    });
    super::print(&response.to_cgi());
    0
}

/// The `fossil` program as [`CONFIG`] beside this program names it, else
/// as [`Fossil::locate_for_web`] finds it; never from the environment.
fn configured_fossil() -> Result<Fossil, Stop> {
    let config_file = std::env::args_os().next().map(PathBuf::from).map(|p| {
        let p = if p.is_absolute() {
            p
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        };
        p.parent().unwrap_or(Path::new("/")).join(CONFIG)
    });
    let config = match config_file.as_deref().map(std::fs::read) {
        Some(Ok(bytes)) => serde_json::from_slice::<Config>(&bytes).map_err(|e| {
            Stop::field("fossil", format!("{CONFIG} does not parse: {e}")).next(format!(
                "write {CONFIG} as {{\"fossil\": \"/absolute/path/to/fossil\"}}"
            ))
        })?,
        _ => Config::default(),
    };
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

/// The response to `request` with its body on `body`; `fossil` is the
/// program any write is stored with.
pub fn respond(request: &Request, body: &mut dyn Read, fossil: Result<Fossil, Stop>) -> Response {
    let json = request.wants_json();
    let Some(repository) = request.repository.clone() else {
        let stop = Stop::field("repository", "Fossil named no repository").next(
            "serve the page with fossil server --extroot DIR (or fossil http, or a CGI script)",
        );
        return refusal(request, json, 500, None, stop);
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let viewer = Repository::open(&cwd.join(&repository))
        .ok()
        .and_then(|repo| request.prove_viewer(&repo));
    let request = &Request {
        user: viewer,
        ..request.clone()
    };
    let cx = Context::new(
        Some(PathBuf::from(repository)),
        cwd,
        Who::Web {
            user: request.user.clone(),
        },
    )
    .with_fossil(fossil);
    let path = request.path_info.trim_matches('/');
    if path.is_empty() {
        if json {
            let mut answer = registry::call("list", Ok(Value::Object(Map::new())), &cx, false);
            if let Some(Value::Array(tools)) =
                answer.result.as_mut().and_then(|r| r.get_mut("tools"))
            {
                tools.retain(|t| {
                    t["name"]
                        .as_str()
                        .and_then(registry::find)
                        .is_some_and(offered)
                });
            }
            return json_response(status_of(&answer, false), &answer);
        }
        return Response {
            status: 200,
            content_type: "text/html",
            body: index(request, &cx),
        };
    }
    let Some(tool) = registry::find(path) else {
        let stop = Stop::field("tool", format!("there is no tool {path:?}"))
            .next("the OCX page lists every tool");
        return refusal(request, json, 404, Some(&cx), stop);
    };
    if !offered(tool) {
        let stop = Stop::field(
            "tool",
            format!(
                "{} acts on a checkout, and the web page offers no tool that does: whatever checkout its server runs in is no visitor's",
                tool.name()
            ),
        )
        .next("call it from the command line or MCP in a checkout of your own");
        return refusal(request, json, 403, Some(&cx), stop);
    }
    let flags = form_fields(tool);
    let input = if request.is_post() {
        read_body(request, body).and_then(|b| post_input(request, tool, &flags, &b))
    } else {
        form_input(tool, &flags, request.query.as_bytes(), true)
    };
    let bad_input = input.is_err();
    let given = input.as_ref().ok().cloned();
    let nothing_given = given
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty);
    if !json && !request.is_post() && nothing_given && form_fields(tool).iter().any(|f| f.required)
    {
        let mut html = tool_page_head(request, &cx);
        html += &format!(
            "<p class=\"ocx-notice\">Fill in the form to run {}.</p>\n",
            esc(tool.name())
        );
        html += &card(request, &cx, tool, true, None);
        return Response {
            status: 200,
            content_type: "text/html",
            body: page("OCX", &html),
        };
    }
    let mut notice = None;
    if tool.writes() {
        notice = if !request.is_post() {
            Some("a GET changes nothing, so this is its dry run: use the form to change something")
        } else if !request.signed_in() {
            Some("nobody is signed in, so this is its dry run: sign in to change something")
        } else if !request.from_own_page() {
            Some(
                "the request did not come from OCX's own page, so this is its dry run and nothing was written",
            )
        } else {
            None
        };
    }
    let (answer, text) = registry::call_with_text(tool.name(), input, &cx, notice.is_some());
    let lacks = lacks_capability(tool, &cx);
    let status = if bad_input {
        400
    } else {
        status_of(&answer, lacks)
    };
    if json {
        return json_response(status, &answer);
    }
    let mut html = tool_page_head(request, &cx);
    html += &format!("<h2>{}: the answer</h2>\n", esc(tool.name()));
    if let Some(n) = notice {
        html += &format!("<p class=\"ocx-notice\">{}</p>\n", esc(n));
    }
    html += &render_answer(&answer, text);
    let refill = (answer.dry_run || !answer.ok)
        .then_some(given.as_ref())
        .flatten();
    html += &card(request, &cx, tool, !answer.dry_run, refill);
    Response {
        status,
        content_type: "text/html",
        body: page("OCX", &html),
    }
}

/// Whether the page offers `tool`: every tool but those acting on a checkout.
fn offered(tool: &dyn Entry) -> bool {
    !tool.checkout()
}

/// A tool's page begins: a button back to the list, the bar, the viewer.
fn tool_page_head(request: &Request, cx: &Context) -> String {
    format!(
        "<p><a class=\"ocx-button\" href=\"{}\">&larr; All tools</a></p>\n{}{}",
        esc(&request.link(None)),
        bar(request),
        who(request, cx)
    )
}

/// The status an answer is given: 200 when the tool did its work, 403 when
/// the viewer lacks what the tool needs, 400 for any other refusal.
fn status_of(answer: &Answer, lacks: bool) -> u16 {
    match (&answer.stopped, lacks) {
        (None, _) => 200,
        (Some(_), true) => 403,
        (Some(_), false) => 400,
    }
}

fn lacks_capability(tool: &dyn Entry, cx: &Context) -> bool {
    match tool.needs() {
        Needs::Nothing => false,
        Needs::Any(letters) => cx
            .caller()
            .map(|c| !c.capabilities.has_any(letters))
            .unwrap_or(true),
    }
}

fn json_response(status: u16, answer: &Answer) -> Response {
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
            field: stop.field.clone(),
            reason: stop.reason.clone(),
        }),
        next_step: stop.next_step.clone(),
        took_ms: 0,
    };
    if json {
        return json_response(status, &answer);
    }
    let mut html = match cx {
        Some(cx) => tool_page_head(request, cx),
        None => format!(
            "<p><a class=\"ocx-button\" href=\"{}\">&larr; All tools</a></p>\n",
            esc(&request.link(None))
        ),
    };
    html += &render_answer(&answer, None);
    Response {
        status,
        content_type: "text/html",
        body: page("OCX", &html),
    }
}

/// The body of a POST, refused when its length is unknown or over [`BODY_LIMIT`].
fn read_body(request: &Request, body: &mut dyn Read) -> Result<Vec<u8>, Stop> {
    let length = match request.content_length.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(n) => n.parse::<usize>().map_err(|_| {
            Stop::field("input", format!("the body's length {n:?} is not a number"))
                .next("send the form again")
        })?,
    };
    if length > BODY_LIMIT {
        return Err(Stop::field(
            "input",
            format!("the body holds {length} bytes, over the limit of {BODY_LIMIT}"),
        )
        .next("send less: split the text, or attach it elsewhere"));
    }
    let mut bytes = Vec::with_capacity(length);
    body.take(length as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| Stop::field("input", format!("cannot read the body: {e}")))?;
    Ok(bytes)
}

/// A POST's input: a form, or one JSON object.
fn post_input(
    request: &Request,
    tool: &dyn Entry,
    flags: &[Flag],
    body: &[u8],
) -> Result<Value, Stop> {
    let content_type = request
        .content_type
        .as_deref()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match content_type.as_str() {
        "application/x-www-form-urlencoded" => form_input(tool, flags, body, false),
        "application/json" => registry::parse_input(body),
        "" if body.is_empty() => Ok(Value::Object(Map::new())),
        other => Err(Stop::field(
            "input",
            format!("a body of type {other:?} is neither a form nor JSON"),
        )
        .next("send application/x-www-form-urlencoded or application/json")),
    }
}

/// The fields of a tool's form: each top-level field of its input, `dry_run`
/// among them (an object's fields are given together, as JSON).
fn form_fields(tool: &dyn Entry) -> Vec<Flag> {
    flags_of(tool.input_schema(), &[])
        .into_iter()
        .filter(|f| f.path.len() == 1)
        .collect()
}

/// A tool's input from an `application/x-www-form-urlencoded` text: each
/// field named as its form names it, refused naming it when it is unknown,
/// not UTF-8 or holds a NUL. An empty text leaves its field out; in a
/// query string, `json` is the page's own and no field.
fn form_input(tool: &dyn Entry, flags: &[Flag], text: &[u8], query: bool) -> Result<Value, Stop> {
    let mut given: Vec<(usize, Vec<String>)> = Vec::new();
    for pair in text.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let mut parts = pair.splitn(2, |b| *b == b'=');
        let raw_name = decode(parts.next().unwrap_or_default());
        let raw_value = decode(parts.next().unwrap_or_default());
        let name = String::from_utf8(raw_name).map_err(|_| {
            Stop::field("input", "a field's name is not UTF-8")
                .next("name each field as the tool's form does")
        })?;
        if query && name == "json" {
            continue;
        }
        let Some(index) = flags.iter().position(|f| f.path[0] == name) else {
            let shown: String = name.chars().filter(|c| !c.is_control()).take(80).collect();
            return Err(Stop::field(
                shown.clone(),
                format!("{shown:?} is not a field of {}", tool.name()),
            )
            .next("leave the field out; the tool's card lists its fields"));
        };
        let value = String::from_utf8(raw_value).map_err(|_| {
            Stop::field(name.clone(), "is not UTF-8").next("give the text as UTF-8")
        })?;
        if value.contains('\0') {
            return Err(
                Stop::field(name, "holds a NUL character").next("remove the NUL from the text")
            );
        }
        match given.iter_mut().find(|(i, _)| *i == index) {
            Some((_, values)) => values.push(value),
            None => given.push((index, vec![value])),
        }
    }
    let mut input = Value::Object(Map::new());
    for (index, values) in given {
        let flag = &flags[index];
        let field = flag.path.join(".");
        let texts: Vec<&str> = values
            .iter()
            .map(String::as_str)
            .filter(|t| !t.trim().is_empty() || flag.kind == Kind::Text)
            .filter(|t| !t.is_empty())
            .collect();
        if texts.is_empty() {
            continue;
        }
        let texts: Vec<&str> = if flag.kind == Kind::Boolean {
            texts
                .iter()
                .map(|t| if *t == "on" { "true" } else { t })
                .collect()
        } else {
            texts
        };
        let value = to_json(&field, flag.kind, &texts)?;
        set(&mut input, &flag.path, value, &field)?;
    }
    Ok(input)
}

/// Percent-decodes a form's text, `+` standing for a space.
fn decode(text: &[u8]) -> Vec<u8> {
    let spaced: Vec<u8> = text
        .iter()
        .map(|b| if *b == b'+' { b' ' } else { *b })
        .collect();
    percent_encoding::percent_decode(&spaced).collect()
}

/// The OCX page: every tool as a card.
fn index(request: &Request, cx: &Context) -> String {
    let mut html = String::new();
    html += &bar(request);
    html += &who(request, cx);
    html += "<p>Every tool OCX offers on this repository. A tool that changes something does so only from a form on this page, as you.</p>\n";
    for tool in TOOLS.iter().filter(|t| offered(**t)) {
        html += &card(request, cx, *tool, true, None);
    }
    page("OCX", &html)
}

/// The bar linking each tool.
fn bar(request: &Request) -> String {
    let mut html = format!(
        "<nav class=\"ocx-bar\"><a href=\"{}\">OCX</a>",
        esc(&request.link(None))
    );
    for tool in TOOLS.iter().filter(|t| offered(**t)) {
        html += &format!(
            " <a href=\"{}\">{}</a>",
            esc(&request.link(Some(tool.name()))),
            esc(tool.name())
        );
    }
    html + "</nav>\n"
}

/// Who the viewer is, as the page proved and as the repository grants.
fn who(request: &Request, cx: &Context) -> String {
    let shown = request
        .capabilities
        .as_deref()
        .map(|c| format!(" (Fossil shows capabilities {})", esc(c)))
        .unwrap_or_default();
    let held = match cx.caller() {
        Ok(c) if c.capabilities.as_str().is_empty() => "; the repository grants none".to_string(),
        Ok(c) => format!(
            "; the repository grants <code>{}</code>",
            esc(c.capabilities.as_str())
        ),
        Err(stop) => format!("; {}", esc(&stop.reason)),
    };
    match request.user.as_deref() {
        Some(u) => {
            format!(
                "<p class=\"ocx-who\">Signed in as <b>{}</b>{shown}{held}.</p>\n",
                esc(u)
            )
        }
        None => format!(
            "<p class=\"ocx-who\">Nobody is signed in{shown}{held}; sign in to change anything.</p>\n"
        ),
    }
}

/// A tool's card: what it does, what it needs (held or not), what it would
/// do now when it changes something and needs no input (`now`), and its
/// form (filled in from `given`), or why there is none.
fn card(
    request: &Request,
    cx: &Context,
    tool: &dyn Entry,
    now: bool,
    given: Option<&Value>,
) -> String {
    let name = tool.name();
    let mut html = format!(
        "<section class=\"ocx-card\" id=\"tool-{0}\">\n<h3><a href=\"{1}\">{0}</a></h3>\n<p>{2}</p>\n",
        esc(name),
        esc(&request.link(Some(name))),
        esc(tool.summary())
    );
    let caller = cx.caller();
    let needs = match tool.needs() {
        Needs::Nothing => "nothing".to_string(),
        Needs::Any(letters) => letters
            .chars()
            .map(|l| {
                let held = caller.as_ref().is_ok_and(|c| c.capabilities.has(l));
                format!(
                    "<span class=\"{}\" title=\"{}\">{l} ({})</span>",
                    if held { "ocx-held" } else { "ocx-not-held" },
                    if held {
                        "you hold it"
                    } else {
                        "you do not hold it"
                    },
                    if held { "held" } else { "not held" }
                )
            })
            .collect::<Vec<_>>()
            .join(" or "),
    };
    html += &format!(
        "<p class=\"ocx-needs\">Needs: {needs}. {}</p>\n",
        if tool.writes() {
            "It may change the repository."
        } else {
            "It only reads."
        }
    );
    let lacks = lacks_capability(tool, cx);
    let refused = if tool.writes() && !request.signed_in() {
        Some("sign in to use it: nobody who has not signed in changes anything here".to_string())
    } else if lacks {
        Some(match &caller {
            Ok(c) => format!(
                "you ({}) hold none of {}, which it needs",
                c.login,
                tool.needs().describe()
            ),
            Err(stop) => stop.reason.clone(),
        })
    } else {
        None
    };
    let fields = form_fields(tool);
    let needs_input = fields.iter().any(|f| f.required);
    let mut refused = refused;
    if now && tool.writes() && !needs_input && refused.is_none() {
        let answer = registry::call(name, Ok(Value::Object(Map::new())), cx, true);
        let nothing_to_fill = fields.iter().all(|f| f.path[0] == "dry_run");
        if let (Some(s), true) = (&answer.stopped, nothing_to_fill) {
            refused = Some(format!(
                "it has nothing to fill in, and it would stop: {}",
                s.reason
            ));
        }
        html += "<div class=\"ocx-now\"><p>What it would do now:</p>\n";
        if let Some(s) = &answer.stopped {
            html += &format!("<p>it would stop: {}</p>\n", esc(&s.reason));
        } else if answer.log.is_empty() {
            html += "<p>nothing</p>\n";
        } else {
            html += "<ul>\n";
            for op in &answer.log {
                html += &format!("<li>{}</li>\n", esc(&op.to_string()));
            }
            html += "</ul>\n";
        }
        html += "</div>\n";
    }
    match refused {
        Some(why) => {
            html += &format!("<p class=\"ocx-noform\">No form: {}.</p>\n", esc(&why));
        }
        None => html += &form(request, tool, &fields, given),
    }
    html + "</section>\n"
}

/// A tool's form: a POST to its own page, a field for each of its
/// input's, filled in from `given` (what the request gave) when there is one.
fn form(request: &Request, tool: &dyn Entry, fields: &[Flag], given: Option<&Value>) -> String {
    let name = tool.name();
    let mut html = format!(
        "<form class=\"ocx-form\" method=\"post\" action=\"{}\" enctype=\"application/x-www-form-urlencoded\">\n",
        esc(&request.link(Some(name)))
    );
    for f in fields {
        let field = &f.path[0];
        let id = esc(&format!("{name}-{field}"));
        let doc = esc(&f.doc);
        let value = given.and_then(|g| g.get(field));
        let text = esc(&value.map(field_text).unwrap_or_default());
        let label = |extra: &str| {
            format!(
                "<label for=\"{id}\" title=\"{doc}\">{}{}{extra}</label>\n",
                esc(field),
                if f.required { " (required)" } else { "" }
            )
        };
        let attrs = format!("id=\"{id}\" name=\"{}\" title=\"{doc}\"", esc(field));
        html += &match f.kind {
            Kind::Boolean => format!(
                "<label title=\"{doc}\"><input type=\"checkbox\" {attrs} value=\"true\"{}> {}</label>\n",
                if value == Some(&Value::Bool(true)) {
                    " checked"
                } else {
                    ""
                },
                esc(field)
            ),
            Kind::Integer => format!(
                "{}<input type=\"number\" step=\"1\" {attrs} value=\"{text}\">\n",
                label("")
            ),
            Kind::Json => format!(
                "{}<textarea rows=\"3\" {attrs}>{text}</textarea>\n",
                label(" (JSON)")
            ),
            Kind::List => format!(
                "{}<input type=\"text\" {attrs} value=\"{text}\">\n",
                label(" (separated by spaces)")
            ),
            Kind::Text if f.doc.contains("Markdown") => {
                format!(
                    "{}<textarea rows=\"5\" {attrs}>{text}</textarea>\n",
                    label("")
                )
            }
            Kind::Text => format!(
                "{}<input type=\"text\" {attrs} value=\"{text}\">\n",
                label("")
            ),
        };
        html += &format!("<small>{doc}</small>\n");
    }
    html += &format!(
        "<p><button type=\"submit\" id=\"{0}-submit\">Run {0}</button></p>\n</form>\n",
        esc(name)
    );
    html
}

/// A field's value as its form shows it: text as it is, a list's items
/// separated by spaces, anything else as JSON.
fn field_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// An answer on the page: the result (or why it stopped) before the log.
fn render_answer(answer: &Answer, text: Option<String>) -> String {
    let mut html = String::new();
    match &answer.stopped {
        Some(s) => {
            html += "<div class=\"ocx-answer ocx-stopped\">\n";
            match &s.field {
                Some(f) => {
                    html += &format!(
                        "<p>Stopped: <b class=\"ocx-field\">{}</b>: {}</p>\n",
                        esc(f),
                        esc(&s.reason)
                    )
                }
                None => html += &format!("<p>Stopped: {}</p>\n", esc(&s.reason)),
            }
            if let Some(n) = &answer.next_step {
                html += &format!("<p>Next: {}</p>\n", esc(n));
            }
        }
        None => {
            html += "<div class=\"ocx-answer ocx-ok\">\n";
            html += &format!(
                "<pre class=\"ocx-result\">{}</pre>\n",
                esc(text.as_deref().unwrap_or(""))
            );
        }
    }
    if answer.dry_run {
        html += "<p class=\"ocx-dry\">Dry run: nothing was written.</p>\n";
    }
    if !answer.log.is_empty() {
        html += "<p>Log:</p>\n<ul class=\"ocx-log\">\n";
        for op in &answer.log {
            html += &format!("<li>{}</li>\n", esc(&op.to_string()));
        }
        html += "</ul>\n";
    }
    html + "</div>\n"
}

/// A whole page: Fossil wraps a `text/html` body whose first element is a
/// `fossil-doc` div in the site's skin, titled by its `data-title`.
fn page(title: &str, inner: &str) -> String {
    format!(
        "<div class=\"fossil-doc\" data-title=\"{}\">\n<style>{STYLE}</style>\n{inner}</div>\n",
        esc(title)
    )
}

/// The page's style: layout only, every colour the skin's own.
const STYLE: &str = "
.ocx-bar { margin: 0.5em 0; }
.ocx-bar a { margin-right: 0.8em; }
.ocx-card { border: 1px solid currentColor; border-radius: 6px; padding: 0.4em 1em; margin: 1em 0; }
.ocx-card h3 { margin: 0.3em 0; }
.ocx-held { font-weight: bold; }
.ocx-not-held { opacity: 0.6; text-decoration: line-through; }
.ocx-form label { display: block; margin-top: 0.5em; font-weight: bold; }
.ocx-form small { display: block; opacity: 0.75; }
.ocx-form input[type=text], .ocx-form input[type=number], .ocx-form textarea {
  width: 100%; box-sizing: border-box; color: inherit; background: transparent;
  border: 1px solid currentColor; border-radius: 3px; padding: 0.2em; font: inherit; }
.ocx-answer { border-left: 4px solid currentColor; padding: 0.1em 0.8em; margin: 1em 0; }
.ocx-result { white-space: pre-wrap; }
.ocx-notice, .ocx-noform, .ocx-dry { font-style: italic; }
.ocx-button { display: inline-block; border: 1px solid currentColor; border-radius: 4px; padding: 0.1em 0.6em; text-decoration: none; color: inherit; }
";

/// `text` escaped as HTML, for an element's text or an attribute's value.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(referer: &str, https: bool) -> Request {
        Request {
            host: Some("example.org".into()),
            uri: "/repo".into(),
            https,
            referer: Some(referer.into()),
            ..Request::default()
        }
    }

    #[test]
    fn only_ocxs_own_page_counts_as_the_referer() {
        assert!(request("http://example.org/repo/ext/ocx-cgi", false).from_own_page());
        assert!(request("http://example.org/repo/ext/ocx-cgi/post", false).from_own_page());
        assert!(request("http://example.org/repo/ext/ocx-cgi?x", false).from_own_page());
        assert!(!request("http://example.org/repo/ext/ocx-cgi-next", false).from_own_page());
        assert!(!request("http://example.org/repo/doc/tip/x.html", false).from_own_page());
        assert!(!request("http://evil.org/repo/ext/ocx-cgi", false).from_own_page());
        assert!(!request("http://example.org/repo/ext/ocx-cgi", true).from_own_page());
        assert!(request("https://example.org/repo/ext/ocx-cgi", true).from_own_page());
    }

    #[test]
    fn only_a_loopback_address_is_local() {
        let from = |addr: &str| Request {
            remote_addr: Some(addr.into()),
            ..Request::default()
        };
        assert!(from("127.0.0.1").is_loopback());
        assert!(from("::1").is_loopback());
        assert!(from("::ffff:127.0.0.1").is_loopback());
        assert!(!from("10.1.2.3").is_loopback());
        assert!(!from("::ffff:10.1.2.3").is_loopback());
        assert!(!from("nil").is_loopback());
        assert!(!Request::default().is_loopback());
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
