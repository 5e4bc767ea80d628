//! A call typed by its tool's schema, the same on every surface: the schema from the tools an
//! earlier call kept when the module said they were its own (the call then names their
//! digest, `Mesh-Tools`, and a module whose tools changed refuses it unrun), else asked of the
//! module; kept or forgotten by what the module answered; made once more, read afresh and
//! naming no digest, when the module's runtime refused it for changed tools. The surface
//! types the arguments and makes the call; this decides what it is typed by and whether it
//! goes again.

use std::sync::Arc;
use std::time::Duration;

use super::{Access, TypedBy};
use crate::subjects::{FullName, ListedTool, ticket};

/// A module's tools as a typed call reads them.
#[derive(Debug)]
pub struct Listed {
    pub tools: Arc<[ListedTool]>,
    /// Their digest, where the way to the mesh names it on calls (the bus).
    pub digest: Option<String>,
    /// Taken from what an earlier call kept, without asking the module.
    pub kept: bool,
    /// Tools the module has (its catalogue entry names them) that this way to the mesh does
    /// not list: a console lists only its credential's. A call of one goes untyped, for the
    /// bus to say whether it is the caller's.
    pub unlisted: Vec<String>,
}

/// What one attempt of a typed call is made by.
pub struct Typed<A> {
    /// The tool as its module lists it; none when the module did not give its tools in
    /// time (the call then goes untyped and its outcome says why).
    pub tool: Option<ListedTool>,
    /// Read from what was kept, not asked: arguments that do not fit may be the keeping's
    /// fault ([`TypedCall::stale`]).
    pub from_kept: bool,
    /// The client that names the tools the call was typed by; none: call with the plain one.
    pub caller: Option<A>,
    typed_by: Option<Arc<TypedBy>>,
}

impl<A> Typed<A> {
    /// Whether the module said, answering this attempt, that its tools are other than those
    /// the call was typed by (a round carrying answers then goes again naming none).
    pub fn tools_changed(&self) -> bool {
        self.typed_by.as_ref().is_some_and(|t| t.changed())
    }
}

/// The module is running and lists its tools, but not this one.
#[derive(Debug, thiserror::Error)]
#[error("module {} is running but has no tool {name}", name.module())]
pub struct NoSuchTool {
    pub name: FullName,
    /// The tools it has, by their full names (for a "did you mean").
    pub tools: Vec<String>,
}

/// One typed call's reading of its schema, attempt by attempt.
pub struct TypedCall<'a, A: Access> {
    client: &'a A,
    name: &'a FullName,
    within: Duration,
    use_kept: bool,
    /// Made again once already, after the module said its tools changed.
    again: bool,
    typed_by: Option<Arc<TypedBy>>,
}

impl<'a, A: Access + Sized> TypedCall<'a, A> {
    /// A typed call of `name` on `client`, its module's tools asked within `within`.
    pub fn new(client: &'a A, name: &'a FullName, within: Duration) -> Self {
        TypedCall {
            client,
            name,
            within,
            use_kept: true,
            again: false,
            typed_by: None,
        }
    }

    /// What the next attempt is typed by and made with.
    pub async fn read(&mut self) -> Result<Typed<A>, NoSuchTool> {
        let name = self.name;
        loop {
            let read = match self
                .client
                .listing(name.module(), self.within, self.use_kept)
                .await
            {
                Ok(read) => read,
                // A module that does not answer leaves the call to say why.
                Err(_) => {
                    self.typed_by = None;
                    return Ok(Typed {
                        tool: None,
                        from_kept: false,
                        caller: None,
                        typed_by: None,
                    });
                }
            };
            let Some(tool) = read.tools.iter().find(|t| t.name == name.tool()) else {
                // What was kept may be behind the module: asked before it is said.
                if read.kept {
                    self.use_kept = false;
                    continue;
                }
                // There, but not listed to this caller: the call says why.
                if read.unlisted.iter().any(|t| t == name.tool()) {
                    self.typed_by = None;
                    return Ok(Typed {
                        tool: None,
                        from_kept: false,
                        caller: None,
                        typed_by: None,
                    });
                }
                return Err(NoSuchTool {
                    name: name.clone(),
                    tools: read
                        .tools
                        .iter()
                        .map(|t| crate::subjects::full_name(name.module(), &t.name))
                        .collect(),
                });
            };
            // A tool that acts for the caller: its ticket is asked for before the first call.
            let acts = tool
                .to_spec()
                .ok()
                .and_then(|s| s.meta)
                .and_then(|m| m.get(ticket::ACTS_FOR_PEOPLE_META).cloned())
                .and_then(|v| v.as_bool())
                == Some(true);
            if acts {
                self.client.expect_ticket(name);
            }
            // Made again: read afresh and naming no digest (another instance may have other
            // tools still), so it goes through.
            let typed = read
                .digest
                .filter(|_| !self.again)
                .and_then(|d| self.client.typed_by(&d));
            let (caller, typed_by) = match typed {
                Some((c, t)) => (Some(c), Some(t)),
                None => (None, None),
            };
            self.typed_by = typed_by.clone();
            return Ok(Typed {
                tool: Some(tool.clone()),
                from_kept: read.kept,
                caller,
                typed_by,
            });
        }
    }

    /// The arguments did not fit a schema that was kept: the next attempt reads it afresh.
    pub fn stale(&mut self) {
        self.use_kept = false;
    }

    /// After an attempt: the tools it was typed by are kept (the module said they are its
    /// own) or forgotten (it did not check); `true` when the attempt is to be made again,
    /// once: `refused`, the module's runtime refused it unrun for other tools.
    pub fn again(&mut self, refused: bool) -> bool {
        let Some(typed_by) = self.typed_by.take() else {
            return false;
        };
        self.client.keep_checked(self.name.module(), &typed_by);
        if refused && typed_by.changed() && !self.again {
            self.again = true;
            self.use_kept = false;
            return true;
        }
        false
    }
}
