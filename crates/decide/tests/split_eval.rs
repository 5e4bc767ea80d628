//! `learn eval` on a split gold set: a folder holding `dev/` and `sealed/` is reported part
//! beside part, the development part exactly as it is reported alone, the sealed part with
//! everything fitted on the development part and without its rows — the winner head that
//! `--write-calibration` writes is fitted on the development part only and carries its
//! figures on the sealed one. On the three labelled cards of `tests/gold/` and the ontology
//! fixtures of `tests/ontologies/`.

use std::path::{Path, PathBuf};

use mesh_decide::backend::Embedded;
use mesh_decide::learn::eval::{self, Part};
use mesh_decide::policy::Policy;
use mesh_ontology::index::Index;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn index(dir: &Path) -> Index {
    let mut index = Index::open(&dir.join("ontology.sqlite")).unwrap();
    for o in ["pato", "uberon", "ncbitaxon"] {
        let file = repo().join(format!("tests/ontologies/{o}.obo"));
        index.import(&file, |_| {}).unwrap();
    }
    index
}

/// Copies the gold cards `names` of `tests/gold/` (card and gold file) into `to`.
fn copy_cards(names: &[&str], to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for name in names {
        for ext in ["md", "gold"] {
            let file = format!("{name}.{ext}");
            std::fs::copy(repo().join("tests/gold").join(&file), to.join(&file)).unwrap();
        }
    }
}

#[test]
fn a_split_set_is_reported_part_beside_part_and_fitted_on_its_development_part() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let split = dir.path().join("split");
    copy_cards(
        &["vole_morphometrics", "tortoise_survey", "mam_pertrapnight"],
        &split.join("dev"),
    );
    // The sealed card: one of them again (three cards are all the labelled set has; what is
    // measured here is how the parts are fitted and reported, not how good the head is).
    copy_cards(&["tortoise_survey"], &split.join("sealed"));
    let run = |folder: &Path| {
        eval::eval(folder, &index, None, &Embedded, &Policy::defaults(), None).unwrap()
    };
    let report = run(&split);
    let alone = run(&split.join("dev"));
    let sealed_alone = run(&split.join("sealed"));

    // The development part is measured as it would be alone.
    assert_eq!(report.part, Part::Development);
    assert_eq!(report.cards, 3);
    assert_eq!(
        serde_json::to_value(&report.levels).unwrap(),
        serde_json::to_value(&alone.levels).unwrap()
    );
    assert_eq!(report.rows.len(), alone.rows.len());
    assert!(alone.sealed.is_none(), "a folder of cards is not split");

    // The sealed part: its own cards, the graph's proposals as it makes them, no rows.
    let sealed = report
        .sealed
        .as_deref()
        .expect("the sealed part is reported");
    assert_eq!(sealed.part, Part::Sealed);
    assert_eq!(sealed.cards, 1);
    assert_eq!(sealed.gold_columns, sealed_alone.gold_columns);
    assert!(sealed.gold_columns > 0);
    assert!(
        sealed.rows.is_empty(),
        "the sealed part's rows are withheld"
    );
    assert_eq!(
        serde_json::to_value(sealed.annotate).unwrap(),
        serde_json::to_value(sealed_alone.annotate).unwrap()
    );
    assert_eq!(
        serde_json::to_value(&sealed.levels["L0"]).unwrap(),
        serde_json::to_value(&sealed_alone.levels["L0"]).unwrap()
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["sealed"]["rows"], serde_json::json!([]));
    assert_eq!(json["sealed"]["part"], "sealed");

    // The winner head written is the development part's, with its figures on the sealed
    // part: the same head's p on the sealed winners, not one fitted on them.
    let model = report
        .winner_model
        .as_ref()
        .expect("a head fits on three cards");
    assert_eq!(model.fitted_on.cards, 3);
    assert!(model.fitted_on.cards_dir.ends_with("dev"));
    let on_sealed = model.fitted_on.sealed.as_ref().expect("its sealed figures");
    assert_eq!(on_sealed.cards, 1);
    let w = sealed
        .winner_held_out
        .as_ref()
        .expect("the head on the sealed part");
    assert_eq!(on_sealed.metrics.n, w.metrics.n);
    assert_eq!(on_sealed.metrics.ece, w.metrics.ece);
    // Alone, the sealed card has no other card to fit a head on.
    assert!(sealed_alone.winner_model.is_none());
}
