//! `cargo bench --bench find`: the `find` tool, called through the
//! registry on a checkout of 20,000 generated files, against `grep -rF` on
//! the same tree; prints the median of each.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

use ocx::context::{Context, Who};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FILES: usize = 20_000;
const RUNS: usize = 9;
const NEEDLE: &str = "needle_in_the_tree";

fn tree(root: &Path) {
    for i in 0..FILES {
        let dir = root.join(format!("d{:03}", i % 200));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for l in 0..40 {
            text += &format!(
                "fn item_{i}_{l}() -> usize {{ {l} * {i} }} // filler text for line {l}\n"
            );
        }
        if i % 97 == 0 {
            text += &format!("let found = \"{NEEDLE}\";\n");
        }
        std::fs::write(dir.join(format!("f{i}.rs")), text).unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::Builder::new()
        .prefix("ocx-bench-")
        .tempdir()
        .unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    tree(&root);
    let fossil = ocx::fossil::Fossil::locate().expect("fossil 2.23 or later");
    let repo = dir.path().join("bench.fossil");
    for args in [
        vec![
            "new".as_ref(),
            "--admin-user".as_ref(),
            "bench".as_ref(),
            repo.as_os_str(),
        ],
        vec!["open".as_ref(), repo.as_os_str(), "--force".as_ref()],
    ] {
        let ok = Command::new(fossil.path())
            .args(&args)
            .current_dir(&root)
            .env("USER", "bench")
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "fossil {args:?}");
    }

    let mut tool = Vec::new();
    let mut found = 0;
    for _ in 0..RUNS {
        let cx = Context::new(
            None,
            root.clone(),
            Who::Local {
                user: Some("bench".into()),
            },
        );
        let input = serde_json::json!({ "text": NEEDLE });
        let started = Instant::now();
        let answer = ocx::registry::call("find", Ok(input), &cx, false);
        tool.push(started.elapsed());
        assert!(answer.ok, "{answer:?}");
        let r = answer.result.unwrap();
        found = r["matches"].as_array().unwrap().len() + r["more"].as_u64().unwrap() as usize;
    }

    let mut grep = Vec::new();
    let mut grep_found = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        let out = Command::new("grep")
            .args(["-rF", NEEDLE])
            .arg(&root)
            .output()
            .unwrap();
        grep.push(started.elapsed());
        grep_found = out
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
    }
    println!("tree: {FILES} files, {found} lines found by find, {grep_found} by grep");
    println!(
        "find (the tool, through the registry): median {:?} of {RUNS}",
        median(tool)
    );
    println!(
        "grep -rF:                              median {:?} of {RUNS}",
        median(grep)
    );
}
