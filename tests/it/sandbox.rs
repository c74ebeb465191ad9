//! Attacks from inside a run's sandbox, each contained, and budgets that end runs by their limit.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use ocx::run::{
    BudgetLimits, Ended, Forbidden, Limit, Plan, Preflight, Program, RunAccount, SandboxError,
    SandboxFields, preflight, spawn,
};
use tempfile::TempDir;

const PYTHON: &str = "/usr/bin/python3";

fn host() -> &'static Preflight {
    static PREFLIGHT: OnceLock<Preflight> = OnceLock::new();
    PREFLIGHT.get_or_init(preflight)
}

fn say(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// Whether this host can hold the fields; when it cannot, asserts that preflight refuses one of `fields` and says so.
fn holds(test: &str, sandbox: &SandboxFields, budget: &BudgetLimits, fields: &[&str]) -> bool {
    match host().check(sandbox, budget) {
        Ok(()) => true,
        Err(u) => {
            assert!(
                u.field == "sandbox" || fields.contains(&u.field),
                "{test}: preflight refused an unexpected field: {u}"
            );
            say(&format!(
                "NOT ENFORCEABLE ON THIS HOST, {test} asserted preflight's refusal instead: {u}"
            ));
            false
        }
    }
}

fn name(test: &str) -> String {
    format!("it-{test}-{}", std::process::id())
}

fn sh(script: &str) -> Program {
    Program {
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        ..Program::default()
    }
}

fn python(code: &str) -> Program {
    Program {
        command: vec![PYTHON.into(), "-c".into(), code.into()],
        ..Program::default()
    }
}

fn tmp() -> TempDir {
    tempfile::Builder::new().prefix("ocx-it").tempdir().unwrap()
}

/// The host account runs run as here, when the tests run as root: a uid of this test
/// process's own, as a node leases each run one from its range.
fn account() -> Option<RunAccount> {
    nix::unistd::geteuid()
        .is_root()
        .then(|| RunAccount::of_uid(1_590_000_000 + std::process::id() % 1_000_000))
}

/// A run's plan, run as [`account`] when the tests run as root.
fn plan(
    run_name: &str,
    workspace: &Path,
    sandbox: &SandboxFields,
    budget: &BudgetLimits,
    program: &Program,
    forbidden: &Forbidden,
) -> Result<Plan, SandboxError> {
    let mut planned = ocx::run::plan(run_name, workspace, sandbox, budget, program, forbidden)?;
    if let Some(a) = account() {
        planned.run_as(a);
    }
    Ok(planned)
}

/// Grants the run account read and write access to a `sandbox.read_write` directory, as a maintainer must.
fn grant(dir: &Path) {
    if let Some(a) = account() {
        std::os::unix::fs::chown(dir, Some(a.uid), Some(a.gid)).unwrap();
    }
}

fn p(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

fn wall(secs: u64) -> BudgetLimits {
    BudgetLimits::wall(Duration::from_secs(secs))
}

struct Out {
    ended: Ended,
    stdout: String,
    stderr: String,
}

fn run_plan(plan: &Plan) -> Out {
    let mut running = spawn(plan, Stdio::null(), Stdio::piped(), Stdio::piped()).unwrap();
    let mut err = running.stderr().unwrap();
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = running.stdout().unwrap().read_to_string(&mut stdout);
    let ended = running.wait().unwrap();
    let stderr = err.join().unwrap();
    Out {
        ended,
        stdout,
        stderr,
    }
}

fn run(
    test: &str,
    workspace: &Path,
    sandbox: &SandboxFields,
    budget: &BudgetLimits,
    program: &Program,
    forbidden: &Forbidden,
) -> Out {
    let plan = plan(&name(test), workspace, sandbox, budget, program, forbidden).unwrap();
    run_plan(&plan)
}

fn node_account_home() -> TempDir {
    let parent = if Path::new("/root").is_dir() {
        "/root"
    } else {
        "/home"
    };
    tempfile::Builder::new()
        .prefix("ocx-it-node-home")
        .tempdir_in(parent)
        .unwrap()
}

#[test]
fn node_account_home_is_not_readable() {
    let sandbox = SandboxFields::default();
    if !holds(
        "node_account_home",
        &sandbox,
        &wall(10),
        &["sandbox.network"],
    ) {
        return;
    }
    let home = node_account_home();
    let secret = home.path().join("credentials");
    fs::write(&secret, "TOPSECRET-home").unwrap();
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let ws = tmp();
    let script = format!(
        "cat '{s}' && echo LEAK-secret; ls '{h}' && echo LEAK-home; ls /root && echo LEAK-root; \
         ls '{r}' && echo LEAK-real-home; echo \"HOME=$HOME\"; echo done",
        s = p(&secret),
        h = p(home.path()),
        r = real_home,
    );
    let forbidden = Forbidden {
        paths: vec![home.path().to_path_buf()],
    };
    let out = run(
        "home",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &forbidden,
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("LEAK"), "{}", out.stdout);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("HOME={}", p(ws.path()))));
    assert_eq!(out.ended.code, Some(0));
}

