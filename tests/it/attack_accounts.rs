//! Attacks by another account of the host on what OCX listens on for a
//! run or a person: a run's model relay, on a TCP port of 127.0.0.1 any
//! account can connect to; the sockets in a run's `.ocx/` (its MCP
//! server, its model relay, its narrow network's ways out); and the MCP
//! server `ocx --mcp-tunnel` serves on loopback. Each is made for real:
//! a served node started as root, a run under bubblewrap, the scripted
//! model service behind TLS, and the other account a process of uid
//! 65534 with no other group.

use crate::model::{Model, Reply};
use crate::relay::{KEY, create, results, search_site, step};
use crate::tls::{Tls, port_of};
use serde_json::{Value, json};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NOBODY: u32 = 65534;

/// The other account's program: each request it is given made on a port
/// of 127.0.0.1 (its status, or the error), each socket connected to,
/// each directory listed, and every `/proc/PID/cmdline` and `environ` it
/// can read searched for `secret`; one JSON object on its output.
const OTHER: &str = r#"
import http.client, json, os, socket, sys
ask = json.loads(sys.stdin.read())
said = {"requests": [], "sockets": {}, "dirs": {}, "found": []}
for port, path, headers, body in ask["requests"]:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", path, body=body, headers=headers)
        r = c.getresponse()
        said["requests"].append(r.status)
    except OSError as e:
        said["requests"].append(str(e))
for path in ask["sockets"]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        said["sockets"][path] = "connected"
    except OSError as e:
        said["sockets"][path] = e.errno
    s.close()
for path in ask["dirs"]:
    try:
        said["dirs"][path] = sorted(os.listdir(path))
    except OSError as e:
        said["dirs"][path] = e.errno
secret = ask["secret"].encode()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    for part in ["cmdline", "environ"]:
        try:
            with open(os.path.join("/proc", pid, part), "rb") as f:
                if secret in f.read():
                    said["found"].append(pid + "/" + part)
        except OSError:
            pass
print(json.dumps(said))
"#;

