//! The tools `mesh up` learned of each module from the catalogue: kept in the state directory,
//! filled into the grants before every rendering (where the grants file names none), so that
//! the layout exports and witnesses each tool apart, and learned again when the catalogue
//! says something changed.

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

/// Each module's tools, by module.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Learned(pub BTreeMap<String, BTreeSet<String>>);

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

    /// Only names the grammar allows, and no more tools a module than the catalogue keeps.
    fn checked(self) -> Learned {
        Learned(
            self.0
                .into_iter()
                .filter(|(m, _)| subjects::check_module(m).is_ok())
                .map(|(m, tools)| {
                    let tools = tools
                        .into_iter()
                        .filter(|t| subjects::check_tool(t).is_ok())
                        .take(MAX_TOOLS)
                        .collect();
                    (m, tools)
                })
                .collect(),
        )
    }

    /// The grants with these tools where the file names none for a module it declares.
    pub fn fill(&self, grants: &Grants) -> Grants {
        let mut filled = grants.clone();
        for m in &mut filled.modules {
            if m.tools.is_none()
                && let Some(tools) = self.0.get(&m.name)
            {
                m.tools = Some(tools.clone());
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
        let mut learned = self.clone();
        for entry in listed {
            if grants.module(&entry.module).is_some() {
                learned
                    .0
                    .insert(entry.module, entry.tools.into_iter().collect());
            }
        }
        Some(learned.checked())
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
        let learned = Learned(
            [
                ("echo".to_owned(), ["echo".to_owned()].into()),
                ("avu".to_owned(), ["add".to_owned()].into()),
            ]
            .into(),
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
            r#"{"echo": ["echo", "bad.name", "tools"], "no.module": ["x"]}"#,
        )
        .unwrap();
        let read = Learned::read(dir.path());
        assert_eq!(
            read.0,
            [("echo".to_owned(), ["echo".to_owned()].into())].into()
        );
    }
}
