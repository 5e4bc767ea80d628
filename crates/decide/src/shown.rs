//! How decide's tools show a run to people — counts, AVUs, the group to answer first, how to
//! write — shared by `decide_annotate`, `decide_explain`, `decide_apply` and
//! `decide_feedback`, so that no tool reads another.

use crate::feedback::{self, GroupView};

/// `n` things, the noun in the singular for one: `1 AVU`, `2 AVUs`.
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How to write a run's accepted AVUs.
pub(crate) fn write_hint(run_id: &str) -> String {
    [
        "to write what is accepted (accept=proposed asks you about each open group first):"
            .to_owned(),
        format!("  mesh call decide_apply run_id={run_id} path=<path> dry_run=false"),
    ]
    .join("\n")
}

/// An AVU on one line: `attribute = value [unit]`, a long value cut short.
pub(crate) fn avu_text(attribute: &str, value: &str, unit: &str) -> String {
    format!(
        "{} = {} [{}]",
        feedback::one_line(attribute, 40),
        feedback::one_line(value, 40),
        unit
    )
}

/// A group to show `decide_feedback` with: the first open one, and its winner's CURIE (its
/// best candidate's when it has no winner).
pub(crate) fn example(views: &[GroupView]) -> Option<(&str, &str)> {
    let view = views.iter().find(|v| v.is_open())?;
    let winner = view
        .winner
        .as_deref()
        .and_then(|w| view.candidates.iter().find(|c| c.decision_id == w))
        .or(view.candidates.first())?;
    Some((view.group_id.as_str(), winner.curie.as_str()))
}
