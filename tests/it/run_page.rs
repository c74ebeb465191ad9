//! A run followed as a maintainer follows it: the real Claude Code against
//! the tests' scripted model server, its record as a table, its transcript
//! growing delivery by delivery (its words, the tool it called and what it
//! answered), its spend moving, and no secret the node knows anywhere it
//! is shown, though the model plants them in a tool call; a reader sees
//! the run but not its transcript. The relay's token and tokens in and
//! out are held in `relay.rs`, whose model service is behind TLS.

use crate::agents::{Agent, Site, answered, delivery};
use crate::model::{Model, Reply};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The node's key for the model service, as the site keeps it.
const KEY: &str = "key-of-the-test-0123456789";

/// `run` of `record` as `login`, after entry `after`.
fn run_as(site: &Site, login: &str, record: &str, after: u64) -> Value {
    site.node
        .repo
        .json(&[
            "run",
            "--record",
            record,
            "--after",
            &after.to_string(),
            "--user",
            login,
        ])
        .ok()
}

/// Waits until `record`'s transcript, as admin reads it, holds an entry
/// for which `wanted` holds; every entry so far.
fn until_entry(site: &Site, record: &str, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let run = run_as(site, "admin", record, 0);
        let entries = run["transcript"].as_array().cloned().unwrap_or_default();
        if entries.iter().any(&wanted) {
            return entries;
        }
        assert!(
            Instant::now() < until,
            "no such entry: {run:#}\n{}",
            site.run_log(record)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The relay token the running agent of `record` holds, read from its
/// environment (a process whose `OCX_RECORD` is the record's).
pub(crate) fn relay_token(record: &str) -> Option<String> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let env = std::fs::read(p.path().join("environ")).ok()?;
        let vars: Vec<String> = env
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !vars.iter().any(|v| *v == format!("OCX_RECORD={record}")) {
            return None;
        }
        vars.iter().find_map(|v| {
            let value = v.split_once('=')?.1;
            value.starts_with("ocx-run-").then(|| value.to_string())
        })
    })
}

