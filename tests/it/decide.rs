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
