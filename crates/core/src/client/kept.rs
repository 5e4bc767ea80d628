//! The tools a client has read, kept by their digest ([`tools_digest`]): discovery and
//! `mesh call` read a module's schemas once per change of its tools, not on every use. In
//! memory for a relay's life; on disk too for the command line, one process per command.
//!
//! Kept by content: a listing is stored under a digest only when it has that digest, so a
//! catalogue or module that lies about a digest cannot put its tools under another's name,
//! and a file changed on disk is dropped when read, not believed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::subjects::catalog::{MAX_KNOWN, is_digest};
use crate::subjects::{ListedTool, tools_digest};

/// The most listings kept on disk, and the most bytes they take; past either the least
/// recently written go (a module that registers new tools again and again cannot fill the
/// disk).
const MAX_FILES: usize = 512;
const MAX_BYTES: u64 = 32 << 20;

/// The largest listing file read back (a module's tools fit one bus message).
const MAX_FILE: u64 = 64 << 20;

/// Listings by digest, and for each module the digest it last had.
#[derive(Debug, Default)]
pub struct Kept {
    memory: Mutex<Memory>,
    dir: Option<PathBuf>,
    /// Where the digests modules confirmed are kept on disk: apart for each mesh (see
    /// [`Kept::for_mesh`]).
    modules: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct Memory {
    listings: HashMap<String, Arc<[ListedTool]>>,
    modules: HashMap<String, String>,
}

impl Kept {
    /// Kept on disk under `dir` as well (created when first written).
    pub fn on_disk(dir: PathBuf) -> Kept {
        Kept {
            memory: Mutex::default(),
            modules: Some(dir.join("modules")),
            dir: Some(dir),
        }
    }

