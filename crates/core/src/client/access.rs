//! The one interface every surface stands on: list (discover), describe (a module's tools)
//! and call. Implemented by the bus (`Client`), a running console (`mesh::console::Console`)
//! and the command line's choice of the two (`mesh::cli::Reach`).

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use std::sync::Arc;

use super::typed::Listed;
use super::{CallError, Client, Discovery, TypedBy};
use crate::subjects::{FullName, ListedTool, Progress, ToolResult, ToolsReply};

/// What the command line and the MCP relay need from a mesh, however it is reached.
pub trait Access: Send + Sync {
    /// The catalogue's modules (or one), each with its tools or why they could not be had.
    fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> impl Future<Output = Result<Discovery, CallError>> + Send;

    /// One module's tools, as its `tools` verb answers.
    fn tools(
        &self,
        module: &str,
        deadline: Duration,
    ) -> impl Future<Output = Result<ToolsReply, CallError>> + Send;

    /// One module's tools as a typed call reads them ([`super::TypedCall`]): as its `tools`
    /// verb answers, where the way to the mesh keeps nothing of them.
    fn listing(
        &self,
        module: &str,
        deadline: Duration,
        use_kept: bool,
    ) -> impl Future<Output = Result<Listed, CallError>> + Send {
        let _ = use_kept;
        async move {
            let reply = self.tools(module, deadline).await?;
            Ok(Listed {
                tools: reply.tools.iter().map(ListedTool::of).collect(),
                digest: None,
                kept: false,
                unlisted: Vec::new(),
            })
        }
    }

    /// A way to the mesh whose calls name the tools of `digest` (`Mesh-Tools`); none where
    /// calls cannot carry it.
    fn typed_by(&self, digest: &str) -> Option<(Self, Arc<TypedBy>)>
    where
        Self: Sized,
    {
        let _ = digest;
        None
    }

    /// After a call typed by `typed_by`: its tools kept for the next call if the module said
    /// they are its own, else forgotten.
    fn keep_checked(&self, module: &str, typed_by: &TypedBy) {
        let _ = (module, typed_by);
    }

    /// The same way to the mesh, its tool calls offered as task `id` (`Mesh-Task`); none
    /// where calls cannot carry it.
    fn offering(&self, id: &str) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = id;
        None
    }

    /// The bus client tasks are made, read, answered and cancelled with (`task.rs`), where
    /// this way to the mesh is the bus itself.
    fn tasks(&self) -> Option<&Client> {
        None
    }

    /// `tool` acts for the caller: its calls are to carry a ticket.
    fn expect_ticket(&self, tool: &FullName) {
        let _ = tool;
    }

    /// One call of one tool.
    fn call(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> impl Future<Output = Result<ToolResult, CallError>> + Send;

    /// One call of one tool, keeping `progress` at the newest report the tool sent while it
    /// ran; a way to the mesh that carries no reports just calls.
    fn call_watched(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: &watch::Sender<Option<Progress>>,
    ) -> impl Future<Output = Result<ToolResult, CallError>> + Send {
        let _ = progress;
        self.call(tool, args, deadline)
    }

    /// `error`, told apart when nobody answered: if the tool's module answers its tools verb
    /// (within `within`) and has the tool, the silence is the bus dropping the call — not
    /// this connection's to make (`Unreached`, read as denied) — rather than nobody serving.
    fn told_apart(
        &self,
        tool: &FullName,
        error: CallError,
        within: Duration,
    ) -> impl Future<Output = CallError> + Send {
        async move {
            if !matches!(error, CallError::NobodyServes { .. }) {
                return error;
            }
            match self.tools(tool.module(), within).await {
                Ok(reply) if reply.tools.iter().any(|t| t.name == tool.tool()) => {
                    CallError::Unreached {
                        target: tool.to_string(),
                        module: tool.module().to_owned(),
                    }
                }
                _ => error,
            }
        }
    }
}

impl Access for Client {
    async fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Discovery, CallError> {
        Client::discover(self, module, deadline).await
    }

    async fn tools(&self, module: &str, deadline: Duration) -> Result<ToolsReply, CallError> {
        Client::tools(self, module, deadline).await
    }

    async fn listing(
        &self,
        module: &str,
        deadline: Duration,
        use_kept: bool,
    ) -> Result<Listed, CallError> {
        let kept = self.kept();
        if use_kept
            && let Some(digest) = kept.digest_of(module)
            && let Some(tools) = kept.get(&digest)
        {
            return Ok(Listed {
                tools,
                digest: Some(digest),
                kept: true,
                unlisted: Vec::new(),
            });
        }
        let listing = self.listing_of(module, deadline).await?;
        let digest = kept.keep(module, None, &listing.tools);
        Ok(Listed {
            tools: listing.tools,
            digest,
            kept: false,
            unlisted: Vec::new(),
        })
    }

    fn typed_by(&self, digest: &str) -> Option<(Self, Arc<TypedBy>)> {
        Some(Client::typed_by(self, digest))
    }

    fn keep_checked(&self, module: &str, typed_by: &TypedBy) {
        if typed_by.checked() {
            self.kept().confirm(module, typed_by.digest());
        } else {
            self.kept().forget(module);
        }
    }

    fn expect_ticket(&self, tool: &FullName) {
        Client::expect_ticket(self, tool);
    }

    fn offering(&self, id: &str) -> Option<Self> {
        Some(Client::offering(self, id))
    }

    fn tasks(&self) -> Option<&Client> {
        Some(self)
    }

    async fn call(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> Result<ToolResult, CallError> {
        Client::call(self, tool, args, deadline).await
    }

    async fn call_watched(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: &watch::Sender<Option<Progress>>,
    ) -> Result<ToolResult, CallError> {
        Client::call_watched(self, tool, args, deadline, progress).await
    }
}
