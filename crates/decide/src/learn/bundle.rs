//! Learned bundles on disk: `bundles/<version>/` holds `manifest.json` (backend, questions
//! lock, what was fitted), `artifacts.json` (the parameters) and `metrics.json`; the file
//! `bundles/CURRENT` names the promoted version and `bundles/promotions.jsonl` records each
//! promotion. A version, once written, is never changed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::logistic::{predict, sigmoid};
use super::metrics::Metrics;
use crate::backend::Level;
use mesh_core::subjects::catalog::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("bundle {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("bundle {path}: {why}")]
    Malformed { path: String, why: String },
    #[error("no bundle version {0} (see mesh decide learn list)")]
    NoVersion(String),
    #[error("no bundle has been fitted yet: run mesh decide learn fit")]
    NoneFitted,
    #[error(
        "bundle {version} was fitted on backend {fitted}, and this decide runs {running}: fit again with this backend"
    )]
    OtherBackend {
        version: String,
        fitted: String,
        running: String,
    },
    #[error(
        "bundle {version} was fitted against questions lock {fitted}, and this decide has {running}: fit again"
    )]
    OtherLock {
        version: String,
        fitted: String,
        running: String,
    },
    #[error(
        "not promoting {version}: the bundle in use, {current}, cannot be read ({why}), so nothing can say whether {version} is better; --force promotes it anyway"
    )]
    CannotCompare {
        version: String,
        current: String,
        why: String,
    },
    #[error("not promoting {version}: {}; --force promotes it anyway", reasons.join("; "))]
    Worse {
        version: String,
        reasons: Vec<String>,
    },
}

/// What was fitted for one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fitted {
    /// The level answers get: L1 or L2.
    pub level: Level,
    pub labels: usize,
    pub cards: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: String,
    pub created_ms: u64,
    pub backend: String,
    pub questions_lock: String,
    /// Question key → what was fitted.
    pub questions: BTreeMap<String, Fitted>,
    /// Question key → why nothing was fitted.
    pub skipped: BTreeMap<String, String>,
}

/// One question's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Platt scaling of the backend's logit z: p = σ(a·z + b), as `[a, b]`.
    pub l1: Vec<f64>,
    /// The head over the backend's features: weights, then the bias.
    pub l2: Vec<f64>,
}

impl Artifact {
    pub fn p_l1(&self, z: f64) -> f64 {
        sigmoid(self.l1[0] * z + self.l1[1])
    }

    pub fn p_l2(&self, features: &[f64]) -> Option<f64> {
        (features.len() + 1 == self.l2.len()).then(|| predict(&self.l2, features))
    }
}

/// A bundle as loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    pub manifest: Manifest,
    pub artifacts: BTreeMap<String, Artifact>,
    /// Question key → level → leave-one-card-out metrics.
    pub metrics: BTreeMap<String, BTreeMap<String, Metrics>>,
}

impl Bundle {
    pub fn version(&self) -> &str {
        &self.manifest.version
    }

    /// Refuses a bundle fitted on another backend or questions lock.
    pub fn check(&self, backend: &str, lock: &str) -> Result<(), BundleError> {
        if self.manifest.backend != backend {
            return Err(BundleError::OtherBackend {
                version: self.version().into(),
                fitted: self.manifest.backend.clone(),
                running: backend.into(),
            });
        }
        if self.manifest.questions_lock != lock {
            return Err(BundleError::OtherLock {
                version: self.version().into(),
                fitted: self.manifest.questions_lock.clone(),
                running: lock.into(),
            });
        }
        Ok(())
    }

