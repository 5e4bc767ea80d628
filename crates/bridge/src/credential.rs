//! A backend credential per person: a helper command the bridge runs for each caller (as
//! git's and docker's credential helpers are run), whose answer — environment for a stdio
//! server, headers for one over HTTP, and how long they hold — goes to that caller's own
//! server and nowhere else: not to the caller, not into a log, not into an error.
//!
//! The helper is run as `<helper> <module>` with `MESH_CALLER` set to the stamped caller
//! (`ann@PEOPLE`), no stdin, its stderr into the bridge's log, within 30 s; it prints one JSON
//! object: `{"env": {"NAME": "value"}, "headers": {"Name": "value"}, "expires_in_s": 3600}`,
//! every key optional (no `expires_in_s`: it holds until the caller's server stops).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use serde_json::Value;
use tokio::io::AsyncReadExt;

/// How long a helper may take.
const HELPER_WITHIN: Duration = Duration::from_secs(30);

/// The most a helper may print.
const MAX_ANSWER: usize = 64 * 1024;

/// What a helper gave for one caller.
#[derive(Debug, Clone, Default)]
pub struct Credential {
    pub env: Vec<(String, String)>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub expires: Option<Instant>,
}

/// Why a helper gave nothing; never with what it printed.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("the credential helper {helper} cannot run: {source}")]
    Spawn {
        helper: String,
        source: std::io::Error,
    },
    #[error("the credential helper failed for this caller ({0})")]
    Failed(std::process::ExitStatus),
    #[error("the credential helper did not answer within {HELPER_WITHIN:?}")]
    Slow,
    #[error("the credential helper's answer is no JSON object of env, headers and expires_in_s")]
    NotAnAnswer,
    #[error("the credential helper's answer names {what} no server may be given")]
    Refused { what: String },
}

/// Runs `helper` for `caller` of `module`.
pub async fn fetch(helper: &Path, module: &str, caller: &str) -> Result<Credential, HelperError> {
    let mut child = tokio::process::Command::new(helper)
        .arg(module)
        .env("MESH_CALLER", caller)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| HelperError::Spawn {
            helper: helper.display().to_string(),
            source,
        })?;
    let mut out = Vec::new();
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let ran = async {
        // One byte past the bound says it was too much.
        (&mut stdout)
            .take(MAX_ANSWER as u64 + 1)
            .read_to_end(&mut out)
            .await
            .ok();
        // Past the bound it may still be writing into a full pipe: it is stopped, not
        // waited for.
        if out.len() > MAX_ANSWER {
            let _ = child.start_kill();
        }
        child.wait().await
    };
    let status = tokio::time::timeout(HELPER_WITHIN, ran)
        .await
        .map_err(|_| HelperError::Slow)?
        .map_err(|source| HelperError::Spawn {
            helper: helper.display().to_string(),
            source,
        })?;
    if !status.success() {
        return Err(HelperError::Failed(status));
    }
    if out.len() > MAX_ANSWER {
        return Err(HelperError::NotAnAnswer);
    }
    parse(&out)
}

/// A helper's answer.
fn parse(out: &[u8]) -> Result<Credential, HelperError> {
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(out) else {
        return Err(HelperError::NotAnAnswer);
    };
    let mut credential = Credential::default();
    for (key, value) in &answer {
        match (key.as_str(), value) {
            ("env", Value::Object(env)) => {
                for (name, v) in env {
                    let Some(v) = v.as_str() else {
                        return Err(HelperError::NotAnAnswer);
                    };
                    let bad = name.is_empty()
                        || name.contains(['=', '\0'])
                        || v.contains('\0')
                        || name.starts_with("NATS_")
                        || name.starts_with("MESH_");
                    if bad {
                        return Err(HelperError::Refused {
                            what: format!(
                                "the variable {:?}",
                                name.chars().take(64).collect::<String>()
                            ),
                        });
                    }
                    credential.env.push((name.clone(), v.to_owned()));
                }
            }
            ("headers", Value::Object(headers)) => {
                for (name, v) in headers {
                    let refused = || HelperError::Refused {
                        what: format!("the header {:?}", name.chars().take(64).collect::<String>()),
                    };
                    let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| refused())?;
                    let mut value = v
                        .as_str()
                        .and_then(|v| HeaderValue::from_str(v).ok())
                        .ok_or_else(refused)?;
                    value.set_sensitive(true);
                    credential.headers.push((header, value));
                }
            }
            ("expires_in_s", Value::Number(n)) => {
                let secs = n
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or(HelperError::NotAnAnswer)?;
                credential.expires =
                    Some(Instant::now() + Duration::from_secs_f64(secs.min(86_400.0 * 365.0)));
            }
            _ => return Err(HelperError::NotAnAnswer),
        }
    }
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_and_bad_ones_refused_without_their_values() {
        let c = parse(
            br#"{"env": {"TOKEN": "s3cret"}, "headers": {"Authorization": "Bearer s3cret"}, "expires_in_s": 60}"#,
        )
        .unwrap();
        assert_eq!(c.env, [("TOKEN".to_owned(), "s3cret".to_owned())]);
        assert!(c.headers[0].1.is_sensitive());
        assert!(c.expires.is_some());
        for bad in [
            &br#"["s3cret"]"#[..],
            br#"{"env": {"NATS_PASSWORD": "s3cret"}}"#,
            br#"{"env": {"A=B": "s3cret"}}"#,
            br#"{"headers": {"Bad Name": "s3cret"}}"#,
            br#"{"headers": {"X": "s3cret\n"}}"#,
            br#"{"expires_in_s": -1}"#,
            br#"{"other": "s3cret"}"#,
            b"not json s3cret",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(!e.contains("s3cret"), "{e}");
        }
    }
}
