//! The headers a bridge sends an MCP server over HTTP (`Authorization` and the like), read
//! from a file or the environment, never the command line (where `ps` shows it to anyone):
//! one `Name: value` a line, blank lines and `#` comments skipped. A value is never repeated
//! in an error, and is marked sensitive so no log prints it.

use http::{HeaderName, HeaderValue};

/// The environment variable that may hold the headers, in the file's format.
pub const HEADERS_ENV: &str = "MESH_MCP_HEADERS";

/// Headers the transport sets itself, which a file may not override.
const RESERVED: [&str; 4] = ["accept", "mcp-session-id", "last-event-id", "content-type"];

/// The largest headers text read.
const MAX_TEXT: usize = 64 * 1024;

/// Why headers could not be read; each names where, never the value.
#[derive(Debug, thiserror::Error)]
pub enum HeadersError {
    #[error("cannot read the headers file {from}: {source}")]
    Read {
        from: String,
        source: std::io::Error,
    },
    #[error("{from}: line {line} is not `Name: value`")]
    NotAHeader { from: String, line: usize },
    #[error("{from}: line {line}: {name:?} is no header name")]
    Name {
        from: String,
        line: usize,
        name: String,
    },
    #[error("{from}: line {line}: the value of {name} holds bytes a header may not")]
    Value {
        from: String,
        line: usize,
        name: String,
    },
    #[error("{from}: line {line}: {name} is the transport's own; leave it out")]
    Reserved {
        from: String,
        line: usize,
        name: String,
    },
    #[error("{from}: larger than {MAX_TEXT} bytes")]
    TooLarge { from: String },
}

/// The headers to send: `file`'s (if given), then `$MESH_MCP_HEADERS`'.
pub fn read(
    file: Option<&std::path::Path>,
) -> Result<Vec<(HeaderName, HeaderValue)>, HeadersError> {
    let mut headers = Vec::new();
    if let Some(path) = file {
        let from = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| HeadersError::Read {
            from: from.clone(),
            source,
        })?;
        headers.extend(parse(&text, &from)?);
    }
    if let Ok(text) = std::env::var(HEADERS_ENV) {
        headers.extend(parse(&text, &format!("${HEADERS_ENV}"))?);
    }
    Ok(headers)
}

/// The headers in `text`, read from `from` (a file's path, or the variable's name).
pub fn parse(text: &str, from: &str) -> Result<Vec<(HeaderName, HeaderValue)>, HeadersError> {
    if text.len() > MAX_TEXT {
        return Err(HeadersError::TooLarge { from: from.into() });
    }
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((name, value)) = trimmed.split_once(':') else {
            return Err(HeadersError::NotAHeader {
                from: from.into(),
                line,
            });
        };
        let name = name.trim();
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeadersError::Name {
            from: from.into(),
            line,
            name: name.chars().take(64).collect(),
        })?;
        if RESERVED.contains(&header.as_str()) {
            return Err(HeadersError::Reserved {
                from: from.into(),
                line,
                name: header.to_string(),
            });
        }
        let mut value = HeaderValue::from_str(value.trim()).map_err(|_| HeadersError::Value {
            from: from.into(),
            line,
            name: header.to_string(),
        })?;
        value.set_sensitive(true);
        out.push((header, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_a_line_each_and_errors_keep_values_out() {
        let h = parse(
            "# the token\nAuthorization: Bearer s3cret\n\nX-Team:  blue  \n",
            "f",
        )
        .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0, "authorization");
        assert_eq!(h[0].1, "Bearer s3cret");
        assert!(h[0].1.is_sensitive());
        assert_eq!(h[1].1, "blue");
        for (text, what) in [
            ("Authorization Bearer s3cret", "is not `Name: value`"),
            ("Bad Name: s3cret", "no header name"),
            ("X-Ok: s3cret\u{7f}", "bytes a header may not"),
            ("Accept: s3cret", "transport's own"),
            ("Mcp-Session-Id: s3cret", "transport's own"),
        ] {
            let e = parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(what), "{text}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        assert!(matches!(
            parse(&"X: y\n".repeat(20_000), "f"),
            Err(HeadersError::TooLarge { .. })
        ));
    }
}
