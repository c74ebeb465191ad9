//! Every tool's answers as a person and a program read them: one refusal
//! and the first answer of each, run through the `ocx` binary on a real
//! repository, its text and its JSON held by snapshots (`snapshots/`),
//! with what differs from run to run (hashes, times, ports, paths)
//! filtered out. A changed answer fails here until its snapshot is
//! reviewed (`cargo insta review`) and committed with the change.

use crate::support::{Repo, fossil, ocx_bin};
use std::path::PathBuf;
use std::process::Command;

/// The repository every case runs on, a node whose process is not
/// started: bob's check-in (`README`) in admin's checkout, its test
/// passed; a post starting a thread, a question for admin and a command
/// record; a wiki page and an unversioned file. bob, a login made by
/// hand, may check in and store unversioned files.
struct Ground {
    repo: Repo,
    checkout: PathBuf,
    /// What `{checkin}`, `{post}`, `{question}` and `{record}` stand for.
    made: Vec<(&'static str, String)>,
}

impl Ground {
    fn new() -> Ground {
        let repo = Repo::new();
        repo.user("bob", "vy");
        let checkin = repo.commit_as("bob", "README", "start\nthe second line\n", None);
        let checkout = repo.dir.path().join("work");
        std::fs::write(
            checkout.join("ocx-tests.json"),
            r#"{"tests": [{"name": "readme", "command": "grep -q start README"}]}"#,
        )
        .unwrap();
        let page = repo.dir.path().join("page.md");
        std::fs::write(&page, "A page\n").unwrap();
        let page = page.to_str().unwrap();
        repo.fossil(&[
            "wiki",
            "create",
            "a-page",
            page,
            "--mimetype",
            "text/x-markdown",
        ]);
        repo.fossil(&["uv", "add", page, "--as", "notes.txt"]);
        repo.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
            .ok();
        let ground = Ground {
            repo,
            checkout,
            made: vec![("{checkin}", checkin)],
        };
        ground.call(&["test"], true).ok();
        let hash = |args: &[&str], field: &str| {
            ground.call(args, true).ok()[field]
                .as_str()
                .unwrap()
                .to_string()
        };
        let made = [
            (
                "{post}",
                hash(
                    &["post", "--title", "A thread", "--text", "the first post"],
                    "hash",
                ),
            ),
            (
                "{question}",
                hash(
                    &[
                        "post",
                        "--title",
                        "Which?",
                        "--text",
                        "Which one?",
                        "--for",
                        "admin",
                        "--options",
                        "this",
                        "--options",
                        "that",
                    ],
                    "hash",
                ),
            ),
            (
                "{record}",
                hash(
                    &crate::support::command_record_args("Pass", &["--wall", "5m"]),
                    "record",
                ),
            ),
        ];
        Ground {
            made: [ground.made.clone(), made.to_vec()].concat(),
            ..ground
        }
    }

    /// Fills what the ground made, and `{dir}`, in `arg`.
    fn fill(&self, arg: &str) -> String {
        let dir = self.repo.dir.path().to_str().unwrap();
        let filled = arg.replace("{dir}", dir);
        self.made
            .iter()
            .fold(filled, |arg, (name, hash)| arg.replace(name, hash))
    }

    /// `ocx ARGS` in the checkout, on the repository, `--json` when told.
    fn call(&self, args: &[impl AsRef<std::ffi::OsStr>], json: bool) -> crate::support::Run {
        let mut c = Command::new(ocx_bin());
        c.args(args)
            .args(json.then_some("--json"))
            .arg("--repository")
            .arg(&self.repo.file)
            .current_dir(&self.checkout);
        crate::support::run(c, None)
    }

    /// `ocx ARGS` as a person reads it and as a program does (`--json`),
    /// in the checkout, on the repository: the exit code, the text and
    /// the JSON, as one text to hold.
    fn shown(&self, args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| self.fill(a)).collect();
        let (text, json) = (self.call(&args, false), self.call(&args, true));
        assert_eq!(text.code, json.code, "{text:?}\n{json:?}");
        let mut answer = json.answer();
        // What the host offers runs (its cgroups, its bubblewrap, its
        // Fossil's version) is the host's, not the answer's.
        if let Some(result) = answer["result"].as_object_mut() {
            if result.contains_key("preflight") {
                result.insert("preflight".into(), "[host]".into());
            }
            if let Some(version) = result.get_mut("fossil").and_then(|f| f.get_mut("version")) {
                *version = "[version]".into();
            }
        }
        let kind = if answer["ok"] == true {
            "ok"
        } else {
            answer["stopped"]["kind"].as_str().unwrap_or("")
        };
        format!(
            "$ ocx {}\nexit {} ({kind})\n--- text\n{}{}--- json\n{:#}\n",
            args.join(" "),
            text.code,
            without_host(&text.stdout),
            text.stderr,
            answer
        )
    }
}

