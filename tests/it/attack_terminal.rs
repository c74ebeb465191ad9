//! Attacks on a run's terminal, made for real: a poster's control keys
//! typed into a run's terminal, and a run's program writing to a joined
//! person's terminal what would act outside the screen.

use crate::terminal::{Site, Tmux};
use std::time::Duration;

#[test]
fn a_posters_control_keys_are_never_typed_into_a_runs_terminal() {
    let site = Site::new();
    let record = site.record();
    let repo = &site.node.repo;
    // Ctrl-C, Ctrl-Z and Ctrl-\ would signal the program; Ctrl-D and a
    // line feed would end a line early; Ctrl-U would erase it.
    let hostile = "stop\u{3}me\u{1a}now\u{1c}or\u{4}end\u{15}here";
    repo.json(&["post", "--to", &record, "--text", hostile])
        .ok();
    let line = site.noted(|s| {
        s["step"] == "line" && s["text"].as_str().is_some_and(|t| t.starts_with("Post "))
    });
    let text = line["text"].as_str().unwrap();
    assert!(
        text.ends_with("stop me now or end here"),
        "one line, each control key a space: {text:?}"
    );
    repo.json(&["post", "--to", &record, "--text", "still here"])
        .ok();
    site.noted(|s| {
        s["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("still here"))
    });
}

#[test]
fn what_a_run_writes_to_its_terminal_never_sets_a_persons_clipboard() {
    let site = Site::new();
    let record = site.record();
    let dir = site.node.repo.dir.path();
    // The control: tmux keeps a clipboard a program in its pane sets.
    let control = Tmux::start(
        dir,
        "control",
        "sleep 1; printf '\\033]52;c;b2N4LXNlY3JldC1wYXlsb2Fk\\007'; echo written",
        80,
        20,
    );
    control.set_clipboard();
    control.shows("written");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        control.buffers().contains("ocx-secret-payload"),
        "tmux keeps what a program it shows puts on the clipboard: {:?}",
        control.buffers()
    );
    let tmux = Tmux::start(dir, "admin", &site.attach(&record, "admin"), 120, 40);
    tmux.set_clipboard();
    tmux.shows("window 40x120");
    tmux.type_text("clipboard");
    tmux.press("Enter");
    site.noted(|s| s["step"] == "line" && s["text"] == "clipboard");
    tmux.shows("got: clipboard");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !tmux.buffers().contains("ocx-secret-payload"),
        "the run set the person's clipboard: {}",
        tmux.buffers()
    );
    tmux.press("C-]");
    tmux.shows("joining: left");
}

#[test]
fn what_a_run_writes_as_c1_controls_or_queries_never_reaches_a_person_or_types_into_the_run() {
    let site = Site::new();
    let record = site.record();
    let dir = site.node.repo.dir.path();
    let tmux = site.joined(&record, "admin", "admin");
    tmux.set_clipboard();
    let seen = dir.join("seen-by-the-person");
    tmux.record_to(&seen);
    tmux.type_text("controls");
    tmux.press("Enter");
    tmux.shows("got: controls");
    // What the person's terminal would type back (a cursor report, its
    // attributes, a colour, its answerback) would arrive before this line.
    tmux.type_text("after");
    tmux.press("Enter");
    site.noted(|s| s["step"] == "line" && s["text"] == "after");
    tmux.shows("got: after");
    let bytes = std::fs::read(&seen).unwrap();
    let shown = String::from_utf8(bytes.clone())
        .unwrap_or_else(|e| panic!("the person was shown bytes of no character: {e}"));
    assert!(
        !shown.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
        "a C1 control reached the person: {shown:?}"
    );
    for held in [
        "\x1b]52",
        "\x1b]8;",
        "\x1bP",
        "\x1b_",
        "\x1b[21t",
        "\x1b[6n",
        "\x1b[c",
        "\x1b]11;?",
        "\x05",
        "\x1bZ",
    ] {
        assert!(
            !shown.contains(held),
            "{held:?} reached the person: {shown:?}"
        );
    }
    assert!(shown.contains("got:\x1b[0m controls"), "{shown:?}");
    assert!(
        !tmux.buffers().contains("ocx-secret-payload"),
        "the run set the person's clipboard: {}",
        tmux.buffers()
    );
    let lines: Vec<String> = site
        .steps()
        .iter()
        .filter(|s| s["step"] == "line")
        .filter_map(|s| s["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("after"),
        "nothing typed itself into the run: {lines:?}"
    );
    tmux.press("C-]");
    tmux.shows("joining: left");
}