#[test]
fn served_repository_file_is_not_readable() {
    let sandbox = SandboxFields::default();
    if !holds("repository", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let node = tmp();
    let repo = node.path().join("project.fossil");
    fs::write(&repo, "SQLite format 3 TOPSECRET-repo").unwrap();
    let ws = tmp();
    let script = format!(
        "cat '{r}' && echo LEAK-repo; test -e '{r}' && echo LEAK-exists; echo done",
        r = p(&repo)
    );
    let forbidden = Forbidden { paths: vec![repo] };
    let out = run(
        "repo",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &forbidden,
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("LEAK"), "{}", out.stdout);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);
}

#[test]
fn node_root_directory_is_not_listable() {
    let sandbox = SandboxFields::default();
    if !holds("node_root", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let root = tmp();
    fs::write(root.path().join("node.db"), "TOPSECRET-db").unwrap();
    fs::create_dir(root.path().join("keys")).unwrap();
    fs::write(root.path().join("keys/signing"), "TOPSECRET-key").unwrap();
    let forbidden = Forbidden {
        paths: vec![root.path().to_path_buf()],
    };

    let elsewhere = tmp();
    let script = format!(
        "ls -la '{r}' && echo LEAK-listed; cat '{r}/node.db' '{r}/keys/signing'; echo done",
        r = p(root.path())
    );
    let out = run(
        "root-out",
        elsewhere.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &forbidden,
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("LEAK"), "{}", out.stdout);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);

    let inside = root.path().join("runs/r1/workspace");
    fs::create_dir_all(&inside).unwrap();
    let script = format!(
        "ls -A '{r}'; echo ---; cat '{r}/node.db' '{r}/keys/signing'; echo done",
        r = p(root.path())
    );
    let out = run(
        "root-in",
        &inside,
        &sandbox,
        &wall(10),
        &sh(&script),
        &forbidden,
    );
    let listed = out.stdout.split("---").next().unwrap();
    assert_eq!(listed.split_whitespace().collect::<Vec<_>>(), ["runs"]);
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);
}

