//! The node's metrics as an operator reads them: a node started with
//! `--metrics`, scraped by the real Prometheus (its own binary, its own
//! configuration and data on a free port of 127.0.0.1), runs a few records
//! of a runner that asks the scripted model service through its relay and
//! reads its deliveries; Prometheus's HTTP API then tells the runs ended,
//! the deliveries read and the tokens spent, each as the node's log and
//! the runs' spend say.

use crate::model::{Model, Reply};
use crate::relay::site_running;
use crate::support::{free_port, is, logged, until_logged};
use crate::tls::{Tls, port_of};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A runner asking the model once through its relay, then reading its
/// deliveries until one says to end.
const ASKING: &str = r#"#!/usr/bin/python3
import os, sys, json, http.client
url = os.environ["OCX_MODEL_URL"]
port = int(url.rsplit(":", 1)[1])
body = json.dumps({"model": "m", "stream": True, "max_tokens": 10,
    "messages": [{"role": "user", "content": "Say hello"}]})
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("POST", "/v1/messages", body=body,
    headers={"x-api-key": os.environ["OCX_MODEL_TOKEN"], "content-type": "application/json"})
c.getresponse().read()
for line in sys.stdin:
    if "please end" in line:
        sys.exit(0)
"#;

/// A Prometheus of the test's own, ended when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second, on a free port,
    /// answering once it is ready.
    fn scraping(target: &str) -> Prometheus {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ocx\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let mut data = Some(data);
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    config.with_file_name("tsdb").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("prometheus is installed (scripts/setup.sh)");
            let mut p = Prometheus {
                child,
                url: format!("http://127.0.0.1:{port}"),
                _data: data.take().unwrap(),
            };
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until && p.child.try_wait().unwrap().is_none() {
                let ready = ureq::get(&format!("{}/-/ready", p.url))
                    .call()
                    .is_ok_and(|r| r.status() == 200);
                if ready {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // Its port taken meanwhile: another, the data kept.
            let _ = p.child.kill();
            let _ = p.child.wait();
            data = Some(std::mem::replace(
                &mut p._data,
                tempfile::tempdir().unwrap(),
            ));
        }
        panic!("prometheus never got ready");
    }

    /// The value of the instant query `query`, once it answers one series
    /// whose value `done` holds of (within 60 seconds).
    fn until(&self, query: &str, done: impl Fn(f64) -> bool) -> f64 {
        let until = Instant::now() + Duration::from_secs(60);
        let mut last = Value::Null;
        while Instant::now() < until {
            let answer: Value = ureq::get(&format!("{}/api/v1/query", self.url))
                .query("query", query)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            if let Some(v) = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                && done(v)
            {
                return v;
            }
            last = answer;
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("Prometheus never answered {query} as wanted: {last:#}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tokens in and out a run's spend says.
fn tokens(root: &Path, record: &str) -> u64 {
    let dir = ocx::node::config::NodeConfig::run_dir(root, record);
    let spend = ocx::node::transcript::read_spend(&dir).expect("the run's spend");
    spend.tokens_in.unwrap_or(0) + spend.tokens_out.unwrap_or(0)
}

#[test]
fn prometheus_scraping_a_node_reads_its_runs_deliveries_and_tokens() {
    let model = Model::start(|_| Reply::text("Hello."));
    let tls = Tls::front(port_of(&model.url()));
    let (site, out) = site_running(&tls, ASKING, json!({}));
    let repo = &site.node.repo;
    let root = repo.node_root();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    assert!(
        repo.json(&["node", "start", "--metrics", "0.0.0.0:9464"])
            .refused()
            .contains("metrics"),
        "an address off the loopback is refused, naming the field"
    );
    repo.json(&["node", "stop"]).ok();
    repo.json(&["node", "start", "--metrics", &address]).ok();
    let prometheus = Prometheus::scraping(&address);
    prometheus.until("up{job=\"ocx\"}", |v| v == 1.0);

    let records: Vec<String> = (0..3)
        .map(|_| crate::relay::create(&site, &out, &[]))
        .collect();
    for record in &records {
        until_logged(&root, 60, |e| is(e, "opened", record));
        site.post(record, "A first note.");
        site.post(record, "A second note.");
        site.post(record, "please end");
        until_logged(&root, 90, |e| {
            is(e, "answered", record) && e["outcome"] == "exited"
        });
    }
    let delivered = logged(&root, |e| {
        e["done"] == "delivered" && records.iter().any(|r| e["record"] == *r)
    });
    assert_eq!(delivered, 9, "three posts given to each run");
    let spent: u64 = records.iter().map(|r| tokens(&root, r)).sum();
    assert!(spent > 0, "the runs spent tokens");

    let ended = prometheus.until(
        "sum(ocx_runs_ended_total{runner=\"search\",outcome=\"exited\"})",
        |v| v >= 3.0,
    );
    assert_eq!(ended, 3.0, "each run ended, by runner and outcome");
    let read = prometheus.until("sum(ocx_delivery_delay_seconds_count)", |v| {
        v >= delivered as f64
    });
    assert_eq!(read, delivered as f64, "each delivery's delay was counted");
    let within = prometheus.until("sum(ocx_delivery_delay_seconds_bucket{le=\"30.0\"})", |v| {
        v > 0.0
    });
    assert_eq!(
        within, read,
        "each was read within 30 seconds of its receipt"
    );
    let counted = prometheus.until(
        "sum(ocx_model_tokens_total{runner=\"search\",sender=\"admin\"})",
        |v| v >= spent as f64,
    );
    assert_eq!(
        counted, spent as f64,
        "the tokens the runs' spend says, by runner and sender"
    );
    let opened = prometheus.until("sum(ocx_runs_opened_total)", |v| v >= 3.0);
    assert_eq!(opened, 3.0);
    let seen = prometheus.until("sum(ocx_records_seen_total)", |v| v >= 3.0);
    assert_eq!(seen, 3.0, "the three records were seen");
    // The page's requests, by tool and status, and a login's wait as an
    // agent machine's contact.
    let cookie = site.node.login("pat");
    let get = |path: &str| site.node.request("GET", path, &[("Cookie", &cookie)], "").0;
    assert_eq!(get(&format!("/ext/ocx-cgi/run/{}?json=1", records[0])), 200);
    assert_eq!(get("/ext/ocx-cgi/no-such-tool"), 404);
    assert_eq!(get("/ext/ocx-cgi/wait?after=0&within=1"), 200);
    let runs = prometheus.until(
        "sum(ocx_page_requests_total{tool=\"run\",status=\"200\"})",
        |v| v >= 1.0,
    );
    assert_eq!(runs, 1.0, "the run's page, asked once");
    prometheus.until(
        "sum(ocx_page_requests_total{tool=\"other\",status=\"404\"})",
        |v| v >= 1.0,
    );
    let waited = prometheus.until("ocx_machine_last_contact_seconds{machine=\"pat\"}", |v| {
        v > 0.0
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - waited).abs() < 120.0,
        "pat's wait, just now: {waited}"
    );

    // Each query of the dashboard in docs/ is one Prometheus takes.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m");
            let answer: Value = ureq::get(&format!("{}/api/v1/query", prometheus.url))
                .query("query", &expr)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            assert_eq!(answer["status"], "success", "{expr}: {answer:#}");
        }
    }
    drop(prometheus);
    repo.json(&["node", "stop"]).ok();
}
