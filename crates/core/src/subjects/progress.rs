//! Progress of a call in flight, both sides of its wire format: the subject a caller listens
//! on and names in `Mesh-Progress`, which subjects a module may report on, and the report.
//!
//! Reports travel outside the call's reply: a reply subject that stayed open for them would
//! need a streamed service export, which keeps a mapping in nats-server for every call until
//! it times out — a cost every call would pay, and one a flood of calls could grow without
//! bound. A module account exports `mesh-progress.<module>.>` as a stream to people instead,
//! and each person may subscribe to `mesh-progress.*.<user>.>` only.

use serde::{Deserialize, Serialize};

/// Progress subjects: `mesh-progress.<module>.<user>.<token>`.
pub const PROGRESS_PREFIX: &str = "mesh-progress";
/// The caller's progress subject; a call without it gets no reports.
pub const HEADER_PROGRESS: &str = "Mesh-Progress";
/// The user token of a caller with no user name (a bus without users).
pub const NO_USER: &str = "_";
/// The largest report a caller reads; a longer message is cut when sent.
pub const MAX_REPORT_BYTES: usize = 4096;
/// The longest message a report carries, in characters.
pub const MAX_MESSAGE_CHARS: usize = 512;
/// Reports a module sends a call at most this often; the newest waits for its turn.
pub const REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

const MAX_TOKEN: usize = 64;
const MAX_SUBJECT: usize = 256;

/// One report: as MCP's `notifications/progress` carries it, without the token. `progress`
/// grows with every report of a call; `total`, when known, is what it grows towards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why a report was not read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReportError {
    #[error("a progress report of {0} bytes is longer than {MAX_REPORT_BYTES}")]
    TooLong(usize),
    #[error("a progress report is not {{progress, total?, message?}}: {0}")]
    Shape(String),
    #[error("a progress report's numbers must be finite and not negative")]
    Numbers,
}

impl Progress {
    pub fn new(progress: f64, total: Option<f64>, message: Option<&str>) -> Progress {
        Progress {
            progress,
            total,
            message: message.map(one_line),
        }
    }

    /// Numbers a caller can show: finite, not negative.
    fn sane(&self) -> bool {
        let ok = |n: f64| n.is_finite() && n >= 0.0;
        ok(self.progress) && self.total.is_none_or(ok)
    }

    /// The report as sent: the message cut to its bound; `None` for numbers no caller reads.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if !self.sane() {
            return None;
        }
        let sent = Progress {
            message: self.message.as_deref().map(one_line),
            ..self.clone()
        };
        Some(serde_json::to_vec(&sent).expect("a report serialises"))
    }

    /// A report as a caller reads it, from anyone: bounded, of its shape, with sane numbers.
    pub fn decode(bytes: &[u8]) -> Result<Progress, ReportError> {
        if bytes.len() > MAX_REPORT_BYTES {
            return Err(ReportError::TooLong(bytes.len()));
        }
        // An object only: serde would read a struct from an array too.
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ReportError::Shape("not a JSON object".into()));
        }
        let report: Progress =
            serde_json::from_slice(bytes).map_err(|e| ReportError::Shape(e.to_string()))?;
        if !report.sane() {
            return Err(ReportError::Numbers);
        }
        // Whatever the sender did: one line, within its bound, for a terminal or a client.
        Ok(Progress {
            message: report.message.as_deref().map(one_line),
            ..report
        })
    }
}

/// A message as reports carry it: at most `MAX_MESSAGE_CHARS`, control characters (escape
/// sequences, line breaks) as spaces.
fn one_line(message: &str) -> String {
    message
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Reports that only ever grow, as every side passes them on: `admit` takes a report above
/// the last one it took, and no other.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rising {
    last: Option<f64>,
}

impl Rising {
    pub fn admit(&mut self, report: &Progress) -> bool {
        if self.last.is_some_and(|l| report.progress <= l) {
            return false;
        }
        self.last = Some(report.progress);
        true
    }
}

/// The subject a caller with user name `user` listens on for one call of `module`'s tools;
/// `None` when the user name cannot be a subject token.
pub fn progress_subject(module: &str, user: &str, token: &str) -> Option<String> {
    let user = if user.is_empty() { NO_USER } else { user };
    let subject = format!("{PROGRESS_PREFIX}.{module}.{user}.{token}");
    (plain_token(user, MAX_SUBJECT)
        && plain_token(token, MAX_TOKEN)
        && subject.len() <= MAX_SUBJECT)
        .then_some(subject)
}

