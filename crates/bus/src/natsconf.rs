//! A reader for nats-server's configuration format, as the server reads it (what the audit,
//! the grants file and the accounts layout's tests read): `#` and `//`
//! comments; `=`, `:` or whitespace between key and value; maps and arrays; quoted and bare
//! strings; numbers with units; booleans; `include`; `$variables` (block-scoped, then the
//! environment). Errors name the file, line and column; nothing is guessed.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
    }
}

/// A configuration value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Node>),
    /// Keys in the order written; a later key of the same name wins, as in the server.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// The value of `key` in a map (keys compare case-insensitively, as the server does).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries
                .iter()
                .rev()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn entries(&self) -> &[(String, Node)] {
        match &self.value {
            Value::Map(entries) => entries,
            _ => &[],
        }
    }
}

/// A configuration that cannot be read, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct ConfError {
    pub pos: Pos,
    pub message: String,
}

/// Reads a configuration file and the files it includes.
pub fn parse_file(path: &Path) -> Result<Node, ConfError> {
    parse_file_with(path, &|k| std::env::var(k).ok())
}

/// As [`parse_file`], with the environment given (for tests).
pub fn parse_file_with(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Node, ConfError> {
    let budget = Budget::default();
    let text = read_limited(path, &budget).map_err(|e| ConfError {
        pos: Pos {
            file: path.to_owned(),
            line: 0,
            col: 0,
        },
        message: format!("cannot read the file: {e}"),
    })?;
    parse_text(&text, path, env, &budget)
}

/// Parses configuration text as if it were the file `name` (for tests and tools).
pub fn parse_str(text: &str, name: &Path) -> Result<Node, ConfError> {
    let budget = Budget::default();
    budget.bytes.set(text.len() as u64);
    parse_text(text, name, &|k| std::env::var(k).ok(), &budget)
}

fn parse_text(
    text: &str,
    name: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    budget: &Budget,
) -> Result<Node, ConfError> {
    let mut parser = Parser {
        src: text.chars().collect(),
        at: 0,
        line: 1,
        col: 1,
        file: name.to_owned(),
        env,
        depth: 0,
        nesting: 0,
        budget,
    };
    let mut scopes = vec![Vec::new()];
    let start = parser.pos();
    let entries = parser.entries(None, &mut scopes)?;
    Ok(Node {
        value: Value::Map(entries),
        pos: start,
    })
}

/// Includes nested deeper than this are taken for a cycle.
const MAX_INCLUDE_DEPTH: usize = 16;
/// Includes in one configuration, all files together.
pub const MAX_INCLUDES: usize = 1024;
/// Blocks and lists nested deeper than this are refused (the parser recurses into them).
pub const MAX_NESTING: usize = 128;
/// The most a configuration may read, its includes and their includes together.
pub const MAX_BYTES: u64 = 16 << 20;
/// The most values a configuration may hold, variables' copies included: a few small files
/// that include each other, or variables made of variables, grow exponentially.
pub const MAX_VALUES: usize = 1_000_000;

/// What the whole reading may still use, shared by a file and everything it includes.
#[derive(Default)]
struct Budget {
    bytes: std::cell::Cell<u64>,
    values: std::cell::Cell<usize>,
    includes: std::cell::Cell<usize>,
}

/// How many values a value holds (itself included).
fn size(value: &Value) -> usize {
    match value {
        Value::Map(entries) => 1 + entries.iter().map(|(_, n)| size(&n.value)).sum::<usize>(),
        Value::Array(items) => 1 + items.iter().map(|n| size(&n.value)).sum::<usize>(),
        _ => 1,
    }
}

/// A name from the file, quoted in a message only when it looks like a name: whatever else
/// it is (a password hash in a file included by mistake) stays out of error messages.
fn shown(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        format!("{name:?}")
    } else {
        "(not shown)".to_owned()
    }
}

