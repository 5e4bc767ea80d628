//! `ontology import URL`: an OBO file fetched from where it lives (the OBO Foundry's PURLs,
//! such as `http://purl.obolibrary.org/obo/pato.obo`, gzip or not) into a file beside the
//! index, with a progress bar on a terminal, then imported like any other file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether an import names a URL rather than a file.
pub fn is_url(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// A fetched file that is removed when dropped.
pub struct Fetched {
    pub path: PathBuf,
}

impl Drop for Fetched {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How long a fetch may wait for the server between bytes before it gives up.
const STALL: Duration = Duration::from_secs(60);

/// Fetches `url` into `dir` (named `.obo.gz` when its bytes are gzip, else `.obo`), showing
/// its bytes as they come on a terminal.
pub fn fetch(url: &str, dir: &Path) -> anyhow::Result<Fetched> {
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        // In the blocking client this bounds each read of the body, not the whole fetch.
        .timeout(STALL)
        .user_agent(concat!("mesh-decide/", env!("CARGO_PKG_VERSION")))
        .build()?;
    let mut response = client
        .get(url)
        .send()
        .map_err(|e| anyhow::anyhow!("cannot fetch {url}: {}", innermost(&e)))?;
    let status = response.status();
    if !status.is_success() {
        anyhow::bail!("cannot fetch {url}: the server answered {status}");
    }
    std::fs::create_dir_all(dir)?;
    let partial = dir.join(format!("fetching-{}.part", uuid::Uuid::new_v4()));
    let mut fetched = Fetched {
        path: partial.clone(),
    };
    let mut file = std::fs::File::create(&partial)?;
    let bar = match response.content_length() {
        Some(len) => ProgressBar::new(len).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, {eta} left",
            )
            .expect("a fixed template")
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
                .expect("a fixed template"),
        ),
    };
    bar.set_message(format!("fetching {url}"));
    let mut first = [0u8; 2];
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = response
            .read(&mut buf)
            .map_err(|e| anyhow::anyhow!("fetching {url} broke off: {e}"))?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if got < 2 {
                first[got] = b;
                got += 1;
            }
        }
        file.write_all(&buf[..n])?;
        bar.inc(n as u64);
    }
    file.flush()?;
    bar.finish_and_clear();
    let gzip = got == 2 && first == [0x1f, 0x8b];
    let named = partial.with_extension(if gzip { "obo.gz" } else { "obo" });
    std::fs::rename(&partial, &named)?;
    fetched.path = named;
    Ok(fetched)
}

/// The deepest cause of an error, once.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut at = e;
    while let Some(next) = at.source() {
        at = next;
    }
    at.to_string()
}
