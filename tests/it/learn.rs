//! Learning: feedback transitions and their labels on a real bus, a fit that recovers a known
//! calibration, promote's refusal, a running decide picking up a promoted bundle, and the
//! chooser answering avu_apply_term's picker over the bus.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::client::Client;
use mesh_decide::backend::{Answer, Backend, BackendError, answer_from_scores};
use mesh_decide::learn::bundle::{self, BundleError};
use mesh_decide::learn::{self, FitOptions};
use mesh_decide::questions::{self, Question};
use mesh_decide::store::sidecar::Sidecar;

use serde_json::{Value, json};

use crate::apply::{Setup, call};

fn gold_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gold")
}

/// The gold cards: (card text, column → gold CURIE).
fn gold_cards() -> Vec<(String, HashMap<String, String>)> {
    ["mam_pertrapnight", "vole_morphometrics", "tortoise_survey"]
        .iter()
        .map(|name| {
            let dir = gold_dir();
            let card = std::fs::read_to_string(dir.join(format!("{name}.md"))).unwrap();
            let gold_file = dir.join(format!("{name}.gold"));
            let gold =
                learn::eval::parse_gold(&std::fs::read_to_string(&gold_file).unwrap(), &gold_file)
                    .unwrap()
                    .into_iter()
                    .map(|g| (g.column, g.terms[0].clone()))
                    .collect();
            (card, gold)
        })
        .collect()
}

async fn setup() -> Setup {
    crate::apply::setup(Duration::from_secs(600)).await
}

async fn ok(client: &Client, tool: &str, args: &Value) -> Value {
    let r = call(client, tool, args).await;
    assert!(!r.is_error, "{tool}: {}", r.text_content());
    r.structured_content.unwrap()
}