/// A variable's name for a message: `$NAME` when it looks like one.
fn shown_variable(name: &str) -> String {
    match shown(name).as_str() {
        "(not shown)" => "(a name not shown)".to_owned(),
        _ => format!("${name}"),
    }
}

/// Reads a file for the parser: a regular file, within what the budget has left.
fn read_limited(path: &Path, budget: &Budget) -> Result<String, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    // The kernel's own files look regular and may never end, or block (/proc/kmsg).
    let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|d| real.starts_with(d))
    {
        return Err("not a regular file (a kernel or device file)".into());
    }
    let left = MAX_BYTES.saturating_sub(budget.bytes.get());
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(|e| e.to_string())?
        .take(left + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > left {
        return Err(format!(
            "the configuration and its includes are larger than {MAX_BYTES} bytes together"
        ));
    }
    budget.bytes.set(budget.bytes.get() + text.len() as u64);
    Ok(text)
}

type Scope = Vec<(String, Node)>;

struct Parser<'e> {
    src: Vec<char>,
    at: usize,
    line: usize,
    col: usize,
    file: PathBuf,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// Includes above this file.
    depth: usize,
    /// Blocks and lists open around the current position.
    nesting: usize,
    budget: &'e Budget,
}

impl Parser<'_> {
    /// Counts `n` more values against the budget.
    fn spend(&self, n: usize, at: &Pos) -> Result<(), ConfError> {
        let used = self.budget.values.get().saturating_add(n);
        self.budget.values.set(used);
        if used > MAX_VALUES {
            return Err(ConfError {
                pos: at.clone(),
                message: format!(
                    "the configuration holds more than {MAX_VALUES} values (includes and variables counted as often as they are used)"
                ),
            });
        }
        Ok(())
    }

    fn pos(&self) -> Pos {
        Pos {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
        }
    }

    fn fail<T>(&self, message: impl Into<String>) -> Result<T, ConfError> {
        Err(ConfError {
            pos: self.pos(),
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.at).copied()
    }

    fn peek2(&self) -> Option<char> {
        self.src.get(self.at + 1).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// Skips blanks, newlines, comments, and the `,`/`;` terminators.
    fn skip_space(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\r' | '\n' | ',' | ';' => {
                    self.bump();
                }
                '#' => self.skip_line(),
                '/' if self.peek2() == Some('/') => self.skip_line(),
                _ => break,
            }
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.bump() {
            if c == '\n' {
                break;
            }
        }
    }

    /// Skips blanks on the current line only.
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\r')) {
            self.bump();
        }
    }

    /// Key–value pairs until `close` (or the end of the file when `None`).
    fn entries(
        &mut self,
        close: Option<char>,
        scopes: &mut Vec<Scope>,
    ) -> Result<Vec<(String, Node)>, ConfError> {
        let mut entries = Vec::new();
        loop {
            self.skip_space();
            match (self.peek(), close) {
                (None, None) => return Ok(entries),
                (None, Some(c)) => {
                    return self.fail(format!("expected {c:?} before the end of the file"));
                }
                (Some(c), Some(want)) if c == want => {
                    self.bump();
                    return Ok(entries);
                }
                (Some(c @ ('}' | ']')), _) => return self.fail(format!("unexpected {c:?}")),
                _ => {}
            }
            let key_pos = self.pos();
            let key = self.key()?;
            self.skip_blanks();
            match self.peek() {
                Some('=' | ':') => {
                    self.bump();
                    self.skip_blanks();
                }
                Some('{') => {}
                Some('\n' | '#' | ',' | ';') | None => {
                    return Err(ConfError {
                        pos: key_pos,
                        message: format!("key {} has no value", shown(&key)),
                    });
                }
                _ => {}
            }
            if key.eq_ignore_ascii_case("include") {
                let target = self.value(scopes)?;
                let Value::Str(path) = target.value else {
                    return Err(ConfError {
                        pos: target.pos,
                        message: "include needs a file name".into(),
                    });
                };
                let included = self.include(&path, &target.pos, scopes)?;
                for (k, v) in included {
                    scopes
                        .last_mut()
                        .expect("a scope")
                        .push((k.clone(), v.clone()));
                    entries.push((k, v));
                }
                continue;
            }
            let value = self.value(scopes)?;
            scopes
                .last_mut()
                .expect("a scope")
                .push((key.clone(), value.clone()));
            entries.push((key, value));
        }
    }

    fn include(
        &mut self,
        path: &str,
        at: &Pos,
        scopes: &mut Vec<Scope>,
    ) -> Result<Vec<(String, Node)>, ConfError> {
        if self.depth >= MAX_INCLUDE_DEPTH {
            return Err(ConfError {
                pos: at.clone(),
                message: format!("includes nest deeper than {MAX_INCLUDE_DEPTH} (a cycle?)"),
            });
        }
        let includes = self.budget.includes.get() + 1;
        self.budget.includes.set(includes);
        if includes > MAX_INCLUDES {
            return Err(ConfError {
                pos: at.clone(),
                message: format!("more than {MAX_INCLUDES} includes in one configuration"),
            });
        }
        let base = self.file.parent().unwrap_or(Path::new("."));
        let file = base.join(path);
        let text = read_limited(&file, self.budget).map_err(|e| ConfError {
            pos: at.clone(),
            message: format!("cannot include {}: {e}", file.display()),
        })?;
        let mut inner = Parser {
            src: text.chars().collect(),
            at: 0,
            line: 1,
            col: 1,
            file,
            env: self.env,
            depth: self.depth + 1,
            nesting: self.nesting,
            budget: self.budget,
        };
        // The included text is read in the including block's scope, like the server does.
        inner.entries(None, scopes)
    }

    fn key(&mut self) -> Result<String, ConfError> {
        match self.peek() {
            Some('"') | Some('\'') => self.quoted(),
            _ => {
                let start = self.at;
                while let Some(c) = self.peek() {
                    if c.is_whitespace()
                        || matches!(c, '=' | ':' | '{' | '}' | '[' | ']' | ',' | ';' | '#')
                    {
                        break;
                    }
                    self.bump();
                }
                if self.at == start {
                    return self.fail("expected a key here");
                }
                Ok(self.src[start..self.at].iter().collect())
            }
        }
    }

    fn value(&mut self, scopes: &mut Vec<Scope>) -> Result<Node, ConfError> {
        let pos = self.pos();
        self.spend(1, &pos)?;
        if matches!(self.peek(), Some('{' | '[')) {
            if self.nesting >= MAX_NESTING {
                return self.fail(format!(
                    "blocks and lists nest deeper than {MAX_NESTING} here"
                ));
            }
            self.nesting += 1;
        }
        let value = match self.peek() {
            None => return self.fail("expected a value before the end of the file"),
            Some('{') => {
                self.bump();
                scopes.push(Vec::new());
                let entries = self.entries(Some('}'), scopes);
                scopes.pop();
                self.nesting -= 1;
                Value::Map(entries?)
            }
            Some('[') => {
                self.bump();
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    match self.peek() {
                        None => return self.fail("expected ']' before the end of the file"),
                        Some(']') => {
                            self.bump();
                            break;
                        }
                        _ => items.push(self.value(scopes)?),
                    }
                }
                self.nesting -= 1;
                Value::Array(items)
            }
            Some('"') | Some('\'') => Value::Str(self.quoted()?),
            Some('(') => Value::Str(self.block()?),
            Some('$') => {
                self.bump();
                let name = self.bare();
                if name.is_empty() {
                    return Err(ConfError {
                        pos,
                        message: "'$' without a variable name".into(),
                    });
                }
                let found = scopes
                    .iter()
                    .rev()
                    .find_map(|scope| scope.iter().rev().find(|(k, _)| *k == name))
                    .map(|(_, v)| &v.value);
                match found {
                    Some(v) => {
                        // A copy costs what it holds: variables of variables add up.
                        self.spend(size(v), &pos)?;
                        v.clone()
                    }
                    None => match (self.env)(&name) {
                        Some(v) => classify(&v),
                        None => {
                            return Err(ConfError {
                                pos,
                                message: format!(
                                    "variable {} is not defined in this block or an enclosing one, nor in the environment",
                                    shown_variable(&name)
                                ),
                            });
                        }
                    },
                }
            }
            Some(_) => {
                let word = self.bare();
                if word.is_empty() {
                    return self.fail("expected a value here");
                }
                classify(&word)
            }
        };
        Ok(Node { value, pos })
    }

    /// A bare word: up to whitespace or a delimiter.
    fn bare(&mut self) -> String {
        let start = self.at;
        while let Some(c) = self.peek() {
            if c.is_whitespace() || matches!(c, ',' | ';' | '}' | ']' | '#') {
                break;
            }
            // `//` starts a comment only after a blank; inside a word it is part of it
            // (`nats-route://host:6222`).
            if c == '/' && self.peek2() == Some('/') && self.at == start {
                break;
            }
            self.bump();
        }
        self.src[start..self.at].iter().collect()
    }

    fn quoted(&mut self) -> Result<String, ConfError> {
        let start = self.pos();
        let quote = self.bump().expect("a quote");
        let mut out = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ConfError {
                        pos: start,
                        message: format!("string opened with {quote} is not closed"),
                    });
                }
                Some(c) if c == quote => return Ok(out),
                Some('\\') if quote == '"' => match self.bump() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some(other) => {
                        out.push('\\');
                        out.push(other);
                    }
                    None => {}
                },
                Some(c) => out.push(c),
            }
        }
    }

    /// `( … )`: a raw multi-line block.
    fn block(&mut self) -> Result<String, ConfError> {
        let start = self.pos();
        self.bump();
        let from = self.at;
        while let Some(c) = self.peek() {
            if c == ')' {
                let text = self.src[from..self.at].iter().collect::<String>();
                self.bump();
                return Ok(text.trim().to_owned());
            }
            self.bump();
        }
        Err(ConfError {
            pos: start,
            message: "block opened with '(' is not closed".into(),
        })
    }
}

