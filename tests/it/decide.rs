//! decide on a real bus: annotate the example card, explain the run, report health.

use std::path::Path;

use mesh_core::subjects::FullName;
use mesh_decide::tools::{Config, module};
use mesh_ontology::index::Index;
use serde_json::{Value, json};

use crate::apply::stored;
use crate::bus::{Bus, GENEROUS};

const CARD: &str = include_str!("../cards/example.md");

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// `decide_annotate` of the example card: its structured output, the call a result.
async fn annotate_example(client: &mesh_core::client::Client) -> Value {
    let r = client
        .call(
            &name("decide_annotate"),
            &json!({"card_text": CARD}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    r.structured_content.unwrap()
}

/// The winner's CURIE for `column` in annotate's structured output, or null.
fn winner(out: &Value, column: &str) -> Value {
    out["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["column"] == column)
        .map(|g| g["winner"]["curie"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn annotate_explain_and_health_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = decide_dir_with_fixtures(dir.path());
    let bus = Bus::single().await;
    let _decide = bus
        .serve(module(Config::in_dir(&decide_dir)).unwrap())
        .await;
    let client = bus.client().await;

    let out = annotate_example(&client).await;
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    assert_eq!(out["card"]["name"], "DP1.10072.001/mam_pertrapnight");
    // Term by term, the winners expected for the example card.
    let winner = |column: &str| winner(&out, column);
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
    let health_text = r.text_content();
    let health = r.structured_content.unwrap();
    assert_eq!(health["questions_lock"]["matches"], true);
    assert_eq!(health["backend"], "embedded");
    assert_eq!(health["sidecar"]["runs"], 1);
    assert_eq!(health["ontologies"].as_array().unwrap().len(), 3);
    // The embedding model: bin/test installs it; the ranking does not load it, and says so.
    assert_eq!(health["embedder"]["loaded"], false, "{health}");
    assert!(
        health["embedder"]["model"].is_string(),
        "bin/test installs the model: {health}"
    );
    assert!(
        health_text.contains("embedding model not loaded (installed, unused)"),
        "{health_text}"
    );
}

/// Asked for (`MESH_DECIDE_EMBED=1` sets `Config::embed`), decide loads the embedding model
/// at start, ranks with it where an ontology has vectors, and health says so.
#[tokio::test]
async fn decide_asked_to_embed_ranks_with_the_model_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = decide_dir_with_fixtures(dir.path());
    {
        let mut index = Index::open(&decide_dir.join("ontology.sqlite")).unwrap();
        let embedder = mesh_decide::embed::Embedder::load_default()
            .unwrap_or_else(|e| panic!("bin/test installs the model: {e}"));
        mesh_decide::embed::embed_ontology(&mut index, &embedder, "pato", false, |_, _| {})
            .unwrap();
    }
    let bus = Bus::single().await;
    let config = Config {
        embed: true,
        ..Config::in_dir(&decide_dir)
    };
    let _decide = bus.serve(module(config).unwrap()).await;
    let client = bus.client().await;
    let r = client
        .call(&name("decide_health"), &json!({}), GENEROUS)
        .await
        .unwrap();
    let text = r.text_content();
    let health = r.structured_content.unwrap();
    assert_eq!(health["embedder"]["loaded"], true, "{health}");
    assert!(
        text.contains("embedding model loaded, in the ranking"),
        "{text}"
    );
    let out = annotate_example(&client).await;
    assert_eq!(winner(&out, "hindfootLength"), "PATO:0000122", "{out:#}");
    assert_eq!(winner(&out, "sex"), "PATO:0000047", "{out:#}");
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
    use mesh_decide::backend::Backend;
    use mesh_decide::openai::OpenAi;
    use mesh_decide::questions;

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

/// The embedded backend behind a gate: every answer waits until the gate opens, as a
/// backend waiting on a slow server would.
struct Gated {
    asked: std::sync::atomic::AtomicUsize,
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl mesh_decide::backend::Backend for Gated {
    fn name(&self) -> String {
        "embedded".into()
    }

    fn ask(
        &self,
        question: &mesh_decide::questions::Question,
        state: &Value,
        options: &[String],
    ) -> Result<mesh_decide::backend::Answer, mesh_decide::backend::BackendError> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        mesh_decide::backend::Embedded.ask(question, state, options)
    }
}

fn decide_dir_with_fixtures(dir: &Path) -> std::path::PathBuf {
    let decide_dir = dir.join("decide");
    let mut index = Index::open(&decide_dir.join("ontology.sqlite")).unwrap();
    for o in ["pato", "uberon", "ncbitaxon"] {
        let f = format!("{}/tests/ontologies/{o}.obo", env!("CARGO_MANIFEST_DIR"));
        index.import(Path::new(&f), |_| {}).unwrap();
    }
    decide_dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_card_waiting_on_its_backend_holds_up_no_other_call() {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = decide_dir_with_fixtures(dir.path());
    let gated = std::sync::Arc::new(Gated {
        asked: Default::default(),
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
    });
    let mut config = Config::in_dir(&decide_dir);
    config.backend = gated.clone();
    let bus = Bus::single().await;
    let _decide = bus.serve(module(config).unwrap()).await;
    let client = bus.client().await;
    let annotate = || {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(
                    &name("decide_annotate"),
                    &json!({"card_text": CARD}),
                    std::time::Duration::from_secs(60),
                )
                .await
        })
    };
    let annotating = annotate();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while gated.asked.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < until,
            "the first annotate never reached its backend"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The annotate waits on its backend; health (which reads the sidecar) answers meanwhile.
    let health = client
        .call(&name("decide_health"), &json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(!health.is_error, "{}", health.text_content());
    assert!(!annotating.is_finished(), "the annotate did not wait");
    // A second card is decided at the same time in the same process: it reaches its own
    // backend question while the first still waits on its.
    let second = annotate();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while gated.asked.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < until,
            "the second annotate never reached its backend while the first waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!annotating.is_finished() && !second.is_finished());
    *gated.open.lock().unwrap() = true;
    gated.opened.notify_all();
    let run = |r: mesh_core::subjects::ToolResult| {
        assert!(!r.is_error, "{}", r.text_content());
        r.structured_content.unwrap()["run_id"].clone()
    };
    let first = run(annotating.await.unwrap().unwrap());
    let second = run(second.await.unwrap().unwrap());
    assert!(first.is_string() && second.is_string() && first != second);
}

#[tokio::test]
async fn a_card_too_large_is_refused_before_any_work_and_a_wide_run_is_read_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = decide_dir_with_fixtures(dir.path());
    let bus = Bus::single().await;
    let _decide = bus
        .serve(module(Config::in_dir(&decide_dir)).unwrap())
        .await;
    let client = bus.client().await;
    let annotate = |card: String| {
        let client = client.clone();
        async move {
            client
                .call(
                    &name("decide_annotate"),
                    &json!({"card_text": card}),
                    std::time::Duration::from_secs(600),
                )
                .await
                .unwrap()
        }
    };
    let head = "# Dataset: DP1.00001.001 / wide\nProduct: A wide table\nSource: a test\nSites: HARV\nRows: 10\nA table of many lengths.\n";
    let row = |i: usize| {
        format!("- length{i} | Length of the hind foot {i} | float | millimeter | 10 to 40\n")
    };
    // More columns than a card may have: refused, and nothing recorded.
    let mut many = head.to_owned();
    for i in 0..=mesh_decide::card::MAX_COLUMNS {
        many.push_str(&row(i));
    }
    let r = annotate(many).await;
    assert!(
        r.is_error && r.text_content().contains("columns"),
        "{}",
        r.text_content()
    );
    let health = client
        .call(&name("decide_health"), &json!({}), GENEROUS)
        .await
        .unwrap();
    assert_eq!(health.structured_content.unwrap()["sidecar"]["runs"], 0);
    // More bytes than a card may have: the same.
    let r = annotate(format!(
        "{head}{}",
        "x".repeat(mesh_decide::card::MAX_CARD_BYTES)
    ))
    .await;
    assert!(
        r.is_error && r.text_content().contains("bytes"),
        "{}",
        r.text_content()
    );

    // A wide card within the bounds whose result is more than a reply carries: the run id,
    // and its columns to read the run by.
    let mut wide = head.to_owned();
    for i in 0..mesh_decide::card::MAX_COLUMNS {
        wide.push_str(&row(i));
    }
    let r = annotate(wide).await;
    assert!(!r.is_error, "{}", r.text_content());
    let text = r.text_content();
    assert!(text.contains("decide_explain"), "{text}");
    let out = r.structured_content.unwrap();
    assert_eq!(out["truncated"], true);
    assert_eq!(
        out["columns"].as_array().unwrap().len(),
        mesh_decide::card::MAX_COLUMNS
    );
    let run = out["run_id"].as_str().unwrap();
    let part = client
        .call(
            &name("decide_explain"),
            &json!({"run_id": run, "column": "length7"}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!part.is_error, "{}", part.text_content());
    let part = part.structured_content.unwrap();
    let decisions = part["decisions"].as_array().unwrap();
    assert!(!decisions.is_empty());
    assert!(
        decisions
            .iter()
            .all(|d| d["subject"].as_str().unwrap().contains("\"length7\""))
    );
}

/// Every line of a text result fits a terminal of 100 columns.
fn fits_a_terminal(text: &str) {
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "{} wide: {line}", line.len());
    }
}

#[tokio::test]
async fn annotate_and_explain_show_each_group_and_feedback_takes_its_curie() {
    use crate::apply::{call, setup};
    let s = setup(std::time::Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let text = r.text_content();
    eprintln!("{text}");
    fits_a_terminal(&text);
    let out = r.structured_content.unwrap();
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    let groups = out["groups"].as_array().unwrap().clone();
    assert!(groups.len() >= 4, "{out:#}");
    // Each group: its id as decide_feedback takes it, its column and ontology, and every
    // candidate with its CURIE, p(fits) to two decimals and level; the winner marked.
    for g in &groups {
        let id = g["group_id"].as_str().unwrap();
        let block = text
            .split("\n\n")
            .find(|b| b.contains(&format!("group_id={id}")))
            .unwrap_or_else(|| panic!("no block for group {id}: {text}"));
        assert!(
            block.starts_with(&format!(
                "column {}, ontology {}: ",
                g["column"].as_str().unwrap(),
                g["ontology"].as_str().unwrap()
            )),
            "{block}"
        );
        for c in g["candidates"].as_array().unwrap() {
            let curie = c["curie"].as_str().unwrap();
            let line = block
                .lines()
                .find(|l| l.contains(&format!("  {curie}  ")))
                .unwrap_or_else(|| panic!("{curie} not in {block}"));
            let p = format!("{:.2}", c["p"].as_f64().unwrap());
            assert!(line.ends_with(&format!("  {p}  L0")), "{line}");
            let winner = g["winner"]["curie"] == curie;
            assert_eq!(line.starts_with("  *"), winner, "{line}");
        }
    }
    assert!(
        text.contains("mesh call decide_feedback group_id=") && text.contains(" pick="),
        "{text}"
    );

    // explain: the same groups as tables, with what was asked about each column; the
    // decisions in JSON name the term they are about.
    let r = call(&ann, "decide_explain", &json!({"run_id": run_id})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let explained = r.text_content();
    eprintln!("{explained}");
    fits_a_terminal(&explained);
    assert!(
        explained.contains("column uid: not annotated, set aside by rule (an identifier)"),
        "{explained}"
    );
    let hind = groups
        .iter()
        .find(|g| g["column"] == "hindfootLength")
        .unwrap();
    let hind_id = hind["group_id"].as_str().unwrap().to_owned();
    let block = explained
        .split("\n\n")
        .find(|b| b.contains(&format!("group_id={hind_id}")))
        .unwrap();
    assert!(
        block.starts_with("column hindfootLength, ontology pato: proposed, open")
            && block.contains("  asked: annotate yes (")
            && block.contains("length")
            && block.contains("PATO:0000122")
            && block.contains("AVU pato.length = hindfootLength [PATO:0000122]: proposed"),
        "{block}"
    );
    // The evidence that carried the winner, part by part, with what each added: the
    // column's name spells "length" out.
    assert!(
        block.contains("the winner, carried by:")
            && block.contains("the column's name or description names it exactly (+"),
        "{block}"
    );
    let json = r.structured_content.unwrap();
    let hind_json = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == hind_id.as_str())
        .unwrap();
    let carried = hind_json["carried_by"].as_array().unwrap();
    assert!(!carried.is_empty(), "{hind_json}");
    assert!(
        carried
            .windows(2)
            .all(|w| w[0]["adds"].as_f64() >= w[1]["adds"].as_f64())
    );
    let fits = mesh_decide::questions::TERM_FITS.key();
    let named: Vec<&Value> = json["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["question_key"] == fits)
        .collect();
    assert!(!named.is_empty());
    assert!(
        named
            .iter()
            .all(|d| d["curie"].is_string() && d["label"].is_string()),
        "{named:?}"
    );
    let json_groups = json["groups"].as_array().unwrap();
    assert_eq!(json_groups.len(), groups.len());
    assert_eq!(json_groups[0]["open"], true);
    assert!(json_groups[0]["candidates"][0]["level"].is_string());

    // feedback by CURIE: the sex group's winner, named as the table shows it.
    let sex = groups.iter().find(|g| g["column"] == "sex").unwrap();
    let sex_id = sex["group_id"].as_str().unwrap().to_owned();
    let r = call(
        &ann,
        "decide_feedback",
        &json!({"group_id": sex_id, "pick": "PATO:0000047"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    assert!(
        r.text_content()
            .starts_with(&format!("pick recorded on group {sex_id} (column sex): ")),
        "{}",
        r.text_content()
    );
    let out = r.structured_content.unwrap();
    assert_eq!(out["picked"]["curie"], "PATO:0000047");
    assert!(
        out["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["unit"] == "PATO:0000047" && l["status"] == "accepted"),
        "{out:#}"
    );
    // The explanation shows it answered.
    let r = call(
        &ann,
        "decide_explain",
        &json!({"run_id": run_id, "column": "sex"}),
    )
    .await;
    let text = r.text_content();
    assert!(
        text.contains("column sex, ontology pato: picked by ann@PEOPLE")
            && text.contains("AVU pato.biological_sex = sex [PATO:0000047]: accepted"),
        "{text}"
    );
}

#[tokio::test]
async fn feedback_refuses_a_curie_it_did_not_offer_and_stores_nothing() {
    use crate::apply::{call, setup};
    let s = setup(std::time::Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    let out = r.structured_content.unwrap();
    let group = |column: &str| {
        out["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["column"] == column)
            .unwrap()
            .clone()
    };
    let hind = group("hindfootLength");
    let hind_id = hind["group_id"].as_str().unwrap();
    let before = stored(&s.decide_dir());
    let huge = format!("PATO:{}", "0".repeat(1_000_000));
    for (args, why) in [
        // Not among the group's candidates, in any way.
        (
            json!({"group_id": hind_id, "pick": "PATO:9999999"}),
            "\"PATO:9999999\" is not one of the candidates offered for group",
        ),
        // Another group's term (scientificName's winner).
        (
            json!({"group_id": hind_id, "pick": "NCBITaxon:10041"}),
            "\"NCBITaxon:10041\" is not one of the candidates offered",
        ),
        // Another group's candidate by its decision id.
        (
            json!({"group_id": hind_id, "decision_id": group("sex")["candidates"][0]["decision_id"]}),
            "is not one of the candidates offered",
        ),
        (
            json!({"group_id": hind_id, "pick": "PATO:0000122' OR '1'='1"}),
            "\"PATO:0000122' OR '1'='1\" is not one of the candidates offered",
        ),
        (
            json!({"group_id": hind_id, "action": "pick", "pick": "x'); DELETE FROM overrides; --"}),
            "is not one of the candidates offered",
        ),
        (
            json!({"group_id": hind_id, "pick": huge}),
            "(1000005 bytes) is not one of the candidates offered",
        ),
        (
            json!({"group_id": format!("{hind_id}' OR 1=1 --"), "pick": "PATO:0000122"}),
            "no candidate group",
        ),
        (
            json!({"group_id": "g".repeat(1_000_000), "action": "reject"}),
            "no candidate group",
        ),
        // A candidate where only a pick names one, or a pick naming none or two.
        (
            json!({"group_id": hind_id, "action": "reject", "pick": "PATO:0000122"}),
            "do not match its input schema",
        ),
        (
            json!({"group_id": hind_id, "action": "pick"}),
            "do not match its input schema",
        ),
        (
            json!({"group_id": hind_id, "pick": "PATO:0000122", "decision_id": "d"}),
            "do not match its input schema",
        ),
    ] {
        let r = call(&ann, "decide_feedback", &args).await;
        let text = r.text_content();
        assert!(
            r.is_error && text.contains(why),
            "{why}: {}",
            &text[..text.len().min(500)]
        );
        assert!(text.len() < 2000, "a short message: {} bytes", text.len());
        if why.contains("not one of the candidates") {
            // The group's candidates, to pick from.
            assert!(
                text.contains("pick one of ") && text.contains("(PATO:0000122)"),
                "{text}"
            );
        }
    }
    assert_eq!(stored(&s.decide_dir()), before, "nothing stored");
    // The right CURIE, in another letter case, goes through.
    let r = call(
        &ann,
        "decide_feedback",
        &json!({"group_id": hind_id, "pick": "pato:0000122"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_ne!(stored(&s.decide_dir()), before);
}

/// Serves `body` at every path but `/missing` (404), over plain HTTP/1.1, for each connection.
async fn serve_file(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let missing = String::from_utf8_lossy(&head).starts_with("GET /missing");
                let reply = if missing {
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_vec()
                } else {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(&body);
                    r
                };
                let _ = s.write_all(&reply).await;
            });
        }
    });
    url
}

/// `ontology import` takes a URL (where OBO files live), gzip or not: fetched beside the
/// index, imported, the fetched file removed; a server's refusal said with its status.
#[tokio::test]
async fn ontology_import_fetches_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("idx/ontology.sqlite");
    let index = index.to_str().unwrap();
    let decide = std::path::Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-decide");
    let obo = std::fs::read(format!(
        "{}/tests/ontologies/pato.obo",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let gz = std::process::Command::new("gzip")
        .arg("-c")
        .arg(format!(
            "{}/tests/ontologies/uberon.obo",
            env!("CARGO_MANIFEST_DIR")
        ))
        .output()
        .unwrap()
        .stdout;
    let import = |url: String| {
        let (decide, index) = (decide.clone(), index.to_owned());
        async move {
            let out = tokio::process::Command::new(decide)
                .args(["ontology", "import", &url, "--index", &index])
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap();
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let plain = serve_file(obo).await;
    let (code, out, err) = import(format!("{plain}/obo/pato.obo")).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("imported pato"), "{out}");
    // Through a pipe: no progress drawn.
    assert!(!err.contains('\r'), "{err:?}");
    let gz_again = gz.clone();
    let zipped = serve_file(gz).await;
    let (code, out, err) = import(format!("{zipped}/obo/uberon.obo.gz")).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("imported uberon"), "{out}");
    let (code, out, err) = import(format!("{plain}/missing")).await;
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("the server answered 404"), "{err}");
    let (code, _, err) = import("http://127.0.0.1:1/pato.obo".into()).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot fetch http://127.0.0.1:1/pato.obo"),
        "{err}"
    );
    // On a terminal, the fetch and the import show how far they have got.
    let zipped_again = serve_file(gz_again).await;
    let mut cmd = std::process::Command::new(&decide);
    cmd.args([
        "ontology",
        "import",
        &format!("{zipped_again}/obo/uberon.obo.gz"),
        "--index",
        index,
    ]);
    // Off the test's thread: the file is served on it.
    let t = tokio::task::spawn_blocking(move || crate::pty::run(&mut cmd, 100, 40))
        .await
        .unwrap();
    assert_eq!(t.code, 0, "{}", t.output);
    assert!(t.output.contains("terms ("), "no progress: {:?}", t.output);
    assert!(t.output.contains('\r'), "nothing redrawn: {:?}", t.output);
    assert!(t.output.contains("imported uberon"), "{}", t.output);
    // Search results are a table with a header: whole through a pipe, fitted on a terminal.
    let out = std::process::Command::new(&decide)
        .args(["ontology", "search", "pato", "length", "--index", index])
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(piped.starts_with("TERM"), "{piped}");
    assert!(piped.contains("PATO:0000122"), "{piped}");
    let widest = piped.lines().map(|l| l.chars().count()).max().unwrap();
    let mut cmd = std::process::Command::new(&decide);
    cmd.args(["ontology", "search", "pato", "length", "--index", index])
        .env_remove("COLUMNS");
    let cols = (widest as u16 - 5).max(30);
    let t = crate::pty::run(&mut cmd, cols, 40);
    assert_eq!(t.code, 0, "{}", t.output);
    assert!(
        t.output.lines().all(|l| l.chars().count() <= cols as usize),
        "{}",
        t.output
    );
    assert!(t.output.contains("PATO:0000122"), "{}", t.output);
    // A server that says it will send too much, or sends without end, is stopped.
    let import_at_most = |url: String, most: &'static str| {
        let (decide, index) = (decide.clone(), index.to_owned());
        async move {
            let out = tokio::process::Command::new(decide)
                .args([
                    "ontology",
                    "import",
                    &url,
                    "--index",
                    &index,
                    "--max-bytes",
                    most,
                ])
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap();
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (code, err) = import_at_most(format!("{plain}/obo/pato.obo"), "1000").await;
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("bytes: more than 1000 may be fetched here"),
        "{err}"
    );
    let endless = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/endless.obo", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    let _ = s.read(&mut b).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
                        .await;
                    let chunk = vec![b'x'; 64 * 1024];
                    while s.write_all(&chunk).await.is_ok() {}
                });
            }
        });
        url
    };
    let (code, err) = import_at_most(endless, "1000000").await;
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("sent more than 1000000 bytes"), "{err}");
    // Nothing fetched is left beside the index.
    let left: Vec<String> = std::fs::read_dir(dir.path().join("idx"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("ontology.sqlite"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
