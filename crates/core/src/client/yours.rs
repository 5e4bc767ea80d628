//! Which tools are this credential's: its publish permissions as the server reports them
//! (`$SYS.REQ.USER.INFO`, nats-server 2.10+), read with the audit's own matching rules.

use std::time::Duration;

use serde::Deserialize;

use super::{CallError, Client};
use crate::permission::Rule;
use crate::subjects::USER_INFO;

#[derive(Deserialize)]
struct Reply {
    data: Option<Data>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    user: Option<String>,
    /// The user's name where `user` is their key (operator mode: their JWT's name;
    /// nats-server 2.14+).
    #[serde(default)]
    user_name: Option<String>,
    #[serde(default)]
    permissions: Option<Permissions>,
}

#[derive(Deserialize)]
struct Permissions {
    #[serde(default)]
    publish: Option<Direction>,
    #[serde(default)]
    subscribe: Option<Direction>,
}

#[derive(Deserialize)]
struct Direction {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
}

/// Why the server cannot say what this credential may publish.
#[derive(Debug, thiserror::Error)]
pub enum PublishRuleError {
    #[error("the server does not answer $SYS.REQ.USER.INFO (nats-server 2.10 or later does)")]
    NotAnswered,
    #[error(
        "this credential may not ask the server: $SYS.REQ.USER.INFO is not in its publish permissions"
    )]
    NotPermitted,
    #[error("the server did not say: {0}")]
    Failed(CallError),
    #[error("the server's answer to $SYS.REQ.USER.INFO is unreadable: {0}")]
    Unreadable(serde_json::Error),
    #[error("the server answered $SYS.REQ.USER.INFO with an error: {0}")]
    Refused(serde_json::Value),
    #[error("the server's answer to $SYS.REQ.USER.INFO has no data")]
    NoData,
}

impl Client {
    /// This connection's publish rule, or why the server cannot say (never a guess).
    pub async fn publish_rule(&self, deadline: Duration) -> Result<Rule, PublishRuleError> {
        self.rules(deadline).await.map(|(publish, _)| publish)
    }

    /// This connection's publish and subscribe rules, or why the server cannot say.
    pub async fn rules(&self, deadline: Duration) -> Result<(Rule, Rule), PublishRuleError> {
        let permissions = self.user_info(deadline).await?.permissions;
        let (publish, subscribe) = match permissions {
            Some(p) => (p.publish, p.subscribe),
            None => (None, None),
        };
        // No permissions in a direction: everything is allowed there.
        let rule = |d: Option<Direction>| match d {
            None => Rule::default(),
            Some(d) => Rule {
                allow: d.allow,
                deny: d.deny,
            },
        };
        Ok((rule(publish), rule(subscribe)))
    }

    /// This connection's user name as the server knows it (empty on a bus without users).
    /// In operator mode the server names a user by their key and says their name apart (their
    /// JWT's): the name, as the runtime names callers (`actor.rs`); one the auth callout let in
    /// is named in `user` by the name the callout gave.
    pub async fn user_name(&self, deadline: Duration) -> Result<String, PublishRuleError> {
        let data = self.user_info(deadline).await?;
        let user = data.user.unwrap_or_default();
        let is_key = user.len() == 56
            && user.starts_with('U')
            && nkeys::KeyPair::from_public_key(&user).is_ok();
        match data.user_name {
            Some(name) if is_key && !name.is_empty() && name != crate::actor::CALLOUT_SENTINEL => {
                Ok(name)
            }
            _ => Ok(user),
        }
    }

    async fn user_info(&self, deadline: Duration) -> Result<Data, PublishRuleError> {
        let msg = match self
            .request(&USER_INFO, USER_INFO, Vec::new(), deadline)
            .await
        {
            Ok(m) => m,
            Err(CallError::NobodyServes { .. }) => return Err(PublishRuleError::NotAnswered),
            Err(CallError::Denied { .. }) => return Err(PublishRuleError::NotPermitted),
            Err(e) => return Err(PublishRuleError::Failed(e)),
        };
        let reply: Reply =
            serde_json::from_slice(&msg.payload).map_err(PublishRuleError::Unreadable)?;
        if let Some(error) = reply.error {
            return Err(PublishRuleError::Refused(error));
        }
        reply.data.ok_or(PublishRuleError::NoData)
    }
}
