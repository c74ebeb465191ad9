//! Benchmark of the model relay's added time: [`SAMPLES`] streamed
//! answers of a scripted model service (a server-sent stream of
//! [`EVENTS`] events, the first sent at once, the rest after it), asked
//! over one kept-alive connection each way: direct, over TLS to the
//! service's TLS front as an agent holding the key would; and through the
//! relay, over plain HTTP on 127.0.0.1 with the run's token, the relay
//! reaching the same front over TLS with the key. Printed: the median and
//! p95 of the time to the answer's first byte and to its end, each way,
//! and the relay's added time at the median (the goal: at most 2 ms).
//!
//! Run: `cargo bench --bench relay`.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

#[path = "../tests/it/tls.rs"]
mod tls;

use ocx::node::runner::ModelKind;
use ocx::run::relay::{Relay, Settings};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 200;
const EVENTS: usize = 40;
const KEY: &str = "sk-bench-key";
/// The most the relay may add at the median, in milliseconds.
const GOAL: f64 = 2.0;

fn main() {
    let service = scripted_service();
    let front = tls::Tls::front(service);
    let dir = tempfile::tempdir().unwrap();
    let authority = dir.path().join("authority.pem");
    std::fs::write(&authority, &front.authority).unwrap();
    let relay = Relay::start(Settings {
        kind: ModelKind::AnthropicMessages,
        upstream: front.url(),
        key: KEY.into(),
        // A budget, so each request is reserved and settled as a run's with `budget.tokens` is.
        budget: Some(1 << 40),
        prices: None,
        cost: None,
        ask: false,
        dir: dir.path().to_path_buf(),
        socket: dir.path().join("model.sock"),
        authorities: Some(authority.clone()),
        log: Box::new(|line| eprintln!("relay: {line}")),
    })
    .unwrap();

    let mut direct = Direct::open(front.port(), &front.authority);
    let relayed = TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
    relayed.set_nodelay(true).unwrap();
    let mut relayed = BufReader::new(relayed);
    let (mut d_first, mut d_all, mut r_first, mut r_all) = (vec![], vec![], vec![], vec![]);
    for i in 0..SAMPLES + 10 {
        let (f, a) = direct.ask(&request(KEY));
        let (g, b) = ask(&mut relayed, &request(relay.token()));
        if i >= 10 {
            d_first.push(f);
            d_all.push(a);
            r_first.push(g);
            r_all.push(b);
        }
    }
    println!("model relay, {SAMPLES} streamed answers of {EVENTS} events, kept-alive connections:");
    for (name, d, r) in [
        ("first byte", &mut d_first, &mut r_first),
        ("whole answer", &mut d_all, &mut r_all),
    ] {
        let (dm, dp) = (quantile(d, 0.5), quantile(d, 0.95));
        let (rm, rp) = (quantile(r, 0.5), quantile(r, 0.95));
        println!(
            "  {name:<13} direct {dm:6.3} ms (p95 {dp:6.3})  relayed {rm:6.3} ms (p95 {rp:6.3})  \
             added {:6.3} ms at the median (goal: at most {GOAL} ms)",
            rm - dm
        );
    }
    println!("  tokens counted by the relay: {}", relay.spent());
}

/// A request for a streamed answer, with `key` as Anthropic's API takes it:
/// a conversation of 64 KB, as an agent's turns grow to (the relay reads
/// each body for the most it may cost).
fn request(key: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"model":"scripted","stream":true,"max_tokens":64,"messages":[{{"role":"user","content":"{}Say hello"}}]}}"#,
        "earlier words ".repeat(64 * 1024 / 14)
    );
    format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {key}\r\n\
         anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The scripted service on a plain port (the TLS front is put before it):
/// each request answered with a stream whose first event is sent at once.
fn scripted_service() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

fn serve(stream: TcpStream) {
    stream.set_nodelay(true).ok();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut length = 0;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if first {
                first = false;
            } else if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"scripted\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n".to_string();
        let mut rest = String::new();
        for i in 0..EVENTS - 2 {
            rest.push_str(&format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} \"}}}}\n\n"
            ));
        }
        rest.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40}}\n\n");
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
            start.len() + rest.len()
        );
        if w.write_all(format!("{head}{start}").as_bytes()).is_err()
            || w.write_all(rest.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// Sends `req` on `conn` and reads the whole answer (by its length, or
/// chunked): the times to its first body byte and to its end.
fn ask(conn: &mut BufReader<impl Read + Write>, req: &[u8]) -> (Duration, Duration) {
    let t = Instant::now();
    conn.get_mut().write_all(req).unwrap();
    conn.get_mut().flush().unwrap();
    let mut length = None;
    let mut chunked = false;
    let mut line = String::new();
    let mut status = String::new();
    loop {
        line.clear();
        assert!(
            conn.read_line(&mut line).unwrap() > 0,
            "the answer ended early"
        );
        if status.is_empty() {
            status = line.clone();
            continue;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    assert!(status.contains(" 200 "), "answered {status}");
    let mut first = None;
    if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line).unwrap();
            first.get_or_insert_with(|| t.elapsed());
            let size =
                usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            conn.read_exact(&mut chunk).unwrap();
            if size == 0 {
                break;
            }
        }
    } else {
        let mut body = vec![0; length.unwrap_or(0)];
        conn.read_exact(&mut body[..1]).unwrap();
        first = Some(t.elapsed());
        conn.read_exact(&mut body[1..]).unwrap();
    }
    (first.unwrap_or_default(), t.elapsed())
}

/// A kept-alive TLS connection to the service's front, trusting its authority.
struct Direct {
    conn: BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>,
}

impl Direct {
    fn open(port: u16, authority: &str) -> Direct {
        let mut roots = rustls::RootCertStore::empty();
        let pem = authority.as_bytes();
        for cert in rustls_pemfile(pem) {
            roots.add(cert).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_nodelay(true).unwrap();
        Direct {
            conn: BufReader::new(rustls::StreamOwned::new(client, tcp)),
        }
    }

    fn ask(&mut self, req: &[u8]) -> (Duration, Duration) {
        ask(&mut self.conn, req)
    }
}

/// The certificates of a PEM text.
fn rustls_pemfile(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.unwrap())
        .collect()
}

fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[i].as_secs_f64() * 1000.0
}
