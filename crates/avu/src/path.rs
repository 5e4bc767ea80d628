//! Object paths: normalised before anything else, and who may write where (`/<zone>/home/<user>`
//! and the configured shared roots).

/// A path that cannot be normalised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path {0:?} is not absolute: it must start with /")]
    Relative(String),
    #[error("path {0:?} holds a control character")]
    Control(String),
    #[error("path is {0} bytes long, more than the 1024 allowed")]
    TooLong(usize),
}

/// Longest path accepted, in bytes, before normalising.
const MAX_PATH: usize = 1024;

/// Absolute, `.` and `..` resolved (`..` at the root stays at the root), repeated and
/// trailing slashes removed: `/a//b/./c/../` → `/a/b`.
pub fn normalise(path: &str) -> Result<String, PathError> {
    if path.len() > MAX_PATH {
        return Err(PathError::TooLong(path.len()));
    }
    if path.chars().any(char::is_control) {
        return Err(PathError::Control(path.to_owned()));
    }
    if !path.starts_with('/') {
        return Err(PathError::Relative(path.to_owned()));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Whether `path` is `root` or below it (both normalised).
fn under(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Where people may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub zone: String,
    /// Normalised roots everybody with an identity may write under.
    pub shared_roots: Vec<String>,
}

impl Access {
    /// The home of `user`: `/<zone>/home/<user>`.
    pub fn home(&self, user: &str) -> String {
        format!("/{}/home/{user}", self.zone)
    }

    /// Whether `user` may write on the normalised `path`.
    pub fn may_write(&self, user: &str, path: &str) -> bool {
        // A user name that is not one path segment could reach past its home.
        let plain = !user.is_empty() && !user.contains('/') && user != "." && user != "..";
        (plain && under(path, &self.home(user)))
            || self.shared_roots.iter().any(|root| under(path, root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_every_spelling() {
        for (given, want) in [
            ("/mesh/home/ann", "/mesh/home/ann"),
            ("/mesh/home/ann/", "/mesh/home/ann"),
            ("//mesh///home//ann//x", "/mesh/home/ann/x"),
            ("/mesh/home/ann/./x/.", "/mesh/home/ann/x"),
            ("/mesh/home/bob/../ann/x", "/mesh/home/ann/x"),
            ("/../../mesh/home/ann", "/mesh/home/ann"),
            ("/mesh/home/ann/../../../..", "/"),
            ("/", "/"),
        ] {
            assert_eq!(normalise(given).unwrap(), want, "{given}");
        }
        assert_eq!(
            normalise("mesh/home/ann"),
            Err(PathError::Relative("mesh/home/ann".into()))
        );
        assert!(matches!(
            normalise("/mesh/home/ann\n/x"),
            Err(PathError::Control(_))
        ));
        assert!(matches!(
            normalise(&"/a".repeat(600)),
            Err(PathError::TooLong(1200))
        ));
    }

    #[test]
    fn writes_only_home_and_shared_roots() {
        let access = Access {
            zone: "mesh".into(),
            shared_roots: vec!["/mesh/projects/shared".into()],
        };
        let may = |user: &str, path: &str| access.may_write(user, &normalise(path).unwrap());
        assert!(may("ann", "/mesh/home/ann"));
        assert!(may("ann", "/mesh/home/ann/data/x.csv"));
        assert!(may("ann", "/mesh/home/bob/../ann/x"));
        assert!(may("ann", "/mesh/projects/shared/x"));
        assert!(!may("ann", "/mesh/home/bob/x"));
        assert!(!may("ann", "/mesh/home/ann/../bob/x"));
        assert!(
            !may("ann", "/mesh/home/annabel/x"),
            "a prefix is not a home"
        );
        assert!(!may("ann", "/mesh/home"));
        assert!(!may("ann", "/mesh/projects/shared2"));
        assert!(!may("ann", "/other/home/ann"));
        assert!(!may("..", "/mesh/x"));
        assert!(!may("", "/mesh/home/x"));
    }
}
