//! The command line: flags and `--input` are one definition, the
//! repository is found as Fossil finds it, and exit codes say what happened.

use crate::support::{Repo, fossil, ocx_bin, run};
use std::process::Command;

#[test]
fn flags_and_input_give_the_same_answer() {
    let r = Repo::new();
    let h = r
        .json(&["post", "--title", "Same", "--text", "x"])
        .ok_str("hash");
    let by_flags = r.json(&["thread", "--of", &h[..10]]).ok();
    let by_input = r
        .json(&["thread", "--input", &format!(r#"{{"of":"{}"}}"#, &h[..10])])
        .ok();
    let by_stdin = r
        .json_stdin(
            &["thread", "--input", "-"],
            format!(r#"{{"of":"{}"}}"#, &h[..10]).as_bytes(),
        )
        .ok();
    let positional = r.json(&["thread", &h[..10]]).ok();
    assert_eq!(by_flags, by_input);
    assert_eq!(by_flags, by_stdin);
    assert_eq!(by_flags, positional);
    let list_flags = r
        .json(&["receipt", "--artifacts", &h, "--capabilities-of", "admin"])
        .ok();
    let list_input = r
        .json(&[
            "receipt",
            "--input",
            &format!(r#"{{"artifacts":["{h}"],"capabilities_of":"admin"}}"#),
        ])
        .ok();
    assert_eq!(list_flags, list_input);
}

#[test]
fn a_missing_field_is_refused_naming_its_flag_as_typed_and_the_tool() {
    let r = Repo::new();
    let h = r
        .json(&["post", "--title", "Asked", "--text", "x"])
        .ok_str("hash");
    let said = r.ocx(&["post", "--to", &h[..10]]);
    assert_eq!(said.code, 1);
    assert!(
        said.stdout.starts_with("stopped: --text: post needs it"),
        "{}",
        said.stdout
    );
    assert!(said.stdout.contains("`ocx help post`"), "{}", said.stdout);
    for serdes in ["TOOL", "missing field"] {
        assert!(!said.stdout.contains(serdes), "{}", said.stdout);
    }
    let a = r.json(&["post", "--to", &h[..10]]).answer();
    assert_eq!(
        a["stopped"]["field"], "text",
        "the answer's field stays the input's: {a:#}"
    );
    let unknown = r.ocx(&["post", "--input", r#"{"text": "x", "colour": "red"}"#]);
    assert!(
        unknown
            .stdout
            .starts_with("stopped: colour: post takes no such field"),
        "{}",
        unknown.stdout
    );
}

#[test]
fn a_command_line_that_does_not_parse_exits_2() {
    let r = Repo::new();
    let run = r.ocx(&["thread", "--of", "0123456789", "--bogus"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--bogus"), "{}", run.stderr);
    assert_eq!(r.ocx(&["nosuchtool"]).code, 2);
}

#[test]
fn version_says_the_version_and_each_tools_help_its_own_flags() {
    let version = run(
        {
            let mut c = Command::new(ocx_bin());
            c.arg("--version");
            c
        },
        None,
    );
    assert_eq!(version.code, 0, "{}", version.stderr);
    assert_eq!(
        version.stdout.trim(),
        format!("ocx {}", env!("CARGO_PKG_VERSION"))
    );
    let r = Repo::new();
    let post = r.ocx(&["-R", "x.fossil", "--user", "list", "post", "--help"]);
    assert_eq!(post.code, 0, "{}", post.stderr);
    let at = |flag: &str| {
        post.stdout
            .find(flag)
            .unwrap_or_else(|| panic!("{flag}: {}", post.stdout))
    };
    assert!(
        at("--title") < at("--repository") && at("--text") < at("--json"),
        "a tool's help shows its own fields first:\n{}",
        post.stdout
    );
    let all = r.ocx(&["--help"]);
    assert_eq!(all.code, 0);
    assert!(
        all.stdout.contains("post") && !all.stdout.contains("--title"),
        "the whole command's help names the tools, not their flags: {}",
        all.stdout
    );
    let group = |title: &str| {
        all.stdout
            .find(title)
            .unwrap_or_else(|| panic!("{title}: {}", all.stdout))
    };
    let (person, admin, run) = (
        group("For a person"),
        group("For an administrator"),
        group("For a run"),
    );
    let tool = |name: &str| all.stdout.find(&format!("\n  {name} ")).unwrap();
    assert!(
        person < tool("post") && tool("post") < admin,
        "post is a person's"
    );
    assert!(
        admin < tool("create") && tool("create") < run,
        "create is an administrator's"
    );
    assert!(run < tool("edit"), "edit is a run's");
    let wrong = r.ocx(&["post", "--of", "x"]);
    assert_eq!(wrong.code, 2, "a flag of another tool is still refused");
}

#[test]
fn every_entrys_bad_command_line_is_refused_naming_the_flag_and_exits_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--mcp", "--bogus"], "'--bogus'"),
        (
            &["--mcp", "--connect", "/nowhere", "--user", "a"],
            "'--user <LOGIN>'",
        ),
        (&["--mcp", "--token-file", "t.json"], "--mcp-http"),
        (
            &[
                "--mcp-ollama",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--steps",
                "0",
                "--system",
                "s",
            ],
            "'--steps <N>'",
        ),
        (&["watch", "--root", "/nowhere"], "--record <HASH>"),
        (&["node-daemon"], "--root <ROOT>"),
        (&["hook-poke", "/nowhere", "extra"], "'extra'"),
    ];
    for (args, names) in cases {
        let mut c = Command::new(ocx_bin());
        c.args(*args);
        let out = run(c, None);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(names), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}

#[test]
fn text_that_is_not_utf8_on_the_command_line_is_refused_naming_it() {
    use std::os::unix::ffi::OsStringExt;
    let r = Repo::new();
    let before = r.hashes();
    let bad = std::ffi::OsString::from_vec(b"caf\xe9".to_vec());
    let run = r.json(&[
        std::ffi::OsString::from("post"),
        "--title".into(),
        bad.clone(),
        "--text".into(),
        "x".into(),
    ]);
    assert_eq!(run.refused(), "title");
    let run = r.json(&[std::ffi::OsString::from("status"), "--user".into(), bad]);
    assert_eq!(run.refused(), "user");
    assert_eq!(r.hashes(), before);
}

#[test]
fn list_and_help_show_every_tool_and_its_schemas() {
    let r = Repo::new();
    let list = r.json(&["list"]).ok();
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for want in ["status", "post", "thread", "receipt"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let post = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "post")
        .unwrap();
    assert_eq!(post["input"]["additionalProperties"], false);
    assert!(post["input"]["properties"]["text"]["description"].is_string());
    let bare = run(Command::new(ocx_bin()), None);
    assert_eq!(bare.code, 0);
    assert!(
        bare.stdout.lines().count() < 25,
        "`ocx` alone is a short usage:\n{}",
        bare.stdout
    );
    for first in ["status", "console", "post", "create", "help"] {
        assert!(
            bare.stdout.contains(&format!("\n  {first} ")),
            "`ocx` alone names {first}:\n{}",
            bare.stdout
        );
    }
    assert!(bare.stdout.contains("ocx --help"), "{}", bare.stdout);
    let help = r.json(&["help", "post"]).ok();
    assert_eq!(help["needs"], "3 or 4 or c or w");
    assert_eq!(
        help["needs_in_words"],
        "the right to post to the forum, held for a moderator (3), or post to the forum (4), or add to tickets (c), or edit tickets (w)"
    );
    assert_eq!(help["for_whom"], "For a person");
    assert!(help["output"]["properties"]["hash"].is_object());
}

#[test]
fn the_repository_is_the_checkouts_or_the_one_named() {
    let r = Repo::new();
    r.user("alice", "v4");
    let work = r.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    crate::support::fossil_in(
        &work,
        &[
            "open",
            r.file.to_str().unwrap(),
            "--workdir",
            work.to_str().unwrap(),
        ],
    );
    let set = Command::new(fossil())
        .args(["user", "default", "alice"])
        .current_dir(&work)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(set.status.success());
    std::fs::create_dir_all(work.join("sub")).unwrap();
    let mut c = Command::new(ocx_bin());
    c.args(["status", "--json"]).current_dir(work.join("sub"));
    let out = run(c, None).ok();
    assert_eq!(
        out["repository"].as_str().unwrap(),
        r.file.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(out["login"], "alice", "the checkout's default user");
    assert!(out["checkout"].as_str().is_some());

    let outside = tempfile::tempdir().unwrap();
    let mut c = Command::new(ocx_bin());
    c.args(["status", "--json"]).current_dir(outside.path());
    let refused = run(c, None);
    assert_eq!(refused.refused(), "repository");

    let missing = outside.path().join("nothing.fossil");
    let mut c = Command::new(ocx_bin());
    c.args(["status", "--json", "--repository"]).arg(&missing);
    assert_eq!(run(c, None).refused(), "repository");
    assert!(!missing.exists(), "no file is made where none was");
}

/// A write from the command line starts `fossil` before it has composed
/// what to store: whether it is stored, refused, or its repository's name
/// is one Fossil's `--args` would read back changed, the post is what
/// Fossil stores (or nothing is) and no `fossil` is left running after it.
#[test]
fn a_post_from_the_command_line_leaves_no_fossil_behind() {
    let r = Repo::new();
    let dir = tempfile::Builder::new()
        .prefix("two words\nand a line")
        .tempdir()
        .unwrap();
    let odd = Repo {
        file: dir.path().join("repo.fossil"),
        dir,
    };
    std::fs::copy(&r.file, &odd.file).unwrap();
    let work = tempfile::tempdir().unwrap();
    let post = |repo: &std::path::Path, text: &str, to: Option<&str>| {
        let mut c = Command::new(ocx_bin());
        c.args(["post", "--json", "--user", "admin", "--text", text])
            .args(match to {
                Some(h) => ["--to", h],
                None => ["--title", "A thread"],
            })
            .arg("--repository")
            .arg(repo)
            .current_dir(work.path());
        let out = run(c, None);
        assert_eq!(started_in(work.path()), Vec::<u32>::new(), "{out:?}");
        out
    };
    for repo in [&r, &odd] {
        let stored = post(&repo.file, "said once", None).ok();
        let hash = stored["hash"].as_str().unwrap();
        assert!(repo.hashes().contains(&hash.to_string()), "{:?}", repo.file);
        assert_eq!(repo.sender(hash).as_deref(), Some("admin"));
    }
    let before = r.hashes();
    assert_eq!(post(&r.file, "x", Some("0123456789ab")).refused(), "to");
    assert_eq!(r.hashes(), before, "a refused post stores nothing");
}

/// The processes whose working directory is `dir`.
fn started_in(dir: &std::path::Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

/// Fossil makes its settings file the first time one of its processes
/// needs it, and two making it at once fail one of them; a fresh host's
/// first commands at once each succeed all the same.
#[test]
fn commands_at_once_on_a_host_with_no_fossil_settings_yet_all_succeed() {
    let r = Repo::new();
    r.user("helper", "o");
    for round in 0..8 {
        let home = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..6)
            .map(|i| {
                Command::new(ocx_bin())
                    .args(["send_runs", "--login", "helper"])
                    .arg(format!("--off={}", i % 2 == 0))
                    .args(["--json", "--repository"])
                    .arg(&r.file)
                    .env("HOME", home.path())
                    .env_remove("XDG_CACHE_HOME")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let answer = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && answer.contains("\"ok\": true"),
                "round {round}: {answer}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
