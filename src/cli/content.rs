//! How a tool's result prints at a terminal: each content item in order — text as it is,
//! images, audio and embedded blobs written to files (their paths printed), resource links
//! and other items each as a line saying what they are, so nothing a tool answered passes
//! unseen. `--json` prints the result itself, data included.

use std::path::{Path, PathBuf};

use base64::Engine;
use mesh_core::subjects::{Content, ToolResult};
use serde_json::Value;

/// Where a call's images, audio and blobs are written: a directory, and the start of each
/// file's name (the tool and the time of the call), numbered in the result's order.
pub struct Files {
    dir: PathBuf,
    stem: String,
    written: usize,
}

impl Files {
    /// Files for `tool`'s result in `dir` (`--save-to`), else in `$XDG_CACHE_HOME/mesh/
    /// results` (`~/.cache/mesh/results`), else the system's temporary directory.
    pub fn new(tool: &str, dir: Option<PathBuf>) -> Files {
        let dir = dir.unwrap_or_else(|| {
            mesh_core::client::Kept::default_dir()
                .and_then(|tools| tools.parent().map(|m| m.join("results")))
                .unwrap_or_else(|| std::env::temp_dir().join("mesh-results"))
        });
        let now = time::OffsetDateTime::now_utc();
        let stem = format!(
            "{tool}-{:04}{:02}{:02}T{:02}{:02}{:02}",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second()
        );
        Files {
            dir,
            stem,
            written: 0,
        }
    }

    /// Writes base64 `data` of type `mime`: the file's path, or why it could not be.
    fn write(&mut self, data: &str, mime: &str) -> Result<PathBuf, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("its data is not base64 ({e})"))?;
        // The next number no file has: another `mesh call` of the same tool in the same
        // second writes beside this one, never over it.
        loop {
            self.written += 1;
            let path = self.dir.join(format!(
                "{}-{}.{}",
                self.stem,
                self.written,
                extension(mime)
            ));
            match write_new(&self.dir, &path, &bytes) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot write {}: {e}", path.display())),
            }
        }
    }
}

/// `bytes` into a new file at `path` in `dir` (made, its owner's alone, if missing): never
/// over a file that is there.
fn write_new(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// A file name's extension for a MIME type.
fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or("").trim() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "audio/flac" => "flac",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "application/zip" => "zip",
        "text/plain" => "txt",
        "text/csv" => "csv",
        "text/html" => "html",
        _ => "bin",
    }
}

/// The result's content as lines for a person: text items as they are, data written to
/// `files` and its path said, the others each as a line naming their kind; with no
/// content, the structured content as JSON.
pub fn printed(result: &ToolResult, files: &mut Files) -> String {
    let mut out: Vec<String> = result.content.iter().map(|c| item(c, files)).collect();
    if out.is_empty()
        && let Some(structured) = &result.structured_content
    {
        out.push(serde_json::to_string_pretty(structured).unwrap_or_default());
    }
    out.join("\n")
}

/// A line for data of `kind` written (or not) to a file.
fn saved(kind: &str, mime: &str, data: &str, files: &mut Files) -> String {
    let what = format!("{kind}, {}, {}", or_unknown(mime), size(decoded_len(data)));
    match files.write(data, mime) {
        Ok(path) => format!("[{what}] {}", path.display()),
        Err(why) => format!("[{what} — not saved: {why}; `--json` has its data]"),
    }
}

