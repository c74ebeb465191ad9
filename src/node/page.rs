//! The one client of OCX's page on a server (`/ext/ocx-cgi`): a tool called
//! with JSON, its answer read as the crate's own [`Answer`], and a stop
//! read by its kind and field, never by its words. Unsigned for a person's
//! clone and `register`; signed in as an agent machine's login (Fossil's
//! login cookie) for the machine's node, signing in again once when the
//! page answers 401 or 403, the status it gives a caller who lacks what a
//! request needs.

use crate::answer::{Answer, Stopped};
use crate::stop::{Stop, StopKind};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

/// OCX's page on a server: `/ext/` and this.
pub const PAGE: &str = "ocx-cgi";

/// How a server serves OCX's page, said where it does not.
pub const SERVE_PAGE: &str = "have the server serve OCX's page (fossil server --extroot DIR, ocx-cgi linked there), then try again";

/// The most bytes of an answer read.
const ANSWER_LIMIT: u64 = 16 << 20;

/// Why the page did not give what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PageError {
    /// The server serves no OCX page (a 404 that is not OCX's answer).
    #[error("{server} serves no OCX page at /ext/{PAGE}")]
    NoPage { server: String },
    /// The server gave no answer: it could not be reached, it broke off
    /// its answer, or a gateway before it said it is down (HTTP 502, 503
    /// or 504); asked again later, it may answer.
    #[error("the server {server} does not answer: {why}")]
    Away { server: String, why: String },
    /// The server answered otherwise than OCX's page, or would not take
    /// the login's sign-in.
    #[error("the server {server}: {why}")]
    Unreachable { server: String, why: String },
    /// The page answered, stopping what was asked.
    #[error("the server {} refused {}: {}", .0.server, .0.tool, .0.stopped.reason)]
    Stopped(Box<PageStop>),
}

/// What the page said when it stopped a call: refused or failed, the
/// field at fault, the reason as the server says it, what to do instead.
#[derive(Debug, Clone)]
pub struct PageStop {
    pub server: String,
    pub tool: String,
    pub stopped: Stopped,
    pub next_step: Option<String>,
}

impl PageError {
    /// A stop the page answered keeps the server's own kind. Anything
    /// else is the caller's to mend, naming `server`: the server they
    /// named is away, serves no OCX page, or does not take their sign-in
    /// (start it, serve the page, name another).
    pub fn kind(&self) -> StopKind {
        match self {
            PageError::Stopped(s) => s.stopped.kind,
            PageError::NoPage { .. } | PageError::Away { .. } | PageError::Unreachable { .. } => {
                StopKind::Refused
            }
        }
    }

    /// Whether the page refused (as opposed to failing, or not answering).
    pub fn refused(&self) -> bool {
        matches!(self, PageError::Stopped(s) if s.stopped.kind == StopKind::Refused)
    }

    /// Whether the server gave no answer ([`PageError::Away`]).
    pub fn away(&self) -> bool {
        matches!(self, PageError::Away { .. })
    }
}

impl From<PageError> for Stop {
    /// A stop naming `server`, of the error's kind: the server's own
    /// reason when it stopped, else why it could not be asked, and what to do.
    fn from(e: PageError) -> Stop {
        let next = match &e {
            PageError::NoPage { .. } => SERVE_PAGE.to_string(),
            PageError::Stopped(s) if s.next_step.is_some() => {
                s.next_step.clone().unwrap_or_default()
            }
            _ => "check that the server answers and serves OCX's page, then try again".into(),
        };
        let reason = match &e {
            PageError::Stopped(s) => format!("{}'s {}: {}", s.server, s.tool, s.stopped.reason),
            other => other.to_string(),
        };
        Stop {
            kind: e.kind(),
            ..Stop::field("server", reason).next(next)
        }
    }
}

/// A login the page is signed in to as, and the cookie it was given.
struct SignIn {
    login: String,
    password: String,
    cookie: Mutex<Option<String>>,
}

