//! A call whose tool reports how far it has got: the caller listens on a subject of its own
//! (`mesh-progress.<module>.<user>.<token>`) and names it in `Mesh-Progress`.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::Value;
use tokio::sync::watch;

use super::{CallError, Client, PublishRuleError};
use crate::subjects::progress::{NO_USER, Rising, progress_subject, progress_token};
use crate::subjects::{FullName, Progress, ToolResult};

/// The longest a call waits to learn its own user name before going on without reports
/// (only the first: the name is kept). Generous, since a call that goes on without it goes
/// without reports, silently; a server that cannot say answers at once.
const USER_WITHIN: Duration = Duration::from_secs(5);

/// The longest one asking of the server for the name takes, however long its askers wait.
const ASK_WITHIN: Duration = Duration::from_secs(10);

impl Client {
    /// Calls a tool as [`Client::call`] does, keeping `progress` at the newest report the
    /// tool sent meanwhile: reports only ever grow, and one that cannot be read (too long,
    /// not a report) is passed over. Reports are best effort: a tool that sends none, or a
    /// credential that may not listen, leaves the call as it would be without them.
    pub async fn call_watched(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: &watch::Sender<Option<Progress>>,
    ) -> Result<ToolResult, CallError> {
        if self.on_behalf.is_some() {
            // Reports go to people only.
            return self.call(tool, args, deadline).await;
        }
        let user = self.own_user(deadline.min(USER_WITHIN)).await;
        let Some(subject) = progress_subject(tool.module(), &user, &progress_token()) else {
            return self.call(tool, args, deadline).await;
        };
        // Subscribed before the request goes, on the same connection: the server has the
        // subscription before the tool can report.
        let Ok(mut reports) = self.nats.subscribe(subject.clone()).await else {
            return self.call(tool, args, deadline).await;
        };
        let call = self.call_reporting(tool, args, deadline, Some(&subject));
        tokio::pin!(call);
        let mut rising = Rising::default();
        let mut read = |msg: async_nats::Message| match Progress::decode(&msg.payload) {
            Ok(p) if rising.admit(&p) => {
                progress.send_replace(Some(p));
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(%tool, "progress report passed over: {e}"),
        };
        let ended = loop {
            tokio::select! {
                biased;
                ended = &mut call => break ended,
                Some(msg) = reports.next() => read(msg),
            }
        };
        // Reports the module sent before its reply came on the same connection, so they are
        // here already: the last of them (often the one that says it is done) is read too.
        // (Unconstrained: tokio's budget would end the loop after 128 with more queued.)
        while let Some(Some(msg)) = tokio::task::unconstrained(reports.next()).now_or_never() {
            read(msg);
        }
        // Dropped, not unsubscribed and awaited: the unsubscription is queued either way, and
        // a bus that is gone cannot hold the answer back.
        drop(reports);
        ended
    }

    /// Asks the server for this connection's user name now, in the background, so that a
    /// relay's first call with reports does not wait for it.
    pub fn learn_user(&self) {
        if self.user.initialized() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.own_user(ASK_WITHIN).await;
        });
    }

    /// This connection's user name for progress subjects: asked of the server once (askers
    /// at the same time share the one asking); `_` when it will not say (kept), or cannot
    /// within `wait` (asked again next time).
    pub(crate) async fn own_user(&self, wait: Duration) -> String {
        if let Some(user) = self.user.get() {
            return user.clone();
        }
        let asked = self.user.get_or_try_init(|| async {
            match self.user_name(ASK_WITHIN).await {
                Ok(user) if user.is_empty() => Ok(NO_USER.to_owned()),
                Ok(user) => Ok(user),
                // The server will not say (an old server, a credential that may not ask):
                // `_` for good, rather than a request (and a violation) on every call.
                Err(e @ (PublishRuleError::NotAnswered | PublishRuleError::NotPermitted)) => {
                    tracing::debug!("own user name unknown, so no progress reports: {e}");
                    Ok(NO_USER.to_owned())
                }
                Err(e) => Err(e),
            }
        });
        match tokio::time::timeout(wait, asked).await {
            Ok(Ok(user)) => user.clone(),
            Ok(Err(e)) => {
                tracing::debug!("own user name unknown for now, so no progress reports: {e}");
                NO_USER.to_owned()
            }
            Err(_) => {
                tracing::debug!(
                    "own user name not known within {wait:?}, so no progress reports for now"
                );
                NO_USER.to_owned()
            }
        }
    }
}
