//! An attack on the long-poll: one login with little more than Read
//! opens hundreds of `wait`s at once, as a forum visitor could, to use up
//! the server account's inotify instances and the waits of others. At
//! most a few of its waits stay open (the rest answered 429 with a
//! `Retry-After`); another login's wait still hears what arrives, and the
//! account's own programs can still watch files.

use crate::cgi::{Ext, repo, served};
use ocx::entry::cgi::wait as ocx_wait;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One GET of `path` with `cookie`; the status and the whole answer.
/// `fossil server` listens with a backlog of ten, so under a burst of
/// hundreds most connections are dropped before it accepts them, which is
/// Fossil's queue, not OCX's answer: a connection not taken within
/// [`CONNECT_WAIT`] is made again at once, until [`TAKEN_WITHIN`]. Left
/// to the system, a dropped connection is tried again after 1, 3, 7, 15,
/// 31 and 63 s, hundreds of them at the same moments, and on a busy host
/// some were still waiting to be taken after the test's 150 s. Any other
/// failure before a byte of answer (refused: no server any more; closed
/// unanswered) is tried again a few times, as before.
fn get(port: u16, path: &str, cookie: &str) -> (u16, String) {
    let until = Instant::now() + TAKEN_WITHIN;
    let mut failed = 0;
    loop {
        let answer = get_once(port, path, cookie);
        let out_of_tries = Instant::now() >= until || failed == 5;
        match answer {
            Some(answer) if answer.0 != 0 || out_of_tries => return answer,
            Some(_) => {
                failed += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            None if out_of_tries => return (0, "not taken".into()),
            None => {}
        }
    }
}

/// How long a request is made again while `fossil server` takes none of
/// its connections.
const TAKEN_WITHIN: Duration = Duration::from_secs(90);

/// How long one connection waits for `fossil server` to take it.
const CONNECT_WAIT: Duration = Duration::from_secs(1);

/// One try: `None` when the server took no connection within
/// [`CONNECT_WAIT`].
fn get_once(port: u16, path: &str, cookie: &str) -> Option<(u16, String)> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = match TcpStream::connect_timeout(&address, CONNECT_WAIT) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return None,
        Err(_) => return Some((0, "no connection".into())),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return Some((0, "not sent".into()));
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Some((status, answer))
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
    let server = served(&repo, &ext);
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
    drop(tx);
    let (mut answers, mut most, mut most_in_all) = (Vec::new(), 0, 0);
    let started = Instant::now();
    let until = started + Duration::from_secs(150);
    while answers.len() < 500 && Instant::now() < until {
        let held = ocx_wait::open_waits(&repo.file, Some("lurker")).unwrap();
        most = most.max(held);
        most_in_all = most_in_all.max(ocx_wait::open_waits(&repo.file, None).unwrap());
        if let Ok(answer) = rx.recv_timeout(Duration::from_millis(100)) {
            answers.push(answer);
        }
        if most == ocx_wait::PER_LOGIN && answers.len() > 400 {
            break;
        }
    }
    assert_eq!(
        most,
        ocx_wait::PER_LOGIN,
        "lurker never held its {} waits, so the attack was not made",
        ocx_wait::PER_LOGIN
    );
    assert!(
        most_in_all <= ocx_wait::IN_ALL,
        "{most_in_all} waits were open"
    );
    let wrong: Vec<_> = answers
        .iter()
        .filter(|(s, a)| !(*s == 429 && a.contains("Retry-After: ")) && *s != 200)
        .take(3)
        .collect();
    assert!(
        wrong.is_empty(),
        "waits answered neither 429 nor 200: {wrong:?}"
    );
    let too_many = answers.iter().filter(|(s, _)| *s == 429).count();
    let heard = answers.len() - too_many;
    let windows = 1 + started.elapsed().as_secs() / 50;
    assert!(
        answers.len() > 400 && heard as u64 <= ocx_wait::PER_LOGIN * (windows + 1),
        "of {} waits answered, {heard} were let wait (at most {} slots, each held up to 50 s, in {windows} windows of 50 s) and {too_many} refused",
        answers.len(),
        ocx_wait::PER_LOGIN
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
}
