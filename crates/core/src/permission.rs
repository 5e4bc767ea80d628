//! nats-server's permission rules for subjects: allow/deny lists and wildcard matching, as
//! the server applies them (the audit reads configurations with them; the client reads its
//! own publish rule).

/// An allow/deny list for one direction. `allow: None` allows everything not denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
}

impl Rule {
    /// The server's rule: allowed when some allow pattern matches (or there is no allow
    /// list), and no deny pattern does; deny wins.
    pub fn permits(&self, subject: &str) -> bool {
        let allowed = match &self.allow {
            None => true,
            Some(list) => list.iter().any(|p| matches(p, subject)),
        };
        allowed && !self.deny.iter().any(|p| matches(p, subject))
    }
}

/// Whether `pattern` (with `*` and `>`) matches the literal subject `subject`.
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether every subject `inner` can match is matched by `outer` (for patterns on both sides).
pub fn covers(outer: &str, inner: &str) -> bool {
    let mut o = outer.split('.');
    let mut i = inner.split('.');
    loop {
        match (o.next(), i.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}
