//! How a tool's result prints at a terminal: each content item in order — text as it is,
//! and every other kind (image, audio, resource link, embedded resource) as a line saying
//! what it is and where to find it, so nothing a tool answered passes unseen. `--json`
//! prints the result itself, data included.

use mesh_core::subjects::{Content, ToolResult};
use serde_json::Value;

/// The result's content as lines for a person: text items as they are, the others each as
/// a line naming their kind; with no content, the structured content as JSON.
pub fn printed(result: &ToolResult) -> String {
    let mut out: Vec<String> = result.content.iter().map(item).collect();
    if out.is_empty()
        && let Some(structured) = &result.structured_content
    {
        out.push(serde_json::to_string_pretty(structured).unwrap_or_default());
    }
    out.join("\n")
}

fn item(c: &Content) -> String {
    if let Some(text) = c.as_text() {
        return text.to_owned();
    }
    let m = &c.0;
    let kind = s(m.get("type"));
    match kind {
        "image" | "audio" => format!(
            "[{kind}, {}, {} — `--json` has its data]",
            or_unknown(s(m.get("mimeType"))),
            size(decoded_len(s(m.get("data"))))
        ),
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
                None => format!(
                    "[resource {uri}, {}, {} — `--json` has its data]",
                    or_unknown(s(get("mimeType"))),
                    size(decoded_len(s(get("blob"))))
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
    fn every_kind_of_item_is_said() {
        let r = result(vec![
            json!({"type": "text", "text": "Here are 2 resource links"}),
            json!({"type": "resource_link", "name": "a.txt", "uri": "file:///a.txt", "mimeType": "text/plain"}),
            json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
            json!({"type": "resource", "resource": {"uri": "test://r", "text": "inside"}}),
            json!({"type": "resource", "resource": {"uri": "test://b", "blob": "AAAAAAAA", "mimeType": "application/pdf"}}),
            json!({"type": "hologram"}),
        ]);
        let p = printed(&r);
        assert_eq!(
            p,
            "Here are 2 resource links\n\
             [resource link] a.txt — file:///a.txt (text/plain)\n\
             [image, image/png, 3 bytes — `--json` has its data]\n\
             [resource test://r]\ninside\n\
             [resource test://b, application/pdf, 6 bytes — `--json` has its data]\n\
             [hologram item — `--json` has it]"
        );
        let only = ToolResult {
            structured_content: Some(json!({"n": 1})),
            ..ToolResult::default()
        };
        assert_eq!(printed(&only), "{\n  \"n\": 1\n}");
    }
}
