//! `ontology import URL`: an OBO file fetched from where it lives (the OBO Foundry's PURLs,
//! such as `http://purl.obolibrary.org/obo/pato.obo`, gzip or not) into a file beside the
//! index, with a progress bar on a terminal, then imported like any other file (the OBO
//! reader tells gzip by its bytes).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use mesh_core::client::innermost;

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

/// Disk a fetch leaves free: a server that sends without end stops here, not at a full disk.
const RESERVE: u64 = 1 << 30;

/// The bytes free on the file system of `dir` (for an unprivileged process).
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the struct it is given; the path is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (r == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// Fetches `url` into a file in `dir`, showing its bytes as they come on a terminal. At most `max_bytes`, and never past leaving a
/// gigabyte of the disk free: a server that sends without end is stopped and said so.
pub fn fetch(url: &str, dir: &Path, max_bytes: u64) -> anyhow::Result<Fetched> {
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
    let room = free_bytes(dir).map_or(u64::MAX, |free| free.saturating_sub(RESERVE));
    let limit = max_bytes.min(room);
    if let Some(len) = response.content_length()
        && len > limit
    {
        anyhow::bail!(
            "{url} is {len} bytes: more than {limit} may be fetched here (--max-bytes {max_bytes}, a gigabyte of disk kept free)"
        );
    }
    let fetched = Fetched {
        path: dir.join(format!("fetched-{}.obo", uuid::Uuid::new_v4())),
    };
    let mut file = std::fs::File::create(&fetched.path)?;
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
    let mut written = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = response
            .read(&mut buf)
            .map_err(|e| anyhow::anyhow!("fetching {url} broke off: {e}"))?;
        if n == 0 {
            break;
        }
        if written + n as u64 > limit {
            bar.finish_and_clear();
            anyhow::bail!(
                "{url} sent more than {limit} bytes, the most that may be fetched here (--max-bytes {max_bytes}, a gigabyte of disk kept free); stopped"
            );
        }
        file.write_all(&buf[..n])?;
        written += n as u64;
        bar.inc(n as u64);
    }
    file.flush()?;
    bar.finish_and_clear();
    // gzip or not, the OBO reader tells by the bytes.
    Ok(fetched)
}