/// A fresh token for one call.
pub fn progress_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Whether `module` may send reports of a call to `subject`, as its caller named it:
/// `mesh-progress.<module>.<user>.<token>`, where `user`, when the caller is known, is the
/// caller's own user name (`None` in local mode, where nobody is known). A person cannot
/// make a module report into another person's subjects.
pub fn may_report(subject: &str, module: &str, user: Option<&str>) -> bool {
    if subject.len() > MAX_SUBJECT {
        return false;
    }
    let mut parts = subject.split('.');
    let (Some(prefix), Some(m), Some(u), Some(token), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    prefix == PROGRESS_PREFIX
        && m == module
        && plain_token(u, MAX_SUBJECT)
        && plain_token(token, MAX_TOKEN)
        && user.is_none_or(|user| u == user)
}

/// A subject token of letters, digits, `_` and `-` only: no wildcard, no separator, no space.
fn plain_token(token: &str, max: usize) -> bool {
    !token.is_empty()
        && token.len() <= max
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_names_its_own_subject() {
        assert_eq!(
            progress_subject("decide", "alice", "k1").as_deref(),
            Some("mesh-progress.decide.alice.k1")
        );
        assert_eq!(
            progress_subject("decide", "", "k1").as_deref(),
            Some("mesh-progress.decide._.k1")
        );
        for (user, token) in [
            ("a.b", "k"),
            ("a*", "k"),
            ("a", "k.x"),
            ("a", ">"),
            ("a", ""),
        ] {
            assert!(
                progress_subject("decide", user, token).is_none(),
                "{user} {token}"
            );
        }
    }

    #[test]
    fn a_module_reports_only_where_its_caller_listens() {
        let s = "mesh-progress.decide.alice.k1";
        assert!(may_report(s, "decide", Some("alice")));
        assert!(may_report(s, "decide", None));
        assert!(!may_report(s, "decide", Some("bob")), "another person's");
        assert!(!may_report(s, "echo", Some("alice")), "another module's");
        for bad in [
            "mesh-progress.decide.alice",
            "mesh-progress.decide.alice.k1.more",
            "mesh-progress.decide.alice.*",
            "mesh-progress.decide.*.k1",
            "mesh-progress.decide.alice.>",
            "mesh.decide.alice.k1",
            "_INBOX.alice.k1",
            "mesh-progress.decide.alice.k 1",
            "mesh-progress.decide..k1",
        ] {
            assert!(!may_report(bad, "decide", None), "{bad}");
        }
        let long = format!("mesh-progress.decide.alice.{}", "k".repeat(65));
        assert!(!may_report(&long, "decide", None));
    }

    #[test]
    fn reports_are_read_bounded_and_sane() {
        let p = Progress::new(3.0, Some(10.0), Some("column 3 of 10"));
        assert_eq!(Progress::decode(&p.encode().unwrap()).unwrap(), p);
        let long = Progress::new(1.0, None, Some(&"é".repeat(2000)));
        let sent = Progress::decode(&long.encode().unwrap()).unwrap();
        assert_eq!(sent.message.unwrap().chars().count(), MAX_MESSAGE_CHARS);
        let sly = br#"{"progress":1,"message":"\u001b[2Jgone\nline"}"#;
        assert_eq!(
            Progress::decode(sly).unwrap().message.as_deref(),
            Some(" [2Jgone line")
        );
        let long = format!(r#"{{"progress":1,"message":"{}"}}"#, "x".repeat(3000));
        let read = Progress::decode(long.as_bytes()).unwrap();
        assert_eq!(read.message.unwrap().len(), MAX_MESSAGE_CHARS);
        assert!(Progress::new(f64::NAN, None, None).encode().is_none());
        assert!(Progress::new(1.0, Some(-1.0), None).encode().is_none());
        assert_eq!(
            Progress::decode(&[b' '; MAX_REPORT_BYTES + 1]),
            Err(ReportError::TooLong(MAX_REPORT_BYTES + 1))
        );
        for bad in [
            &br#"{"progress":-1}"#[..],
            br#"{"progress":"1"}"#,
            br#"{"progress":1,"extra":2}"#,
            br#"{"total":1}"#,
            br#"[1]"#,
            b"\xff",
        ] {
            assert!(
                Progress::decode(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
