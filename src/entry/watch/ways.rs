//! A run's ways out when its record names `sandbox.hosts`: the passages
//! its forwarder offers inside on loopback (the proxy; the node's own
//! address), and the sockets behind them, served by the watcher.

use crate::run::egress::{self, Allowed, Passage, Refused};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// The proxy's port inside a run (the next one when the node's own port is this).
const PROXY_PORT: u16 = 3128;

/// A hosts run's ways out, planned before it starts.
pub struct Ways {
    /// Each loopback port inside and the socket it is forwarded to: the proxy first, then the
    /// node's own port when its URL is on loopback, then any [`Ways::pass`] adds (the model
    /// relay's).
    pub passages: Vec<Passage>,
    /// The proxy's port inside.
    pub proxy_port: u16,
    proxy: PathBuf,
    allowed: Allowed,
    node: Option<(PathBuf, SocketAddr)>,
}

impl Ways {
    /// Plans the ways out of a run whose record lists `hosts`, its sockets in `dir` (the
    /// run's `.ocx`, bound inside at its own path), reaching the node at `url`.
    pub fn plan(url: &str, hosts: &[String], dir: &Path) -> Ways {
        let mut allowed = Allowed::of(hosts);
        let node = url::Url::parse(url).ok().and_then(|u| {
            let port = u.port_or_known_default()?;
            let host = u.host_str()?.to_string();
            let at = (host.trim_matches(['[', ']']), port)
                .to_socket_addrs()
                .ok()?
                .next()?;
            Some((host, port, at))
        });
        let mut passages = Vec::new();
        let mut to_node = None;
        let mut proxy_port = PROXY_PORT;
        if let Some((host, port, at)) = node {
            // Clients that ignore NO_PROXY (fossil) ask the proxy for the node by its URL.
            allowed.node = Some((format!("{host}:{port}"), at));
            if at.ip().is_loopback() {
                let socket = dir.join("node.sock");
                passages.push(Passage {
                    port,
                    socket: socket.clone(),
                });
                to_node = Some((socket, at));
                if port == PROXY_PORT {
                    proxy_port += 1;
                }
            }
        }
        let proxy = dir.join("egress.sock");
        passages.insert(
            0,
            Passage {
                port: proxy_port,
                socket: proxy.clone(),
            },
        );
        Ways {
            passages,
            proxy_port,
            proxy,
            allowed,
            node: to_node,
        }
    }

    /// Offers one more way out inside: `p.port` on 127.0.0.1, carried to `p.socket`, which
    /// its owner serves (the model relay's socket).
    pub fn pass(&mut self, p: Passage) {
        if !self.passages.iter().any(|q| q.port == p.port) {
            self.passages.push(p);
        }
    }

    /// The variables that point the run's programs at the proxy.
    pub fn env(&self) -> BTreeMap<String, String> {
        let proxy = format!("http://127.0.0.1:{}", self.proxy_port);
        let mut env = BTreeMap::new();
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            env.insert(name.to_string(), proxy.clone());
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.insert(name.to_string(), "127.0.0.1,localhost".to_string());
        }
        env
    }

    /// The words put before the run's program: `OCX forward PORT=SOCKET... --`.
    pub fn forwarder(&self, ocx: &Path) -> Vec<String> {
        let mut words = vec![ocx.display().to_string(), "forward".to_string()];
        words.extend(self.passages.iter().map(Passage::arg));
        words.push("--".to_string());
        words
    }

    /// Serves the proxy (its refusals to `log`, counted in `refused`) and the relay to the node.
    pub fn serve(&self, log: std::fs::File, refused: Refused) -> std::io::Result<()> {
        egress::serve_proxy(&self.proxy, self.allowed.clone(), log, refused)?;
        if let Some((socket, at)) = &self.node {
            egress::serve_node(socket, *at)?;
        }
        Ok(())
    }
}
