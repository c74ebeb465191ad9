//! Attacks made from inside a real no-password run under bubblewrap: its
//! runner, a small program of ours, tries to get the node to run, follow or
//! believe what the run wrote, through its own `ocx --mcp`, through the
//! node's socket, and around both. Each test asserts the attack failed and
//! that nothing changed on the host or in the node's repository.

use crate::support::{Repo, Served, ServedNode, fossil};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What the attacker's runner adds to the shared prelude.
const PRELUDE: &str = r#"
MARKER = os.environ["OCX_TEST_MARKER"]

def server(name):
    rpc = mcp(name)
    return lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})

def unsent():
    db = sqlite3.connect(".clone.fossil")
    rows = db.execute("SELECT b.uuid FROM unsent u JOIN blob b USING(rid)").fetchall()
    db.close()
    arts = []
    for (h,) in rows:
        data = subprocess.run([FOSSIL, "artifact", h, "-R", ".clone.fossil"], capture_output=True).stdout
        arts.append((h, data))
    return arts

def sent(arts):
    return [{"hash": h, "content": base64.b64encode(d).decode()} for h, d in arts]

def rename(data, hash_len):
    return hashlib.sha1(data).hexdigest() if hash_len == 40 else hashlib.sha3_256(data).hexdigest()

def reseal(body):
    return body + b"Z " + hashlib.md5(body).hexdigest().encode() + b"\n"

"#;

const MAIN: &str = r#"
for line in sys.stdin:
    if not line.startswith("Record "):
        continue
    local = server("ocx")
    node = server("ocx-node")
    try:
        attack(local, node)
    except Exception as e:
        note({"step": "crash", "error": repr(e)})
    note({"step": "done"})
"#;

/// A no-password run whose runner makes `attack`, and what it noted.
struct Attack {
    node: ServedNode,
    /// Read-write inside the run, and seen by the test.
    out: PathBuf,
    /// A file of the host outside the sandbox, which no attack may create.
    marker: PathBuf,
    /// The served repository's check-ins before the run started.
    checkins_before: i64,
    steps: Vec<Value>,
}

impl Attack {
    fn step(&self, name: &str) -> &Value {
        self.steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name}: {:#?}", self.steps))
    }

    fn checkins_now(&self) -> i64 {
        checkins(&self.node.repo.file)
    }

    fn assert_no_new_checkin(&self) {
        assert_eq!(
            self.checkins_now(),
            self.checkins_before,
            "no check-in reached the node's repository"
        );
    }
}

fn checkins(file: &Path) -> i64 {
    let db = rusqlite::Connection::open(file).unwrap();
    db.query_row("SELECT count(*) FROM event WHERE type='ci'", [], |r| {
        r.get(0)
    })
    .unwrap()
}

