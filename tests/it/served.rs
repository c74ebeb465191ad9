//! The served repository's side of agent machines, over real HTTP to a
//! real `fossil server` serving OCX's page: the long-poll `wait`, the
//! receipts and unaudited check-ins answered as JSON to a signed-in
//! machine, the run's login kept for a remote run (`run_login`), and the
//! clone-side tools pulling, writing in the clone and pushing.

use crate::cgi::{Ext, Server, thread};
use crate::support::Repo;
use serde_json::Value;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A served repository: `pat` may read (o) and post, `zed` may not read,
/// nobody reads nothing; each signs in with `LOGIN-pw`.
struct Site {
    repo: Repo,
    server: Server,
    _ext: Ext,
}

impl Site {
    fn new() -> Site {
        let repo = Repo::new();
        repo.user("alice", "v234").user("pat", "o").user("zed", "g");
        repo.fossil(&["user", "capabilities", "nobody", "g"]);
        repo.fossil(&["user", "capabilities", "anonymous", ""]);
        let ext = Ext::new();
        let server = Server::start(&repo, &ext);
        Site {
            repo,
            server,
            _ext: ext,
        }
    }

    /// GET `path` with `cookie` (none: unsigned); status and JSON body.
    fn get(&self, path: &str, cookie: Option<&str>) -> (u16, Value) {
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let (status, head, body) = self.server.request("GET", path, &headers, "");
        let value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {head}\n{body}"));
        (status, value)
    }
}

/// The newest receipt's number, read from the file.
fn last_receipt(repo: &Repo) -> i64 {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row("SELECT coalesce(max(rcvid),0) FROM rcvfrom", [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn wait_answers_when_a_receipt_arrives_and_a_cli_write_goes_through_meanwhile() {
    let site = Site::new();
    thread(&site.repo);
    let cookie = site.server.login("pat");
    let m = last_receipt(&site.repo);
    assert!(m > 0, "the thread was received");
    let (status, now) = site.get("/ext/ocx-cgi/wait?after=0", Some(&cookie));
    assert_eq!((status, now["last"].as_i64()), (200, Some(m)), "{now}");
    let (status, quiet) = site.get(
        &format!("/ext/ocx-cgi/wait?after={m}&within=1"),
        Some(&cookie),
    );
    assert_eq!(
        (status, quiet["last"].as_i64()),
        (200, Some(m)),
        "nothing arrived within 1 s: {quiet}"
    );

    let (tx, rx) = mpsc::channel();
    let (port, asked) = (site.server.port, format!("/ext/ocx-cgi/wait?after={m}"));
    let waiting_cookie = cookie.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let answer = crate::served::request(port, &asked, &waiting_cookie);
        let _ = tx.send((answer, started.elapsed()));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(700)).is_err(),
        "the wait answered with nothing received"
    );
    let written = Instant::now();
    thread(&site.repo);
    let wrote_in = written.elapsed();
    let ((status, answer), waited) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(status, 200, "{answer}");
    let last = answer["last"].as_i64().unwrap();
    assert_eq!(last, last_receipt(&site.repo), "the newest receipt");
    assert!(last > m, "a receipt after {m}: {answer}");
    assert!(
        waited < Duration::from_secs(45),
        "answered on the arrival, not at the end of the wait ({waited:?}; the write took {wrote_in:?})"
    );
}

/// One GET of `path` on `port` with `cookie`: status and JSON body.
pub fn request(port: u16, path: &str, cookie: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn wait_is_refused_to_nobody_and_to_a_login_that_may_not_read() {
    let site = Site::new();
    let m = last_receipt(&site.repo);
    let (status, unsigned) = site.get("/ext/ocx-cgi/wait?after=0&within=1", None);
    assert_eq!(status, 403, "{unsigned}");
    assert_eq!(unsigned["ok"], false);
    assert_eq!(unsigned["stopped"]["field"], "user");
    assert!(unsigned.get("last").is_none(), "no receipt number told");
    let zed = site.server.login("zed");
    let (status, refused) = site.get("/ext/ocx-cgi/wait?after=0&within=1", Some(&zed));
    assert_eq!(status, 403, "{refused}");
    assert!(refused.get("last").is_none());
    let forged = "fossil-0000000000000000=AAAA%2F0%2Fpat";
    let (status, _) = site.get("/ext/ocx-cgi/wait?after=0&within=1", Some(forged));
    assert_eq!(
        status, 403,
        "a cookie the user table does not hold proves no one"
    );
    let pat = site.server.login("pat");
    for (query, field) in [
        ("", "after"),
        ("after=-1", "after"),
        ("after=x", "after"),
        ("after=1&within=0", "within"),
        ("after=1&within=51", "within"),
        ("after=1&sleep=3", "sleep"),
    ] {
        let (status, bad) = site.get(&format!("/ext/ocx-cgi/wait?{query}"), Some(&pat));
        assert_eq!(status, 400, "{query}: {bad}");
        assert_eq!(bad["stopped"]["field"], field, "{query}: {bad}");
    }
    assert_eq!(last_receipt(&site.repo), m, "nothing was written");
}
