//! The one interface both surfaces stand on: list (discover), describe (a module's tools)
//! and call. Two implementations: the bus (`Client`) and a running console (`Console`).

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::{CallError, Client, Discovery};
use crate::subjects::{FullName, Progress, ToolResult, ToolsReply};

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
