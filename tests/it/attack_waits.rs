//! An attack on the long-poll: one login with little more than Read
//! opens hundreds of `wait`s at once, as a forum visitor could, to use up
//! the server account's inotify instances and the waits of others. At
//! most a few of its waits stay open (the rest answered 429 with a
//! `Retry-After`); another login's wait still hears what arrives, and the
//! account's own programs can still watch files.

use crate::cgi::{Ext, Server, repo};
use ocx::entry::cgi::wait as ocx_wait;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One GET of `path` with `cookie`; the status and the whole answer.
fn get(port: u16, path: &str, cookie: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, "no connection".into());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return (0, "not sent".into());
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// The newest receipt the page's `wait` says the repository holds.
fn last(answer: &str) -> i64 {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str::<serde_json::Value>(body).unwrap_or_default()["last"]
        .as_i64()
        .unwrap_or(-1)
}

#[test]
fn five_hundred_waits_of_one_login_leave_others_waits_and_the_accounts_watches_working() {
    let (ext, repo) = (Ext::new(), repo());
    repo.user("lurker", "o2").user("carol", "o");
    let server = Server::start(&repo, &ext);
    let (lurker, carol) = (server.login("lurker"), server.login("carol"));
    let (status, now) = get(server.port, "/ext/ocx-cgi/wait?after=0", &carol);
    assert_eq!(status, 200, "{now}");
    let after = last(&now);
    let path = format!("/ext/ocx-cgi/wait?after={after}&within=50");

    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..500 {
        let (tx, path, cookie, port) = (tx.clone(), path.clone(), lurker.clone(), server.port);
        std::thread::spawn(move || {
            let _ = tx.send(get(port, &path, &cookie));
        });
    }
    let mut refused = Vec::new();
    let until = Instant::now() + Duration::from_secs(150);
    while refused.len() < 500 - ocx_wait::PER_LOGIN as usize && Instant::now() < until {
        if let Ok(answer) = rx.recv_timeout(Duration::from_millis(200)) {
            refused.push(answer);
        }
    }
    let too_many = refused.iter().filter(|(s, _)| *s == 429).count();
    assert!(
        too_many >= 500 - ocx_wait::PER_LOGIN as usize,
        "only {too_many} of 500 waits were refused; others: {:?}",
        refused
            .iter()
            .filter(|(s, _)| *s != 429)
            .take(3)
            .collect::<Vec<_>>()
    );
    assert!(
        refused
            .iter()
            .all(|(s, a)| *s != 429 || a.contains("Retry-After: ")),
        "a 429 without Retry-After"
    );
    let watch = nix::sys::inotify::Inotify::init(nix::sys::inotify::InitFlags::IN_CLOEXEC);
    assert!(
        watch.is_ok(),
        "the account's own programs can no longer watch files: {watch:?}"
    );

    let port = server.port;
    let carols = std::thread::spawn(move || get(port, &path, &carol));
    std::thread::sleep(Duration::from_millis(500));
    crate::cgi::thread(&repo);
    let (status, heard) = carols.join().unwrap();
    assert_eq!(status, 200, "carol's wait: {heard}");
    assert!(last(&heard) > after, "carol's wait heard nothing: {heard}");
    let mut held = 0;
    while let Ok((status, answer)) = rx.recv_timeout(Duration::from_secs(40)) {
        assert_eq!(status, 200, "{answer}");
        held += 1;
        if held == ocx_wait::PER_LOGIN {
            break;
        }
    }
    assert!(held <= ocx_wait::PER_LOGIN);
}