fn item(c: &Content, files: &mut Files) -> String {
    if let Some(text) = c.as_text() {
        return text.to_owned();
    }
    let m = &c.0;
    let kind = s(m.get("type"));
    match kind {
        "image" | "audio" => saved(kind, s(m.get("mimeType")), s(m.get("data")), files),
        "resource_link" => {
            let mut line = format!(
                "[resource link] {} — {}",
                or_unknown(s(m.get("name"))),
                or_unknown(s(m.get("uri")))
            );
            if let Some(mime) = m.get("mimeType").and_then(Value::as_str) {
                line.push_str(&format!(" ({mime})"));
            }
            if let Some(d) = m.get("description").and_then(Value::as_str) {
                line.push_str(&format!(": {d}"));
            }
            line
        }
        "resource" => {
            let r = m.get("resource").and_then(Value::as_object);
            let get = |k: &str| r.and_then(|r| r.get(k));
            let uri = or_unknown(s(get("uri")));
            match get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => saved(
                    &format!("resource {uri}"),
                    s(get("mimeType")),
                    s(get("blob")),
                    files,
                ),
            }
        }
        other => format!("[{} item — `--json` has it]", or_unknown(other)),
    }
}

/// A string value, or "" when it is none.
fn s(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}

/// The bytes base64 `data` holds (no need to decode it to say how many).
fn decoded_len(data: &str) -> usize {
    let data = data.trim_end_matches('=');
    data.len() * 3 / 4
}

fn size(bytes: usize) -> String {
    match bytes {
        b if b < 1024 => format!("{b} bytes"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(items: Vec<Value>) -> ToolResult {
        ToolResult {
            content: items
                .into_iter()
                .map(|v| match v {
                    Value::Object(m) => Content(m),
                    _ => unreachable!(),
                })
                .collect(),
            ..ToolResult::default()
        }
    }

    #[test]
    fn every_kind_of_item_is_said_and_data_written_to_files() {
        let dir = tempfile::tempdir().unwrap();
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n");
        let r = result(vec![
            json!({"type": "text", "text": "Here are 2 resource links"}),
            json!({"type": "resource_link", "name": "a.txt", "uri": "file:///a.txt", "mimeType": "text/plain"}),
            json!({"type": "image", "data": png, "mimeType": "image/png"}),
            json!({"type": "resource", "resource": {"uri": "test://r", "text": "inside"}}),
            json!({"type": "resource", "resource": {"uri": "test://b", "blob": "AAAAAAAA", "mimeType": "application/pdf"}}),
            json!({"type": "audio", "data": "not base64!", "mimeType": "audio/wav"}),
            json!({"type": "hologram"}),
        ]);
        let mut files = Files::new("t_x", Some(dir.path().join("out")));
        let p = printed(&r, &mut files);
        let lines: Vec<&str> = p.lines().collect();
        let stem = dir.path().join("out").join(&files.stem);
        let first = format!("{}-1.png", stem.display());
        let second = format!("{}-2.pdf", stem.display());
        assert_eq!(
            lines,
            [
                "Here are 2 resource links",
                "[resource link] a.txt — file:///a.txt (text/plain)",
                &format!("[image, image/png, 6 bytes] {first}"),
                "[resource test://r]",
                "inside",
                &format!("[resource test://b, application/pdf, 6 bytes] {second}"),
                "[audio, audio/wav, 8 bytes — not saved: its data is not base64 (Invalid symbol 32, offset 3.); `--json` has its data]",
                "[hologram item — `--json` has it]",
            ]
        );
        assert_eq!(std::fs::read(&first).unwrap(), b"\x89PNG\r\n");
        assert_eq!(std::fs::read(&second).unwrap(), [0u8; 6]);
        // A second call of the same tool in the same second writes beside the first.
        let mut again = Files::new("t_x", Some(dir.path().join("out")));
        again.stem.clone_from(&files.stem);
        let p = printed(
            &result(vec![
                json!({"type": "image", "data": png, "mimeType": "image/png"}),
            ]),
            &mut again,
        );
        assert_eq!(
            p,
            format!("[image, image/png, 6 bytes] {}-2.png", stem.display())
        );
        assert_eq!(std::fs::read(&first).unwrap(), b"\x89PNG\r\n");
        assert_eq!(std::fs::read(&second).unwrap(), [0u8; 6]);
        let only = ToolResult {
            structured_content: Some(json!({"n": 1})),
            ..ToolResult::default()
        };
        assert_eq!(printed(&only, &mut files), "{\n  \"n\": 1\n}");
    }
}