/// OCX's page on one server.
pub struct Page {
    /// The server's address, no trailing `/`.
    url: String,
    agent: ureq::Agent,
    sign_in: Option<SignIn>,
}

impl Page {
    /// The page of the server at `url`, asked unsigned, each request
    /// answered within `within`.
    pub fn unsigned(url: &str, within: Duration) -> Page {
        Page {
            url: url.trim_end_matches('/').to_string(),
            agent: crate::http::agent(Some(within)),
            sign_in: None,
        }
    }

    /// The page of the server at `url`, signed in as `login`.
    pub fn signed_in(url: &str, login: &str, password: &str, within: Duration) -> Page {
        Page {
            sign_in: Some(SignIn {
                login: login.to_string(),
                password: password.to_string(),
                cookie: Mutex::new(None),
            }),
            ..Page::unsigned(url, within)
        }
    }

    /// The server's address, no trailing `/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The login the page is signed in to as, if any.
    pub fn login(&self) -> Option<&str> {
        self.sign_in.as_ref().map(|s| s.login.as_str())
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> PageError {
        PageError::Unreachable {
            server: self.url.clone(),
            why: why.to_string(),
        }
    }

    fn away(&self, why: impl std::fmt::Display) -> PageError {
        PageError::Away {
            server: self.url.clone(),
            why: why.to_string(),
        }
    }

    /// A request that failed as `e` says: the server gave no answer when
    /// the connection or its answer failed, else it could not be asked.
    fn failed(&self, e: ureq::Error) -> PageError {
        use ureq::Error as E;
        match e {
            E::Io(_)
            | E::Timeout(_)
            | E::HostNotFound
            | E::ConnectionFailed
            | E::Protocol(_)
            | E::BodyStalled => self.away(e),
            other => self.unreachable(other),
        }
    }

    /// The result of the server's `tool` asked with `input`, read as `T`.
    pub fn call<T: DeserializeOwned>(&self, tool: &str, input: &Value) -> Result<T, PageError> {
        let (status, text) = self.send(&format!("{tool}?json"), Some(input))?;
        let answer: Answer = match serde_json::from_str(&text) {
            Ok(a) => a,
            Err(_) if status == 404 => {
                return Err(PageError::NoPage {
                    server: self.url.clone(),
                });
            }
            Err(_) => {
                return Err(
                    self.unreachable(format!("its {tool} (HTTP {status}) is not OCX's answer"))
                );
            }
        };
        if let Some(stopped) = answer.stopped {
            return Err(PageError::Stopped(Box::new(PageStop {
                server: self.url.clone(),
                tool: tool.to_string(),
                stopped,
                next_step: answer.next_step,
            })));
        }
        if !answer.ok || answer.tool != tool {
            return Err(self.unreachable(format!("its {tool} answered for another tool")));
        }
        serde_json::from_value(answer.result.unwrap_or(Value::Null))
            .map_err(|e| self.unreachable(format!("its {tool} does not read: {e}")))
    }

    /// The server's whole answer to `tool` asked with `input`: its result,
    /// or its refusal, as the page gave it.
    pub fn answer(&self, tool: &str, input: &Value) -> Result<Answer, PageError> {
        let (status, text) = self.send(&format!("{tool}?json"), Some(input))?;
        match serde_json::from_str::<Answer>(&text) {
            Ok(a) if a.tool == tool => Ok(a),
            Ok(_) => Err(self.unreachable(format!("its {tool} answered for another tool"))),
            Err(_) if status == 404 => Err(PageError::NoPage {
                server: self.url.clone(),
            }),
            Err(_) => {
                Err(self.unreachable(format!("its {tool} (HTTP {status}) is not OCX's answer")))
            }
        }
    }

    /// What a GET of the page's `path` answers (200), read as `T`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, PageError> {
        let (status, text) = self.send(path, None)?;
        if status != 200 {
            return Err(self.unreachable(format!("its {path} answered HTTP {status}")));
        }
        serde_json::from_str(&text)
            .map_err(|_| self.unreachable(format!("its {path} is not OCX's answer")))
    }

