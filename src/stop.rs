//! The words every layer stops in: why a call stopped, naming the field at
//! fault, and the checks that refuse the same way wherever they run (a
//! hash or its prefix, the field a serde complaint is about).

/// Whether a call was refused (what was asked may not or cannot be done
/// as asked: the caller can change it) or failed (something beneath it
/// broke: a file, the repository, a program).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StopKind {
    #[default]
    Refused,
    Failed,
}

/// Why a tool stopped: refused or failed, the field at fault, the reason,
/// what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub kind: StopKind,
    pub field: Option<String>,
    pub reason: String,
    pub next_step: Option<String>,
}

impl Stop {
    /// A refusal naming `field`.
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Stop {
        Stop {
            kind: StopKind::Refused,
            field: Some(field.into()),
            reason: reason.into(),
            next_step: None,
        }
    }

    /// A refusal no one field is at fault for.
    pub fn new(reason: impl Into<String>) -> Stop {
        Stop {
            kind: StopKind::Refused,
            field: None,
            reason: reason.into(),
            next_step: None,
        }
    }

    /// A failure of something beneath the call, as `reason` says it.
    pub fn failed(reason: impl Into<String>) -> Stop {
        Stop {
            kind: StopKind::Failed,
            ..Stop::new(reason)
        }
    }

    /// The same refusal, saying what to do instead.
    pub fn next(mut self, next_step: impl Into<String>) -> Stop {
        self.next_step = Some(next_step.into());
        self
    }

    /// An operation that failed, kept to its first line so no backtrace
    /// or dump reaches the caller.
    pub fn internal(e: impl std::fmt::Display) -> Stop {
        Stop::said(StopKind::Failed, e)
    }

    /// A layer's error stopping a call as its `kind` says (each layer's
    /// enum tells it per variant), kept to its first line.
    pub fn said(kind: StopKind, e: impl std::fmt::Display) -> Stop {
        let text = e.to_string();
        Stop {
            kind,
            ..Stop::new(text.lines().next().unwrap_or("internal error").to_string())
        }
    }
}

/// The field a serde complaint is about (a path such as `budget.wall`) and
/// the complaint, without serde's line and column.
pub fn field_at_fault(e: &serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let message = e.inner().to_string();
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    let named = message.split('`').nth(1).unwrap_or("").to_string();
    let field = if message.starts_with("unknown field") && path != "." {
        path
    } else if message.starts_with("unknown field") || message.starts_with("missing field") {
        if path == "." {
            named
        } else {
            format!("{path}.{named}")
        }
    } else if path == "." {
        "input".to_string()
    } else {
        path
    };
    (field, message)
}

/// Checks a hash or prefix given in `field`: hex digits only, 10 to 64 of
/// them; answers it in lower case.
pub fn hash_prefix(field: &str, given: &str) -> Result<String, Stop> {
    if !given.bytes().all(|b| b.is_ascii_hexdigit()) || given.is_empty() {
        return Err(
            Stop::field(field, format!("{given:?} is not a hash: hex digits only"))
                .next("give a full hash or a prefix of at least 10 hex digits"),
        );
    }
    if given.len() < 10 || given.len() > 64 {
        return Err(Stop::field(
            field,
            format!(
                "{given:?} has {} hex digits; a hash or prefix has 10 to 64",
                given.len()
            ),
        )
        .next("give a full hash or a prefix of at least 10 hex digits"));
    }
    Ok(given.to_ascii_lowercase())
}

/// Checks that a hash in `field` is given in full: 40 or 64 lower-case hex digits.
pub fn full_hash(field: &str, given: &str) -> Result<(), Stop> {
    let ok = (given.len() == 40 || given.len() == 64)
        && given
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok {
        Ok(())
    } else {
        Err(Stop::field(
            field,
            format!("{given:?} is not a full hash: 40 or 64 lower-case hex digits"),
        )
        .next("give each hash in full"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_beneath_a_call_is_no_refusal_and_keeps_its_first_line() {
        let failed = Stop::internal("disk I/O error\n  at frame 1\n  at frame 2");
        assert_eq!(failed.kind, StopKind::Failed);
        assert_eq!(failed.reason, "disk I/O error");
        assert_eq!(Stop::field("to", "no such post").kind, StopKind::Refused);
        assert_eq!(Stop::new("no").next("yes").kind, StopKind::Refused);
        let shown = serde_json::to_value(StopKind::Failed).unwrap();
        assert_eq!(shown, "failed");
    }

    #[test]
    fn hash_prefixes_are_checked() {
        assert!(hash_prefix("to", "abc").is_err());
        assert!(hash_prefix("to", "zzzzzzzzzzzz").is_err());
        assert_eq!(hash_prefix("to", "ABCDEF0123").unwrap(), "abcdef0123");
    }
}