/// `text` without what the host offers runs: the lines below
/// `preflight:`, indented, as [`Ground::shown`] leaves out of the JSON.
fn without_host(text: &str) -> String {
    let mut kept = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if skipping && line.starts_with(' ') {
            continue;
        }
        skipping = line == "preflight:";
        if skipping {
            kept.push_str("preflight: [host]\n");
        } else {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// What differs from run to run, each with what stands for it: this
/// repository's directory, Fossil's path, times, ports, hashes.
fn filters(ground: &Ground) -> Vec<(String, String)> {
    let dir = ground.repo.dir.path();
    let mut filters = Vec::new();
    for (path, name) in [
        (dir.canonicalize().unwrap(), "[dir]"),
        (dir.to_path_buf(), "[dir]"),
        (fossil(), "[fossil]"),
        (ocx_bin().to_path_buf(), "[ocx]"),
    ] {
        filters.push((escape(path.to_str().unwrap()), name.into()));
    }
    for (pattern, name) in [
        (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?Z?", "[time]"),
        (r#""took_ms": \d+"#, r#""took_ms": "[ms]""#),
        (r#""(ms|ago|age_s|at|elapsed_ms)": \d+"#, r#""$1": "[n]""#),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:[port]"),
        (r"\b[0-9a-f]{64}\b", "[hash64]"),
        (r"\b[0-9a-f]{40}\b", "[hash40]"),
        (r"\b[0-9a-f]{10,39}\b", "[hash-prefix]"),
        (r"ocx-test-[A-Za-z0-9]+", "ocx-test-[tmp]"),
        (r"fossil version [^\n\x22]+", "fossil version [version]"),
        (r"node-[0-9a-f]{8}\b", "node-[code]"),
        (r"\b([a-z]+)-[0-9a-f]{6}\b", "$1-[six]"),
        (r"\bagent/([a-z]+)-[0-9a-f]{8}\b", "agent/$1-[eight]"),
        (r"(wall.left\W+)\d+", "$1[s]"),
        (r"\d+( s of its wall left)", "[s]$1"),
        (r"(?m)^  version: \d+\.\d+.*$", "  version: [version]"),
    ] {
        filters.push((pattern.into(), name.into()));
    }
    filters
}

/// `text` as a regular expression matching itself.
fn escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if "\\.+*?()|[]{}^$#&-~".contains(c) {
                format!("\\{c}")
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Holds `tool`'s refusal (`refused` given) and its first answer
/// (`answer` given), each against its snapshot.
fn holds(tool: &str, refused: &[&str], answer: &[&str]) {
    let ground = Ground::new();
    let mut settings = insta::Settings::clone_current();
    for (pattern, name) in filters(&ground) {
        settings.add_filter(&pattern, name);
    }
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots/answers");
    settings.bind(|| {
        let shown = ground.shown(refused);
        assert!(shown.contains("\nexit 1 (refused)\n"), "{shown}");
        insta::assert_snapshot!(format!("{tool}-refused"), shown);
        let shown = ground.shown(answer);
        insta::assert_snapshot!(format!("{tool}-answer"), shown);
    });
}

/// A test for each tool: its name, the arguments of a refusal, those of
/// its first answer; and a test that these are every tool.
macro_rules! answers {
    ($($tool:ident: [$($refused:expr),* $(,)?] then [$($answer:expr),* $(,)?];)*) => {
        $(
            #[test]
            fn $tool() {
                holds(stringify!($tool), &[$($refused),*], &[$($answer),*]);
            }
        )*

        #[test]
        fn every_tool_has_its_answers_held() {
            let held = [$(stringify!($tool)),*];
            let tools: Vec<&str> = ocx::registry::TOOLS.iter().map(|t| t.name()).collect();
            assert_eq!(held.as_slice(), tools.as_slice());
        }
    };
}

answers! {
    list: ["list", "--input", r#"{"bogus": 1}"#] then ["list"];
    help: ["help"] then ["help", "--tool", "post"];
    status: ["status", "--input", r#"{"bogus": 1}"#] then ["status"];
    post: ["post", "--title", "A title"] then ["post", "--to", "{post}", "--text", "an answer", "--dry-run"];
    thread: ["thread"] then ["thread", "--of", "{post}"];
    questions: ["questions", "--input", r#"{"bogus": 1}"#] then ["questions"];
    decide: ["decide", "--note", "yes"] then ["decide", "--question", "{question}", "--option", "1", "--dry-run"];
    console: ["console", "--input", r#"{"bogus": 1}"#] then ["console"];
    receipt: ["receipt", "--artifacts", "xyz"] then ["receipt", "--artifacts", "{checkin}", "--capabilities-of", "bob"];
    create: ["create", "--runner", "command", "--command", "true"] then ["create", "--runner", "command", "--command", "true", "--objective", "Pass", "--wall", "5m", "--dry-run"];
    stop: ["stop"] then ["stop", "--record", "{record}", "--dry-run"];
    run: ["run", "--record", "zz"] then ["run", "--record", "{record}"];
    attach: ["attach"] then ["attach", "--run", "{record}", "--dry-run"];
    patterns: ["patterns", "--input", r#"{"bogus": 1}"#] then ["patterns"];
    tag_messages: ["tag_messages", "--input", r#"{"bogus": 1}"#] then ["tag_messages", "--dry-run"];
    audit: ["audit", "--checkin", "{checkin}", "--verdict", "maybe", "--reason", "r", "--against", "PLAN.md"] then ["audit", "--checkin", "{checkin}", "--verdict", "pass", "--reason", "it reads", "--against", "PLAN.md", "--dry-run"];
    verdicts: ["verdicts"] then ["verdicts", "--checkin", "{checkin}"];
    unaudited: ["unaudited", "--input", r#"{"bogus": 1}"#] then ["unaudited"];
    hook: ["hook", "--action", "install", "--url", "ftp://x/"] then ["hook", "--action", "install", "--url", "http://127.0.0.1:9/", "--dry-run"];
    export: ["export", "--input", r#"{"bogus": 1}"#] then ["export", "--dry-run"];
    project: ["project"] then ["project", "--name", "demo", "--dir", "{dir}", "--dry-run"];
    upstream: ["upstream", "--every", "often"] then ["upstream", "--dry-run"];
    stage: ["stage"] then ["stage", "--checkin", "trunk", "--root", "{dir}", "--dry-run"];
    accept: ["accept", "--root", "relative"] then ["accept", "--root", "{dir}", "--dry-run"];
    rollback: ["rollback", "--root", "relative"] then ["rollback", "--root", "{dir}", "--dry-run"];
    release: ["release", "--root", "relative"] then ["release", "--root", "{dir}"];
    node: ["node", "--action", "sideways"] then ["node", "--action", "start", "--dry-run"];
    lost: ["lost"] then ["lost", "--record", "{record}", "--dry-run"];
    adopt: ["adopt"] then ["adopt", "--login", "bob", "--dry-run"];
    runner: ["runner", "--name", "nobody-such"] then ["runner", "--name", "demo", "--dry-run"];
    credential: ["credential", "--name", "BAD NAME", "--file", "/nowhere"] then ["credential"];
    send_runs: ["send_runs"] then ["send_runs", "--login", "bob", "--dry-run"];
    register: ["register"] then ["register", "--server", "http://127.0.0.1:9/repo", "--credentials", "{dir}/creds.json", "--login", "m1", "--dry-run"];
    machine: ["machine"] then ["machine", "--server", "http://127.0.0.1:9/repo", "--dry-run"];
    approve: ["approve", "--login", "m1", "--key", "short", "--capabilities", "goC4w"] then ["approve", "--login", "m1", "--key", "0000000000000000000000000000000000000000000000000000000000000000", "--capabilities", "goC4w", "--dry-run"];
    collect: ["collect", "--login", "m1"] then ["collect", "--login", "m1", "--code", "a-code", "--dry-run"];
    run_login: ["run_login"] then ["run_login", "--record", "{record}", "--dry-run"];
    run_report: ["run_report"] then ["run_report", "--record", "{record}", "--dry-run"];
    push: ["push", "--artifacts", "not-an-artifact"] then ["push", "--dry-run"];
    context: ["context", "--input", r#"{"bogus": 1}"#] then ["context"];
    find: ["find"] then ["find", "--text", "start"];
    read: ["read"] then ["read", "--path", "README"];
    edit: ["edit", "--path", "/etc/passwd", "--old", "a", "--new", "b"] then ["edit", "--path", "README", "--old", "start", "--new", "begin", "--dry-run"];
    test: ["test", "--name", "nobody-such"] then ["test", "--name", "readme"];
    save: ["save", "--title", "Begin"] then ["save", "--title", "Begin", "--intent", "a word", "--expression", "README's first line", "--demonstrates", "readme", "--dry-run"];
    wiki_read: ["wiki_read"] then ["wiki_read", "--page", "a-page"];
    wiki_edit: ["wiki_edit", "--page", "a-page"] then ["wiki_edit", "--page", "a-page", "--old", "", "--new", "Hello", "--dry-run"];
    unversioned_list: ["unversioned_list", "--input", r#"{"bogus": 1}"#] then ["unversioned_list"];
    unversioned_get: ["unversioned_get"] then ["unversioned_get", "--name", "notes.txt"];
    unversioned_put: ["unversioned_put", "--name", "notes.txt"] then ["unversioned_put", "--name", "notes.txt", "--text", "hello", "--user", "bob", "--dry-run"];
}