    /// Sends one request to the page: a POST of `body` as JSON, or a GET;
    /// its status and text. Signed in, it signs in again once when the
    /// page answers 401 or 403.
    fn send(&self, path: &str, body: Option<&Value>) -> Result<(u16, String), PageError> {
        let url = format!("{}/ext/{PAGE}/{path}", self.url);
        for attempt in 0..2 {
            let cookie = match &self.sign_in {
                None => None,
                Some(s) if attempt == 0 => Some(self.cookie(s)?),
                Some(s) => Some(self.sign_in_as(s)?),
            };
            let sent = match body {
                Some(b) => {
                    let mut request = self
                        .agent
                        .post(&url)
                        .header("Content-Type", "application/json");
                    if let Some(c) = &cookie {
                        request = request.header("Cookie", c).header("Referer", &url);
                    }
                    request.send(b.to_string().as_bytes())
                }
                None => {
                    let mut request = self.agent.get(&url);
                    if let Some(c) = &cookie {
                        request = request.header("Cookie", c);
                    }
                    request.call()
                }
            };
            let mut response = sent.map_err(|e| self.failed(e))?;
            let status = response.status().as_u16();
            let text = response
                .body_mut()
                .with_config()
                .limit(ANSWER_LIMIT)
                .read_to_string()
                .map_err(|e| self.failed(e))?;
            if matches!(status, 502..=504) && serde_json::from_str::<Answer>(&text).is_err() {
                return Err(self.away(format!("HTTP {status} from before it")));
            }
            if cookie.is_some() && attempt == 0 && (status == 401 || status == 403) {
                continue;
            }
            return Ok((status, text));
        }
        Err(self.unreachable(format!(
            "it does not take {}'s sign-in",
            self.login().unwrap_or("nobody")
        )))
    }

    fn cookie(&self, s: &SignIn) -> Result<String, PageError> {
        let kept = s.cookie.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match kept {
            Some(c) => Ok(c),
            None => self.sign_in_as(s),
        }
    }

    /// Signs in (Fossil's `/login`), keeping the login cookie it sets.
    fn sign_in_as(&self, s: &SignIn) -> Result<String, PageError> {
        let response = self
            .agent
            .post(&format!("{}/login", self.url))
            .send_form([
                ("u", s.login.as_str()),
                ("p", s.password.as_str()),
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
                self.unreachable(format!(
                    "signing in as {} set no login cookie (HTTP {})",
                    s.login,
                    response.status().as_u16()
                ))
            })?;
        *s.cookie.lock().unwrap_or_else(|e| e.into_inner()) = Some(cookie.clone());
        Ok(cookie)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_the_page_gives_reads_back_as_the_answer_it_was() {
        let text = r#"{"ok": false, "tool": "collect", "dry_run": false, "log": [],
            "result": null, "stopped": {"kind": "refused", "field": "login", "reason": "no"},
            "next_step": "wait", "took_ms": 3}"#;
        let answer: Answer = serde_json::from_str(text).unwrap();
        let stopped = answer.stopped.unwrap();
        assert_eq!(stopped.kind, StopKind::Refused);
        assert_eq!(stopped.field.as_deref(), Some("login"));
        let e = PageError::Stopped(Box::new(PageStop {
            server: "http://s".into(),
            tool: "collect".into(),
            stopped,
            next_step: answer.next_step,
        }));
        assert!(e.refused());
        let stop = Stop::from(e);
        assert_eq!(stop.field.as_deref(), Some("server"));
        assert_eq!(stop.next_step.as_deref(), Some("wait"));
        let absent = Stop::from(PageError::NoPage {
            server: "http://s".into(),
        });
        assert!(absent.reason.contains("serves no OCX page at /ext/ocx-cgi"));
        assert_eq!(absent.next_step.as_deref(), Some(SERVE_PAGE));
    }
}
