//! The node's starter of watchers (`ocx watchers --root ROOT`, HISTORY
//! 416): one `ocx` the node starts once, which reads on its standard
//! input a line for each run to watch (`RECORD` or `RECORD CHECKIN`),
//! forks, and answers the child's process id (or `! WHY`). The child
//! becomes the run's watcher: in a session of its own, its output to the
//! run's `watch.log`, its command line rewritten to the one an `ocx
//! watch` started as a program would have, so `ps` and whoever looks for
//! watchers by their command line find it as before.
//!
//! Why: every `ocx` started as a program has its loader write 1.4 MB of
//! relocated data, a run's own memory for the run's whole life; a forked
//! watcher shares those pages with the starter and every other watcher,
//! and starts without a program's start.
//!
//! Invariants: the starter runs on one thread, so a fork copies a process
//! that nothing else was changing; it draws no random number and keeps no
//! random state before it forks, and a child draws its generator afresh
//! from the system, so no two watchers share one; it ends when the node's
//! end of its socket closes.

use std::io::{BufRead, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::path::Path;

/// Runs the starter until its input closes; `lock` is the node's lock,
/// which it holds open with the node and its children close.
pub fn main(root: &Path, lock: Option<i32>) -> i32 {
    // Its own descriptor of the socket, read without the standard
    // library's lock on standard input, which a child would inherit held.
    let Ok(socket) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return 1;
    };
    let mut input = std::io::BufReader::new(std::fs::File::from(socket));
    crate::node::spawn::weigh_own_session();
    loop {
        reap();
        if input.buffer().is_empty() {
            let mut polled = [nix::poll::PollFd::new(
                input.get_ref().as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut polled, 1000u16) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return 1,
                Ok(_) => {}
            }
        }
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let answer = match request(&line) {
            Some((record, checkin)) => {
                let own = [Some(input.get_ref().as_raw_fd()), lock];
                fork_watcher(root, record, checkin, &own)
            }
            None => "! not a record's hash and a check-in's".to_string(),
        };
        if input
            .get_ref()
            .write_all(format!("{answer}\n").as_bytes())
            .is_err()
        {
            return 0;
        }
    }
}

/// The record and check-in a request names, each a full hash in lower
/// case, or `None`.
fn request(line: &str) -> Option<(&str, Option<&str>)> {
    let hash = |h: &str| {
        matches!(h.len(), 40 | 64) && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let mut words = line.trim_end_matches('\n').split(' ');
    let record = words.next().filter(|r| hash(r))?;
    let checkin = match words.next() {
        Some(c) if hash(c) => Some(c),
        Some(_) => return None,
        None => None,
    };
    words.next().is_none().then_some((record, checkin))
}

/// Forks the watcher of `record`: its process id, or `! WHY`. The child
/// closes `own`, the starter's socket and the node's lock.
fn fork_watcher(root: &Path, record: &str, checkin: Option<&str>, own: &[Option<i32>]) -> String {
    // SAFETY: the starter has one thread, so the child is a whole copy of
    // a process nothing else was changing.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => child.to_string(),
        Ok(nix::unistd::ForkResult::Child) => {
            for fd in own.iter().flatten() {
                // SAFETY: the child's copies of the starter's own, which it
                // never uses again; what holds the socket is never dropped,
                // as `exit` below ends the process without unwinding.
                drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(*fd) });
            }
            let code = become_watcher(root, record, checkin);
            std::process::exit(code)
        }
        Err(e) => format!("! {e}"),
    }
}

/// In the child: the watcher's session, input, output, command line and
/// random generator, then the watcher itself.
fn become_watcher(root: &Path, record: &str, checkin: Option<&str>) -> i32 {
    let dir = crate::node::config::NodeConfig::run_dir(root, record);
    let set = || -> std::io::Result<()> {
        nix::unistd::setsid()?;
        nix::unistd::dup2_stdin(std::fs::File::open("/dev/null")?)?;
        let log = crate::node::spawn::own_log(&dir.join("watch.log"))?;
        nix::unistd::dup2_stdout(&log)?;
        nix::unistd::dup2_stderr(&log)?;
        Ok(())
    };
    if set().is_err() {
        return 1;
    }
    let mut title: Vec<&[u8]> = vec![b"watch", b"--root"];
    title.push(root.as_os_str().as_encoded_bytes());
    title.extend([b"--record".as_slice(), record.as_bytes()]);
    if let Some(c) = checkin {
        title.extend([b"--checkin".as_slice(), c.as_bytes()]);
    }
    retitle(&title);
    if rand::rng().reseed().is_err() {
        return 1;
    }
    super::main(root, record, checkin)
}

/// Ends the starter's children that have ended, so none is left a zombie.
fn reap() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Writes `args` after the program's name over this process's command
/// line, as `/proc/PID/cmdline` and `ps` read it, the rest of its room
/// zeroed. Left as it is when they do not fit.
fn retitle(args: &[&[u8]]) {
    let Some((start, end)) = argument_area() else {
        return;
    };
    let Some(len) = end.checked_sub(start) else {
        return;
    };
    let program = std::env::args_os().next().unwrap_or_default();
    let mut title: Vec<u8> = program.as_encoded_bytes().to_vec();
    title.push(0);
    for a in args {
        title.extend_from_slice(a);
        title.push(0);
    }
    if title.len() > len {
        return;
    }
    // SAFETY: [start, end) is this process's own argument strings, as the
    // kernel laid them out at exec and `/proc/self/stat` gives their place;
    // nothing holds a reference into them (the standard library reads
    // them afresh at each `args()`), and the bytes written stay within.
    unsafe {
        let area = start as *mut u8;
        std::ptr::copy_nonoverlapping(title.as_ptr(), area, title.len());
        std::ptr::write_bytes(area.add(title.len()), 0, len - title.len());
    }
}

/// Where this process's argument strings lie: `arg_start` and `arg_end`
/// of `/proc/self/stat` (its 48th and 49th fields).
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace().skip(45);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_full_hashes_alone() {
        let r = "a".repeat(64);
        let c = "b".repeat(40);
        assert_eq!(request(&format!("{r}\n")), Some((r.as_str(), None)));
        assert_eq!(
            request(&format!("{r} {c}\n")),
            Some((r.as_str(), Some(c.as_str())))
        );
        for bad in [
            String::new(),
            "\n".into(),
            format!("{}\n", "A".repeat(64)),
            format!("{}\n", "a".repeat(63)),
            format!("{r} {c} {c}\n"),
            format!("{r} ../x\n"),
            format!("{r}  {c}\n"),
        ] {
            assert_eq!(request(&bad), None, "{bad:?}");
        }
    }
}
