//! A backend that asks an OpenAI-compatible server: the question and its state as a prompt
//! with numbered options, one answer token, and the probabilities read off that token's
//! log-probabilities. Its answers are level L0 like the embedded backend's.

use std::time::Duration;

use serde_json::{Value, json};

use super::backend::{Answer, Backend, BackendError, answer_from_scores};
use super::questions::{Question, canonical};

/// Where the server is and which model answers.
#[derive(Debug, Clone)]
pub struct OpenAi {
    /// The API base, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub client: std::sync::OnceLock<reqwest::blocking::Client>,
}

impl OpenAi {
    fn prompt(question: &Question, state: &Value, options: &[String]) -> String {
        let mut p = format!(
            "{}\n\nAbout:\n{}\n\nOptions:\n",
            question.text,
            canonical(state)
        );
        for (i, o) in options.iter().enumerate() {
            p.push_str(&format!("{}. {o}\n", i + 1));
        }
        p.push_str("\nAnswer with the option's number only.");
        p
    }
}

impl Backend for OpenAi {
    fn name(&self) -> String {
        format!("openai:{}@{}", self.model, self.url)
    }

    fn ask(
        &self,
        question: &Question,
        state: &Value,
        options: &[String],
    ) -> Result<Answer, BackendError> {
        let unanswerable = |why: String| BackendError::Unanswerable {
            kind: question.kind.to_owned(),
            why,
        };
        if options.is_empty() {
            return Err(BackendError::NoOptions(question.key()));
        }
        let body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": OpenAi::prompt(question, state, options)}],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": true,
            "top_logprobs": 20
        });
        // One client for every question, so a run of many reuses its connections. Made on
        // first use: a blocking client may not be made (nor dropped) on the async runtime.
        let client = match self.client.get() {
            Some(c) => c,
            None => {
                let made = reqwest::blocking::Client::builder()
                    .timeout(self.timeout)
                    .build()
                    .map_err(|e| unanswerable(e.to_string()))?;
                self.client.get_or_init(|| made)
            }
        };
        let mut request = client
            .post(format!(
                "{}/chat/completions",
                self.url.trim_end_matches('/')
            ))
            .json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .map_err(|e| unanswerable(format!("the server at {} did not answer: {e}", self.url)))?;
        let status = response.status();
        let reply: Value = response
            .json()
            .map_err(|e| unanswerable(format!("the server's answer is not JSON: {e}")))?;
        if !status.is_success() {
            return Err(unanswerable(format!("the server said {status}: {reply}")));
        }
        let top = reply
            .pointer("/choices/0/logprobs/content/0/top_logprobs")
            .and_then(Value::as_array)
            .ok_or_else(|| unanswerable("the answer carries no log-probabilities".into()))?;
        // The log-probability of each option's number; an option the server did not list
        // gets far less than any it did.
        let floor = top
            .iter()
            .filter_map(|t| t.get("logprob").and_then(Value::as_f64))
            .fold(0.0, f64::min)
            - 10.0;
        let scores: Vec<f64> = (1..=options.len())
            .map(|n| {
                top.iter()
                    .find(|t| {
                        t.get("token").and_then(Value::as_str).map(str::trim)
                            == Some(&n.to_string())
                    })
                    .and_then(|t| t.get("logprob").and_then(Value::as_f64))
                    .unwrap_or(floor)
            })
            .collect();
        // A softmax of log-probabilities is their normalised probabilities.
        Ok(Answer {
            calibration: "none: token logprobs, normalised over the options".into(),
            ..answer_from_scores(options, &scores, 1.0)
        })
    }
}