/// Starts a served node, and a no-password run (restricted to `branch`
/// when given) whose runner defines `attack(local, node)` as `body`.
fn attack(body: &str, branch: Option<&str>) -> Attack {
    let repo = Repo::new();
    let dir = repo.dir.path().to_path_buf();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = dir.join("prog");
    let out = dir.join("out");
    let host = dir.join("host");
    for d in [&prog, &out, &host] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = host.join("pwned");
    let runner = prog.join("attacker.py");
    std::fs::write(
        &runner,
        format!("{}{PRELUDE}{body}{MAIN}", crate::support::PY_RUNNER_PRELUDE),
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let page = dir.join("page.md");
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil(), "OCX_TEST_MARKER": marker}});
    std::fs::write(&page, format!("```json\n{block}\n```\n")).unwrap();
    repo.fossil(&[
        "wiki",
        "create",
        "sandbox/attacker",
        page.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
    repo.commit_as("admin", "README", "start\n", None);
    let node = Served::on(repo).start();
    let checkins_before = checkins(&node.repo.file);
    let mut args = vec![
        "create",
        "--runner",
        "attacker",
        "--run-user",
        "intruder",
        "--objective",
        "Break the boundary",
        "--no-password",
        "--wall",
        "5m",
        "--read-write",
        out.to_str().unwrap(),
    ];
    if let Some(b) = branch {
        args.extend(["--branch", b, "--new-branch"]);
    }
    node.repo.json(&args).ok();
    let steps = crate::support::noted_until_done(&out, "the attack");
    Attack {
        node,
        out,
        marker,
        checkins_before,
        steps,
    }
}

/// The refusal's reason in a tool call's answer, or the MCP error's text.
fn refusal(msg: &Value) -> String {
    if let Some(e) = msg.get("error") {
        return e["message"].as_str().unwrap_or_default().to_string();
    }
    let result = &msg["result"];
    assert_eq!(result["isError"], true, "the call was refused: {msg:#}");
    result["structuredContent"]["stopped"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_test_called_through_the_node_socket_runs_nothing_on_the_host() {
    let a = attack(
        r#"
def attack(local, node):
    with open("ocx-tests.json", "w") as f:
        json.dump({"tests": [{"name": "x", "command": "touch %s/ran-inside; touch %s" % (out, MARKER)}]}, f)
    note({"step": "node-test", "result": node("ocx_test", {})})
    note({"step": "node-save", "result": node("ocx_save", {"title": "t", "intent": "i", "expression": "e", "demonstrates": "x"})})
    note({"step": "local-test", "result": local("ocx_test", {})})
"#,
        None,
    );
    for step in ["node-test", "node-save"] {
        let why = refusal(&a.step(step)["result"]);
        assert!(why.contains("there is no tool"), "{step}: {why}");
    }
    assert!(
        a.out.join("ran-inside").exists(),
        "the test ran where it belongs, inside the sandbox"
    );
    assert!(
        !a.marker.exists(),
        "the run's test command reached the host: {}",
        a.marker.display()
    );
}

#[test]
fn a_rewritten_tagxref_does_not_carry_a_checkin_onto_the_allowed_branch() {
    let a = attack(
        r#"
def attack(local, node):
    with open("trunk.txt", "w") as f:
        f.write("straight onto trunk\n")
    fossil("add", "trunk.txt")
    code, said = fossil("commit", "-m", "onto trunk", "--no-warnings")
    db = sqlite3.connect(".clone.fossil")
    rid = db.execute("SELECT max(objid) FROM event WHERE type='ci'").fetchone()[0]
    uuid = db.execute("SELECT uuid FROM blob WHERE rid=?", (rid,)).fetchone()[0]
    db.execute("UPDATE tagxref SET value='fixes' WHERE rid=? AND tagid=8", (rid,))
    fixes = db.execute("SELECT tagid FROM tag WHERE tagname='sym-fixes'").fetchone()
    if fixes is None:
        db.execute("INSERT INTO tag(tagname) VALUES('sym-fixes')")
        fixes = db.execute("SELECT tagid FROM tag WHERE tagname='sym-fixes'").fetchone()
    db.execute("UPDATE tagxref SET tagid=? WHERE rid=? AND tagid=(SELECT tagid FROM tag WHERE tagname='sym-trunk')", (fixes[0], rid))
    db.commit()
    db.close()
    note({"step": "commit", "code": code, "hash": uuid, "branch": fossil("info", uuid)[1]})
    note({"step": "push", "result": local("ocx_push", {})})
"#,
        Some("fixes"),
    );
    let commit = a.step("commit");
    assert_eq!(commit["code"], 0, "{commit:#}");
    assert!(
        commit["branch"].as_str().unwrap().contains("fixes"),
        "the clone now says the check-in is on fixes: {commit:#}"
    );
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains("is on trunk") && why.contains("only on fixes"),
        "{why}"
    );
    let hash = commit["hash"].as_str().unwrap();
    assert!(
        a.node.repo.sender(hash).is_none(),
        "the check-in never arrived"
    );
    a.assert_no_new_checkin();
}

#[test]
fn a_save_whose_clone_carries_a_hook_runs_it_only_inside_the_sandbox() {
    let a = attack(
        r#"
def attack(local, node):
    script = os.path.join(out, "hook.sh")
    with open(script, "w") as f:
        f.write("touch %s/hook-ran\ntouch %s\nexit 0\n" % (out, MARKER))
    code, said = fossil("hook", "add", "--type", "before-commit", "--command", "/bin/sh " + script, "-R", ".clone.fossil")
    note({"step": "hook", "code": code, "said": said})
    with open("change.txt", "w") as f:
        f.write("a change\n")
    fossil("add", "change.txt")
    note({"step": "node-save", "result": node("ocx_save", {"title": "t", "intent": "i", "expression": "e", "demonstrates": "none"})})
    note({"step": "save", "result": local("ocx_save", {"title": "Add a change", "intent": "to try a hook", "expression": "change.txt", "demonstrates": "none"})})
"#,
        None,
    );
    assert_eq!(a.step("hook")["code"], 0, "{:#}", a.step("hook"));
    let why = refusal(&a.step("node-save")["result"]);
    assert!(why.contains("there is no tool"), "{why}");
    let saved = &a.step("save")["result"]["result"];
    assert_eq!(saved["isError"], false, "{saved:#}");
    let checkin = saved["structuredContent"]["result"]["checkin"]
        .as_str()
        .unwrap();
    assert_eq!(
        a.node.repo.sender(checkin).as_deref(),
        Some("intruder"),
        "the save arrived as the run's user"
    );
    assert!(
        a.out.join("hook-ran").exists(),
        "the clone's hook ran, inside the sandbox"
    );
    assert!(
        !a.marker.exists(),
        "the clone's hook ran on the host: {}",
        a.marker.display()
    );
}

#[test]
fn a_state_file_linked_elsewhere_is_not_written_through() {
    let a = attack(
        r#"
def attack(local, node):
    victim = os.path.join(out, "victim")
    with open(victim, "w") as f:
        f.write("untouched\n")
    for name in ["agent.json.tmp", "agent.json"]:
        path = os.path.join(".ocx", name)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(victim, path)
    with open("ocx-tests.json", "w") as f:
        json.dump({"tests": [{"name": "ok", "command": "true"}]}, f)
    note({"step": "node-test", "result": node("ocx_test", {})})
    note({"step": "test", "result": local("ocx_test", {})})
    note({"step": "edit", "result": local("ocx_edit", {"path": "ocx-tests.json", "old": "", "new": "\n"})})
    note({"step": "links", "agent": os.path.islink(os.path.join(".ocx", "agent.json"))})
"#,
        None,
    );
    assert!(refusal(&a.step("node-test")["result"]).contains("there is no tool"));
    assert_eq!(
        std::fs::read_to_string(a.out.join("victim")).unwrap(),
        "untouched\n",
        "the file the state's links name is unchanged"
    );
    let test = &a.step("test")["result"]["result"];
    assert_eq!(test["isError"], false, "{test:#}");
    assert_eq!(
        a.step("links")["agent"],
        false,
        "the state was written as a file of its own, replacing the link"
    );
    assert!(!a.marker.exists(), "nothing was written on the host");
}

#[test]
fn read_and_edit_through_a_link_out_of_the_workspace_are_refused() {
    let a = attack(
        r#"
def attack(local, node):
    secret = os.path.join(out, "secret")
    with open(secret, "w") as f:
        f.write("the host's secret\n")
    with open("plain.txt", "w") as f:
        f.write("plain\n")
    note({"step": "read-plain", "result": local("ocx_read", {"path": "plain.txt"})})
    os.remove("plain.txt")
    os.symlink(secret, "plain.txt")
    os.symlink(out, "outside")
    note({"step": "read-swapped", "result": local("ocx_read", {"path": "plain.txt"})})
    note({"step": "read-dir", "result": local("ocx_read", {"path": "outside/secret"})})
    note({"step": "edit-swapped", "result": local("ocx_edit", {"path": "plain.txt", "old": "the host's secret\n", "new": "overwritten\n"})})
    note({"step": "edit-new", "result": local("ocx_edit", {"path": "outside/planted.txt", "old": "", "new": "planted\n"})})
    note({"step": "node-read", "result": node("ocx_read", {"path": "plain.txt"})})
"#,
        None,
    );
    let plain = &a.step("read-plain")["result"]["result"];
    assert_eq!(plain["isError"], false, "{plain:#}");
    for step in ["read-swapped", "read-dir", "edit-swapped", "edit-new"] {
        let why = refusal(&a.step(step)["result"]);
        assert!(why.contains("symbolic link"), "{step}: {why}");
        let text = a.step(step).to_string();
        assert!(
            !text.contains("the host's secret\\n\","),
            "{step} leaked: {text}"
        );
    }
    assert!(refusal(&a.step("node-read")["result"]).contains("there is no tool"));
    assert_eq!(
        std::fs::read_to_string(a.out.join("secret")).unwrap(),
        "the host's secret\n"
    );
    assert!(!a.out.join("planted.txt").exists());
}

#[test]
fn a_pushed_checkin_whose_hash_does_not_match_its_bytes_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    with open("honest.txt", "w") as f:
        f.write("honest\n")
    fossil("add", "honest.txt")
    fossil("commit", "-m", "honest", "--no-warnings")
    arts = unsent()
    ci = [a for a in arts if a[1].startswith(b"C ")][0]
    body = ci[1][:ci[1].rindex(b"Z ")].replace(b"C honest", b"C forged")
    forged = reseal(body)
    rest = [a for a in arts if a[0] != ci[0]]
    note({"step": "forged", "claimed": ci[0], "real": rename(forged, len(ci[0])),
          "files": [h for h, _ in rest], "honest_names": all(rename(d, len(h)) == h for h, d in arts)})
    note({"step": "push", "result": node("ocx_push", {"artifacts": sent(rest + [(ci[0], forged)])})})
"#,
        None,
    );
    let forged = a.step("forged");
    assert_eq!(
        forged["honest_names"], true,
        "the run read its artifacts exactly"
    );
    let claimed = forged["claimed"].as_str().unwrap();
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains(claimed) && why.contains("hash to"),
        "the refusal names the artifact and why: {why}"
    );
    for h in [claimed, forged["real"].as_str().unwrap()]
        .into_iter()
        .chain(
            forged["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap()),
        )
    {
        assert!(a.node.repo.sender(h).is_none(), "{h} never arrived");
    }
    a.assert_no_new_checkin();
}

