//! The exit codes of `mesh` and of modules' own commands, one per outcome a script must
//! tell apart.

use super::Outcome;

/// Exit codes, documented in `mesh --help` and README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// The tool answered with a result.
    Ok = 0,
    /// The tool ran and answered with an error.
    ToolError = 1,
    /// Bad usage, bad input, or no connection to the bus.
    Usage = 2,
    /// Nobody serves the tool.
    NobodyServes = 3,
    /// This credential may not call the tool.
    Denied = 4,
    /// The tool is served but did not answer in time.
    Slow = 5,
    /// The tool needs input that could not be asked for.
    NeedsInput = 6,
    /// The module is busy with this caller's other calls: try again later.
    Busy = 7,
    /// Interrupted (Ctrl-C): the call was given up, and its module told so. 128 + SIGINT, as
    /// a shell reports a process SIGINT ended.
    Interrupted = 130,
}

impl From<Outcome> for Exit {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Result => Exit::Ok,
            Outcome::ToolError => Exit::ToolError,
            Outcome::NobodyServes => Exit::NobodyServes,
            Outcome::Denied => Exit::Denied,
            Outcome::Slow => Exit::Slow,
            Outcome::Busy => Exit::Busy,
            Outcome::Connection => Exit::Usage,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// The table `mesh --help` prints.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  the tool answered with a result
  1  the tool ran and answered with an error
  2  usage, input or connection problem; for `mesh call`, also a tool its running module
     does not have, or arguments its input schema refuses (checked before the call)
  3  nobody serves the tool (not running or not installed)
  4  denied: this credential may not call the tool
  5  slow: the tool is served but did not answer in time
  6  the tool needs input that could not be asked for
  7  busy: the module is taking no more of your calls now (your share of it is in use, or
     your calls a minute are spent); the message says when to try again";

/// An error and its causes as one line for a person (`cannot read x.obo: No such file…`):
/// each cause after a colon, except one its error already says (a message written
/// `"cannot read {file}: {source}"` keeps its source in the chain too, and would say it
/// twice).
pub fn said(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod said_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read x.obo: {source}")]
    struct Read {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the import failed")]
    struct Import(#[source] Read);

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let e = Import(Read {
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
        assert_eq!(
            super::said(&e),
            "the import failed: cannot read x.obo: no such file"
        );
    }
}
