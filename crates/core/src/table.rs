//! Tables that fit the terminal: on a terminal the flexible columns (a description) are cut
//! to one line with an ellipsis so that every row fits its width; through a pipe, or with
//! `--wide`, every cell is printed whole (a script reads all of it).

use std::io::IsTerminal;

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Row, Table};

/// How wide a table may be: the terminal's width when stdout is one (`COLUMNS` overrides it,
/// as shells set it), none through a pipe or when `wide`.
pub fn width(wide: bool) -> Option<u16> {
    if wide || !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|c| *c > 0)
    {
        return Some(c);
    }
    comfy_table::Table::new().width()
}

/// The table as lines: columns apart by two blanks, no borders, the header first. With a
/// `width`, the columns in `flexible` are cut (one line, "…") so that each line fits; the
/// others keep their whole content.
pub fn render(
    header: &[String],
    rows: &[Vec<String>],
    flexible: &[usize],
    width: Option<u16>,
) -> String {
    let mut table = Table::new();
    table.load_preset(NOTHING).force_no_tty();
    table.set_truncation_indicator("…");
    table.set_header(header.iter().map(|h| h.as_str()));
    for cells in rows {
        let mut row = Row::from(cells.iter().map(|c| one_line(c)));
        if width.is_some() {
            row.max_height(1);
        }
        table.add_row(row);
    }
    match width {
        Some(w) => {
            table
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(w);
            for (i, column) in table.column_iter_mut().enumerate() {
                if !flexible.contains(&i) {
                    column.set_constraint(ColumnConstraint::ContentWidth);
                }
            }
        }
        None => {
            table.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    for column in table.column_iter_mut() {
        // Two blanks between columns, none before the first.
        column.set_padding((0, 2));
        column.set_cell_alignment(CellAlignment::Left);
    }
    let text = table.to_string();
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    lines.join("\n")
}

/// Prints [`render`] to stdout.
pub fn print(header: &[String], rows: &[Vec<String>], flexible: &[usize], width: Option<u16>) {
    println!("{}", render(header, rows, flexible, width));
}

/// A cell's text on one line: a newline or tab in a module's description would break rows.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<String> {
        ["TOOL", "DESCRIPTION", "STATUS"].map(String::from).to_vec()
    }

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec![
                "decide_annotate".into(),
                "Decides, column by column, which ontology terms describe a dataset card, records every decision, and proposes AVUs (it writes none)".into(),
                "running".into(),
            ],
            vec!["echo".into(), "Echoes\ntext".into(), "running".into()],
        ]
    }

    fn width_of(line: &str) -> usize {
        line.chars().count()
    }

    #[test]
    fn on_a_terminal_every_line_fits_and_names_stay_whole() {
        for w in [120u16, 80, 60] {
            let text = render(&header(), &rows(), &[1], Some(w));
            for line in text.lines() {
                assert!(width_of(line) <= w as usize, "{w}: {line:?}");
            }
            assert!(text.contains("decide_annotate"), "{text}");
            assert!(text.contains('…'), "{text}");
            assert!(text.lines().all(|l| !l.contains('\n')));
            assert_eq!(text.lines().count(), 3, "{text}");
        }
    }

    #[test]
    fn through_a_pipe_every_cell_is_whole() {
        let text = render(&header(), &rows(), &[1], None);
        assert!(text.contains("records every decision, and proposes AVUs (it writes none)"));
        assert!(!text.contains('…'));
        assert!(text.lines().next().unwrap().starts_with("TOOL"));
        // A newline inside a cell does not start a row.
        assert!(text.contains("Echoes text"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
    }
}