#[test]
fn a_runs_page_shows_its_record_and_its_transcript_as_it_goes_and_no_secret() {
    let planted: Arc<Mutex<Vec<String>>> = Arc::default();
    let plant = planted.clone();
    let model = Model::start(move |r| {
        let Some((line, _)) = delivery(r) else {
            return Reply::text("Nothing to do.");
        };
        if line.starts_with("Record ") {
            Reply::text("Ready to review.")
        } else if line.contains("secrets") && answered(r) == 0 {
            let all = plant.lock().unwrap().join(" ");
            Reply::tool(
                &Agent::Claude.tool("ocx", "thread"),
                json!({"of": format!("x {all}")}),
            )
        } else if line.contains("secrets") {
            Reply::text("Looked.")
        } else if line.contains("2+2") {
            Reply::text("It is 4.")
        } else {
            Reply::text("Noted.")
        }
    });
    let site = Site::new(Agent::Claude, &model, Some(KEY));
    let record = site.record(&[]);
    let user = site.user_of(&record);
    site.said(&record, &user, "Ready to review.");

    // The record as a table, the run running, its first line delivered
    // and the agent's words, in order.
    let first = run_as(&site, "admin", &record, 0);
    assert_eq!(first["state"], "running", "{first:#}");
    assert_eq!(first["fields"]["objective"], "Review what you are given");
    assert_eq!(first["fields"]["user"], user.as_str());
    assert_eq!(first["sent_by"], "admin");
    let entries = until_entry(&site, &record, |e| e["text"] == "Ready to review.");
    assert_eq!(entries[0]["kind"], "delivery", "{entries:#?}");
    assert!(entries[0]["text"].as_str().unwrap().starts_with("Record "));
    let at = |kind: &str, text: &str| {
        entries
            .iter()
            .position(|e| e["kind"] == kind && e["text"] == text)
    };
    assert!(at("words", "Ready to review.").is_some(), "{entries:#?}");

    // A post's turn arrives after the last entry seen, its spend moving.
    let last = entries.last().unwrap()["seq"].as_u64().unwrap();
    let spent_before = until_spend(&site, &record, 0);
    site.post(&record, "What is 2+2?");
    site.said(&record, &user, "It is 4.");
    let next = run_as(&site, "admin", &record, last);
    let news = next["transcript"].as_array().unwrap();
    assert!(
        news.iter().all(|e| e["seq"].as_u64().unwrap() > last),
        "only what came after {last}: {news:#?}"
    );
    assert!(
        news.iter()
            .any(|e| e["kind"] == "delivery" && e["text"].as_str().unwrap().contains("2+2")),
        "{news:#?}"
    );
    assert!(
        news.iter()
            .any(|e| e["kind"] == "words" && e["text"] == "It is 4."),
        "{news:#?}"
    );
    until_spend(&site, &record, spent_before + 1);

    // The model plants every secret the node knows for this run in a tool
    // call: the node's key (given to the run, its model service a stand-in
    // on this host) and the run's password.
    let password = std::fs::read_to_string(site.run_dir(&record).join("password"))
        .unwrap()
        .trim()
        .to_string();
    *planted.lock().unwrap() = vec![KEY.to_string(), password.clone()];
    site.post(&record, "Read the secrets thread.");
    site.said(&record, &user, "Looked.");
    let entries = until_entry(&site, &record, |e| e["kind"] == "tool_result");
    let call = entries
        .iter()
        .find(|e| e["kind"] == "tool_call")
        .expect("the tool call is in the transcript");
    assert_eq!(call["name"], Agent::Claude.tool("ocx", "thread"));
    let shown_args = call["arguments"]["of"].as_str().unwrap();
    assert!(
        shown_args.contains("[credential model-key masked]")
            && shown_args.contains("[the run's password masked]"),
        "each secret masked by name: {shown_args}"
    );
    for login in ["admin", "pat"] {
        site.node
            .repo
            .fossil(&["user", "password", login, &format!("{login}-pw")]);
    }
    let ext = crate::cgi::Ext::new();
    let page_path = format!("/run/{record}");
    let page = crate::cgi::cgi(
        &ext,
        &site.node.repo,
        &[("FOSSIL_USER", "admin"), ("PATH_INFO", &page_path)],
        b"",
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<table class=\"ocx-record\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("It is 4."), "{}", page.body);
    let everywhere = [
        std::fs::read_to_string(site.run_dir(&record).join("transcript.jsonl")).unwrap(),
        run_as(&site, "admin", &record, 0).to_string(),
        site.node.repo.ocx(&["run", "--record", &record]).stdout,
        page.body.clone(),
    ];
    for (shown, secret) in everywhere
        .iter()
        .flat_map(|s| [(s, KEY), (s, password.as_str())])
    {
        assert!(!shown.contains(secret), "a secret shown: {shown}");
    }

    // A reader sees the run and its state, never its transcript.
    let read = run_as(&site, "pat", &record, 0);
    assert_eq!(read["state"], "running");
    assert_eq!(read["transcript"], json!([]), "{read:#}");
    assert!(
        read["transcript_withheld"]
            .as_str()
            .unwrap()
            .contains("administrators and to the record's sender (admin)"),
        "{read:#}"
    );
    let page = crate::cgi::cgi(
        &ext,
        &site.node.repo,
        &[("FOSSIL_USER", "pat"), ("PATH_INFO", &page_path)],
        b"",
    );
    assert!(!page.body.contains("It is 4."), "{}", page.body);
    assert!(page.body.contains("id=\"ocx-withheld\""), "{}", page.body);

    // A folded output, as the page fetches it once opened: that entry
    // alone, its secrets masked, and to the administrator, not the reader.
    let result = entries.iter().find(|e| e["kind"] == "tool_result").unwrap();
    let query = format!("json&entry={}", result["seq"]);
    let fetched = |login: &str| {
        let page = crate::cgi::cgi(
            &ext,
            &site.node.repo,
            &[
                ("FOSSIL_USER", login),
                ("PATH_INFO", &page_path),
                ("QUERY_STRING", &query),
            ],
            b"",
        );
        assert_eq!(page.status, 200, "{}", page.body);
        page.answer()["result"].clone()
    };
    let admin = fetched("admin");
    assert_eq!(admin["transcript"], json!([result]), "{admin:#}");
    assert!(!admin.to_string().contains(&password), "{admin:#}");
    let reader = fetched("pat");
    assert_eq!(reader["transcript"], json!([]), "{reader:#}");
    assert!(reader["transcript_withheld"].is_string(), "{reader:#}");

    // The page's long-poll refuses what is no whole number, or too long a
    // wait, naming the query's key.
    for (query, field) in [
        ("json&after=abc", "after"),
        ("json&after=-1", "after"),
        ("json&within=99", "within"),
        ("json&entry=x", "entry"),
        ("json&entry=99999", "entry"),
        ("json&entry=1&last=2", "last"),
        ("json&last=x", "last"),
    ] {
        let asked = crate::cgi::cgi(
            &ext,
            &site.node.repo,
            &[
                ("FOSSIL_USER", "admin"),
                ("PATH_INFO", &page_path),
                ("QUERY_STRING", query),
            ],
            b"",
        );
        assert_eq!(asked.status, 400, "{query}: {}", asked.body);
        let answer: Value = serde_json::from_str(&asked.body).unwrap();
        assert_eq!(answer["stopped"]["field"], field, "{query}: {answer:#}");
    }

    // Stopped: the state and the transcript's last entry say so.
    site.json(&["stop", "--record", &record]);
    assert_eq!(site.response(&record).0, "stopped");
    let ended = run_as(&site, "admin", &record, 0);
    assert_eq!(ended["state"], "ended");
    assert_eq!(ended["outcome"], "stopped");
    let last = ended["transcript"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "ended", "{last:#}");
    assert_eq!(last["outcome"], "stopped");
    // The last entries alone, as the page draws them, read from the
    // transcript's end: the whole transcript's last, after `after` too.
    let whole = ended["transcript"].as_array().unwrap().clone();
    assert!(whole.len() >= 3, "{whole:#?}");
    for (query, want) in [
        ("json&last=2".to_string(), whole[whole.len() - 2..].to_vec()),
        (
            format!("json&last=1000&after={}", whole[0]["seq"]),
            whole[1..].to_vec(),
        ),
        ("json&last=0".to_string(), Vec::new()),
    ] {
        let asked = crate::cgi::cgi(
            &ext,
            &site.node.repo,
            &[
                ("FOSSIL_USER", "admin"),
                ("PATH_INFO", &page_path),
                ("QUERY_STRING", &query),
            ],
            b"",
        );
        assert_eq!(asked.status, 200, "{query}: {}", asked.body);
        assert_eq!(
            asked.answer()["result"]["transcript"],
            json!(want),
            "{query}"
        );
    }
}

/// Waits until the run's spend says more than `seconds` of wall; the
/// seconds it says.
fn until_spend(site: &Site, record: &str, seconds: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let run = run_as(site, "admin", record, 0);
        if let Some(s) = run["spend"]["wall_seconds"].as_u64()
            && s >= seconds
        {
            return s;
        }
        assert!(Instant::now() < until, "the spend did not move: {run:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `node tests/browser/run-page.mjs` for `login` on `record`, its lines
/// read and answered as it goes: `on_line` is given each line it prints
/// and done before it is answered.
fn in_chromium(
    site: &Site,
    login: &str,
    record: &str,
    mode: &str,
    shots: &[(&str, &std::path::Path)],
    mut on_line: impl FnMut(&str),
) {
    use std::io::{BufRead, Write};
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").is_dir(),
        "playwright-core is missing: run scripts/setup.sh"
    );
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let mut c = std::process::Command::new("node");
    c.arg(browser.join("run-page.mjs"))
        .env("OCX_BASE", site.node.base())
        .env("OCX_LOGIN", login)
        .env("OCX_PASSWORD", format!("{login}-pw"))
        .env("OCX_RECORD", record)
        .env("OCX_MODE", mode)
        .env("OCX_SECRET", KEY)
        .env("OCX_PROFILE", profile.path().join("profile"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, path) in shots {
        c.env(name, path);
    }
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut said = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        on_line(&line);
        said.push(line);
        let _ = writeln!(stdin, "go");
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the browser test failed: {said:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn in_chromium_a_maintainer_follows_a_live_run_from_the_console_its_sender_sees_its_own_and_a_reader_no_transcript()
 {
    let model = Model::start(move |r| match delivery(r) {
        Some((line, _)) if line.starts_with("Record ") => Reply::text("Ready to review."),
        Some((line, hash)) if line.contains("2+2") && answered(r) == 0 => {
            Reply::tool(&Agent::Claude.tool("ocx", "thread"), json!({"of": hash}))
        }
        Some((line, _)) if line.contains("2+2") => Reply::text("It is 4."),
        _ => Reply::text("Noted."),
    });
    let site = Site::new(Agent::Claude, &model, Some(KEY));
    for login in ["admin", "pat"] {
        site.node
            .repo
            .fossil(&["user", "password", login, &format!("{login}-pw")]);
    }
    let record = site.record(&[]);
    let user = site.user_of(&record);
    site.said(&record, &user, "Ready to review.");
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (console, running, ended) = (
        shots.join("ocx-run-console.png"),
        shots.join("ocx-run-running.png"),
        shots.join("ocx-run-ended.png"),
    );
    in_chromium(
        &site,
        "admin",
        &record,
        "maintainer",
        &[
            ("OCX_SHOT_CONSOLE", &console),
            ("OCX_SHOT_RUNNING", &running),
            ("OCX_SHOT_ENDED", &ended),
        ],
        |line| match line {
            "on the console" => {
                site.json(&crate::support::command_record_args(
                    "Arrives while the console is open",
                    &["--wall", "1m"],
                ));
            }
            "on the page" => {
                site.post(&record, "What is 2+2?");
            }
            "seen the turn" => {
                site.json(&["stop", "--record", &record]);
            }
            _ => {}
        },
    );
    for shot in [&console, &running, &ended] {
        assert!(shot.is_file(), "no screenshot {}", shot.display());
    }
    in_chromium(&site, "pat", &record, "reader", &[], |_| {});

    // pat, given R, sends a record of pat's own: its sender sees its
    // transcript, though pat administers nothing.
    site.json(&["send_runs", "--login", "pat"]);
    let own = site.node.repo.json(&[
        "create",
        "--runner",
        "claude",
        "--objective",
        "Review what you are given",
        "--wall",
        "10m",
        "--hears",
        "pat",
        "--user",
        "pat",
    ]);
    let own = own.ok_str("record");
    site.said(&own, &site.user_of(&own), "Ready to review.");
    // Its transcript made longer than a page sends at once, as a long
    // session's is, while the run waits for its next delivery.
    let transcript = ocx::node::transcript::Transcript::open(&site.run_dir(&own), []).unwrap();
    for i in 0..60 {
        transcript.add(ocx::node::transcript::Said::Words {
            text: format!("Step {i} of a long session."),
        });
    }
    in_chromium(&site, "pat", &own, "sender", &[], |_| {});
    site.json(&["stop", "--record", &own]);
}