/// What a bare word means: a boolean, a number (with a size unit), or a string.
fn classify(word: &str) -> Value {
    match word.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => return Value::Bool(true),
        "false" | "no" | "off" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(n) = word.parse::<i64>() {
        return Value::Int(n);
    }
    let digits_end = word
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(word.len());
    if digits_end > 0
        && let Ok(n) = word[..digits_end].parse::<i64>()
    {
        let factor = match word[digits_end..].to_ascii_uppercase().as_str() {
            "K" => Some(1_000),
            "KB" | "KI" | "KIB" => Some(1 << 10),
            "M" => Some(1_000_000),
            "MB" | "MI" | "MIB" => Some(1 << 20),
            "G" => Some(1_000_000_000),
            "GB" | "GI" | "GIB" => Some(1 << 30),
            "T" => Some(1_000_000_000_000),
            "TB" | "TI" | "TIB" => Some(1 << 40),
            _ => None,
        };
        if let Some(f) = factor {
            return Value::Int(n.saturating_mul(f));
        }
    }
    if word.contains('.')
        && !word.contains(':')
        && let Ok(f) = word.parse::<f64>()
    {
        return Value::Float(f);
    }
    Value::Str(word.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Node, ConfError> {
        parse_str(text, Path::new("test.conf"))
    }

    #[test]
    fn separators_comments_and_kinds() {
        let n = parse(
            "# comment\nport: 4222\nhost = 127.0.0.1 // trailing\nname \"a b\"\nmax_payload: 1MB; debug: true\nlisten: 127.0.0.1:4222\nratio 0.5\n",
        )
        .unwrap();
        assert_eq!(n.get("port").unwrap().value, Value::Int(4222));
        assert_eq!(n.get("host").unwrap().as_str(), Some("127.0.0.1"));
        assert_eq!(n.get("name").unwrap().as_str(), Some("a b"));
        assert_eq!(n.get("max_payload").unwrap().value, Value::Int(1 << 20));
        assert_eq!(n.get("debug").unwrap().value, Value::Bool(true));
        assert_eq!(n.get("listen").unwrap().as_str(), Some("127.0.0.1:4222"));
        assert_eq!(n.get("ratio").unwrap().value, Value::Float(0.5));
    }

    #[test]
    fn maps_arrays_and_subjects() {
        let n = parse(
            "accounts {\n  A: { users = [ {user: a, password: 'p'}, {user: \"b\"} ]\n exports [{service: mesh.>}] }\n}\n",
        )
        .unwrap();
        let a = n.get("accounts").unwrap().get("a").unwrap();
        let Value::Array(users) = &a.get("users").unwrap().value else {
            panic!()
        };
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].get("password").unwrap().as_str(), Some("p"));
        let Value::Array(exports) = &a.get("exports").unwrap().value else {
            panic!()
        };
        assert_eq!(exports[0].get("service").unwrap().as_str(), Some("mesh.>"));
    }

    #[test]
    fn crafted_files_end_in_clear_errors_without_their_text() {
        // Deep nesting: an error, not a stack overflow.
        for text in [
            format!("a: {}", "{ b: ".repeat(10_000)),
            format!("a: {}", "[".repeat(30_000)),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.message.contains("nest deeper than"), "{e}");
        }
        // Variables made of variables: exponential copies, refused by the value budget.
        let mut text = String::from("v0: [1, 2, 3, 4]\n");
        for i in 1..40 {
            let p = i - 1;
            text.push_str(&format!("v{i}: [$v{p}, $v{p}, $v{p}, $v{p}]\n"));
        }
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("more than"), "{e}");
        // A password hash where a value was expected is not quoted back.
        let e = parse("root: $6$salt$c2VjcmV0aGFzaA\n").unwrap_err();
        assert!(!e.to_string().contains("c2VjcmV0aGFzaA"), "{e}");
        let e = parse("$2a$11$c2VjcmV0aGFzaA: x\n}").unwrap_err();
        assert!(!e.to_string().contains("c2VjcmV0aGFzaA"), "{e}");
    }

    #[test]
    fn includes_are_bounded_and_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        // /dev/zero, and a directory: refused at once.
        for target in [
            "/dev/zero",
            "/proc/kmsg",
            "/proc/self/status",
            dir.path().to_str().unwrap(),
        ] {
            let main = dir.path().join("main.conf");
            std::fs::write(&main, format!("include \"{target}\"\n")).unwrap();
            let e = parse_file(&main).unwrap_err();
            assert!(e.message.contains("not a regular file"), "{e}");
        }
        // Sixteen small files, each including the next four times: refused, not 1.6 GB.
        for i in 0..16 {
            let next = format!("f{}.conf", i + 1);
            let body = if i == 15 {
                "x: 1\n".repeat(50)
            } else {
                format!("include \"{next}\"\n").repeat(4)
            };
            std::fs::write(dir.path().join(format!("f{i}.conf")), body).unwrap();
        }
        let e = parse_file(&dir.path().join("f0.conf")).unwrap_err();
        assert!(e.message.contains("more than"), "{e}");
    }

    #[test]
    fn variables_are_block_scoped_then_environment() {
        let n = parse_str(
            "PW: secret\nusers [ {user: a, password: $PW} ]\n",
            Path::new("t.conf"),
        )
        .unwrap();
        let Value::Array(users) = &n.get("users").unwrap().value else {
            panic!()
        };
        assert_eq!(users[0].get("password").unwrap().as_str(), Some("secret"));
        let e = parse("a { X: 1 }\nb: $X\n").unwrap_err();
        assert!(e.message.contains("variable $X is not defined"), "{e}");
        assert_eq!((e.pos.line, e.pos.col), (2, 4));
    }

    #[test]
    fn a_real_world_shape() {
        let text = r#"
# NATS server for the lab
server_name: lab-1
listen: 0.0.0.0:4222
http = 8222
max_payload = 8MB
ping_interval: "2m"
jetstream {
   store_dir: /data/js
   max_mem: 1G
   max_file = 100GB
}
tls {
  cert_file: "/etc/nats/server.pem"
  key_file:  "/etc/nats/key.pem"
  timeout: 2.5
}
cluster {
  name: lab
  listen: 0.0.0.0:6222
  routes = [
    nats-route://n2:6222
    nats-route://n3:6222
  ]
}
system_account: SYS
PEOPLE_PUBLISH = ["mesh.*.tools", "mesh.catalog.modules"]
accounts {
  SYS { users: [ { user: admin, password: $ADMIN_PASS } ] }
  MESH {
    jetstream: enabled
    users: [ { nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4 } ]
    exports: [ { service: "mesh.>", response_type: singleton } ]
  }
  PEOPLE {
    default_permissions: { publish: $PEOPLE_PUBLISH, subscribe: { deny: ">" } }
    users = [
      { user: "ann", password: "$2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy" }
    ]
    imports = [ { service: { account: MESH, subject: "mesh.>" }, share: true } ]
  }
}
"#;
        // $ADMIN_PASS comes from the environment; without it the reader says so.
        let e = parse_text(text, Path::new("lab.conf"), &|_| None, &Budget::default()).unwrap_err();
        assert!(
            e.message.contains("variable $ADMIN_PASS is not defined"),
            "{e}"
        );
        let env = |k: &str| (k == "ADMIN_PASS").then(|| "s3cret".to_owned());
        let n = parse_text(text, Path::new("lab.conf"), &env, &Budget::default()).unwrap();
        assert_eq!(n.get("max_payload").unwrap().value, Value::Int(8 << 20));
        let routes = n.get("cluster").unwrap().get("routes").unwrap();
        let Value::Array(routes) = &routes.value else {
            panic!()
        };
        assert_eq!(routes[1].as_str(), Some("nats-route://n3:6222"));
        let model = crate::audit::Model::read(&n).unwrap();
        let people = model.account("PEOPLE").unwrap();
        assert_eq!(
            people.users[0].permissions.publish.allow.as_deref(),
            Some(&["mesh.*.tools".to_owned(), "mesh.catalog.modules".to_owned()][..])
        );
        assert!(
            !people.users[0]
                .permissions
                .subscribe
                .permits("_INBOX.ann.x")
        );
    }

    #[test]
    fn malformed_files_name_line_and_column() {
        let cases = [
            ("a {\n  b: 1\n", "expected '}' before the end of the file"),
            ("a: \"open\n", "not closed"),
            ("a: 1\n}\n", "unexpected '}'"),
            ("a\n", "has no value"),
            ("a: [1, 2\n", "expected ']'"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.to_string().starts_with("test.conf:"), "{e}");
            assert!(e.message.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn includes_are_read_relative_to_the_including_file() {
        let dir = std::env::temp_dir().join(format!("mesh-conf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/auth.conf"), "users: [ {user: inc} ]\n").unwrap();
        std::fs::write(
            dir.join("main.conf"),
            "authorization {\n  include \"sub/auth.conf\"\n}\n",
        )
        .unwrap();
        let n = parse_file(&dir.join("main.conf")).unwrap();
        let Value::Array(users) = &n.get("authorization").unwrap().get("users").unwrap().value
        else {
            panic!()
        };
        assert_eq!(users[0].get("user").unwrap().as_str(), Some("inc"));
        std::fs::write(dir.join("loop.conf"), "include loop.conf\n").unwrap();
        let e = parse_file(&dir.join("loop.conf")).unwrap_err();
        assert!(e.message.contains("a cycle"), "{e}");
        let e = parse_str("include missing.conf\n", &dir.join("x.conf")).unwrap_err();
        assert!(e.message.contains("cannot include"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
