//! The page's request: the variables Fossil sets, the viewer proven from them, and a tool's input read from a query, a form or JSON.

#![allow(clippy::disallowed_methods)] // the one reader of a CGI request's variables, as docs/architecture.md says

use super::{BODY_LIMIT, NAME, NEXT_NAME};
use crate::fields::{Flag, Kind, flags_of, set, to_json};
use crate::fossil::Repository;
use crate::input::parse_input;
use crate::stop::Stop;
use crate::tool::Entry;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

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
    /// Whether the page is served as `ocx-cgi-next`, the release staged
    /// beside the current one.
    pub next: bool,
    /// The release this program is, when it was staged into a release root.
    pub release: Option<crate::tools::release::Built>,
    /// The page's working directory, which Fossil chose.
    pub cwd: PathBuf,
    /// The path the page was started as, absolute: where its
    /// configuration lies.
    pub invoked_as: PathBuf,
}

impl Request {
    /// The request as Fossil gives it in this process's environment, to
    /// the program started as its first argument.
    pub fn from_environment() -> Request {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let invoked_as = cwd.join(
            std::env::args_os()
                .next()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(NAME)),
        );
        Request::from_variables(|name| std::env::var_os(name), invoked_as, cwd)
    }

    /// The request as Fossil gives it in the variables `var` reads, to the
    /// program started as `invoked_as` (absolute) in directory `cwd`.
    pub fn from_variables(
        var: impl Fn(&str) -> Option<OsString>,
        invoked_as: PathBuf,
        cwd: PathBuf,
    ) -> Request {
        let var = |name: &str| var(name).map(|v| v.to_string_lossy().into_owned());
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
            next: invoked_as.file_name() == Some(NEXT_NAME.as_ref()),
            release: crate::tools::release::of_this_program(),
            cwd,
            invoked_as,
        }
    }

    /// The page's configuration file, beside the program Fossil started.
    pub fn config_file(&self) -> PathBuf {
        self.invoked_as
            .parent()
            .unwrap_or(Path::new("/"))
            .join(super::CONFIG)
    }

    /// The name the page is served under: `ocx-cgi`, or `ocx-cgi-next`.
    pub fn served_as(&self) -> &'static str {
        if self.next { NEXT_NAME } else { NAME }
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
    /// `/ext/ocx-cgi` (or `/ext/ocx-cgi-next`, as it is served).
    pub fn own_page(&self) -> Option<String> {
        let host = self.host.as_deref()?;
        let scheme = if self.https { "https" } else { "http" };
        Some(format!(
            "{scheme}://{host}{}/ext/{}",
            self.uri,
            self.served_as()
        ))
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

    /// Whether the request only reads and never waits: a GET of a page OCX
    /// draws (the console, the list of tools, a run's page) or of a tool
    /// that writes nothing, neither the long-poll `wait` nor asking to wait
    /// for a run's next entry (`within`). Such a request's reads share one
    /// read transaction, begun once its repository is open (HISTORY 412,
    /// 478); a GET of a tool that writes is its dry run, but may fetch a
    /// pattern for seconds, and is left out.
    pub(super) fn reads_at_once(&self) -> bool {
        let path = self.path_info.trim_matches('/');
        let reads = match path {
            "" | "console" | super::TOOL_LIST => true,
            "wait" => false,
            p if p.starts_with("run/") => true,
            p => crate::registry::find(p).is_some_and(|tool| !tool.writes()),
        };
        self.method.eq_ignore_ascii_case("GET")
            && reads
            && !self
                .query
                .split('&')
                .any(|p| p == "within" || p.starts_with("within="))
    }

    pub(super) fn is_post(&self) -> bool {
        self.method.eq_ignore_ascii_case("POST")
    }

    pub(super) fn link(&self, tool: Option<&str>) -> String {
        match tool {
            Some(t) => format!("{}/ext/{}/{t}", self.uri, self.served_as()),
            None => format!("{}/ext/{}", self.uri, self.served_as()),
        }
    }
}

/// Why a request's body was not taken.
#[derive(Debug)]
pub enum BodyRefused {
    /// The announced length is not a number.
    NotANumber(String),
    /// The announced length is over the limit.
    Over(u64),
    /// The body could not be read.
    Unreadable(std::io::Error),
    /// The body ended before the length announced.
    Short,
}