#[test]
fn a_pushed_checkin_naming_another_login_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    fossil("user", "new", "admin", "admin@here", "x", "-R", ".clone.fossil")
    with open("as-admin.txt", "w") as f:
        f.write("as admin\n")
    fossil("add", "as-admin.txt")
    code, said = fossil("commit", "--user", "admin", "-m", "as the admin", "--no-warnings")
    arts = unsent()
    ci = [d for h, d in arts if d.startswith(b"C ")]
    note({"step": "commit", "code": code, "said": said, "u": [l for l in ci[0].decode().split("\n") if l.startswith("U ")]})
    note({"step": "push", "result": local("ocx_push", {})})
"#,
        None,
    );
    let commit = a.step("commit");
    assert_eq!(commit["code"], 0, "{commit:#}");
    assert_eq!(commit["u"], json!(["U admin"]), "{commit:#}");
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains("U card names \"admin\"") && why.contains("intruder"),
        "{why}"
    );
    a.assert_no_new_checkin();
}

#[test]
fn a_symlinked_tests_file_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    planted = os.path.join(out, "tests.json")
    with open(planted, "w") as f:
        json.dump({"tests": [{"name": "x", "command": "touch %s/ran" % out}]}, f)
    os.symlink(planted, "ocx-tests.json")
    note({"step": "test", "result": local("ocx_test", {})})
    note({"step": "context", "result": local("ocx_context", {})})