    /// The metrics of a question at the level it answers with.
    pub(crate) fn chosen(&self, key: &str) -> Option<&Metrics> {
        let level = self.manifest.questions.get(key)?.level;
        self.metrics.get(key)?.get(level.name())
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, BundleError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|e| BundleError::Malformed {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

/// The versions in `dir`, oldest first (`v1`, `v2`, …).
pub fn versions(dir: &Path) -> Vec<String> {
    let mut found: Vec<(u64, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix('v')?.parse().ok()?;
            e.path().join("manifest.json").exists().then_some((n, name))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, v)| v).collect()
}

/// Writes a new version (into a temporary directory renamed into place, so a half-written
/// bundle is never seen) and returns its name.
pub fn write(
    dir: &Path,
    mut manifest: Manifest,
    artifacts: &BTreeMap<String, Artifact>,
    metrics: &BTreeMap<String, BTreeMap<String, Metrics>>,
) -> Result<String, BundleError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let next = versions(dir)
        .last()
        .and_then(|v| v[1..].parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    let version = format!("v{next}");
    manifest.version = version.clone();
    let tmp = dir.join(format!(".{version}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    for (name, value) in [
        ("manifest.json", serde_json::to_value(&manifest)),
        ("artifacts.json", serde_json::to_value(artifacts)),
        ("metrics.json", serde_json::to_value(metrics)),
    ] {
        let path = tmp.join(name);
        let text = serde_json::to_string_pretty(&value.expect("bundle parts serialise"))
            .expect("JSON values serialise");
        std::fs::write(&path, text + "\n").map_err(io(&path))?;
    }
    let target = dir.join(&version);
    std::fs::rename(&tmp, &target).map_err(io(&target))?;
    Ok(version)
}

pub fn load(dir: &Path, version: &str) -> Result<Bundle, BundleError> {
    let at = dir.join(version);
    if !at.join("manifest.json").exists() {
        return Err(BundleError::NoVersion(version.into()));
    }
    let manifest: Manifest = read_json(&at.join("manifest.json"))?;
    let artifacts: BTreeMap<String, Artifact> = read_json(&at.join("artifacts.json"))?;
    let metrics = read_json(&at.join("metrics.json"))?;
    for (key, a) in &artifacts {
        if a.l1.len() != 2 || a.l1.iter().chain(&a.l2).any(|v| !v.is_finite()) {
            return Err(BundleError::Malformed {
                path: at.join("artifacts.json").display().to_string(),
                why: format!("{key}: parameters must be finite numbers, l1 two of them"),
            });
        }
    }
    Ok(Bundle {
        manifest,
        artifacts,
        metrics,
    })
}

fn current_file(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

/// The promoted version, if any.
pub fn current(dir: &Path) -> Option<String> {
    std::fs::read_to_string(current_file(dir))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// What a promotion did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Promotion {
    pub version: String,
    pub from: Option<String>,
    pub forced: bool,
    /// Why it would have been refused, when forced.
    pub overridden: Vec<String>,
}

/// How a promotion judges a bundle: the backend and questions lock it must have been
/// fitted on, and how it compares with the one in use — both on the same labels (`judge`
/// gives the reasons the new one is worse).
pub struct Judge<'a> {
    pub backend: &'a str,
    pub lock: &'a str,
    pub judge: &'a Comparison<'a>,
}

/// Why the first bundle is worse than the second (none: it is not), or why the two cannot
/// be compared.
pub type Comparison<'a> = dyn Fn(&Bundle, &Bundle) -> Result<Vec<String>, super::LearnError> + 'a;

/// Makes `version` (the newest when `None`) the current bundle unless it would be refused
/// where it runs (another backend or questions lock) or is worse than the current one on
/// the same labels; `force` promotes a worse one, or one nothing can compare, anyway, and
/// the record says so.
pub fn promote(
    dir: &Path,
    version: Option<&str>,
    force: bool,
    judge: &Judge<'_>,
) -> Result<Promotion, BundleError> {
    let version = match version {
        Some(v) => v.to_owned(),
        None => versions(dir).pop().ok_or(BundleError::NoneFitted)?,
    };
    let new = load(dir, &version)?;
    // A bundle a running decide would refuse is not promoted, forced or not.
    new.check(judge.backend, judge.lock)?;
    let from = current(dir);
    let reasons = match &from {
        Some(old) if *old != version => match load(dir, old) {
            Ok(old) => match (judge.judge)(&new, &old) {
                Ok(reasons) => reasons,
                Err(why) => vec![format!(
                    "the two cannot be compared on the same labels: {why}"
                )],
            },
            Err(e) if force => vec![format!("the bundle in use, {old}, cannot be read: {e}")],
            Err(e) => {
                return Err(BundleError::CannotCompare {
                    version,
                    current: old.clone(),
                    why: e.to_string(),
                });
            }
        },
        _ => Vec::new(),
    };
    if !reasons.is_empty() && !force {
        return Err(BundleError::Worse { version, reasons });
    }
    let tmp = dir.join(".CURRENT.tmp");
    std::fs::write(&tmp, format!("{version}\n")).map_err(io(&tmp))?;
    std::fs::rename(&tmp, current_file(dir)).map_err(io(dir))?;
    let promotion = Promotion {
        version,
        from,
        forced: force && !reasons.is_empty(),
        overridden: reasons,
    };
    let log = dir.join("promotions.jsonl");
    let mut record = serde_json::to_value(&promotion).expect("serialises");
    record["at_ms"] = now_ms().into();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(io(&log))?;
    writeln!(f, "{record}").map_err(io(&log))?;
    Ok(promotion)
}
