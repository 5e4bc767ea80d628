//! One call driven through its `input_required` rounds, whoever answers: the tool asks, an
//! [`Asker`] answers (a person at a terminal, `--answer` values, another tool, an MCP client
//! asked by elicitation), and the call is made again with the answers and the tool's sealed
//! state, up to [`MAX_INPUT_ROUNDS`]. The command line and both MCP relays drive calls with
//! it; a 2026-07-28 client, which answers questions itself, gets the question back
//! ([`Asked::PassBack`]).

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::subjects::{
    KEY_INPUT_RESPONSES, KEY_REQUEST_STATE, MAX_INPUT_ROUNDS, ToolResult, continue_with,
};

/// What an asker made of one round's questions.
#[derive(Debug)]
pub enum Asked {
    /// The answers, keyed as the questions were.
    Answers(Map<String, Value>),
    /// Not answered here: the question goes back to the caller as the result (a 2026-07-28
    /// client answers it and calls again itself).
    PassBack,
}

/// Whoever answers a tool's questions.
pub trait Asker {
    /// Why a round's questions got no answers (the surface says it its own way).
    type Error;

    /// Answers one round's `requests` (`inputRequests`: key → `{method, params}`), asked by
    /// a call made with `arguments` (the caller's own, without the continuation keys).
    fn ask(
        &mut self,
        requests: &Map<String, Value>,
        arguments: &Map<String, Value>,
    ) -> impl Future<Output = Result<Asked, Self::Error>> + Send;
}

/// How a conversation ended, short of a result: `E` a round's call failing (the mesh's
/// failure kinds), `A` the asker's.
#[derive(Debug, thiserror::Error)]
pub enum Ended<E, A> {
    /// A round's call failed.
    #[error(transparent)]
    Call(E),
    /// The tool asked what could not be asked.
    #[error(transparent)]
    NotAsked(A),
    /// The tool kept asking.
    #[error("the tool still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped")]
    TooManyRounds,
}

/// Calls with `arguments` through `call` (one round each), handing each round's questions to
/// `asker`, until the tool gives a result, the asker passes the question back, or it ends.
pub async fn converse<F, Fut, E, K>(
    mut arguments: Map<String, Value>,
    mut call: F,
    asker: &mut K,
) -> Result<ToolResult, Ended<E, K::Error>>
where
    F: FnMut(Arc<Map<String, Value>>) -> Fut,
    Fut: Future<Output = Result<ToolResult, E>>,
    K: Asker,
{
    for _ in 0..=MAX_INPUT_ROUNDS {
        // Shared with the round, not copied into it: taken back once its future is done.
        let shared = Arc::new(std::mem::take(&mut arguments));
        let result = call(shared.clone()).await.map_err(Ended::Call);
        arguments = Arc::try_unwrap(shared).unwrap_or_else(|kept| (*kept).clone());
        let result = result?;
        if !result.needs_input() {
            return Ok(result);
        }
        let requests = result.input_requests.clone().unwrap_or_default();
        let mut asked = arguments.clone();
        asked.remove(KEY_REQUEST_STATE);
        asked.remove(KEY_INPUT_RESPONSES);
        match asker.ask(&requests, &asked).await {
            Ok(Asked::Answers(answers)) => {
                continue_with(&mut arguments, result.request_state.as_deref(), answers)
            }
            Ok(Asked::PassBack) => return Ok(result),
            Err(why) => return Err(Ended::NotAsked(why)),
        }
    }
    Err(Ended::TooManyRounds)
}

