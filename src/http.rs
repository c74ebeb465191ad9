//! The one way OCX makes an HTTP client (to a Fossil server's page, to a
//! local model, to a pattern's URL): a status other than 2xx is read as an
//! answer, no redirect is followed (a link an answer names is never
//! taken), and the whole request is bounded as the caller says. A client
//! may be held to addresses its caller resolved and checked once.

use std::net::SocketAddr;
use std::time::Duration;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};

fn config(within: Option<Duration>) -> ureq::config::Config {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(within)
        .timeout_await_100(None)
        .user_agent(format!("ocx/{}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A client whose every request ends within `within` (never, for `None`),
/// naming itself `ocx/VERSION`.
pub fn agent(within: Option<Duration>) -> ureq::Agent {
    config(within).into()
}

/// A client like [`agent`] that connects to `addresses` alone, whatever a
/// URL's host resolves to when it is asked (its Host header and TLS name
/// stay the URL's): the addresses its caller resolved once and checked,
/// so a name that answers otherwise at the fetch (DNS rebinding) reaches
/// nothing unchecked. Since no redirect is followed, no other host is.
pub fn agent_at(within: Option<Duration>, addresses: Vec<SocketAddr>) -> ureq::Agent {
    ureq::Agent::with_parts(
        config(within),
        ureq::unversioned::transport::DefaultConnector::new(),
        Pinned(addresses),
    )
}

/// A resolver answering the addresses it was given, for any name.
#[derive(Debug)]
struct Pinned(Vec<SocketAddr>);

impl Resolver for Pinned {
    fn resolve(
        &self,
        _uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut out = self.empty();
        for a in self.0.iter().take(16) {
            out.push(*a);
        }
        if out.is_empty() {
            return Err(ureq::Error::HostNotFound);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    /// A server on 127.0.0.1 answering one request with `said`; its port.
    fn answering(said: &'static str) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            if let Ok((s, _)) = l.accept() {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = (&s).write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{said}",
                        said.len()
                    )
                    .as_bytes(),
                );
            }
        });
        port
    }

    #[test]
    fn a_held_client_reaches_the_checked_address_whatever_the_name_resolves_to() {
        let checked = answering("checked");
        let elsewhere = answering("elsewhere");
        // The URL's name resolves to the other server now; the client goes
        // where its caller checked, never where the name leads at the fetch.
        let agent = agent_at(
            Some(Duration::from_secs(5)),
            vec![SocketAddr::from(([127, 0, 0, 1], checked))],
        );
        let mut answer = agent
            .get(&format!("http://localhost:{elsewhere}/pattern"))
            .call()
            .unwrap();
        assert_eq!(answer.body_mut().read_to_string().unwrap(), "checked");
        assert!(
            agent_at(None, Vec::new())
                .get("http://localhost:1/")
                .call()
                .is_err()
        );
    }
}
