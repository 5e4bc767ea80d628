//! The tools `mesh up` learned of each module from the catalogue: kept in the state directory,
//! filled into the grants before every rendering (where the grants file names none), so that
//! the layout exports and witnesses each tool apart, and learned again when the catalogue
//! says something changed. A tool a module no longer lists stays routed for as long as a
//! call may run: its export removed, the calls in flight on it would lose their witness (a
//! module could drop a tool, answer, and list it again, and no record of those calls would
//! be kept).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::client::Client;
use mesh_core::subjects::{self, catalog::MAX_TOOLS};

use crate::grants::Grants;

/// The file in the state directory.
pub const FILE: &str = "tools.json";

/// How long one look at the catalogue may take.
const ASK_WITHIN: Duration = Duration::from_secs(5);

/// How long a tool stays routed after its module last listed it: the longest a call may run
/// (the exports' response threshold, `layout::LONGEST_CALL`).
pub const KEPT_FOR: Duration = Duration::from_secs(3600);

/// Each module's tools, by module: when each was last listed (seconds since the epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Learned(pub BTreeMap<String, BTreeMap<String, u64>>);

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Learned {
    fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// What an earlier `mesh up` learned; nothing when there is no file or it does not read
    /// (it is learned again from the catalogue once the modules answer).
    pub fn read(dir: &Path) -> Learned {
        std::fs::read_to_string(Self::path(dir))
            .ok()
            .and_then(|t| serde_json::from_str::<Learned>(&t).ok())
            .map(Learned::checked)
            .unwrap_or_default()
    }

    /// Kept for the next start.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("a map of names serialises");
        mesh_core::client::write_private(&Self::path(dir), &text)
    }

    /// Only names the grammar allows, and no more tools a module than the catalogue keeps
    /// (the most recently listed).
    fn checked(self) -> Learned {
        Learned(
            self.0
                .into_iter()
                .filter(|(m, _)| subjects::check_module(m).is_ok())
                .map(|(m, tools)| {
                    let mut tools: Vec<(String, u64)> = tools
                        .into_iter()
                        .filter(|(t, _)| subjects::check_tool(t).is_ok())
                        .collect();
                    tools.sort_by_key(|(_, seen)| std::cmp::Reverse(*seen));
                    tools.truncate(MAX_TOOLS);
                    (m, tools.into_iter().collect())
                })
                .collect(),
        )
    }

    /// The tools routed for each module: the names, whenever last listed.
    pub fn routed(&self) -> BTreeMap<&str, BTreeSet<&str>> {
        self.0
            .iter()
            .map(|(m, tools)| (m.as_str(), tools.keys().map(String::as_str).collect()))
            .collect()
    }

    /// The grants with these tools where the file names none for a module it declares.
    pub fn fill(&self, grants: &Grants) -> Grants {
        let mut filled = grants.clone();
        for m in &mut filled.modules {
            if m.tools.is_none()
                && let Some(tools) = self.0.get(&m.name)
            {
                m.tools = Some(tools.keys().cloned().collect());
            }
        }
        filled
    }

    /// What the catalogue lists now of every module the grants declare (a module it does
    /// not list keeps what was learned of it before); `None` when the catalogue did not
    /// answer.
    pub async fn ask(&self, you: &Client, grants: &Grants) -> Option<Learned> {
        let listed = match you.catalogue(None, ASK_WITHIN).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("the catalogue did not say which tools each module has: {e}");
                return None;
            }
        };
        Some(
            self.with_listed(
                listed
                    .into_iter()
                    .filter(|e| grants.module(&e.module).is_some())
                    .map(|e| (e.module, e.tools)),
                now_secs(),
            ),
        )
    }

    /// These tools with `listed` seen at `now`: a tool listed no more kept until `KEPT_FOR`
    /// after it last was.
    fn with_listed(
        &self,
        listed: impl IntoIterator<Item = (String, Vec<String>)>,
        now: u64,
    ) -> Learned {
        let mut learned = self.clone();
        for (module, tools) in listed {
            let seen = learned.0.entry(module).or_default();
            seen.retain(|_, at| *at + KEPT_FOR.as_secs() >= now);
            for t in tools {
                seen.insert(t, now);
            }
        }
        learned.checked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_tools_fill_only_modules_the_file_names_none_for() {
        let file = r#"modules { echo {}, avu { tools: [list] } }"#;
        let grants =
            Grants::read(&crate::natsconf::parse_str(file, Path::new("grants.conf")).unwrap())
                .unwrap();
        let learned = Learned::default().with_listed(
            [
                ("echo".to_owned(), vec!["echo".to_owned()]),
                ("avu".to_owned(), vec!["add".to_owned()]),
            ],
            1,
        );
        let filled = learned.fill(&grants);
        let tools = |m: &str| filled.module(m).unwrap().tools.clone().unwrap();
        assert_eq!(tools("echo"), ["echo".to_owned()].into());
        assert_eq!(tools("avu"), ["list".to_owned()].into());
    }

    #[test]
    fn a_kept_file_with_names_the_grammar_refuses_reads_without_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE),
            r#"{"echo": {"echo": 5, "bad.name": 5, "tools": 5}, "no.module": {"x": 5}}"#,
        )
        .unwrap();
        let read = Learned::read(dir.path());
        assert_eq!(
            read.0,
            [("echo".to_owned(), [("echo".to_owned(), 5)].into())].into()
        );
    }

    /// A tool a module stops listing stays routed as long as a call on it may run, so that a
    /// module cannot drop its export (and the witness) under calls in flight.
    #[test]
    fn a_tool_listed_no_more_stays_routed_for_the_longest_call() {
        let t0 = 1_000_000;
        let listed = |tools: &[&str]| {
            [(
                "evil".to_owned(),
                tools.iter().map(|t| t.to_string()).collect(),
            )]
        };
        let learned = Learned::default().with_listed(listed(&["t2"]), t0);
        let dropped = learned.with_listed(listed(&["t9"]), t0 + 10);
        let routed = dropped.routed();
        assert_eq!(routed["evil"], ["t2", "t9"].into());
        let later = dropped.with_listed(listed(&["t9"]), t0 + KEPT_FOR.as_secs() + 1);
        assert_eq!(later.routed()["evil"], ["t9"].into());
    }
}
