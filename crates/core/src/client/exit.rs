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
