//! A call's progress on the terminal: a bar on stderr that follows the tool's reports, gone
//! when the call ends. Nothing is drawn through a pipe.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use mesh_core::subjects::Progress;

/// Per-mille steps of a bar whose total is known: reports are numbers, not counts.
const STEPS: u64 = 1000;

/// Draws `tool`'s reports until `reports` closes (its sender is dropped when the call ends).
pub fn follow(tool: String, mut reports: watch::Receiver<Option<Progress>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut bar: Option<(ProgressBar, bool)> = None;
        while reports.changed().await.is_ok() {
            let Some(report) = reports.borrow_and_update().clone() else {
                continue;
            };
            let counted = report.total.is_some_and(|t| t > 0.0);
            if bar.as_ref().is_none_or(|(_, was)| *was != counted) {
                if let Some((old, _)) = bar.take() {
                    old.finish_and_clear();
                }
                bar = Some((new_bar(&tool, counted), counted));
            }
            let (bar, _) = bar.as_ref().expect("made above");
            match report.total {
                Some(total) if total > 0.0 => {
                    let done = (report.progress / total).clamp(0.0, 1.0);
                    bar.set_position((done * STEPS as f64).round() as u64);
                    bar.set_message(report.message.unwrap_or_default());
                }
                _ => bar.set_message(match report.message {
                    Some(m) => m,
                    None => format!("{}", report.progress),
                }),
            }
        }
        if let Some((bar, _)) = bar {
            bar.finish_and_clear();
        }
    })
}

fn new_bar(tool: &str, counted: bool) -> ProgressBar {
    let bar = if counted {
        ProgressBar::new(STEPS).with_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {percent:>3}% {wide_msg}")
                .expect("a fixed template")
                .progress_chars("=> "),
        )
    } else {
        let bar = ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {prefix} {wide_msg}")
                .expect("a fixed template"),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    };
    bar.set_prefix(tool.to_owned());
    bar
}
