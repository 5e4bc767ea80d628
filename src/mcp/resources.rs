//! The relay's resources, resource templates, prompts and completions: each MCP method
//! passed to `mesh_core::client::Features`, which gathers them across the modules the
//! credential may ask and routes each request back to its module. Results pass through as
//! the modules wrote them; a module's refusal is the JSON-RPC error it said, and the mesh's
//! own failure kinds are internal errors naming the kind in `data` (`mesh/outcome`).
//!
//! The relay offers all three capabilities always: what a mesh has changes while a session
//! lasts, and an empty listing says "none now" where -32601 would say "never". Its results
//! are the credential's own (what it may read), so they are marked private, fresh for no
//! time (SEP-2549).

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CacheScope, CompleteRequestParams, CompleteResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, PaginatedRequestParams, PromptsCapability, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourcesCapability, ServerCapabilities,
};
use serde_json::{Map, Value, json};

use super::Relay;
use crate::console::OUTCOME_META;
use mesh_core::client::{Access, FeatureCallError, Features, ListKind};

/// Adds resources, prompts and completions to what the relay declares.
pub(crate) fn declare(capabilities: &mut ServerCapabilities) {
    capabilities.resources = Some(ResourcesCapability::default());
    capabilities.prompts = Some(PromptsCapability::default());
    capabilities.completions = Some(Map::new());
}

/// A failure as the JSON-RPC error the client gets.
fn error(e: FeatureCallError) -> McpError {
    match e {
        FeatureCallError::Refused { error } => {
            McpError::new(ErrorCode(error.code as i32), error.message, error.data)
        }
        FeatureCallError::Call(e) => McpError::internal_error(
            e.to_string(),
            Some(json!({ OUTCOME_META: e.outcome().name() })),
        ),
    }
}

/// A result the module wrote, read as the rmcp type the handler answers with.
///
/// A module's result says nothing of `resultType` (its reply is complete or a refusal): it is
/// complete, which 2026-07-28 says on the wire (rmcp leaves it out for older versions).
fn typed<T: serde::de::DeserializeOwned>(what: &str, mut value: Value) -> Result<T, McpError> {
    if let Value::Object(o) = &mut value {
        o.insert("resultType".into(), json!("complete"));
    }
    serde_json::from_value(value).map_err(|e| {
        McpError::internal_error(
            format!("a module's {what} does not read as MCP's: {e}"),
            None,
        )
    })
}

impl<A: Access + Features + Clone + 'static> Relay<A> {
    /// One page of a gathered listing, as the result object MCP names `key` in.
    async fn page(
        &self,
        kind: ListKind,
        request: Option<PaginatedRequestParams>,
    ) -> Result<Value, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let page = self
            .client
            .list(kind, cursor.as_deref(), self.options.list_timeout)
            .await
            .map_err(error)?;
        let mut result = Map::new();
        result.insert(kind.key().into(), Value::Array(page.items));
        if let Some(next) = page.next {
            result.insert("nextCursor".into(), Value::String(next));
        }
        Ok(Value::Object(result))
    }

    pub(crate) async fn resources_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourcesResult, McpError> {
        let page: ListResourcesResult =
            typed("resources", self.page(ListKind::Resources, request).await?)?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    pub(crate) async fn templates_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let page: ListResourceTemplatesResult = typed(
            "resource templates",
            self.page(ListKind::Templates, request).await?,
        )?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    pub(crate) async fn prompts_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListPromptsResult, McpError> {
        let page: ListPromptsResult =
            typed("prompts", self.page(ListKind::Prompts, request).await?)?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    pub(crate) async fn read(
        &self,
        request: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, McpError> {
        let read = Features::read(&self.client, &request.uri, self.options.call_timeout)
            .await
            .map_err(error)?;
        let mut result: ReadResourceResult = typed("resource", Value::Object(read))?;
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result.into())
    }

    pub(crate) async fn get(
        &self,
        request: GetPromptRequestParams,
    ) -> Result<GetPromptResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let got = Features::prompt(
            &self.client,
            &request.name,
            arguments,
            self.options.call_timeout,
        )
        .await
        .map_err(error)?;
        let result: GetPromptResult = typed("prompt", Value::Object(got))?;
        Ok(result.into())
    }

    pub(crate) async fn completion(
        &self,
        request: CompleteRequestParams,
    ) -> Result<CompleteResult, McpError> {
        let mut params = serde_json::to_value(&request).expect("params serialise");
        if let Value::Object(o) = &mut params {
            o.remove("_meta");
        }
        let completed = Features::complete(&self.client, params, self.options.list_timeout)
            .await
            .map_err(error)?;
        typed("completion", Value::Object(completed))
    }
}