fn labels(dir: &Path) -> Vec<(String, bool, f64, String, String)> {
    let db = rusqlite::Connection::open(dir.join("sidecar.sqlite")).unwrap();
    let mut q = db
        .prepare(
            "SELECT question_key, positive, weight, source, state_json FROM labels ORDER BY rowid",
        )
        .unwrap();
    q.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

#[tokio::test]
async fn feedback_moves_links_and_writes_weighted_labels() {
    let s = setup().await;
    let ann = s.bus.client_as(Some("ann")).await;
    let card = std::fs::read_to_string(gold_dir().join("mam_pertrapnight.md")).unwrap();
    let run = ok(&ann, "decide_annotate", &json!({"card_text": card})).await;
    let group = |column: &str| {
        run["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["column"] == column)
            .unwrap()
            .clone()
    };
    let fits = questions::TERM_FITS.key();
    let chooser = questions::CHOOSER.key();

    // weight: decide proposed weight (PATO:0000128); the curator picks mass, not the winner.
    let weight = group("weight");
    assert_eq!(weight["winner"]["curie"], "PATO:0000128");
    let mass = weight["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["curie"] == "PATO:0000125")
        .unwrap()
        .clone();
    let offered = weight["candidates"].as_array().unwrap().len();
    let out = ok(
        &ann,
        "decide_feedback",
        &json!({"group_id": weight["group_id"], "action": "pick", "decision_id": mass["decision_id"]}),
    )
    .await;
    let links = out["links"].as_array().unwrap();
    let status = |unit: &str| {
        links
            .iter()
            .find(|l| l["unit"] == unit)
            .map(|l| l["status"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        status("PATO:0000128").as_deref(),
        Some("rejected"),
        "{links:?}"
    );
    assert_eq!(
        status("PATO:0000125").as_deref(),
        Some("accepted"),
        "a fresh link"
    );
    let fresh = links.iter().find(|l| l["unit"] == "PATO:0000125").unwrap();
    assert_eq!(
        (fresh["attribute"].as_str(), fresh["value"].as_str()),
        (Some("pato.mass"), Some("weight")),
        "the same value rule: the column's name"
    );
    let l = labels(&s.decide_dir());
    for key in [&fits, &chooser] {
        let mine: Vec<_> = l.iter().filter(|x| &x.0 == key).collect();
        assert_eq!(
            mine.len(),
            offered,
            "{key}: one label per offered candidate"
        );
        let positive: Vec<_> = mine.iter().filter(|x| x.1).collect();
        assert_eq!(positive.len(), 1);
        assert_eq!((positive[0].2, positive[0].3.as_str()), (1.0, "curator"));
        assert!(positive[0].4.contains("PATO:0000125"));
        assert!(
            mine.iter()
                .filter(|x| !x.1)
                .all(|x| x.2 == 0.7 && x.3 == "implicit")
        );
    }
    // The chooser's labels see only ontology, value and candidate.
    let chooser_state: Value =
        serde_json::from_str(&l.iter().find(|x| x.0 == chooser).unwrap().4).unwrap();
    let mut keys: Vec<_> = chooser_state.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["candidate", "ontology", "value"]);

    // The group is closed now: another pick, or a candidate it never offered, is refused.
    let r = call(&ann, "decide_feedback", &json!({"group_id": weight["group_id"], "action": "pick", "decision_id": mass["decision_id"]})).await;
    assert!(
        r.is_error && r.text_content().contains("no longer open"),
        "{}",
        r.text_content()
    );
    let sex = group("sex");
    let r = call(
        &ann,
        "decide_feedback",
        &json!({"group_id": sex["group_id"], "action": "pick", "decision_id": mass["decision_id"]}),
    )
    .await;
    assert!(
        r.is_error
            && r.text_content()
                .contains("not one of the candidates offered"),
        "{}",
        r.text_content()
    );
    let r = call(
        &ann,
        "decide_feedback",
        &json!({"group_id": sex["group_id"], "action": "pick"}),
    )
    .await;
    assert!(r.is_error, "a pick names its candidate");

    // A decline: recorded, no label, the group stays open.
    let before = labels(&s.decide_dir()).len();
    ok(
        &ann,
        "decide_feedback",
        &json!({"group_id": sex["group_id"], "action": "decline"}),
    )
    .await;
    assert_eq!(labels(&s.decide_dir()).len(), before);
    let explained = ok(&ann, "decide_explain", &json!({"run_id": run["run_id"]})).await;
    assert!(
        explained["open_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group_id"] == sex["group_id"])
    );

    // None of these: every offered candidate a curator negative at 1.0, links rejected.
    let sex_offered = sex["candidates"].as_array().unwrap().len();
    let out = ok(
        &ann,
        "decide_feedback",
        &json!({"group_id": sex["group_id"], "action": "reject"}),
    )
    .await;
    assert!(
        out["links"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["status"] == "rejected")
    );
    let after = labels(&s.decide_dir());
    let new = &after[before..];
    assert_eq!(new.len(), 2 * sex_offered);
    assert!(new.iter().all(|x| !x.1 && x.2 == 1.0 && x.3 == "curator"));
    let explained = ok(&ann, "decide_explain", &json!({"run_id": run["run_id"]})).await;
    assert!(
        !explained["open_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group_id"] == sex["group_id"])
    );
}

/// A backend whose logit for a state is the state's own `z`.
struct Known;

impl Backend for Known {
    fn name(&self) -> String {
        "known".into()
    }
    fn ask(
        &self,
        _q: &Question,
        state: &Value,
        options: &[String],
    ) -> Result<Answer, BackendError> {
        let z = state["z"].as_f64().unwrap_or(0.0);
        let scores: Vec<f64> = options
            .iter()
            .map(|o| if o == "yes" { z } else { 0.0 })
            .collect();
        Ok(answer_from_scores(options, &scores, 1.0))
    }
}

/// Writes labels for term.fits drawn from y ~ Bernoulli(σ(a·z + b)) over `cards` cards.
fn synthetic_labels(sidecar: &Sidecar, n: usize, a: f64, b: f64, seed: u64) {
    let mut x = seed;
    let mut uniform = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    for i in 0..n {
        let z = uniform() * 8.0 - 4.0;
        let p = 1.0 / (1.0 + (-(a * z + b)).exp());
        let positive = uniform() < p;
        sidecar
            .db
            .execute(
                "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight, source, created_ms, card)
                 VALUES (?1, ?2, ?3, 'h', 'yes', ?4, 1.0, 'curator', 0, ?5)",
                mesh_decide::params![
                    format!("l{seed}-{i}"),
                    questions::TERM_FITS.key(),
                    json!({"z": z}).to_string(),
                    positive,
                    format!("card{}", i % 8)
                ],
            )
            .unwrap();
    }
}

#[test]
fn a_fit_recovers_a_known_calibration_and_promote_refuses_worse() {
    let dir = tempfile::tempdir().unwrap();
    let bundles = dir.path().join("bundles");
    let good = Sidecar::open(&dir.path().join("good.sqlite")).unwrap();
    // The backend is overconfident by a factor of 2 and biased: the truth is σ(0.5·z + 0.8).
    synthetic_labels(&good, 6000, 0.5, 0.8, 11);
    // Too few chooser labels: said so, nothing fitted for it.
    good.db
        .execute(
            "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight, source, created_ms, card)
             VALUES ('c1', ?1, '{}', 'h', 'yes', 1, 1.0, 'curator', 0, 'card0')",
            mesh_decide::params![questions::CHOOSER.key()],
        )
        .unwrap();
    let mut lines = Vec::new();
    let report = learn::fit(&good, &Known, &bundles, FitOptions::default(), &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap();
    assert_eq!(report.version, "v1");
    assert!(
        lines.iter().any(|l| l.contains("held out card 8 of 8")),
        "progress is shown: {lines:?}"
    );
    assert!(
        report.skipped[&questions::CHOOSER.key()].starts_with("too few labels: 1"),
        "{:?}",
        report.skipped
    );
    let v1 = bundle::load(&bundles, "v1").unwrap();
    let a = &v1.artifacts[&questions::TERM_FITS.key()];
    assert!(
        (a.l1[0] - 0.5).abs() < 0.06 && (a.l1[1] - 0.8).abs() < 0.1,
        "Platt: {:?}",
        a.l1
    );
    let m = &v1.metrics[&questions::TERM_FITS.key()];
    assert!(m["L1"].ece < m["L0"].ece, "calibration helps: {m:?}");
    assert!(m["L1"].ece < 0.03, "{m:?}");
    assert_eq!(v1.manifest.backend, "known");
    assert_eq!(v1.manifest.questions_lock, questions::lock_id());
    assert!(
        v1.manifest
            .questions
            .contains_key(&questions::TERM_FITS.key())
    );
    // A bundle is for the backend and lock it was fitted on.
    assert!(matches!(
        v1.check("embedded", &questions::lock_id()),
        Err(BundleError::OtherBackend { .. })
    ));
    assert!(matches!(
        v1.check("known", "sha256:other"),
        Err(BundleError::OtherLock { .. })
    ));

    // Promotion judges both bundles on the same labels: the good sidecar's.
    let compare = |new: &bundle::Bundle, old: &bundle::Bundle| {
        learn::compare_on_labels(&good, &Known, new, old)
    };
    let lock = questions::lock_id();
    let judge = bundle::Judge {
        backend: "known",
        lock: &lock,
        judge: &compare,
    };
    let first = bundle::promote(&bundles, None, false, &judge).unwrap();
    assert_eq!(
        (first.version.as_str(), first.from.as_deref()),
        ("v1", None)
    );

    // Labels that are mostly noise give a worse bundle: promote refuses it, --force records it.
    let noisy = Sidecar::open(&dir.path().join("noisy.sqlite")).unwrap();
    synthetic_labels(&noisy, 600, 0.05, 0.0, 12);
    learn::fit(&noisy, &Known, &bundles, FitOptions::default(), &mut |_| {}).unwrap();
    let refused = bundle::promote(&bundles, None, false, &judge).unwrap_err();
    assert!(
        matches!(&refused, BundleError::Worse { version, .. } if version == "v2"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("on the same 6000 labels"),
        "{refused}"
    );
    assert_eq!(bundle::current(&bundles).as_deref(), Some("v1"));
    // A bundle for another backend is never promoted, forced or not.
    let other = bundle::Judge {
        backend: "embedded",
        lock: &lock,
        judge: &compare,
    };
    assert!(matches!(
        bundle::promote(&bundles, Some("v2"), true, &other),
        Err(BundleError::OtherBackend { .. })
    ));
    let forced = bundle::promote(&bundles, Some("v2"), true, &judge).unwrap();
    assert!(forced.forced && !forced.overridden.is_empty());
    assert_eq!(bundle::current(&bundles).as_deref(), Some("v2"));
    // The bundle in use cannot be read: nothing can say the other is better, so nothing is
    // promoted but by force (the check is never skipped).
    let kept = std::fs::read(bundles.join("v2/artifacts.json")).unwrap();
    std::fs::write(bundles.join("v2/artifacts.json"), "{ not json").unwrap();
    let refused = bundle::promote(&bundles, Some("v1"), false, &judge).unwrap_err();
    assert!(
        matches!(&refused, BundleError::CannotCompare { current, .. } if current == "v2"),
        "{refused}"
    );
    assert_eq!(bundle::current(&bundles).as_deref(), Some("v2"));
    std::fs::write(bundles.join("v2/artifacts.json"), kept).unwrap();
    let log = std::fs::read_to_string(bundles.join("promotions.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    assert_eq!(
        (
            records[1]["version"].as_str(),
            records[1]["forced"].as_bool()
        ),
        (Some("v2"), Some(true))
    );

    // No labels: nothing fitted, no version written.
    let empty = Sidecar::open(&dir.path().join("empty.sqlite")).unwrap();
    assert!(matches!(
        learn::fit(&empty, &Known, &bundles, FitOptions::default(), &mut |_| {}),
        Err(learn::LearnError::NothingFitted(_))
    ));
    assert_eq!(bundle::versions(&bundles), ["v1", "v2"]);
}

/// Every gold card annotated, and in each group with a gold term the curator picks it (or
/// rejects them all when it is not among the candidates).
async fn curate(ann: &Client) -> Vec<String> {
    let mut runs = Vec::new();
    for (card, gold) in gold_cards() {
        let run = ok(ann, "decide_annotate", &json!({"card_text": card})).await;
        for g in run["groups"].as_array().unwrap() {
            let Some(curie) = gold.get(g["column"].as_str().unwrap()) else {
                continue;
            };
            let pick = g["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| &c["curie"] == curie);
            let args = match pick {
                Some(c) => {
                    json!({"group_id": g["group_id"], "action": "pick", "decision_id": c["decision_id"]})
                }
                None => json!({"group_id": g["group_id"], "action": "reject"}),
            };
            ok(ann, "decide_feedback", &args).await;
        }
        runs.push(run["run_id"].as_str().unwrap().to_owned());
    }
    runs
}

fn mesh(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .output()
        .unwrap()
}

/// `mesh` while modules of this test's runtime serve the call it makes.
async fn mesh_on_bus(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_running_decide_picks_up_a_promoted_bundle() {
    let s = setup().await;
    let ann = s.bus.client_as(Some("ann")).await;
    let health = ok(&ann, "decide_health", &json!({})).await;
    assert!(health["bundle"].is_null());
    // With no bundle, every question says it is not calibrated, and why; the value kind is
    // a rule, never a probability.
    for (key, said) in health["calibration"].as_object().unwrap() {
        let c = said["calibration"].as_str().unwrap();
        if key.starts_with("avu.value_kind") {
            assert_eq!(c, "rule", "{said}");
        } else if key == "winner" {
            // The winner's p is calibrated out of the box: the head decide ships, fitted on
            // the development part of its gold set, held out card by card, and measured on
            // the sealed part it never saw.
            assert_eq!(c, "winner head", "{said}");
            assert!(said["cards"].as_u64().unwrap() >= 30, "{said}");
            assert!(said["held_out_ece"].as_f64().unwrap() < 0.2, "{said}");
            let sealed = &said["sealed"];
            assert!(sealed["cards"].as_u64().unwrap() >= 15, "{said}");
            assert!(sealed["ece"].as_f64().unwrap() < 0.2, "{said}");
        } else {
            assert_eq!(c, "none", "{key}: {said}");
            assert!(
                said["why"].as_str().is_some_and(|w| !w.is_empty()),
                "{said}"
            );
        }
    }
    assert_eq!(
        health["calibration"].as_object().unwrap().len(),
        questions::ALL.len() + 1
    );
    curate(&ann).await;

    // Fit and promote with the command line, offline, while decide keeps serving.
    let dir = s.decide_dir();
    let dir_arg = dir.to_str().unwrap();
    let out = mesh(&[
        "decide",
        "learn",
        "fit",
        "--dir",
        dir_arg,
        "--min-labels",
        "10",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("bundle v1 written"), "{stdout}");
    assert!(
        stdout.contains(&format!("{}: ", questions::TERM_FITS.key())),
        "{stdout}"
    );
    let out = mesh(&["decide", "learn", "promote", "--dir", dir_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No restart: the next call sees it.
    let health = ok(&ann, "decide_health", &json!({})).await;
    assert_eq!(health["bundle"]["version"], "v1", "{health:#}");
    // The fitted question says on what; the others still say they are not.
    let fits = &health["calibration"][questions::TERM_FITS.key()];
    assert!(
        matches!(fits["calibration"].as_str(), Some("L1" | "L2")),
        "{fits}"
    );
    assert_eq!(fits["bundle"], "v1");
    assert!(fits["labels"].as_u64().unwrap() >= 10, "{fits}");
    assert_eq!(
        health["calibration"][questions::ASPECT.key()]["calibration"],
        "none"
    );
    let card = std::fs::read_to_string(gold_dir().join("mam_pertrapnight.md")).unwrap();
    let run = ok(&ann, "decide_annotate", &json!({"card_text": card})).await;
    let explained = ok(&ann, "decide_explain", &json!({"run_id": run["run_id"]})).await;
    let fits: Vec<&Value> = explained["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["question_key"] == questions::TERM_FITS.key())
        .collect();
    assert!(!fits.is_empty());
    for d in &fits {
        let level = d["level"].as_str().unwrap();
        assert!(level == "L1" || level == "L2", "{d}");
        assert!(
            d["calibration"].as_str().unwrap().contains("bundle v1"),
            "{d}"
        );
    }
    let db = rusqlite::Connection::open(dir.join("sidecar.sqlite")).unwrap();
    let bundle: Option<String> = db
        .query_row(
            "SELECT bundle FROM runs WHERE id = ?1",
            [run["run_id"].as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bundle.as_deref(), Some("v1"));

    // Eval with the bundle reports every level.
    let gold = gold_dir();
    let eval = |more: &[&str]| {
        let mut args = vec!["decide", "learn", "eval", "--cards", gold.to_str().unwrap()];
        args.extend(["--dir", dir_arg]);
        args.extend(more);
        mesh(&args)
    };
    let out = eval(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cards"], 3);
    assert_eq!(report["rows"].as_array().unwrap().len(), 15);
    // L1 and L2 fitted on the gold cards (each held out), and the bundle's own.
    for level in ["L0", "L1", "L2", "L1 (v1)", "L2 (v1)"] {
        let l = &report["levels"][level];
        assert!(l["term_fits"]["n"].as_u64().unwrap() > 20, "{report:#}");
        let top1 = l["top1"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&top1), "{report:#}");
        assert_eq!(l["reliability"].as_array().unwrap().len(), 10);
        // What a curator is shown: each column's winner, its p against being right.
        assert!(l["winner"]["n"].as_u64().unwrap() > 0, "{report:#}");
        for share in ["winner_mean_p", "winner_right"] {
            assert!(
                (0.0..=1.0).contains(&l[share].as_f64().unwrap()),
                "{report:#}"
            );
        }
    }
    // The plot: an SVG naming every level; anything but .svg refused with a clear word.
    let plot = dir.join("reliability.svg");
    let out = eval(&["--plot", plot.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{svg:.200}");
    for level in ["L0: ECE", "L2: ECE", "L1 (v1): ECE"] {
        assert!(svg.contains(level), "{level} not in the plot");
    }
    let out = eval(&["--plot", dir.join("reliability.png").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name the file .svg"));

    // A bundle fitted on another backend is refused on loading; the one in use stays.
    let v2 = dir.join("bundles/v2");
    copy_dir(&dir.join("bundles/v1"), &v2);
    let manifest = v2.join("manifest.json");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"backend\": \"embedded\"", "\"backend\": \"elsewhere\"")
        .replace("\"version\": \"v1\"", "\"version\": \"v2\"");
    std::fs::write(&manifest, text).unwrap();
    // promote says no, forced or not: a running decide would refuse it.
    for force in [&[][..], &["--force"][..]] {
        let mut args = vec!["decide", "learn", "promote", "v2", "--dir", dir_arg];
        args.extend_from_slice(force);
        let out = mesh(&args);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("backend elsewhere"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Put in use by hand all the same, it is refused where it runs.
    std::fs::write(dir.join("bundles/CURRENT"), "v2\n").unwrap();
    let health = ok(&ann, "decide_health", &json!({})).await;
    assert_eq!(health["bundle"]["version"], "v1");
    assert_eq!(health["bundle_refused"]["version"], "v2");
    assert!(
        health["bundle_refused"]["why"]
            .as_str()
            .unwrap()
            .contains("backend elsewhere"),
        "{health:#}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[tokio::test]
async fn the_chooser_answers_the_picker_over_the_bus() {
    let s = setup().await;
    let ann = s.bus.client_as(Some("ann")).await;
    // decide_choose itself: the best candidate when it clears the threshold…
    let chosen = ok(
        &ann,
        "decide_choose",
        &json!({"ontology": "pato", "value": "length", "candidates": [
            {"curie": "PATO:0002212", "label": "slender"}, {"curie": "PATO:0000122", "label": "length"}]}),
    )
    .await;
    assert_eq!(chosen["choice"], "PATO:0000122", "{chosen:#}");
    assert!(chosen["p"].as_f64().unwrap() >= chosen["threshold"].as_f64().unwrap());
    // …and none when nothing does.
    let none = ok(
        &ann,
        "decide_choose",
        &json!({"ontology": "pato", "value": "density", "candidates": [{"curie": "PATO:0045031", "label": "normal mass density"}]}),
    )
    .await;
    assert!(none["choice"].is_null(), "{none:#}");

    // Through avu_apply_term's picker, from the command line.
    let login = s.bus.flags("ann");
    let run = |value: &str, path: &str| {
        let (value, path) = (format!("value={value}"), format!("path={path}"));
        let login = login.clone();
        async move {
            let login: Vec<&str> = login.iter().map(String::as_str).collect();
            let call = [
                "call",
                "avu_apply_term",
                &path,
                &value,
                "ontology=pato",
                "--answer-with",
                "decide_choose",
                "--timeout",
                "10s",
            ];
            mesh_on_bus(&[&login[..], &call].concat()).await
        }
    };
    let out = run("length", "/mesh/home/ann/a").await;
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("decide_choose answered: length (PATO:0000122)")
    );
    let listed = ok(&ann, "avu_list", &json!({"path": "/mesh/home/ann/a"})).await;
    assert_eq!(
        listed["avus"],
        json!([{"attribute": "pato.length", "value": "length", "unit": "PATO:0000122"}])
    );

    // A word the fixture's terms only brush ("normal mass density", "deviation (from
    // normal)"): the chooser declines, and nothing is written.
    let out = run("normal", "/mesh/home/ann/b").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing written"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let listed = ok(&ann, "avu_list", &json!({"path": "/mesh/home/ann/b"})).await;
    assert_eq!(listed["avus"], json!([]));
}

/// `mesh decide learn fit` on a terminal shows each question's work as a bar (labels read,
/// then cards held out) and clears it; through a pipe it logs lines instead, no bar.
#[tokio::test]
async fn learn_fit_shows_a_bar_on_a_terminal_and_lines_through_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::open(&dir.path().join("sidecar.sqlite")).unwrap();
    synthetic_labels(&sidecar, 1500, 0.5, 0.8, 3);
    drop(sidecar);
    let home = tempfile::tempdir().unwrap();
    let fit = |home: &Path, dir: &Path| {
        let mut cmd = crate::cli::std_command(home);
        cmd.args(["decide", "learn", "fit", "--dir"]).arg(dir);
        cmd
    };
    let on_terminal = {
        let mut cmd = fit(home.path(), dir.path());
        tokio::task::spawn_blocking(move || crate::pty::run(&mut cmd, 100, 30))
            .await
            .unwrap()
    };
    let shown = &on_terminal.output;
    assert_eq!(on_terminal.code, 0, "{shown}");
    assert!(
        shown.contains("labels read") && shown.contains("/8 cards held out, "),
        "no bar: {shown:?}"
    );
    assert!(shown.starts_with("term.fits@"), "{shown:?}");
    assert!(!shown.contains("0/0"), "an empty bar was drawn: {shown:?}");
    assert!(shown.contains("bundle v1 written"), "{shown:?}");
    assert!(
        !shown.contains("features of 200"),
        "log lines on a terminal: {shown:?}"
    );

    let piped = fit(home.path(), dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(piped.status.success(), "{err}");
    assert!(err.contains(": features of 200 / 1500 labels\n"), "{err}");
    assert!(err.contains(": held out card 8 of 8\n"), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('['), "{err:?}");
    assert!(String::from_utf8_lossy(&piped.stdout).contains("bundle v2 written"));
}
