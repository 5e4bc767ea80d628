//! A JSON file `mesh up` writes from the grants file (at each start and reload), read again
//! whenever it changes: the callers' limits, who may call what.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::de::DeserializeOwned;

/// The file, and the last value read of it.
pub(crate) struct Watched<T> {
    path: PathBuf,
    read: Mutex<Option<(SystemTime, Arc<T>)>>,
}

impl<T: DeserializeOwned> Watched<T> {
    pub fn new(path: PathBuf) -> Watched<T> {
        Watched {
            path,
            read: Mutex::new(None),
        }
    }

    /// What the file says now, or why it cannot be read.
    pub fn get(&self) -> Result<Arc<T>, String> {
        let path = &self.path;
        let modified = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, value)) = &*read
            && *at == modified
        {
            return Ok(value.clone());
        }
        let value = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<T>(&b).map_err(|e| e.to_string()))
            .map(Arc::new)
            .map_err(|e| format!("{} does not read: {e}", path.display()))?;
        *read = Some((modified, value.clone()));
        Ok(value)
    }
}