/// A read's or a prompt's rounds, as [`converse`] a call's: `round` made with the answers
/// and the sealed state so far (none the first time, unless given in `first`), each
/// `input_required` result's questions handed to `asker`, until the module answers or the
/// asker passes the question back — both returned as the result got (`resultType` says
/// which).
pub async fn converse_feature<F, Fut, E, K>(
    first: (Option<Map<String, Value>>, Option<String>),
    mut round: F,
    asker: &mut K,
) -> Result<Map<String, Value>, Ended<E, K::Error>>
where
    F: FnMut(Option<Map<String, Value>>, Option<String>) -> Fut,
    Fut: Future<Output = Result<Map<String, Value>, E>>,
    K: Asker,
{
    let (mut responses, mut state) = first;
    for _ in 0..=MAX_INPUT_ROUNDS {
        let got = round(responses.take(), state.take())
            .await
            .map_err(Ended::Call)?;
        if got.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return Ok(got);
        }
        let requests = match got.get("inputRequests") {
            Some(Value::Object(r)) => r.clone(),
            _ => Map::new(),
        };
        match asker.ask(&requests, &Map::new()).await {
            Ok(Asked::Answers(answers)) => {
                responses = Some(answers);
                state = got
                    .get(KEY_REQUEST_STATE)
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            Ok(Asked::PassBack) => return Ok(got),
            Err(why) => return Err(Ended::NotAsked(why)),
        }
    }
    Err(Ended::TooManyRounds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::CallError;
    use serde_json::json;

    /// Answers each question with its key, counting rounds.
    struct Echoing(usize);

    impl Asker for Echoing {
        type Error = String;

        async fn ask(
            &mut self,
            requests: &Map<String, Value>,
            arguments: &Map<String, Value>,
        ) -> Result<Asked, String> {
            assert!(!arguments.contains_key(KEY_REQUEST_STATE));
            self.0 += 1;
            Ok(Asked::Answers(
                requests.keys().map(|k| (k.clone(), json!(k))).collect(),
            ))
        }
    }

    fn asks(key: &str, state: &str) -> ToolResult {
        let mut requests = Map::new();
        requests.insert(key.into(), json!({"method": "elicitation/create"}));
        ToolResult::input_required(requests, state.into())
    }

    #[tokio::test]
    async fn rounds_carry_the_answers_and_the_state_until_a_result() {
        let mut seen = Vec::new();
        let mut asker = Echoing(0);
        let result = converse(
            Map::from_iter([("x".to_owned(), json!(1))]),
            |args: Arc<Map<String, Value>>| {
                seen.push(Value::Object((*args).clone()));
                let round = seen.len();
                async move {
                    Ok::<_, CallError>(match round {
                        1 => asks("a", "s1"),
                        2 => asks("b", "s2"),
                        _ => ToolResult::text("done"),
                    })
                }
            },
            &mut asker,
        )
        .await
        .unwrap();
        assert_eq!(result.text_content(), "done");
        assert_eq!(asker.0, 2);
        assert_eq!(seen[1][KEY_REQUEST_STATE], "s1");
        assert_eq!(seen[1][KEY_INPUT_RESPONSES], json!({"a": "a"}));
        assert_eq!(seen[2][KEY_REQUEST_STATE], "s2");
        assert_eq!(seen[2]["x"], 1);
    }

    struct Refusing;

    impl Asker for Refusing {
        type Error = String;

        async fn ask(
            &mut self,
            _: &Map<String, Value>,
            _: &Map<String, Value>,
        ) -> Result<Asked, String> {
            Err("no terminal".into())
        }
    }

    struct Passing;

    impl Asker for Passing {
        type Error = String;

        async fn ask(
            &mut self,
            _: &Map<String, Value>,
            _: &Map<String, Value>,
        ) -> Result<Asked, String> {
            Ok(Asked::PassBack)
        }
    }

    #[tokio::test]
    async fn a_question_passed_back_is_the_result_and_one_not_asked_ends_it() {
        let call = |_: Arc<Map<String, Value>>| async { Ok::<_, CallError>(asks("a", "s")) };
        let back = converse(Map::new(), call, &mut Passing).await.unwrap();
        assert!(back.needs_input());
        let ended = converse(Map::new(), call, &mut Refusing).await;
        assert!(matches!(ended, Err(Ended::NotAsked(w)) if w == "no terminal"));
        let ended = converse(Map::new(), call, &mut Echoing(0)).await;
        assert!(matches!(ended, Err(Ended::TooManyRounds)));
    }

    #[tokio::test]
    async fn a_feature_s_rounds_carry_answers_and_state_and_end_as_a_call_s() {
        let asks = |key: &str, state: &str| {
            json!({"resultType": "input_required", "requestState": state,
                   "inputRequests": {key: {"method": "elicitation/create"}}})
            .as_object()
            .cloned()
            .unwrap()
        };
        let mut seen = Vec::new();
        let mut asker = Echoing(0);
        let got = converse_feature(
            (None, None),
            |responses, state| {
                seen.push((responses, state));
                let round = seen.len();
                let got = match round {
                    1 => asks("a", "s1"),
                    _ => json!({"contents": []}).as_object().cloned().unwrap(),
                };
                async move { Ok::<_, CallError>(got) }
            },
            &mut asker,
        )
        .await
        .unwrap();
        assert!(got.contains_key("contents"));
        assert_eq!(
            seen[1].0,
            Some(json!({"a": "a"}).as_object().cloned().unwrap())
        );
        assert_eq!(seen[1].1.as_deref(), Some("s1"));
        let always = |_, _| async move { Ok::<_, CallError>(asks("a", "s")) };
        let back = converse_feature((None, None), always, &mut Passing)
            .await
            .unwrap();
        assert_eq!(back["resultType"], "input_required");
        let ended = converse_feature((None, None), always, &mut Refusing).await;
        assert!(matches!(ended, Err(Ended::NotAsked(w)) if w == "no terminal"));
        let ended = converse_feature((None, None), always, &mut Echoing(0)).await;
        assert!(matches!(ended, Err(Ended::TooManyRounds)));
    }
}
