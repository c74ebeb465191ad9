//! Benchmark of a long-lived MCP server: a plain JSON-RPC client writing
//! lines to `ocx --mcp` over stdio (initialize, notifications/initialized,
//! then 200 tools/call of each tool) on the large repository, printing the
//! median and 95th percentile per call of `thread`, `receipt`, `status`
//! and `list`, each timed from the request's first byte written to the
//! response's last byte read.
//!
//! Run: `cargo bench --bench mcp` (builds the release binary first).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::ms;
use ocx::fossil::Fossil;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const CALLS: usize = 200;
/// What each call may take at most, by its median.
const CEILING_MS: f64 = 1.0;

/// A JSON-RPC client over the server's standard input and output.
struct Client {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
}

impl Client {
    fn start(ocx: &std::path::Path, repo: &std::path::Path) -> Client {
        let mut child = Command::new(ocx)
            .args(["--mcp", "--user", "ann", "--repository"])
            .arg(repo)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        let mut client = Client {
            child,
            to,
            from,
            next_id: 1,
        };
        client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.to.write_all(&line).unwrap();
        self.to.flush().unwrap();
    }

    /// Sends a request and answers its response's result, and the time
    /// from its first byte written to the response's last byte read (the
    /// server sends nothing but responses here, so the next line is it).
    fn request(&mut self, method: &str, params: Value) -> (Value, Duration) {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        let mut answer = String::new();
        let started = Instant::now();
        self.to.write_all(&line).unwrap();
        self.to.flush().unwrap();
        assert!(
            self.from.read_line(&mut answer).unwrap() > 0,
            "the server ended"
        );
        let took = started.elapsed();
        let message: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(message["id"], json!(id), "{answer}");
        assert!(message.get("error").is_none(), "{answer}");
        (message["result"].clone(), took)
    }

    /// Calls `ocx_NAME` with `arguments`: whether it answered ok, and how long it took.
    fn call(&mut self, name: &str, arguments: Value) -> (bool, Duration) {
        let (result, took) = self.request(
            "tools/call",
            json!({"name": format!("ocx_{name}"), "arguments": arguments}),
        );
        (result["isError"] != json!(true), took)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The median and 95th percentile of `times`.
fn figures(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let p95 = times[(times.len() * 95).div_ceil(100) - 1];
    (times[times.len() / 2], p95)
}

fn main() {
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let repo = common::large_repository(&fossil);
    let ocx = common::release_ocx();
    let hashes = common::hashes(&repo);
    let mut client = Client::start(&ocx, &repo);
    let posts: Vec<&String> = (0..)
        .map(|i| &hashes[(i * 7919 * 13) % hashes.len()])
        .filter(|h| client.call("thread", json!({"of": h})).0)
        .take(CALLS)
        .collect();
    println!("{CALLS} calls each over one stdio session, per call:");
    let mut over = Vec::new();
    for name in ["thread", "receipt", "status", "list"] {
        let mut times: Vec<Duration> = (0..CALLS)
            .map(|i| {
                let input = match name {
                    "thread" => json!({"of": posts[i]}),
                    "receipt" => json!({"artifacts": [posts[i]]}),
                    _ => json!({}),
                };
                let (ok, took) = client.call(name, input);
                assert!(ok, "{name} refused");
                took
            })
            .collect();
        let (median, p95) = figures(&mut times);
        println!(
            "  {name:<8} median {:>6.3} ms   p95 {:>6.3} ms",
            ms(median),
            ms(p95)
        );
        if ms(median) > CEILING_MS {
            over.push(name);
        }
    }
    if !over.is_empty() {
        println!("over {CEILING_MS} ms by the median: {}", over.join(", "));
    }
}
