//! `git`: the program started under that name in Fossil's extroot serves
//! the git export of the repository Fossil serves the request through,
//! read-only over git's smart HTTP, at `/ext/git/NAME.git/` (NAME the
//! repository file's name without its extension): `info/refs?service=
//! git-upload-pack` and `git-upload-pack`, nothing else. The viewer is
//! proven as the page proves one (`cgi::Request::prove_viewer`) and must
//! hold clone (`g`) and read (`o`) by the capabilities the repository gives
//! them, nobody's when no one signed in. A body is read up to its announced
//! length and never past it, at most [`BODY_LIMIT`] raw or expanded; a
//! gzipped one (Fossil passes no `Content-Encoding` to `/ext`) is known by
//! its first bytes. Git's answer is read whole before a header is written.

use super::cgi::Request;
use crate::context::{Context, Who};
use crate::fossil::Repository;
use crate::git::{Export, Git, GitError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The name Fossil serves the export under: `/ext/git`.
pub const NAME: &str = "git";

/// The largest request body taken, raw or expanded from gzip (50 MiB).
pub const BODY_LIMIT: u64 = 50 * 1024 * 1024;

/// What the program answers: a status, a type and a body.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body's type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    fn said(status: u16, text: impl Into<String>) -> Reply {
        let mut body = text.into().into_bytes();
        body.push(b'\n');
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
        }
    }

    /// The reply as CGI output: headers, a blank line, the body.
    pub fn to_cgi(&self) -> Vec<u8> {
        let mut out = super::cgi::head(
            self.status,
            self.content_type,
            "Cache-Control: no-cache, max-age=0, must-revalidate\r\n",
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// Why the export cannot be served from here: the page's configuration
/// does not read, or no git program is there to serve it.
#[derive(Debug, thiserror::Error)]
pub enum Unserved {
    /// The page's configuration (where `git` is) does not read.
    #[error("{}", .0.reason)]
    Config(crate::stop::Stop),
    /// No git program to serve it.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// Answers the request in the environment; always exits 0, since Fossil
/// ignores the exit code and the reply says what went wrong.
pub fn main() -> i32 {
    std::panic::set_hook(Box::new(|_| {}));
    let reply = std::panic::catch_unwind(|| {
        let request = Request::from_environment();
        let git = super::cgi::read_config()
            .map_err(Unserved::Config)
            .and_then(|c| Ok(Git::locate(c.git.as_deref())?));
        // Standard input unbuffered, so no byte past the announced length is
        // taken from it: a buffered reader would fill its buffer past it.
        use std::os::fd::AsFd;
        match std::io::stdin().as_fd().try_clone_to_owned() {
            Ok(fd) => respond(&request, &mut std::fs::File::from(fd), git),
            Err(_) => Reply::said(500, "standard input cannot be read"),
        }
    })
    .unwrap_or_else(|_| Reply::said(500, "internal error"));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&reply.to_cgi());
    let _ = out.flush();
    0
}

/// What a request asks of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// The refs, for a fetch.
    Refs,
    /// One fetch.
    Fetch,
    /// Anything of a push.
    Push,
}

/// The reply to `request`, its body on `body`, served with `git`.
pub fn respond(request: &Request, body: &mut dyn Read, git: Result<Git, Unserved>) -> Reply {
    let Some(repository) = request.repository.clone() else {
        return Reply::said(
            500,
            "Fossil named no repository: serve this with fossil server --extroot DIR",
        );
    };
    let path = request.path_info.trim_start_matches('/');
    let Some((name, rest)) = path.split_once('/') else {
        return Reply::said(404, "no such git repository here");
    };
    let service = request
        .query
        .split('&')
        .find_map(|p| p.strip_prefix("service="));
    let asked = match (rest, service) {
        ("info/refs", Some("git-upload-pack")) => Asked::Refs,
        ("git-upload-pack", _) => Asked::Fetch,
        ("info/refs", Some("git-receive-pack")) | ("git-receive-pack", _) => Asked::Push,
        ("info/refs", _) => {
            return Reply::said(
                403,
                "only git's smart HTTP is served here (info/refs?service=git-upload-pack)",
            );
        }
        _ => return Reply::said(404, "no such git path here"),
    };
    let stem = Path::new(&repository)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("");
    if stem.is_empty() || name != format!("{stem}.git") {
        return Reply::said(404, "no such git repository here");
    }
    if asked == Asked::Push {
        return Reply::said(403, READ_ONLY);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let file = cwd.join(&repository);
    let Ok(repo) = Repository::open(&file) else {
        return Reply::said(500, "the repository cannot be read");
    };
    let viewer = request.prove_viewer(&repo);
    let cx = Context::new(
        Some(PathBuf::from(&repository)),
        cwd,
        Who::Web { user: viewer },
    );
    let may = cx
        .caller()
        .map(|c| c.capabilities.has('g') && c.capabilities.has('o'))
        .unwrap_or(false);
    if !may {
        return Reply::said(
            403,
            "cloning needs capabilities g (clone) and o (read check-ins): sign in as a login that holds them",
        );
    }
    let export = match Export::of(&repo) {
        Ok(Some(e)) => e,
        Ok(None) | Err(GitError::NotAMirror(_)) => {
            return Reply::said(404, "this repository has no git export");
        }
        Err(_) => return Reply::said(500, "the repository's git export cannot be read"),
    };
    let git = match git {
        Ok(g) => g,
        Err(e) => return Reply::said(500, e.to_string()),
    };
    let git_dir = export.git_dir();
    match asked {
        Asked::Refs => {
            if !request.method.eq_ignore_ascii_case("GET") {
                return Reply::said(405, "info/refs is read with GET");
            }
            match git.advertise_refs(&git_dir) {
                Ok(refs) => {
                    let mut body = pkt_line("# service=git-upload-pack\n");
                    body.extend_from_slice(b"0000");
                    body.extend_from_slice(&refs);
                    Reply {
                        status: 200,
                        content_type: "application/x-git-upload-pack-advertisement",
                        body,
                    }
                }
                Err(_) => Reply::said(500, "git cannot read the export"),
            }
        }
        Asked::Fetch => {
            if !request.method.eq_ignore_ascii_case("POST") {
                return Reply::said(405, "git-upload-pack is asked with POST");
            }
            let request_body = match read_request(request.content_length.as_deref(), body) {
                Ok(b) => b,
                Err(reply) => return reply,
            };
            match git.fetch(&git_dir, &request_body) {
                Ok(answer) => Reply {
                    status: 200,
                    content_type: "application/x-git-upload-pack-result",
                    body: answer,
                },
                Err(_) => Reply::said(500, "git failed to answer the fetch"),
            }
        }
        Asked::Push => Reply::said(403, READ_ONLY),
    }
}

/// Why a push is refused.
const READ_ONLY: &str =
    "this git export is read-only: push to the Fossil repository it is exported from";

/// `text` as one pkt-line: its length with the four digits, in hex, then it.
fn pkt_line(text: &str) -> Vec<u8> {
    format!("{:04x}{text}", text.len() + 4).into_bytes()
}

/// The request's body: exactly the length announced (never a byte past
/// it), refused with 413 when that is over [`BODY_LIMIT`] (nothing read),
/// and expanded when it is gzip (its first bytes `1f 8b`), refused with 400
/// when that does not read and 413 when it expands past the limit.
pub fn read_request(content_length: Option<&str>, body: &mut dyn Read) -> Result<Vec<u8>, Reply> {
    use super::cgi::request::{BodyRefused, announced_body};
    if content_length.is_none_or(|n| n.trim().is_empty()) {
        return Err(Reply::said(400, "the request announces no length"));
    }
    let raw = announced_body(content_length, body, BODY_LIMIT).map_err(|e| match e {
        BodyRefused::NotANumber(n) => {
            Reply::said(400, format!("the request's length {n:?} is not a number"))
        }
        BodyRefused::Over(_) => too_large(),
        BodyRefused::Unreadable(_) => Reply::said(400, "the request's body cannot be read"),
        BodyRefused::Short => Reply::said(400, "the request's body is shorter than it announced"),
    })?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    let mut expanded = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .take(BODY_LIMIT + 1)
        .read_to_end(&mut expanded)
        .map_err(|_| Reply::said(400, "the request's gzip does not read"))?;
    if expanded.len() as u64 > BODY_LIMIT {
        return Err(too_large());
    }
    Ok(expanded)
}

fn too_large() -> Reply {
    Reply::said(
        413,
        format!("a request body is taken up to {BODY_LIMIT} bytes, raw or expanded"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that fails the test if read past `allowed` bytes.
    struct Guarded {
        data: Vec<u8>,
        at: usize,
        allowed: usize,
    }

    impl Read for Guarded {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            assert!(
                buf.is_empty() || self.at < self.allowed,
                "read past the announced length"
            );
            let room = self.allowed.saturating_sub(self.at).min(buf.len());
            let n = room.min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_body_is_read_to_its_length_and_no_further() {
        let mut r = Guarded {
            data: b"0009done\nEXTRA".to_vec(),
            at: 0,
            allowed: 9,
        };
        assert_eq!(read_request(Some("9"), &mut r).unwrap(), b"0009done\n");
        assert_eq!(r.at, 9);
    }

    #[test]
    fn a_body_announced_over_the_limit_is_never_read() {
        let mut r = Guarded {
            data: vec![b'0'; 16],
            at: 0,
            allowed: 0,
        };
        let reply = read_request(Some(&(BODY_LIMIT + 1).to_string()), &mut r).unwrap_err();
        assert_eq!(reply.status, 413);
        assert_eq!(r.at, 0);
    }

    #[test]
    fn gzip_is_known_by_its_first_bytes() {
        let body = gzip(b"0032want 0123\n0000");
        let mut r = &body[..];
        assert_eq!(
            read_request(Some(&body.len().to_string()), &mut r).unwrap(),
            b"0032want 0123\n0000"
        );
        let bad = [0x1f, 0x8b, 8, 0, 1, 2, 3, 4, 5];
        let mut r = &bad[..];
        assert_eq!(read_request(Some("9"), &mut r).unwrap_err().status, 400);
        let bomb = gzip(&vec![b'0'; (BODY_LIMIT + 1) as usize]);
        let mut r = &bomb[..];
        assert_eq!(
            read_request(Some(&bomb.len().to_string()), &mut r)
                .unwrap_err()
                .status,
            413
        );
    }

    #[test]
    fn a_short_or_unannounced_body_is_refused() {
        let mut r = &b"abc"[..];
        assert_eq!(read_request(Some("10"), &mut r).unwrap_err().status, 400);
        let mut r = &b"abc"[..];
        assert_eq!(read_request(None, &mut r).unwrap_err().status, 400);
        let mut r = &b"abc"[..];
        assert_eq!(read_request(Some("-1"), &mut r).unwrap_err().status, 400);
    }

    #[test]
    fn the_service_line_is_one_pkt_line() {
        assert_eq!(
            pkt_line("# service=git-upload-pack\n"),
            b"001e# service=git-upload-pack\n"
        );
    }
}