    /// The digests modules confirm kept apart for the mesh `mesh` names (its bus and the
    /// person on it): a module of the same name on another bus, or as another person sees
    /// it, may have other tools, and a call typed by them would reach a module that does not
    /// check. Listings stay shared: they are kept by their content.
    pub fn for_mesh(mut self, mesh: &str) -> Kept {
        use sha2::Digest;
        let named: String = sha2::Sha256::digest(mesh.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.modules = self.dir.as_ref().map(|d| d.join("modules").join(named));
        self
    }

    /// Where the command line keeps listings: `$XDG_CACHE_HOME/mesh/tools`, else
    /// `~/.cache/mesh/tools`; `None` when neither is set.
    pub fn default_dir() -> Option<PathBuf> {
        let absolute = |var: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        absolute("XDG_CACHE_HOME")
            .or_else(|| absolute("HOME").map(|h| h.join(".cache")))
            .map(|d| d.join("mesh").join("tools"))
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The digests kept, at most [`MAX_KNOWN`]: what a listing request says it knows.
    pub fn known(&self) -> Vec<String> {
        let mut known: HashSet<String> = self.memory().listings.keys().cloned().collect();
        if let Some(dir) = &self.dir
            && let Ok(entries) = std::fs::read_dir(dir)
        {
            known.extend(
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
                    .filter(|d| is_digest(d)),
            );
        }
        known.into_iter().take(MAX_KNOWN).collect()
    }

    /// The tools kept under `digest`, from memory or disk.
    pub fn get(&self, digest: &str) -> Option<Arc<[ListedTool]>> {
        if let Some(tools) = self.memory().listings.get(digest) {
            return Some(tools.clone());
        }
        let tools = self.read_file(digest)?;
        let mut memory = self.memory();
        if memory.listings.len() < MAX_KNOWN {
            memory.listings.insert(digest.to_owned(), tools.clone());
        }
        Some(tools)
    }

    /// The digest `module` last had, as this client (or an earlier command) read it.
    pub fn digest_of(&self, module: &str) -> Option<String> {
        if let Some(d) = self.memory().modules.get(module) {
            return Some(d.clone());
        }
        let modules = self.modules.as_ref()?;
        crate::subjects::check_module(module).ok()?;
        let d = read_small(&modules.join(module), 64)?;
        let d = String::from_utf8(d).ok()?;
        let d = d.trim();
        if !is_digest(d) {
            return None;
        }
        // Remembered, so confirming it again writes nothing.
        let mut memory = self.memory();
        if memory.modules.len() < MAX_KNOWN {
            memory.modules.insert(module.to_owned(), d.to_owned());
        }
        Some(d.to_owned())
    }

    /// Keeps `tools` (`module`'s) under `digest` when that is their digest (said by a
    /// catalogue, or `None` to compute it); returns the digest they were kept under, or
    /// `None` when the one said is not theirs (they are then not kept).
    pub fn keep(
        &self,
        module: &str,
        digest: Option<&str>,
        tools: &Arc<[ListedTool]>,
    ) -> Option<String> {
        let computed = tools_digest(tools);
        if let Some(said) = digest.filter(|d| *d != computed) {
            tracing::warn!(%module, "a listing said its tools' digest is {said} but it is {computed}: not kept");
            return None;
        }
        let fresh = {
            let mut memory = self.memory();
            let fresh = !memory.listings.contains_key(&computed);
            if fresh && memory.listings.len() < MAX_KNOWN {
                memory.listings.insert(computed.clone(), tools.clone());
            }
            fresh
        };
        if let Some(dir) = &self.dir
            && fresh
            && !dir.join(format!("{computed}.json")).exists()
        {
            // The cache only saves round trips: a disk that cannot be written costs nothing
            // but them.
            if let Err(e) = write_listing(dir, &computed, tools) {
                tracing::debug!("cannot keep {module}'s tools in {}: {e}", dir.display());
            }
        }
        Some(computed)
    }

    /// `module` answered a call typed by the tools of `digest` and said they are its own
    /// (`Mesh-Tools`): the next command types its calls by them without asking.
    pub fn confirm(&self, module: &str, digest: &str) {
        let moved = {
            let mut memory = self.memory();
            let moved = memory.modules.get(module).map(String::as_str) != Some(digest);
            if moved && memory.modules.len() < MAX_KNOWN {
                memory.modules.insert(module.to_owned(), digest.to_owned());
            }
            moved
        };
        if let Some(modules) = &self.modules
            && moved
            && crate::subjects::check_module(module).is_ok()
        {
            let written = create_private_dir(modules)
                .and_then(|()| write_whole(&modules.join(module), digest.as_bytes()));
            if let Err(e) = written {
                tracing::debug!(
                    "cannot keep {module}'s digest in {}: {e}",
                    modules.display()
                );
            }
        }
    }

    /// `module` refused a call typed by the digest kept for it, or does not say whether it
    /// checks: its tools are asked before the next call.
    pub fn forget(&self, module: &str) {
        self.memory().modules.remove(module);
        if let Some(modules) = &self.modules
            && crate::subjects::check_module(module).is_ok()
        {
            let _ = std::fs::remove_file(modules.join(module));
        }
    }

    /// Forgets, in memory, the listings not among `seen` (what the last whole discovery
    /// found): a relay keeps what its mesh serves, not every version it ever saw.
    pub fn retain(&self, seen: &HashSet<String>) {
        let mut memory = self.memory();
        memory.listings.retain(|d, _| seen.contains(d));
        memory.modules.retain(|_, d| seen.contains(d));
    }

    fn read_file(&self, digest: &str) -> Option<Arc<[ListedTool]>> {
        if !is_digest(digest) {
            return None;
        }
        let path = self.dir.as_ref()?.join(format!("{digest}.json"));
        let bytes = read_small(&path, MAX_FILE)?;
        let tools: Vec<ListedTool> = match serde_json::from_slice(&bytes) {
            Ok(t) => t,
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        if tools_digest(&tools) != digest {
            // Changed since it was written: not believed, not kept.
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(tools.into())
    }
}

/// Writes a listing under its digest, and keeps the directory to [`MAX_FILES`] listings.
fn write_listing(dir: &Path, digest: &str, tools: &[ListedTool]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    let body = serde_json::to_vec(tools).map_err(std::io::Error::other)?;
    write_whole(&dir.join(format!("{digest}.json")), &body)?;
    prune(dir)
}

/// A regular file's bytes, at most `max` of them (a file larger, a FIFO, a device: none),
/// read through the handle that was checked.
fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// The cache's directories, the person's own (what they called is nobody else's business).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Written beside and renamed into place: a reader sees the old file or the new, whole.
fn write_whole(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(&tmp)?.write_all(body)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Removes the least recently written listings past [`MAX_FILES`] or [`MAX_BYTES`].
fn prune(dir: &Path) -> std::io::Result<()> {
    let mut listings: Vec<(std::time::SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    // Newest first: kept while both bounds hold.
    listings.sort_by_key(|l| std::cmp::Reverse(l.0));
    let mut bytes = 0;
    for (i, (_, len, path)) in listings.iter().enumerate() {
        bytes += len;
        if i >= MAX_FILES || bytes > MAX_BYTES {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(description: &str) -> Arc<[ListedTool]> {
        let raw = serde_json::value::to_raw_value(&serde_json::json!({
            "name": "t", "description": description, "inputSchema": {"type": "object"}
        }))
        .unwrap();
        vec![ListedTool::from_raw(raw).unwrap()].into()
    }

    #[test]
    fn a_digest_that_is_not_the_tools_is_not_kept() {
        let kept = Kept::default();
        let real = tools_digest(&tools("a"));
        assert_eq!(kept.keep("m", Some(&real), &tools("b")), None);
        assert!(kept.get(&real).is_none());
        assert_eq!(kept.keep("m", Some(&real), &tools("a")), Some(real.clone()));
        assert_eq!(kept.get(&real).unwrap()[0].description, "a");
        assert_eq!(kept.digest_of("m"), None, "kept, not yet confirmed by m");
        kept.confirm("m", &real);
        assert_eq!(kept.digest_of("m"), Some(real));
        kept.forget("m");
        assert_eq!(kept.digest_of("m"), None);
    }

    #[test]
    fn a_file_changed_on_disk_is_dropped_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let digest = Kept::on_disk(dir.path().into())
            .keep("m", None, &tools("a"))
            .unwrap();
        let path = dir.path().join(format!("{digest}.json"));
        let changed = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"a\"", "\"b\"");
        std::fs::write(&path, changed).unwrap();
        let later = Kept::on_disk(dir.path().into());
        assert!(later.known().contains(&digest));
        assert!(later.get(&digest).is_none());
        assert!(!path.exists());
    }

    #[test]
    fn another_process_reads_what_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = Kept::on_disk(dir.path().into());
        let digest = first.keep("m", None, &tools("a")).unwrap();
        first.confirm("m", &digest);
        let later = Kept::on_disk(dir.path().into());
        assert_eq!(later.digest_of("m"), Some(digest.clone()));
        assert_eq!(later.get(&digest).unwrap()[0].description, "a");
        later.forget("m");
        assert_eq!(Kept::on_disk(dir.path().into()).digest_of("m"), None);
        // A module name that could leave the directory is never written.
        first.confirm("../x", &digest);
        assert!(!dir.path().join("x").exists());
    }

    #[test]
    fn what_a_module_confirmed_on_one_mesh_is_not_taken_on_another() {
        let dir = tempfile::tempdir().unwrap();
        let here = Kept::on_disk(dir.path().into()).for_mesh("lab:4222\nann");
        let digest = here.keep("m", None, &tools("a")).unwrap();
        here.confirm("m", &digest);
        let again = Kept::on_disk(dir.path().into()).for_mesh("lab:4222\nann");
        assert_eq!(again.digest_of("m"), Some(digest.clone()));
        for other in ["lab:4222\nbob", "other:4222\nann"] {
            let there = Kept::on_disk(dir.path().into()).for_mesh(other);
            assert_eq!(there.digest_of("m"), None, "{other}");
            // The tools themselves are kept by content, for every mesh.
            assert_eq!(there.get(&digest).unwrap()[0].description, "a");
        }
    }
}