"#,
        None,
    );
    for step in ["test", "context"] {
        let why = refusal(&a.step(step)["result"]);
        assert!(
            why.contains("ocx-tests.json") && why.contains("symbolic link"),
            "{step}: {why}"
        );
    }
    assert!(!a.out.join("ran").exists(), "the linked tests never ran");
}

#[test]
fn a_file_shaped_as_a_control_artifact_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    db = sqlite3.connect(".clone.fossil")
    trunk = db.execute("SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid WHERE e.type='ci' ORDER BY e.mtime DESC LIMIT 1").fetchone()[0]
    db.close()
    control = reseal(("D 2026-01-01T00:00:00.000\nT +sym-release %s\nU intruder\n" % trunk).encode())
    with open("release.txt", "wb") as f:
        f.write(control)
    fossil("add", "release.txt")
    code, said = fossil("commit", "-m", "a file that is a tag", "--no-warnings")
    note({"step": "commit", "code": code, "control": rename(control, len(trunk))})
    note({"step": "push", "result": local("ocx_push", {})})
"#,
        None,
    );
    let control = a.step("commit")["control"].as_str().unwrap().to_string();
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains(&control) && why.contains("other than a check-in"),
        "{why}"
    );
    assert!(a.node.repo.sender(&control).is_none());
    a.assert_no_new_checkin();
}

