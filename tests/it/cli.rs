//! The command line: flags and `--input` are one definition, the
//! repository is found as Fossil finds it, and exit codes say what happened.

use crate::support::{Repo, fossil, ocx_bin, run};
use std::process::Command;

#[test]
fn flags_and_input_give_the_same_answer() {
    let r = Repo::new();
    let h = r.json(&["post", "--title", "Same", "--text", "x"]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
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
    assert!(post.stdout.contains("--title"), "{}", post.stdout);
    let all = r.ocx(&["--help"]);
    assert_eq!(all.code, 0);
    assert!(
        all.stdout.contains("post") && !all.stdout.contains("--title"),
        "the whole command's help names the tools, not their flags: {}",
        all.stdout
    );
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
        bare.stdout.contains("receipt"),
        "`ocx` alone lists the tools"
    );
    let help = r.json(&["help", "post"]).ok();
    assert_eq!(help["needs"], "3 or 4 or c or w");
    assert!(help["output"]["properties"]["hash"].is_object());
}

#[test]
fn the_repository_is_the_checkouts_or_the_one_named() {
    let r = Repo::new();
    r.user("alice", "v4");
    let work = r.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let open = Command::new(fossil())
        .arg("open")
        .arg(&r.file)
        .arg("--workdir")
        .arg(&work)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(
        open.status.success(),
        "{}",
        String::from_utf8_lossy(&open.stderr)
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