#[test]
fn writes_outside_the_workspace_do_not_reach_the_host() {
    let sandbox = SandboxFields::default();
    if !holds("writes_outside", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let tag = format!("ocx-it-escape-{}", std::process::id());
    let beside = ws.path().parent().unwrap().join(&tag);
    let targets = [
        PathBuf::from("/etc").join(&tag),
        PathBuf::from("/usr").join(&tag),
        PathBuf::from("/tmp").join(&tag),
        PathBuf::from("/").join(&tag),
        beside,
    ];
    let mut script = String::new();
    for t in &targets {
        script.push_str(&format!("echo x > '{}' && echo wrote '{}'; ", p(t), p(t)));
    }
    script.push_str("echo kept > inside.txt; echo done");
    let out = run(
        "writes",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &Forbidden::default(),
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    for t in &targets {
        assert!(!t.exists(), "{} reached the host", t.display());
    }
    assert_eq!(
        fs::read_to_string(ws.path().join("inside.txt")).unwrap(),
        "kept\n"
    );
}

#[test]
fn read_only_is_read_only_and_read_write_is_writable() {
    let ro = tmp();
    let rw = tmp();
    fs::write(ro.path().join("file"), "original").unwrap();
    grant(rw.path());
    let sandbox = SandboxFields {
        network: false,
        read_only: vec![ro.path().to_path_buf()],
        read_write: vec![rw.path().to_path_buf()],
    };
    if !holds("read_only", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let script = format!(
        "cat '{ro}/file'; echo; echo changed > '{ro}/file' && echo LEAK-ro-write; \
         touch '{ro}/new' && echo LEAK-ro-create; echo written > '{rw}/new' && echo rw-ok; echo done",
        ro = p(ro.path()),
        rw = p(rw.path()),
    );
    let out = run(
        "rorw",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &Forbidden::default(),
    );
    assert!(
        out.stdout.starts_with("original"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains("rw-ok") && out.stdout.contains("done"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("LEAK"), "{}", out.stdout);
    assert_eq!(
        fs::read_to_string(ro.path().join("file")).unwrap(),
        "original"
    );
    assert!(!ro.path().join("new").exists());
    assert_eq!(
        fs::read_to_string(rw.path().join("new")).unwrap(),
        "written\n"
    );
}

/// What a program given no more than `sandbox` does when it connects to a
/// listener of the host's loopback: whether it connected (it exits 0 when
/// it did, 7 when refused), and whether the listener has a connection
/// waiting. None when the host cannot hold the case (`holds`).
fn loopback_reached(case: &str, sandbox: &SandboxFields, refused: &[&str]) -> Option<(bool, bool)> {
    if !holds(case, sandbox, &wall(10), refused) {
        return None;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = tmp();
    let out = run(
        &case.replace('_', "-"),
        ws.path(),
        sandbox,
        &wall(10),
        &python(&format!(
            "import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\nexcept OSError as e:\n    print(e)\n    sys.exit(7)\n"
        )),
        &Forbidden::default(),
    );
    let connected = match out.ended.code {
        Some(0) => true,
        Some(7) => false,
        _ => panic!(
            "the program failed: {:?}\n{}{}",
            out.ended, out.stdout, out.stderr
        ),
    };
    listener.set_nonblocking(true).unwrap();
    Some((connected, listener.accept().is_ok()))
}

#[test]
fn without_network_the_host_loopback_is_unreachable() {
    let sandbox = SandboxFields::default();
    if let Some(reached) = loopback_reached("network_false", &sandbox, &["sandbox.network"]) {
        assert_eq!(reached, (false, false), "(connected, accepted)");
    }
}

#[test]
fn with_network_the_host_loopback_is_reachable() {
    let sandbox = SandboxFields {
        network: true,
        ..SandboxFields::default()
    };
    if let Some(reached) = loopback_reached("network_true", &sandbox, &[]) {
        assert_eq!(reached, (true, true), "(connected, accepted)");
    }
}

fn assert_cgroup_removed(plan: &Plan) {
    let cg = plan.cgroup.as_ref().expect("a cgroup plan");
    for slot in [&cg.cpu, &cg.memory, &cg.pids].into_iter().flatten() {
        assert!(!slot.dir.exists(), "{} left behind", slot.dir.display());
    }
}

#[test]
fn fork_bomb_ends_by_the_process_limit() {
    let sandbox = SandboxFields::default();
    let budget = BudgetLimits {
        processes: Some(16),
        ..wall(20)
    };
    if !holds(
        "fork_bomb",
        &sandbox,
        &budget,
        &["sandbox.network", "budget.processes"],
    ) {
        return;
    }
    let ws = tmp();
    let plan = plan(
        &name("forkbomb"),
        ws.path(),
        &sandbox,
        &budget,
        &python("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"),
        &Forbidden::default(),
    )
    .unwrap();
    let out = run_plan(&plan);
    say(&format!("{}: {:?}", plan.run_name, out.ended));
    assert_eq!(out.ended.limit, Some(Limit::Processes), "{:?}", out.ended);
    assert!(
        out.ended.elapsed < Duration::from_secs(10),
        "{:?}",
        out.ended
    );
    assert_cgroup_removed(&plan);
    assert!(Command::new("true").status().unwrap().success());
}

#[test]
fn memory_hog_ends_by_the_memory_limit() {
    let sandbox = SandboxFields::default();
    let budget = BudgetLimits {
        memory_bytes: Some(64 << 20),
        ..wall(30)
    };
    if !holds(
        "memory_hog",
        &sandbox,
        &budget,
        &["sandbox.network", "budget.memory"],
    ) {
        return;
    }
    let ws = tmp();
    let code =
        "hog = []\nfor _ in range(256):\n    hog.append(b'x' * (8 << 20))\nprint('SURVIVED')\n";
    let plan = plan(
        &name("memhog"),
        ws.path(),
        &sandbox,
        &budget,
        &python(code),
        &Forbidden::default(),
    )
    .unwrap();
    let out = run_plan(&plan);
    say(&format!("{}: {:?}", plan.run_name, out.ended));
    assert_eq!(
        out.ended.limit,
        Some(Limit::Memory),
        "{:?} {}",
        out.ended,
        out.stderr
    );
    assert!(!out.stdout.contains("SURVIVED"));
    assert_cgroup_removed(&plan);
}

#[test]
fn busy_loops_end_by_the_cpu_limit_across_processes() {
    let sandbox = SandboxFields::default();
    let budget = BudgetLimits {
        cpu_seconds: Some(1),
        ..wall(30)
    };
    if !holds(
        "busy_loop",
        &sandbox,
        &budget,
        &["sandbox.network", "budget.cpu"],
    ) {
        return;
    }
    let ws = tmp();
    let spin = format!("{PYTHON} -c 'while True: pass'");
    let plan = plan(
        &name("busy"),
        ws.path(),
        &sandbox,
        &budget,
        &sh(&format!("{spin} & {spin} & wait")),
        &Forbidden::default(),
    )
    .unwrap();
    let out = run_plan(&plan);
    say(&format!("{}: {:?}", plan.run_name, out.ended));
    assert_eq!(out.ended.limit, Some(Limit::Cpu), "{:?}", out.ended);
    let used = out.ended.cpu_used.expect("cpu used");
    assert!(used >= Duration::from_secs(1), "{:?}", out.ended);
    assert!(
        out.ended.elapsed < Duration::from_secs(15),
        "{:?}",
        out.ended
    );
    assert_cgroup_removed(&plan);
}

#[test]
fn sleep_past_wall_ends_by_the_wall_limit() {
    let sandbox = SandboxFields::default();
    if !holds("wall", &sandbox, &wall(1), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let out = run(
        "wall",
        ws.path(),
        &sandbox,
        &wall(1),
        &sh("sleep 30"),
        &Forbidden::default(),
    );
    assert_eq!(out.ended.limit, Some(Limit::Wall), "{:?}", out.ended);
    assert!(out.ended.elapsed >= Duration::from_secs(1));
    assert!(
        out.ended.elapsed < Duration::from_secs(3),
        "{:?}",
        out.ended
    );
}

fn escaper(dir: &Path, then: &str) -> Program {
    python(&format!(
        "import os, sys, time\n\
         if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
         time.sleep(1.5)\n        open('{d}/escaped', 'w').write(str(os.getpid()))\n        os._exit(0)\n    os._exit(0)\n\
         os.wait()\nprint('parent', flush=True)\n{then}\n",
        d = p(dir),
    ))
}

fn assert_never_escapes(test: &str, budget: BudgetLimits, then: &str, limit: Option<Limit>) {
    let out_dir = tmp();
    grant(out_dir.path());
    let sandbox = SandboxFields {
        read_write: vec![out_dir.path().to_path_buf()],
        ..SandboxFields::default()
    };
    if !holds(
        test,
        &sandbox,
        &budget,
        &["sandbox.network", "budget.processes"],
    ) {
        return;
    }
    let ws = tmp();
    let started = Instant::now();
    let out = run(
        test,
        ws.path(),
        &sandbox,
        &budget,
        &escaper(out_dir.path(), then),
        &Forbidden::default(),
    );
    assert!(
        out.stdout.contains("parent"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(out.ended.limit, limit, "{:?}", out.ended);
    thread::sleep(
        Duration::from_millis(2500).saturating_sub(started.elapsed()) + Duration::from_millis(500),
    );
    assert!(
        !out_dir.path().join("escaped").exists(),
        "a setsid grandchild outlived the run"
    );
}

#[test]
fn setsid_grandchild_dies_when_the_run_exits() {
    assert_never_escapes("setsid-exit", wall(10), "", None);
}

#[test]
fn setsid_grandchild_dies_when_the_wall_ends_the_run() {
    let budget = BudgetLimits {
        processes: Some(32),
        ..wall(1)
    };
    assert_never_escapes("setsid-wall", budget, "time.sleep(30)", Some(Limit::Wall));
}

#[test]
fn another_runs_workspace_is_not_visible() {
    let sandbox = SandboxFields::default();
    if !holds("other_workspace", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let a = tmp();
    let b = tmp();
    fs::write(b.path().join("work"), "TOPSECRET-b").unwrap();
    // Run b lasts until it is killed once run a has looked, however slowly
    // a busy host runs a: its own end or wall before the kill would not be
    // the stop this test makes.
    let plan_b = plan(
        &name("ws-b"),
        b.path(),
        &sandbox,
        &wall(300),
        &sh("sleep 300"),
        &Forbidden::default(),
    )
    .unwrap();
    let running_b = spawn(&plan_b, Stdio::null(), Stdio::null(), Stdio::null()).unwrap();
    let script = format!(
        "ls '{b}' && echo LEAK-listed; cat '{b}/work'; echo mine > a.txt; echo done",
        b = p(b.path())
    );
    let out = run(
        "ws-a",
        a.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &Forbidden::default(),
    );
    running_b.kill();
    let ended_b = running_b.wait().unwrap();
    assert!(ended_b.stopped, "{ended_b:?}");
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("LEAK") && !out.stdout.contains("TOPSECRET"));
    assert!(a.path().join("a.txt").exists());
    assert!(!b.path().join("a.txt").exists());
}

#[test]
fn a_stop_from_another_thread_ends_the_run() {
    let sandbox = SandboxFields::default();
    if !holds("stop", &sandbox, &wall(30), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let plan = plan(
        &name("stop"),
        ws.path(),
        &sandbox,
        &wall(30),
        &sh("sleep 30 & sleep 30"),
        &Forbidden::default(),
    )
    .unwrap();
    let running = spawn(&plan, Stdio::null(), Stdio::null(), Stdio::null()).unwrap();
    let killer = running.killer();
    let stopper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        killer.kill();
    });
    let ended = running.wait().unwrap();
    stopper.join().unwrap();
    assert!(ended.stopped, "{ended:?}");
    assert_eq!(ended.limit, None);
    assert!(ended.elapsed < Duration::from_secs(3), "{ended:?}");
}

#[test]
fn environment_holds_only_path_home_user_and_the_programs_own() {
    let sandbox = SandboxFields::default();
    if !holds("env", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let home = tmp();
    let program = Program {
        command: vec!["env".into()],
        env: BTreeMap::from([("OCX_TOKEN".to_string(), "t0ken".to_string())]),
        homes: vec![home.path().to_path_buf()],
        home: None,
    };
    let out = run(
        "env",
        ws.path(),
        &sandbox,
        &wall(10),
        &program,
        &Forbidden::default(),
    );
    let vars: BTreeMap<&str, &str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    assert_eq!(
        vars.keys().copied().collect::<Vec<_>>(),
        ["HOME", "OCX_TOKEN", "PATH", "PWD", "USER"],
        "{}",
        out.stdout
    );
    assert_eq!(vars["PWD"], p(ws.path()));
    assert_eq!(vars["HOME"], p(home.path()));
    assert_eq!(vars["OCX_TOKEN"], "t0ken");
    let first = vars["PATH"].split(':').next().unwrap();
    assert!(Path::new(first).join("env").is_file(), "{}", vars["PATH"]);
    assert!(!vars["USER"].is_empty());
}

fn refused(result: Result<Plan, SandboxError>, field: &str) {
    match result {
        Ok(_) => panic!("planned a run that {field} should have refused"),
        Err(e) => {
            assert_eq!(e.field(), Some(field), "{e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }
}

#[test]
fn relative_and_forbidden_reaching_paths_are_refused_naming_the_field() {
    let ws = tmp();
    let node = tmp();
    let repo = node.path().join("repo.fossil");
    fs::write(&repo, "").unwrap();
    let forbidden = Forbidden {
        paths: vec![repo.clone()],
    };
    let prog = sh("true");
    let b = wall(5);
    let with = |read_only: Vec<PathBuf>, read_write: Vec<PathBuf>| SandboxFields {
        network: false,
        read_only,
        read_write,
    };
    let try_plan = |s: &SandboxFields, prog: &Program| {
        plan(&name("refuse"), ws.path(), s, &b, prog, &forbidden)
    };

    refused(
        try_plan(&with(vec!["relative/dir".into()], vec![]), &prog),
        "sandbox.read_only",
    );
    refused(
        try_plan(&with(vec![], vec!["./x".into()]), &prog),
        "sandbox.read_write",
    );
    refused(
        try_plan(&with(vec![repo.clone()], vec![]), &prog),
        "sandbox.read_only",
    );
    refused(
        try_plan(&with(vec![], vec![node.path().to_path_buf()]), &prog),
        "sandbox.read_write",
    );
    refused(
        try_plan(&with(vec!["/".into()], vec![]), &prog),
        "sandbox.read_only",
    );

    let link_dir = tmp();
    let link = link_dir.path().join("innocent");
    std::os::unix::fs::symlink(node.path(), &link).unwrap();
    refused(
        try_plan(&with(vec![link], vec![]), &prog),
        "sandbox.read_only",
    );

    let home_program = |homes: Vec<PathBuf>| Program {
        homes,
        ..sh("true")
    };
    refused(
        try_plan(
            &with(vec![], vec![]),
            &home_program(vec![node.path().to_path_buf()]),
        ),
        "program.homes",
    );
    refused(
        try_plan(&with(vec![], vec![]), &home_program(vec!["home".into()])),
        "program.homes",
    );
    refused(
        try_plan(&with(vec![], vec![]), &sh_relative()),
        "program.command",
    );
    refused(
        plan(
            &name("refuse"),
            Path::new("ws"),
            &with(vec![], vec![]),
            &b,
            &prog,
            &forbidden,
        ),
        "workspace",
    );
    refused(
        plan(
            &name("refuse"),
            node.path(),
            &with(vec![], vec![]),
            &b,
            &prog,
            &forbidden,
        ),
        "workspace",
    );
    refused(
        plan(
            "../escape",
            ws.path(),
            &with(vec![], vec![]),
            &b,
            &prog,
            &forbidden,
        ),
        "run_name",
    );
    assert!(try_plan(&with(vec![link_dir.path().to_path_buf()], vec![]), &prog).is_ok());
}

fn sh_relative() -> Program {
    Program {
        command: vec!["bin/sh".into()],
        ..Program::default()
    }
}

#[test]
fn plan_serializes_to_json_without_secret_values() {
    let ws = tmp();
    let ro = tmp();
    let program = Program {
        env: BTreeMap::from([("API_KEY".to_string(), "sk-verysecret".to_string())]),
        ..sh("true")
    };
    let budget = BudgetLimits {
        memory_bytes: Some(1 << 30),
        ..wall(60)
    };
    let sandbox = SandboxFields {
        network: false,
        read_only: vec![ro.path().to_path_buf()],
        read_write: vec![],
    };
    let planned = plan(
        &name("json"),
        ws.path(),
        &sandbox,
        &budget,
        &program,
        &Forbidden::default(),
    );
    let planned = match planned {
        Err(SandboxError::Unenforceable(u)) => {
            say(&format!("NOT ENFORCEABLE ON THIS HOST, plan refused: {u}"));
            assert_eq!(u.field, "budget.memory");
            return;
        }
        other => other.unwrap(),
    };
    let json = serde_json::to_string_pretty(&planned).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(!json.contains("sk-verysecret"), "{json}");
    assert_eq!(v["env"]["API_KEY"], "<hidden>");
    assert_eq!(v["wall"], 60.0);
    assert_eq!(v["network"], false);
    assert_eq!(v["cgroup"]["memory_bytes"], 1u64 << 30);
    let args: Vec<&str> = v["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for needed in ["--new-session", "--die-with-parent", "--unshare-all"] {
        assert!(args.contains(&needed), "{needed} missing: {json}");
    }
    assert!(!args.contains(&"--share-net"));
    assert!(
        args.windows(3)
            .any(|w| w == ["--ro-bind", p(ro.path()).as_str(), p(ro.path()).as_str()])
    );
    let pre = serde_json::to_string(host()).unwrap();
    say(&format!("preflight on this host: {pre}"));
}

#[test]
fn forbidden_paths_inside_system_directories_are_masked() {
    let sandbox = SandboxFields::default();
    if !holds("system_masks", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let made = tempfile::Builder::new()
        .prefix("ocx-it-node")
        .tempdir_in("/etc")
        .and_then(|d| {
            let f = tempfile::Builder::new()
                .prefix("ocx-it-repo")
                .tempfile_in("/etc")?;
            Ok((d, f))
        });
    let (root, repo) = match made {
        Ok(made) => made,
        Err(e) => {
            say(&format!(
                "NOT CHECKED ON THIS HOST, system_masks cannot write under /etc: {e}"
            ));
            return;
        }
    };
    fs::write(root.path().join("secret"), "TOPSECRET-dir").unwrap();
    fs::write(repo.path(), "TOPSECRET-file").unwrap();
    let forbidden = Forbidden {
        paths: vec![root.path().to_path_buf(), repo.path().to_path_buf()],
    };
    let script = format!(
        "cat '{r}/secret'; ls -A '{r}'; cat '{f}'; echo done",
        r = p(root.path()),
        f = p(repo.path())
    );
    let ws = tmp();
    let out = run(
        "masks",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &forbidden,
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);
    assert!(!out.stdout.contains("secret"), "{}", out.stdout);
}

#[test]
fn root_only_files_of_the_system_directories_are_not_readable() {
    let sandbox = SandboxFields::default();
    if !holds("root_only", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let mut targets = Vec::new();
    let made = tempfile::Builder::new()
        .prefix("ocx-it-root-only")
        .tempfile_in("/etc");
    let _made = match made {
        Ok(f) => {
            fs::write(f.path(), "TOPSECRET-etc").unwrap();
            fs::set_permissions(f.path(), fs::Permissions::from_mode(0o600)).unwrap();
            targets.push(f.path().to_path_buf());
            Some(f)
        }
        Err(e) => {
            say(&format!(
                "NOT CHECKED ON THIS HOST, root_only cannot write under /etc: {e}"
            ));
            None
        }
    };
    let shadow = Path::new("/etc/shadow");
    if shadow.is_file() {
        targets.push(shadow.to_path_buf());
    }
    if targets.is_empty() {
        return;
    }
    let mut script = String::new();
    for t in &targets {
        script.push_str(&format!(
            "cat '{t}' && echo LEAK-read; head -c1 '{t}' >/dev/null 2>&1 && echo LEAK-opened; ",
            t = p(t)
        ));
    }
    script.push_str("echo done");
    let ws = tmp();
    let out = run(
        "root-only",
        ws.path(),
        &sandbox,
        &wall(10),
        &sh(&script),
        &Forbidden::default(),
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("LEAK"), "{}", out.stdout);
    assert!(!out.stdout.contains("TOPSECRET"), "{}", out.stdout);
    assert!(out.stderr.contains("Permission denied"), "{}", out.stderr);
}

#[test]
fn the_program_is_not_root_on_the_host() {
    let sandbox = SandboxFields::default();
    if !holds("not_root", &sandbox, &wall(10), &["sandbox.network"]) {
        return;
    }
    let ws = tmp();
    let home = tmp();
    fs::write(ws.path().join("given"), "from the maintainer").unwrap();
    let outside = tmp();
    fs::write(outside.path().join("host-file"), "host").unwrap();
    fs::create_dir(ws.path().join("sub")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("host-file"),
        ws.path().join("sub/file-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("dir-link")).unwrap();
    let program = Program {
        homes: vec![home.path().to_path_buf()],
        ..sh("echo mine > made; echo state > \"$HOME/state\"; cat given; echo; echo done")
    };
    let planned = plan(
        &name("not-root"),
        ws.path(),
        &sandbox,
        &wall(10),
        &program,
        &Forbidden::default(),
    )
    .unwrap();
    let out = run_plan(&planned);
    assert!(
        out.stdout.contains("from the maintainer"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    let made = fs::metadata(ws.path().join("made")).unwrap();
    let state = fs::metadata(home.path().join("state")).unwrap();
    let me = fs::metadata(ws.path()).unwrap().uid();
    match &planned.account {
        Some(a) => {
            assert_ne!(a.uid, 0);
            for m in [&made, &state] {
                assert_eq!((m.uid(), m.gid()), (a.uid, a.gid));
            }
            assert_eq!(me, a.uid, "the workspace was not handed over");
            let link = fs::symlink_metadata(ws.path().join("sub/file-link")).unwrap();
            assert_eq!(link.uid(), a.uid, "a link inside was not handed over");
            for host in [
                outside.path().to_path_buf(),
                outside.path().join("host-file"),
            ] {
                let m = fs::metadata(&host).unwrap();
                assert_eq!(
                    m.uid(),
                    0,
                    "{} was handed over through a link",
                    host.display()
                );
            }
        }
        None => {
            assert_ne!(made.uid(), 0);
            assert_eq!(made.uid(), me);
        }
    }
}

fn spawn_refused(planned: &Plan, field: &str) {
    match spawn(planned, Stdio::null(), Stdio::null(), Stdio::null()) {
        Ok(r) => {
            let _ = r.wait();
            panic!("started a run that {field} should have refused");
        }
        Err(e) => {
            assert_eq!(e.field(), Some(field), "{e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }
}

#[test]
fn paths_the_run_account_cannot_use_are_refused_at_spawn() {
    let Some(account) = account() else {
        say(
            "NOT CHECKED ON THIS HOST, runs are not started as a run account unless the node is root",
        );
        return;
    };
    let closed = tmp();
    fs::set_permissions(closed.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let not_granted = tmp();
    let ws = tmp();
    let b = wall(5);
    for (sandbox, field) in [
        (
            SandboxFields {
                read_only: vec![closed.path().to_path_buf()],
                ..SandboxFields::default()
            },
            "sandbox.read_only",
        ),
        (
            SandboxFields {
                read_write: vec![not_granted.path().to_path_buf()],
                ..SandboxFields::default()
            },
            "sandbox.read_write",
        ),
    ] {
        let planned = plan(
            &name("refuse-account"),
            ws.path(),
            &sandbox,
            &b,
            &sh("true"),
            &Forbidden::default(),
        )
        .unwrap();
        assert_eq!(planned.account.as_ref(), Some(&account));
        spawn_refused(&planned, field);
    }
    assert_eq!(
        fs::metadata(ws.path()).unwrap().uid(),
        0,
        "a refused run changed its workspace"
    );
    let inside = closed.path().join("workspace");
    fs::create_dir(&inside).unwrap();
    let planned = plan(
        &name("refuse-reach"),
        &inside,
        &SandboxFields::default(),
        &b,
        &sh("true"),
        &Forbidden::default(),
    )
    .unwrap();
    spawn_refused(&planned, "workspace");
}

/// Whether this process's mount table names `path` anywhere.
fn mounted_here(path: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(path.to_str().unwrap())
}

#[test]
fn an_administrators_plan_reads_what_its_account_may_read_behind_a_closed_directory() {
    if account().is_none() {
        say(
            "NOT CHECKED ON THIS HOST, runs are not started as a run account unless the node is root",
        );
        return;
    }
    // Root's home, as rustup leaves it: closed, holding a toolchain all may read.
    let closed = tmp();
    fs::set_permissions(closed.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let toolchain = closed.path().join("toolchain");
    let shut = closed.path().join("shut");
    for (dir, mode) in [(&toolchain, 0o755), (&shut, 0o700)] {
        fs::create_dir(dir).unwrap();
        fs::write(dir.join("file"), "what the toolchain holds\n").unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(mode)).unwrap();
    }
    let show = toolchain.join("show");
    fs::write(&show, "#!/bin/sh\ncat \"$(dirname \"$0\")/file\"\n").unwrap();
    fs::set_permissions(&show, fs::Permissions::from_mode(0o755)).unwrap();
    let reachable = tmp();
    fs::set_permissions(reachable.path(), fs::Permissions::from_mode(0o711)).unwrap();
    let reach = reachable.path().join("reach");
    let ws = tmp();
    let sandbox = |path: &Path| SandboxFields {
        read_only: vec![path.to_path_buf()],
        ..SandboxFields::default()
    };
    let shows = Program {
        command: vec![p(&show)],
        ..Program::default()
    };

    // A run from a record reads only what its account reaches, as before.
    let record = plan(
        &name("reach-record"),
        ws.path(),
        &sandbox(&toolchain),
        &wall(10),
        &sh(&format!("cat {}/file", p(&toolchain))),
        &Forbidden::default(),
    )
    .unwrap();
    spawn_refused(&record, "sandbox.read_only");
    let record = plan(
        &name("reach-record"),
        ws.path(),
        &sandbox(&toolchain),
        &wall(10),
        &shows,
        &Forbidden::default(),
    )
    .unwrap();
    spawn_refused(&record, "program.command");

    // The administrator's plan reads the toolchain and runs its program.
    let mut planned = plan(
        &name("reach-admin"),
        ws.path(),
        &sandbox(&toolchain),
        &wall(10),
        &shows,
        &Forbidden::default(),
    )
    .unwrap();
    planned.reach_closed(&reach);
    let out = run_plan(&planned);
    assert_eq!(out.ended.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "what the toolchain holds\n");
    assert!(
        !mounted_here(&reach) && !mounted_here(&toolchain),
        "nothing stays mounted on the host"
    );

    // A path closed to the account itself stays refused, reached or not.
    let mut planned = plan(
        &name("reach-shut"),
        ws.path(),
        &sandbox(&shut),
        &wall(10),
        &sh(&format!("cat {}/file", p(&shut))),
        &Forbidden::default(),
    )
    .unwrap();
    planned.reach_closed(&reach);
    spawn_refused(&planned, "sandbox.read_only");
}

#[test]
fn a_run_started_by_root_without_an_account_of_its_own_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        say("NOT CHECKED ON THIS HOST, only root switches a run to an account of its own");
        return;
    }
    let ws = tmp();
    let planned = ocx::run::plan(
        &name("no-account"),
        ws.path(),
        &SandboxFields::default(),
        &wall(5),
        &sh("touch made"),
        &Forbidden::default(),
    )
    .unwrap();
    assert_eq!(planned.account, None);
    match spawn(&planned, Stdio::null(), Stdio::null(), Stdio::null()) {
        Ok(r) => {
            let _ = r.wait();
            panic!("a run started as root");
        }
        Err(e) => assert!(matches!(e, SandboxError::Account { .. }), "{e}"),
    }
    assert!(!ws.path().join("made").exists(), "nothing ran");
}
