//! decide on a real bus: annotate the example card, explain the run, report health.

use std::path::Path;

use mesh::modules::decide::index::Index;
use mesh::modules::decide::tools::{Config, module};
use mesh::subjects::FullName;
use serde_json::{Value, json};

use crate::bus::{Bus, GENEROUS};

const CARD: &str = include_str!("../cards/example.md");

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

#[tokio::test]
async fn annotate_explain_and_health_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = dir.path().join("decide");
    {
        let mut index = Index::open(&decide_dir.join("ontology.sqlite")).unwrap();
        for o in ["pato", "uberon", "ncbitaxon"] {
            let f = format!("{}/tests/ontologies/{o}.obo", env!("CARGO_MANIFEST_DIR"));
            index.import(Path::new(&f), |_| {}).unwrap();
        }
    }
    let bus = Bus::single().await;
    let _decide = bus
        .serve(module(Config::in_dir(&decide_dir)).unwrap())
        .await;
    let client = bus.client().await;

    let r = client
        .call(
            &name("decide_annotate"),
            &json!({"card_text": CARD}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    let out = r.structured_content.unwrap();
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    assert_eq!(out["card"]["name"], "DP1.10072.001/mam_pertrapnight");
    // Term by term, the winners expected for the example card.
    let winner = |column: &str| {
        out["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["column"] == column)
            .map(|g| g["winner"]["curie"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(winner("hindfootLength"), "PATO:0000122", "{out:#}");
    assert_eq!(winner("earLength"), "PATO:0000122");
    assert_eq!(winner("scientificName"), "NCBITaxon:10041");
    assert_eq!(winner("sex"), "PATO:0000047", "biological sex");
    let proposed = out["proposed"].as_array().unwrap();
    assert!(
        proposed
            .iter()
            .any(|l| l["attribute"] == "pato.length" && l["unit"] == "PATO:0000122")
    );

    let r = client
        .call(
            &name("decide_explain"),
            &json!({"run_id": run_id}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    let explained = r.structured_content.unwrap();
    let decisions = explained["decisions"].as_array().unwrap();
    assert!(decisions.len() > 10);
    // A rule decided exactly where there is no probability.
    for d in decisions {
        assert_eq!(d["level"] == "rule", d["p"].is_null(), "{d}");
    }
    assert_eq!(explained["links"].as_array().unwrap().len(), proposed.len());

    let r = client
        .call(
            &name("decide_explain"),
            &json!({"run_id": "nope"}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(r.is_error && r.text_content().contains("no run nope"));

    // A malformed card is refused with its line, and nothing is recorded for it.
    let r = client
        .call(
            &name("decide_annotate"),
            &json!({"card_text": "# Dataset: X\n"}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(
        r.is_error && r.text_content().starts_with("card line 1:"),
        "{}",
        r.text_content()
    );
    let r = client
        .call(
            &name("decide_annotate"),
            &json!({"card_path": "../../etc/passwd"}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(r.is_error && r.text_content().contains("inside decide's cards directory"));

    let r = client
        .call(&name("decide_health"), &json!({}), GENEROUS)
        .await
        .unwrap();
    let health = r.structured_content.unwrap();
    assert_eq!(health["questions_lock"]["matches"], true);
    assert_eq!(health["backend"], "embedded");
    assert_eq!(health["sidecar"]["runs"], 1);
    assert_eq!(health["ontologies"].as_array().unwrap().len(), 3);
}

/// A stand-in for an OpenAI-compatible server: it answers every chat completion with one
/// token whose top log-probabilities favour option 2, and keeps the requests it got.
async fn stand_in() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let kept = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let kept = kept.clone();
                    async move {
                        use http_body_util::BodyExt;
                        assert_eq!(req.uri().path(), "/v1/chat/completions");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        kept.lock()
                            .unwrap()
                            .push(serde_json::from_slice::<Value>(&body).unwrap());
                        let answer = json!({"choices": [{"message": {"role": "assistant", "content": "2"},
                            "logprobs": {"content": [{"token": "2", "logprob": -0.105,
                                "top_logprobs": [{"token": "2", "logprob": -0.105}, {"token": "1", "logprob": -2.3}]}]}}]});
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(answer.to_string())),
                        ))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn the_openai_compatible_backend_against_a_stand_in() {
    use mesh::modules::decide::backend::Backend;
    use mesh::modules::decide::openai::OpenAi;
    use mesh::modules::decide::questions;

    let (url, seen) = stand_in().await;
    let backend = OpenAi {
        url: url.clone(),
        model: "stand-in".into(),
        api_key: None,
        timeout: std::time::Duration::from_secs(10),
        client: Default::default(),
    };
    let state = json!({"column": {"name": "remarks", "description": "Technician remarks"}});
    let answer = tokio::task::spawn_blocking(move || {
        let options: Vec<String> = questions::ANNOTATE
            .options
            .iter()
            .map(|s| s.to_string())
            .collect();
        backend.ask(&questions::ANNOTATE, &state, &options)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(answer.answer, "no");
    let p_no = (-0.105f64).exp() / ((-0.105f64).exp() + (-2.3f64).exp());
    assert!((answer.p - p_no).abs() < 1e-9, "{answer:?}");
    assert_eq!(answer.level.name(), "L0");
    let asked = seen.lock().unwrap().pop().unwrap();
    assert_eq!(asked["model"], "stand-in");
    assert_eq!(asked["logprobs"], true);
    let prompt = asked["messages"][0]["content"].as_str().unwrap();
    assert!(
        prompt.contains(questions::ANNOTATE.text)
            && prompt.contains("1. yes")
            && prompt.contains("\"remarks\""),
        "{prompt}"
    );

    // A server that is not there is a clear error, not a guess.
    let gone = OpenAi {
        url: "http://127.0.0.1:1/v1".into(),
        model: "m".into(),
        api_key: None,
        timeout: std::time::Duration::from_secs(5),
        client: Default::default(),
    };
    let e = tokio::task::spawn_blocking(move || {
        gone.ask(
            &questions::ANNOTATE,
            &json!({}),
            &["yes".into(), "no".into()],
        )
    })
    .await
    .unwrap()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("did not answer") && e.contains("127.0.0.1:1"),
        "{e}"
    );
}
