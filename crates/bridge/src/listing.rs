//! A server's `tools/list`, bounded: a server that pages for ever, lists more tools than any
//! module serves, or never answers is a failed listing, not a bridge that waits or grows.

use std::time::Duration;

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::{Peer, RoleClient, ServiceError};

/// The most pages, tools and time one listing may take.
const MAX_PAGES: usize = 64;
/// As many as the catalogue registers for one module: more could be served but never listed.
const MAX_TOOLS: usize = mesh_core::subjects::catalog::MAX_TOOLS;
const LIST_WITHIN: Duration = Duration::from_secs(30);

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("tools/list failed: {0}")]
    Service(#[from] ServiceError),
    #[error("tools/list went on past {MAX_PAGES} pages")]
    TooManyPages,
    #[error("tools/list named more than {MAX_TOOLS} tools")]
    TooManyTools,
    #[error("tools/list did not end within {LIST_WITHIN:?}")]
    Slow,
}

/// Every page of the server's tools.
pub async fn list(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, ListError> {
    let pages = async {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let page = peer.list_tools(Some(params)).await?;
            tools.extend(page.tools);
            if tools.len() > MAX_TOOLS {
                return Err(ListError::TooManyTools);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(ListError::TooManyPages)
    };
    tokio::time::timeout(LIST_WITHIN, pages)
        .await
        .unwrap_or(Err(ListError::Slow))
}
