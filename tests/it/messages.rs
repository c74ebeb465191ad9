//! OCX message blocks, read as spec-fixtures/messages says: each NAME.md
//! beside NAME.json, the reading expected.

use ocx::protocol::message::{self, Reading};
use std::path::Path;

#[test]
fn every_fixture_reads_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("spec-fixtures/messages");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read(&path).unwrap();
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("json")).unwrap()).unwrap();
        let got = serde_json::to_value(message::read(&text)).unwrap();
        assert_eq!(got, expected, "{}", path.display());
        seen += 1;
    }
    assert!(seen >= 7, "the fixtures are there ({seen})");
}

#[test]
fn what_the_writer_writes_the_reader_reads() {
    let msg: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"ocx": 1, "kind": "stop", "node": "ab", "stops": "cd", "note": "has ``` inside"}"#,
    )
    .unwrap();
    let text = format!("Stopping this.\n\n{}", message::write(&msg));
    assert!(text.contains("```json\n{\n  \"ocx\": 1,"));
    assert_eq!(
        message::read(text.as_bytes()),
        Reading::Message { message: msg }
    );
}

#[test]
fn every_kind_fixture_reads_as_expected() {
    use ocx::protocol::kinds::{self, Kind};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("spec-fixtures/kinds");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let case: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let message = case["message"].as_object().unwrap();
        let (kind, field) = match kinds::read(message) {
            Kind::Known(_) => ("known", None),
            Kind::Other => ("other", None),
            Kind::Refused(_, p) => ("refused", Some(p.field)),
            Kind::Malformed(p) => ("malformed", Some(p.field)),
        };
        assert_eq!(kind, case["expected"]["kind"], "{}", path.display());
        assert_eq!(
            field.as_deref(),
            case["expected"]["field"].as_str(),
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 10, "the fixtures are there ({seen})");
}