/// [`OTHER`] run as uid 65534 (its gid the same, no other group) on
/// `ask`, given on its standard input (on no command line, where the
/// secret would be found).
fn as_other(ask: &Value) -> Value {
    use std::io::Write;
    let mut child = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(OTHER)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(ask.to_string().as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the other account's program: {}",
        crate::support::said(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The TCP ports process `pid` listens on, with the address each is bound to.
fn listening(pid: u32) -> Vec<(String, u16)> {
    let out = Command::new("ss").args(["-Hltnp"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .filter_map(|l| {
            let local = l.split_whitespace().nth(3)?;
            let (addr, port) = local.rsplit_once(':')?;
            Some((addr.to_string(), port.parse().ok()?))
        })
        .collect()
}

/// The sockets under `dir`, found as root, however deep.
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_socket() {
            found.push(e.path());
        } else if kind.is_dir() {
            found.extend(sockets_under(&e.path()));
        }
    }
    found
}

/// A run whose page names its model service, on the narrow network
/// (`sandbox.hosts`) and without its password, so that its `.ocx/` holds
/// every socket a run may have: another account, knowing the relay's port
/// (any account can list what 127.0.0.1 listens on), is answered 401 with
/// no token, a guessed one, and the node's key itself, and none of its
/// requests reaches the model service; it finds the run's token on no
/// command line or environment it can read; and it can neither list the
/// run's directory nor connect to any socket of it (the run's `.ocx/`
/// lies inside a directory that is the run's and root's alone).
#[test]
fn another_account_is_refused_at_a_runs_relay_and_reaches_no_socket_of_its_ocx_directory() {
    let model = Model::start(|_| Reply::text("hello from upstream"));
    let tls = Tls::front(port_of(&model.url()));
    let (site, out) = search_site(&tls);
    let record = create(&site, &out, &["--hosts", "example.org", "--no-password"]);
    let all = results(&out);
    assert_eq!(step(&all, "token")["status"], 200, "{all:#?}");
    let token = step(&all, "done")["token"].as_str().unwrap().to_string();
    let reached = model.conversation().len();

    let root = site.node.repo.node_root();
    let run_dir = ocx::node::config::NodeConfig::run_dir(&root, &record);
    let watcher = crate::support::nodes_and_watchers_under(&root)
        .into_iter()
        .find(|p| p.command() == "watch")
        .expect("the run's watcher");
    let ports = listening(watcher.pid as u32);
    assert!(!ports.is_empty(), "the relay listens on the host");
    for (addr, _) in &ports {
        assert_eq!(addr, "127.0.0.1", "the watcher listens on loopback alone");
    }
    let sockets = sockets_under(&run_dir);
    for name in ["mcp.sock", "model.sock"] {
        assert!(
            sockets.iter().any(|s| s.ends_with(name)),
            "{name} in {sockets:?}"
        );
    }
    assert!(sockets.len() >= 4, "the ways out too: {sockets:?}");

    let body = json!({"model": "m", "max_tokens": 10,
        "messages": [{"role": "user", "content": "from another account"}]})
    .to_string();
    let mut requests = Vec::new();
    for (_, port) in &ports {
        for headers in [
            json!({"content-type": "application/json"}),
            json!({"x-api-key": "sk-guessed"}),
            json!({"authorization": "Bearer sk-guessed"}),
            json!({"x-api-key": KEY}),
            json!({"x-api-key": &token[..token.len() - 1]}),
        ] {
            requests.push(json!([port, "/v1/messages", headers, body]));
        }
    }
    let ocx_dirs: Vec<PathBuf> = sockets
        .iter()
        .filter_map(|s| s.parent())
        .map(Path::to_path_buf)
        .collect();
    let mut dirs = vec![run_dir.clone()];
    dirs.extend(ocx_dirs);
    let said = as_other(&json!({
        "requests": requests,
        "sockets": sockets,
        "dirs": dirs,
        "secret": token,
    }));
    for status in said["requests"].as_array().unwrap() {
        assert_eq!(status, 401, "{said:#}");
    }
    assert_eq!(
        model.conversation().len(),
        reached,
        "nothing of the other account reached the model service"
    );
    assert_eq!(
        said["found"],
        json!([]),
        "the run's token is on no line it reads"
    );
    for (path, errno) in said["sockets"].as_object().unwrap() {
        assert_eq!(errno, 13, "{path}: {said:#}");
    }
    for (path, errno) in said["dirs"].as_object().unwrap() {
        assert_eq!(errno, 13, "{path}: {said:#}");
    }

    site.post(&record, "please end");
    let (outcome, note) = site.response(&record);
    assert_eq!(outcome, "exited", "{note}");
}

/// `ocx --mcp-tunnel` serves every tool to its tunnel through an MCP
/// server of its own on 127.0.0.1, behind a token only that process
/// knows. Another account, which can find the port, is answered 401
/// without the token and with a guessed one, and the token is on no
/// command line or environment it can read.
#[test]
fn another_account_is_refused_at_the_mcp_tunnels_own_server() {
    let repo = crate::support::Repo::new();
    let service = crate::tunnel::Service::start();
    let mut child = crate::tunnel::tunnel(&repo, &service, Some(crate::tunnel::KEY));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let ports = loop {
        let ports = listening(child.id());
        if !ports.is_empty() {
            break ports;
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the tunnel's server never listened");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "another-account", "version": "1"}}})
    .to_string();
    let mut requests = Vec::new();
    for (addr, port) in &ports {
        assert_eq!(
            addr, "127.0.0.1",
            "the tunnel's server is on loopback alone"
        );
        for headers in [
            json!({"content-type": "application/json", "accept": "application/json, text/event-stream"}),
            json!({"content-type": "application/json", "accept": "application/json, text/event-stream",
                "authorization": "Bearer guessed"}),
            json!({"content-type": "application/json", "accept": "application/json, text/event-stream",
                "authorization": format!("Bearer {}", crate::tunnel::KEY)}),
        ] {
            requests.push(json!([port, "/mcp", headers, init]));
        }
    }
    let said = as_other(&json!({
        "requests": requests,
        "sockets": [],
        "dirs": [],
        "secret": crate::tunnel::KEY,
    }));
    let _ = child.kill();
    let _ = child.wait();
    for status in said["requests"].as_array().unwrap() {
        assert_eq!(status, 401, "{said:#}");
    }
    assert_eq!(
        said["found"],
        json!([]),
        "the tunnel's key is on no line it reads"
    );
}