#[test]
fn a_pushed_checkin_naming_itself_trunk_on_a_fixes_run_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    with open("fix.txt", "w") as f:
        f.write("fixed\n")
    fossil("add", "fix.txt")
    fossil("commit", "-m", "the fix", "--branch", "fixes", "--no-warnings")
    arts = unsent()
    ci = [x for x in arts if x[1].startswith(b"C ")][0]
    body = ci[1][:ci[1].rindex(b"Z ")].replace(b"\nU ", b"\nT *sym-trunk *\nU ")
    forged = reseal(body)
    name = rename(forged, len(ci[0]))
    rest = [x for x in arts if x[0] != ci[0]]
    note({"step": "forged", "hash": name})
    note({"step": "push", "result": node("ocx_push", {"artifacts": sent(rest + [(name, forged)])})})
"#,
        Some("fixes"),
    );
    let hash = a.step("forged")["hash"].as_str().unwrap().to_string();
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains(&hash) && why.contains("*sym-trunk") && why.contains("only on fixes"),
        "{why}"
    );
    assert!(a.node.repo.sender(&hash).is_none());
    a.assert_no_new_checkin();
}

#[test]
fn a_pushed_checkin_without_its_files_is_refused() {
    let a = attack(
        r#"
def attack(local, node):
    with open("new.txt", "w") as f:
        f.write("a new file\n")
    fossil("add", "new.txt")
    fossil("commit", "-m", "a new file", "--no-warnings")
    arts = unsent()
    ci = [x for x in arts if x[1].startswith(b"C ")][0]
    files = [x[0] for x in arts if x[0] != ci[0]]
    note({"step": "commit", "hash": ci[0], "files": files})
    note({"step": "push", "result": node("ocx_push", {"artifacts": sent([ci])})})
"#,
        None,
    );
    let commit = a.step("commit");
    let hash = commit["hash"].as_str().unwrap();
    let file = commit["files"][0].as_str().unwrap();
    let why = refusal(&a.step("push")["result"]);
    assert!(
        why.contains(hash) && why.contains(file) && why.contains("new.txt"),
        "{why}"
    );
    assert!(a.node.repo.sender(hash).is_none());
    a.assert_no_new_checkin();
}

#[test]
fn an_endless_message_on_the_node_socket_ends_only_its_own_connection() {
    let a = attack(
        r#"
def attack(local, node):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["OCX_MCP_SOCKET"])
    chunk = b"a" * (1 << 20)
    sent_bytes = 0
    ended = "never"
    try:
        for _ in range(80):
            s.sendall(chunk)
            sent_bytes += len(chunk)
        s.settimeout(30)
        ended = "eof" if s.recv(1) == b"" else "answered"
    except socket.timeout:
        ended = "still reading"
    except OSError as e:
        ended = "closed: " + type(e).__name__
    note({"step": "flood", "sent": sent_bytes, "ended": ended})
    note({"step": "status", "result": node("ocx_status", {})})
    again = server("ocx-node")
    note({"step": "again", "result": again("ocx_status", {})})
"#,
        None,
    );
    let flood = a.step("flood");
    let ended = flood["ended"].as_str().unwrap();
    assert!(
        ended == "eof" || ended.starts_with("closed"),
        "the node dropped the endless message's connection: {flood:#}"
    );
    for step in ["status", "again"] {
        let result = &a.step(step)["result"]["result"];
        assert_eq!(result["isError"], false, "{step}: {result:#}");
        assert_eq!(result["structuredContent"]["result"]["login"], "intruder");
    }
}
