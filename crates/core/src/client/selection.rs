//! Which tools a surface offers an agent, and finding one among many. A [`Selection`] is a
//! list of patterns over full tool names (`avu_*`, `decide_apply`, `*_list`: `*` stands for
//! any run of characters), given on the command line (`--tools`) or named in the grants file
//! (`profiles`); [`ranked`] finds tools by words over their names and descriptions. Neither
//! grants anything: what a credential may call stays the bus's to say.

use std::fmt;

/// The longest pattern: a module's name (32), `_`, a tool's (64).
const MAX_PATTERN: usize = 97;

/// The tools offered: those whose full names match any of the patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    patterns: Vec<String>,
    /// Where the patterns came from (`profile curation`), for messages.
    origin: Option<String>,
}

/// A pattern that cannot select a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(
        "tool pattern {pattern:?} is not a full tool name or a pattern of one ({why}): write full names with * for any run of characters, such as avu_*, decide_apply or *_list"
    )]
    Pattern { pattern: String, why: &'static str },
    #[error("no tool pattern given: name at least one, such as avu_* or decide_apply")]
    Empty,
}

impl Selection {
    /// The patterns, each checked: a full name's characters (`a-z`, `0-9`, `_`, `-`) and `*`.
    pub fn parse<S: AsRef<str>>(
        patterns: impl IntoIterator<Item = S>,
    ) -> Result<Selection, SelectionError> {
        let mut checked: Vec<String> = Vec::new();
        for p in patterns {
            let p = p.as_ref().trim();
            check(p)?;
            if !checked.iter().any(|c| c == p) {
                checked.push(p.to_owned());
            }
        }
        if checked.is_empty() {
            return Err(SelectionError::Empty);
        }
        Ok(Selection {
            patterns: checked,
            origin: None,
        })
    }

    /// The same selection, said in messages to come from `origin` (`profile curation`).
    pub fn from_origin(mut self, origin: impl Into<String>) -> Selection {
        self.origin = Some(origin.into());
        self
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether the full name `name` is selected; an eponymous tool's (`greet`) by its long
    /// form too, so `greet_*` selects it as every other tool of module `greet`.
    pub fn selects(&self, name: &str) -> bool {
        let long = (!name.contains('_')).then(|| format!("{name}_{name}"));
        self.patterns
            .iter()
            .any(|p| glob(p, name) || long.as_deref().is_some_and(|l| glob(p, l)))
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let patterns = self.patterns.join(", ");
        match &self.origin {
            Some(origin) => write!(f, "{origin} ({patterns})"),
            None => write!(f, "--tools {patterns}"),
        }
    }
}

fn check(pattern: &str) -> Result<(), SelectionError> {
    let bad = |why| {
        Err(SelectionError::Pattern {
            pattern: pattern.to_owned(),
            why,
        })
    };
    match pattern.chars().next() {
        None => return bad("it is empty"),
        Some(c) if !(c.is_ascii_lowercase() || c == '*') => {
            return bad("it must start with a letter a-z or *");
        }
        Some(_) => {}
    }
    if pattern.len() > MAX_PATTERN {
        return bad("it is too long");
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-*".contains(c);
    if !pattern.chars().all(allowed) {
        return bad("it holds a character outside a-z, 0-9, _, - and *");
    }
    Ok(())
}

/// Whether `name` matches `pattern`, `*` standing for any run of characters (none too).
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    // Each middle part at its first place after the one before: the earliest leaves the
    // most room for the rest, so the first match found is as good as any.
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The words of a search, lower-case, each once: runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_lowercase();
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The tools that `query`'s words find, best first: a word in a tool's name counts two, in
/// its description one (words are found inside longer ones: `list` finds `avu_list` and
/// "lists"); ties by name. Tools no word finds are left out; a query with no words finds
/// every tool, by name. `name` and `description` read a tool.
pub fn ranked<'a, T>(
    tools: &'a [T],
    query: &str,
    name: impl Fn(&T) -> &str,
    description: impl Fn(&T) -> &str,
) -> Vec<&'a T> {
    let words = words(query);
    let mut scored: Vec<(usize, &T)> = tools
        .iter()
        .filter_map(|t| {
            let n = name(t).to_lowercase();
            let d = description(t).to_lowercase();
            let score: usize = words
                .iter()
                .map(|w| {
                    2 * usize::from(n.contains(w.as_str())) + usize::from(d.contains(w.as_str()))
                })
                .sum();
            (words.is_empty() || score > 0).then_some((score, t))
        })
        .collect();
    scored.sort_by(|(a, x), (b, y)| b.cmp(a).then_with(|| name(x).cmp(name(y))));
    scored.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_full_names() {
        let s = Selection::parse(["avu_*", "decide_apply", "*_list", "e*o_*o"]).unwrap();
        for yes in [
            "avu_add",
            "avu_",
            "decide_apply",
            "catalog_list",
            "echo",
            // Module list's eponymous tool is a tool named list.
            "list",
        ] {
            assert!(s.selects(yes), "{yes}");
        }
        for no in [
            "decide_apply_x",
            "decide_annotate",
            "avux_add",
            "echo_fail",
            "lists",
        ] {
            assert!(!s.selects(no), "{no}");
        }
        assert!(Selection::parse(["*"]).unwrap().selects("any_tool"));
        assert!(Selection::parse(["a*a"]).unwrap().selects("aa"));
        assert!(!Selection::parse(["a*a"]).unwrap().selects("ab"));
        assert!(Selection::parse(["*a*b*"]).unwrap().selects("xaxbx"));
        assert!(!Selection::parse(["*b*a"]).unwrap().selects("xaxb"));
    }

    #[test]
    fn bad_patterns_say_why() {
        for bad in ["", "Avu_*", "avu.add", "mesh.>", "avu add", "_x"] {
            let e = Selection::parse([bad]).unwrap_err().to_string();
            assert!(e.contains("is not a full tool name"), "{bad}: {e}");
        }
        assert_eq!(
            Selection::parse(Vec::<String>::new()),
            Err(SelectionError::Empty)
        );
        let s = Selection::parse(["echo_*", "echo_*"]).unwrap();
        assert_eq!(s.patterns(), ["echo_*"]);
        assert_eq!(s.to_string(), "--tools echo_*");
        assert_eq!(s.from_origin("profile p").to_string(), "profile p (echo_*)");
    }

    #[test]
    fn words_rank_names_over_descriptions() {
        let tools = [
            ("avu_list", "lists the AVUs of a path"),
            ("avu_add", "adds an AVU"),
            ("echo", "says the text back"),
            ("decide_apply", "applies a decision to a path as AVUs"),
        ];
        let found = |q: &str| -> Vec<&str> {
            ranked(&tools, q, |t| t.0, |t| t.1)
                .into_iter()
                .map(|t| t.0)
                .collect()
        };
        assert_eq!(found("list path"), ["avu_list", "decide_apply"]);
        assert_eq!(found("AVU"), ["avu_add", "avu_list", "decide_apply"]);
        assert_eq!(found("nothing-here"), Vec::<&str>::new());
        assert_eq!(found("  "), ["avu_add", "avu_list", "decide_apply", "echo"]);
    }
}
