//! MCP tool names as mesh tool names, which are subjects' tokens (`[a-z][a-z0-9_]*`, at most
//! 64): a readable, deterministic spelling, made unique within a listing; the original is
//! kept in the tool's `_meta` (`mesh/mcpName`), and the bridge maps each call back by it.

use sha2::{Digest, Sha256};

/// The `_meta` key that names a bridged tool's name on its MCP server.
pub const MCP_NAME_META: &str = "mesh/mcpName";

/// The longest mesh tool name.
const MAX: usize = 64;

/// The mesh spelling of an MCP tool name: lower case, words joined by `_` (`get-sum` →
/// `get_sum`, `getTinyImage` → `get_tiny_image`, `files.read` → `files_read`), `t_` before
/// a name that does not start with a letter, at most 64 characters (a longer one cut and
/// marked with its digest).
pub fn spelled(mcp: &str) -> String {
    let mut out = String::with_capacity(mcp.len());
    let mut previous_lower = false;
    for c in mcp.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            previous_lower = true;
        } else {
            // `-`, `.`, `/`, `_`, spaces, anything not ASCII: a word break.
            if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
            previous_lower = false;
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "t_");
        while out.ends_with('_') {
            out.pop();
        }
    }
    if out.len() > MAX {
        return marked(&out, mcp);
    }
    out
}

/// `name` cut to leave room for `_` and six hex digits of `mcp`'s sha256.
fn marked(name: &str, mcp: &str) -> String {
    let digest = Sha256::digest(mcp.as_bytes());
    let hex: String = digest[..3].iter().map(|b| format!("{b:02x}")).collect();
    let keep = name.len().min(MAX - hex.len() - 1);
    // ASCII only by now: any byte index is a character boundary.
    format!("{}_{hex}", name[..keep].trim_end_matches('_'))
}

/// The mesh names of a listing's tools, in order: each spelled, and where two would be the
/// same, or one is a verb the mesh keeps (`tools`, `result`), marked with its digest — again
/// with a counter until no two names are alike (a server can list a name that is another's
/// mark, or one name twice). The same listing always gets the same names.
pub fn for_listing(mcp: &[&str], reserved: &[&str]) -> Vec<String> {
    let spelled: Vec<String> = mcp.iter().map(|m| spelled(m)).collect();
    let mut out: Vec<String> = Vec::with_capacity(mcp.len());
    for (s, m) in spelled.iter().zip(mcp) {
        let clash = spelled.iter().filter(|o| *o == s).count() > 1;
        let mut name = if clash || reserved.contains(&s.as_str()) {
            marked(s, m)
        } else {
            s.clone()
        };
        let mut n = 1u32;
        while out.contains(&name) || reserved.contains(&name.as_str()) {
            name = marked(s, &format!("{m}#{n}"));
            n += 1;
        }
        out.push(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelled_as_subject_tokens() {
        for (mcp, mesh) in [
            ("echo", "echo"),
            ("get-sum", "get_sum"),
            ("getTinyImage", "get_tiny_image"),
            ("get_current_time", "get_current_time"),
            ("files.read", "files_read"),
            ("Read File", "read_file"),
            ("2fa", "t_2fa"),
            ("_private", "private"),
            ("--", "t"),
            ("", "t"),
            ("café", "caf"),
            ("a>b*c", "a_b_c"),
        ] {
            assert_eq!(spelled(mcp), mesh, "{mcp}");
            mesh_core::subjects::check_tool(&spelled(mcp)).unwrap();
        }
        let long = "x".repeat(200);
        let s = spelled(&long);
        assert_eq!(s.len(), 64);
        mesh_core::subjects::check_tool(&s).unwrap();
    }

    #[test]
    fn a_listing_gets_unique_names_the_same_each_time() {
        let mcp = [
            "get-sum",
            "get_sum",
            "getSum",
            "tools",
            "echo",
            "echo",
            "get_sum_2fb224",
            "get_sum_9a9a9a",
        ];
        let names = for_listing(&mcp, &["tools", "result"]);
        assert_eq!(names, for_listing(&mcp, &["tools", "result"]));
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(
            names[4].starts_with("echo_"),
            "two of one name are both marked"
        );
        assert_ne!(names[3], "tools");
        for n in &names {
            mesh_core::subjects::check_tool(n).unwrap();
        }
    }
}
