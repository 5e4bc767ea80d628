//! The user's state directory and what the surfaces keep in it: the console's bearer token.

use std::path::{Path, PathBuf};

/// The console's token file in the state directory.
pub const CONSOLE_TOKEN_FILE: &str = "console.token";
/// An environment variable that gives the console and `mesh --console` the token instead of
/// the file (a service manager's secret, a test).
pub const CONSOLE_TOKEN_ENV: &str = "MESH_CONSOLE_TOKEN";

pub use mesh_core::runtime::default_state_dir as default_dir;

/// Where the console's token is: one per user of the machine, whichever console they run
/// (`mesh serve`, `mesh up`'s), so `mesh --console` finds it without being told.
pub fn console_token_path() -> PathBuf {
    default_dir().join(CONSOLE_TOKEN_FILE)
}

/// The token a console requires, made on first use (readable by its owner only), so that
/// another user of the machine cannot call tools as the console's owner.
pub fn console_token() -> std::io::Result<String> {
    if let Some(token) = std::env::var(CONSOLE_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
    {
        return Ok(token);
    }
    let path = console_token_path();
    match read_token(&path) {
        Ok(t) => return Ok(t),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    // Two consoles starting together end with one token.
    if mesh_core::runtime::request_state::create_once(&path, token.as_bytes())? {
        Ok(token)
    } else {
        read_token(&path)
    }
}

/// The token `mesh --console` sends: `$MESH_CONSOLE_TOKEN`, else the file, else none.
pub fn client_console_token() -> Option<String> {
    std::env::var(CONSOLE_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| read_token(&console_token_path()).ok())
}

fn read_token(path: &Path) -> std::io::Result<String> {
    let token = std::fs::read_to_string(path)?.trim().to_owned();
    if token.is_empty() {
        return Err(std::io::Error::other(format!(
            "{} is empty: remove it to have a new token made",
            path.display()
        )));
    }
    Ok(token)
}