/// A request's body: exactly the `CONTENT_LENGTH` announced (none: empty),
/// never a byte past it, refused (nothing read) when that is over `limit`.
pub fn announced_body(
    content_length: Option<&str>,
    body: &mut dyn Read,
    limit: u64,
) -> Result<Vec<u8>, BodyRefused> {
    let length = match content_length.map(str::trim) {
        None | Some("") => 0,
        Some(n) => n
            .parse::<u64>()
            .map_err(|_| BodyRefused::NotANumber(n.to_string()))?,
    };
    if length > limit {
        return Err(BodyRefused::Over(length));
    }
    let mut bytes = Vec::with_capacity(length as usize);
    body.take(length)
        .read_to_end(&mut bytes)
        .map_err(BodyRefused::Unreadable)?;
    if (bytes.len() as u64) < length {
        return Err(BodyRefused::Short);
    }
    Ok(bytes)
}

/// The body of a POST, refused when its length is not a number, is over
/// [`BODY_LIMIT`], or is more than came.
pub(super) fn read_body(request: &Request, body: &mut dyn Read) -> Result<Vec<u8>, Stop> {
    announced_body(request.content_length.as_deref(), body, BODY_LIMIT as u64).map_err(
        |e| match e {
            BodyRefused::NotANumber(n) => {
                Stop::field("input", format!("the body's length {n:?} is not a number"))
                    .next("send the form again")
            }
            BodyRefused::Over(length) => Stop::field(
                "input",
                format!("the body holds {length} bytes, over the limit of {BODY_LIMIT}"),
            )
            .next("send less: split the text, or attach it elsewhere"),
            BodyRefused::Unreadable(e) => {
                Stop::field("input", format!("cannot read the body: {e}"))
            }
            BodyRefused::Short => Stop::field("input", "the body is shorter than it announced")
                .next("send the form again"),
        },
    )
}

/// A POST's input: a form, or one JSON object.
pub(super) fn post_input(
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
        "application/json" => parse_input(body),
        "" if body.is_empty() => Ok(Value::Object(Map::new())),
        other => Err(Stop::field(
            "input",
            format!("a body of type {other:?} is neither a form nor JSON"),
        )
        .next("send application/x-www-form-urlencoded or application/json")),
    }
}

/// The fields of a tool's form: each top-level field of its input, `dry_run`
/// among them (an object's fields are given together, as JSON). Read from
/// its schema the first time, then kept for the life of the process (a
/// page server's), as the schema is.
pub(super) fn form_fields(tool: &dyn Entry) -> &'static [Flag] {
    static FORMS: Mutex<BTreeMap<&'static str, &'static [Flag]>> = Mutex::new(BTreeMap::new());
    let mut forms = FORMS.lock().unwrap_or_else(PoisonError::into_inner);
    forms.entry(tool.name()).or_insert_with(|| {
        let fields: Vec<Flag> = flags_of(tool.input_schema(), &[])
            .into_iter()
            .filter(|f| f.path.len() == 1)
            .collect();
        Box::leak(fields.into_boxed_slice())
    })
}

/// A tool's input from an `application/x-www-form-urlencoded` text: each
/// field named as its form names it, refused naming it when it is unknown,
/// not UTF-8 or holds a NUL. An empty text leaves its field out; in a
/// query string, `json` is the page's own and no field.
pub(super) fn form_input(
    tool: &dyn Entry,
    flags: &[Flag],
    text: &[u8],
    query: bool,
) -> Result<Value, Stop> {
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
    fn the_next_release_counts_only_its_own_page() {
        let next = |referer: &str| Request {
            next: true,
            ..request(referer, false)
        };
        assert!(next("http://example.org/repo/ext/ocx-cgi-next/post").from_own_page());
        assert!(!next("http://example.org/repo/ext/ocx-cgi/post").from_own_page());
        assert_eq!(next("").link(Some("post")), "/repo/ext/ocx-cgi-next/post");
    }

    #[test]
    fn only_a_get_that_neither_writes_nor_waits_reads_at_once() {
        let asked = |method: &str, path: &str, query: &str| Request {
            method: method.into(),
            path_info: path.into(),
            query: query.into(),
            ..Request::default()
        };
        for (path, query) in [
            ("", ""),
            ("/", "json"),
            ("/console", ""),
            ("/tools", ""),
            ("/thread", "of=abc"),
            ("/run/abc", "json&after=3"),
        ] {
            assert!(asked("GET", path, query).reads_at_once(), "{path}?{query}");
        }
        for (method, path, query) in [
            ("POST", "/console", ""),
            ("POST", "/thread", ""),
            ("GET", "/wait", ""),
            ("GET", "/run/abc", "json&within=25"),
            ("GET", "/run", "record=abc&within"),
            ("GET", "/create", "pattern=https://example.org/p"),
            ("GET", "/post", ""),
            ("GET", "/no-such-tool", ""),
        ] {
            assert!(
                !asked(method, path, query).reads_at_once(),
                "{method} {path}?{query}"
            );
        }
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
}
