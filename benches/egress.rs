//! Benchmark of what the proxy of a run with `sandbox.hosts` adds to a
//! connect: a `CONNECT` through the proxy's socket, answered 200 once the
//! proxy has resolved the listed name and connected, beside a direct TCP
//! connect to the same server on 127.0.0.1, each until the server's first
//! byte arrives, taken in turns; median and p95 of [`TIMES`] each.
//!
//! Run: `cargo bench --bench egress`.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use ocx::run::egress::{self, Allowed, Refused};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Instant;

const TIMES: usize = 200;

fn main() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.write_all(b"x");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let log = std::fs::File::create(dir.path().join("output.log")).unwrap();
    let refused = Refused::default();
    egress::serve_proxy(
        &socket,
        Allowed::of(&[format!("localhost:{port}")]),
        log,
        refused.clone(),
    )
    .unwrap();
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..TIMES {
        let t = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        direct.push(t.elapsed().as_secs_f64() * 1000.0);

        let t = Instant::now();
        let mut s = UnixStream::connect(&socket).unwrap();
        s.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut got = Vec::new();
        while got.last() != Some(&b'x') {
            let n = s.read(&mut b).unwrap();
            assert!(
                n == 1,
                "the proxy closed: {}",
                String::from_utf8_lossy(&got)
            );
            got.push(b[0]);
        }
        proxied.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    assert_eq!(refused.count(), 0);
    let (dm, dp) = common::stat(&mut direct);
    let (pm, pp) = common::stat(&mut proxied);
    println!("{TIMES} connects to a server on 127.0.0.1, until its first byte, median and p95:");
    println!("  direct             median {dm:>7.3} ms   p95 {dp:>7.3} ms");
    println!(
        "  CONNECT via proxy  median {pm:>7.3} ms   p95 {pp:>7.3} ms   (+{:.3} ms at the median)",
        pm - dm
    );
}
