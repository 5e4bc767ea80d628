//! Ranking by evidence on a real index (SQLite, imported from OBO files written here): a term
//! a column names exactly comes before one the search ranks, a formula names the atom before
//! its ions, a column whose values are taxa gets the lowest taxon above them, a concentration
//! goes to the chemical, an element to its atom (a compound counted as it to the compound),
//! a unit to its quality (and a unit in a name to no term), a measurement to what EFO calls
//! it, a plural to its singular, of two terms named alike the general one wins, and values
//! that are qualities (written out, as `M` and `F`, or as codes the description gives) name
//! the attribute they are values of.

use std::path::Path;

use mesh_decide::backend::Embedded;
use mesh_decide::card;
use mesh_decide::evidence::{Evidence, Terms};
use mesh_decide::graph;
use mesh_decide::policy::Policy;
use mesh_decide::store::sidecar::Sidecar;
use mesh_ontology::index::Index;

const PATO: &str = "format-version: 1.2
ontology: pato

[Term]
id: PATO:0000001
name: quality

[Term]
id: PATO:0001241
name: physical object quality
is_a: PATO:0000001

[Term]
id: PATO:0001995
name: organismal quality
is_a: PATO:0001241

[Term]
id: PATO:0000047
name: biological sex
is_a: PATO:0001995

[Term]
id: PATO:0001894
name: phenotypic sex
is_a: PATO:0000047

[Term]
id: PATO:0001338
name: mixed sex
is_a: PATO:0001894

[Term]
id: PATO:0000383
name: female
is_a: PATO:0001894

[Term]
id: PATO:0000384
name: male
is_a: PATO:0001894

[Term]
id: PATO:0000044
name: frequency
is_a: PATO:0000001

[Term]
id: PATO:0000169
name: viability
is_a: PATO:0001995

[Term]
id: PATO:0001421
name: alive
is_a: PATO:0000169

[Term]
id: PATO:0001422
name: dead
is_a: PATO:0000169

[Term]
id: PATO:0001986
name: dissolved
is_a: PATO:0000001

[Term]
id: PATO:0000146
name: temperature
is_a: PATO:0000001

[Term]
id: PATO:0001842
name: acidity
synonym: \"pH\" EXACT []
is_a: PATO:0000001

[Term]
id: PATO:0001708
name: 1-D extent
is_a: PATO:0000001

[Term]
id: PATO:0000122
name: length
is_a: PATO:0001708

[Term]
id: PATO:0001309
name: duration
is_a: PATO:0000001

[Term]
id: PATO:0000165
name: time
is_a: PATO:0000001

[Term]
id: PATO:0000011
name: age
is_a: PATO:0000165
";

const CHEBI: &str = "format-version: 1.2
ontology: chebi

[Term]
id: CHEBI:24431
name: chemical entity

[Term]
id: CHEBI:18248
name: iron atom
synonym: \"Fe\" EXACT []
synonym: \"iron\" EXACT []
is_a: CHEBI:24431

[Term]
id: CHEBI:29033
name: iron(2+)
synonym: \"Fe(2+)\" EXACT []
is_a: CHEBI:24431

[Term]
id: CHEBI:29034
name: iron(3+)
synonym: \"Fe(3+)\" EXACT []
is_a: CHEBI:24431

[Term]
id: CHEBI:25555
name: nitrogen atom
is_a: CHEBI:24431

[Term]
id: CHEBI:29351
name: nitrogen(.)
is_a: CHEBI:24431

[Term]
id: CHEBI:17632
name: nitrate
is_a: CHEBI:24431

[Term]
id: CHEBI:25805
name: oxygen atom
is_a: CHEBI:24431

[Term]
id: CHEBI:15379
name: dioxygen
is_a: CHEBI:24431

[Term]
id: CHEBI:36080
name: protein
is_a: CHEBI:24431

[Term]
id: CHEBI:17855
name: triglyceride
is_a: CHEBI:24431

[Term]
id: CHEBI:15377
name: water
is_a: CHEBI:24431

[Term]
id: CHEBI:132952
name: oxalate
is_a: CHEBI:24431

[Term]
id: CHEBI:30623
name: oxalate(2-)
is_a: CHEBI:132952

[Term]
id: CHEBI:46904
name: oxalate(1-)
is_a: CHEBI:132952

[Term]
id: CHEBI:17996
name: chloride
is_a: CHEBI:24431
";

const EFO: &str = "format-version: 1.2
ontology: efo

[Term]
id: EFO:0001444
name: measurement

[Term]
id: EFO:0004458
name: C-reactive protein measurement
is_a: EFO:0001444

[Term]
id: EFO:0004318
name: smoking behavior
synonym: \"smoking\" EXACT []

[Term]
id: EFO:0001799
name: ethnic group
synonym: \"race\" EXACT []

[Term]
id: EFO:0000719
name: temporal measurement
is_a: EFO:0001444

[Term]
id: EFO:0000433
name: duration
is_a: EFO:0000719

[Term]
id: EFO:0004949
name: clinical temporal measurement
is_a: EFO:0000719

[Term]
id: EFO:0000714
name: survival time
is_a: EFO:0004949

[Term]
id: EFO:0007058
name: last follow up

[Term]
id: EFO:0000001
name: rapid eye movement
synonym: \"REM\" EXACT []
";

const MONDO: &str = "format-version: 1.2
ontology: mondo

[Term]
id: MONDO:0000001
name: disease

[Term]
id: MONDO:0009723
name: Leigh syndrome
synonym: \"LS\" EXACT []
is_a: MONDO:0000001

[Term]
id: MONDO:0700096
name: human disease
is_a: MONDO:0000001

[Term]
id: MONDO:7770006
name: disorder of an anatomical system
is_a: MONDO:0700096

[Term]
id: MONDO:0005087
name: respiratory system disorder
is_a: MONDO:7770006

[Term]
id: MONDO:0005249
name: pneumonia
is_a: MONDO:0005087

[Term]
id: MONDO:0004979
name: asthma
is_a: MONDO:0005087

[Term]
id: MONDO:0005002
name: chronic obstructive pulmonary disease
is_a: MONDO:0005087

[Term]
id: MONDO:0005148
name: type 2 diabetes mellitus
is_a: MONDO:0700096

[Term]
id: MONDO:0005267
name: heart disorder
is_a: MONDO:0700096
";

const NCBITAXON: &str = "format-version: 1.2
ontology: ncbitaxon

[Term]
id: NCBITaxon:9989
name: Rodentia

[Term]
id: NCBITaxon:10040
name: Peromyscus
is_a: NCBITaxon:9989

[Term]
id: NCBITaxon:10041
name: Peromyscus leucopus
is_a: NCBITaxon:10040

[Term]
id: NCBITaxon:10042
name: Peromyscus maniculatus
is_a: NCBITaxon:10040

[Term]
id: NCBITaxon:447135
name: Myodes glareolus
is_a: NCBITaxon:9989

[Term]
id: NCBITaxon:10088
name: Mus <genus>
synonym: \"mouse\" EXACT []
is_a: NCBITaxon:9989

[Term]
id: NCBITaxon:10090
name: Mus musculus
synonym: \"house mouse\" EXACT []
synonym: \"mouse\" EXACT []
is_a: NCBITaxon:10088
";

const CARD: &str = "# Dataset: TEST.1 / evidence
Product: Evidence
Source: the tests
Sites: A
Rows: 100
- sex | Sex of the animal | string | - | M 48%, F 44%, U 8%
- Fe_mgL | Dissolved iron | float | mg/L | 0.01 to 2.3, median 0.2
- species | Species caught | string | - | Peromyscus leucopus 60%, Peromyscus maniculatus 30%, Myodes glareolus 10%
- waterTemp | Water temperature | float | degC | 2.0 to 24.5, median 12.0
- TN_mgL | Total nitrogen | float | mg/L | 0.11 to 2.60, median 0.38
- NO3_N | Nitrate as nitrogen | float | mg N/L | 0.002 to 1.840, median 0.093
- DO_mgL | Dissolved oxygen | float | mg/L | 7.1 to 14.6, median 11.2
- soilInWaterpH | pH of the soil in water | float | - | 3.2 to 9.1, median 5.4
- length_of_stay | Nights in hospital | integer | day | 0 to 212, median 4
- fishDataQF | Quality flag of the record | string | - | legacyData 3%
- crp | C-reactive protein | float | mg/L | 0.2 to 480.0, median 62.0
- trig | Triglycerides | float | mmol/L | 0.3 to 11.2, median 1.3
- flow_Ls | Stream discharge at the weir | float | L/s | 0.1 to 2100.0, median 22.4
";

fn index(dir: &Path) -> Index {
    let mut index = Index::open(&dir.join("index.sqlite")).unwrap();
    for (name, text) in [
        ("pato", PATO),
        ("chebi", CHEBI),
        ("ncbitaxon", NCBITAXON),
        ("efo", EFO),
        ("mondo", MONDO),
    ] {
        let file = dir.join(format!("{name}.obo"));
        std::fs::write(&file, text).unwrap();
        index.import(&file, |_| {}).unwrap();
    }
    index
}

/// A run of the graph over `card` on `index`, its sidecar in `dir`.
fn annotated(card: &card::Card, index: &Index, dir: &Path) -> graph::Run {
    let mut sidecar = Sidecar::open(&dir.join("sidecar.sqlite")).unwrap();
    graph::annotate_into(
        card,
        index,
        &Embedded,
        &Policy::defaults(),
        &mut sidecar,
        None,
        None,
    )
    .unwrap()
}

/// The test card's heading with `columns` (card lines) under it.
fn card_with(columns: &str) -> card::Card {
    card::parse(&format!(
        "{}{columns}",
        CARD.split("\n- ").next().unwrap().to_owned() + "\n"
    ))
    .unwrap()
}

/// The CURIEs the evidence of `card`'s column `name` names.
fn named_by(card: &card::Card, index: &Index, name: &str) -> Vec<String> {
    let column = card.columns.iter().find(|c| c.name == name).unwrap();
    Evidence::read(column, index as &dyn Terms)
        .unwrap()
        .found
        .into_iter()
        .map(|f| f.curie)
        .collect()
}

/// The CURIE `run` proposes for `column`, if any.
fn winner_of(run: &graph::Run, column: &str) -> Option<String> {
    run.groups
        .iter()
        .find(|g| g.column == column)
        .and_then(|g| g.winner.as_ref())
        .map(|w| w.curie.clone())
}

#[test]
fn exact_names_whole_before_loose() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let fe: Vec<String> = index
        .named("Fe")
        .unwrap()
        .into_iter()
        .map(|n| {
            format!(
                "{} {}",
                n.candidate.curie,
                if n.loose { "loose" } else { "whole" }
            )
        })
        .collect();
    // `Fe` is the atom's synonym whole; `Fe(2+)` and `Fe(3+)` are `fe` only loosely.
    assert_eq!(fe[0], "CHEBI:18248 whole", "{fe:?}");
    assert!(fe[1..].iter().all(|n| n.ends_with("loose")), "{fe:?}");
    assert_eq!(fe.len(), 3, "{fe:?}");
    // Nothing is named by a part of a name: `D-name` is not `name`.
    assert!(
        index
            .named("iron 2")
            .unwrap()
            .iter()
            .all(|n| n.loose || n.candidate.curie == "CHEBI:29033")
    );
    assert_eq!(index.parents("PATO:0001338").unwrap(), ["PATO:0001894"]);
}

#[test]
fn values_that_are_taxa_give_the_lowest_taxon_above_them() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card::parse(CARD).unwrap();
    let species = card.columns.iter().find(|c| c.name == "species").unwrap();
    let e = Evidence::read(species, &index as &dyn Terms).unwrap();
    let taxa = e.values_in("ncbitaxon").expect("values named in ncbitaxon");
    assert_eq!(taxa.named, 3);
    assert_eq!(taxa.common.as_ref().unwrap().curie, "NCBITaxon:9989");
    assert!(taxa.only.is_none());
    let two = card::parse(&CARD.replace(", Myodes glareolus 10%", "")).unwrap();
    let species = two.columns.iter().find(|c| c.name == "species").unwrap();
    let e = Evidence::read(species, &index as &dyn Terms).unwrap();
    assert_eq!(
        e.values_in("ncbitaxon")
            .unwrap()
            .common
            .as_ref()
            .unwrap()
            .label,
        "Peromyscus"
    );
}

#[test]
fn the_graph_proposes_what_the_evidence_names() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card::parse(CARD).unwrap();
    let run = annotated(&card, &index, dir.path());
    let proposed = |column: &str| {
        let group = run.groups.iter().find(|g| g.column == column);
        group
            .and_then(|g| g.winner.as_ref())
            .map(|w| (g_ontology(group), w.curie.clone()))
            .unwrap_or_else(|| panic!("nothing for {column}: {:#?}", run.groups))
    };
    fn g_ontology(g: Option<&graph::Group>) -> String {
        g.map(|g| g.ontology.clone()).unwrap_or_default()
    }
    // The general term, not the one below it that also says "sex".
    assert_eq!(proposed("sex"), ("pato".into(), "PATO:0000047".into()));
    // A concentration is of the chemical its name names, not the quality "dissolved".
    assert_eq!(proposed("Fe_mgL"), ("chebi".into(), "CHEBI:18248".into()));
    // Taxa in the values: the lowest taxon above them all.
    assert_eq!(
        proposed("species"),
        ("ncbitaxon".into(), "NCBITaxon:9989".into())
    );
    // °C: the quality the unit measures.
    assert_eq!(
        proposed("waterTemp"),
        ("pato".into(), "PATO:0000146".into())
    );
    // An element is ChEBI's atom, not the radical a bare "nitrogen" names there; oxygen is
    // measured as the gas.
    assert_eq!(proposed("TN_mgL"), ("chebi".into(), "CHEBI:25555".into()));
    assert_eq!(proposed("DO_mgL"), ("chebi".into(), "CHEBI:15379".into()));
    // Nitrate counted as nitrogen is nitrate.
    assert_eq!(proposed("NO3_N"), ("chebi".into(), "CHEBI:17632".into()));
    // `pH` at the end of a camelCase name is acidity's synonym.
    assert_eq!(
        proposed("soilInWaterpH"),
        ("pato".into(), "PATO:0001842".into())
    );
    // Days measure a duration: the "length" of a stay is no 1-D extent.
    assert_eq!(
        proposed("length_of_stay"),
        ("pato".into(), "PATO:0001309".into())
    );
    // A quality flag is set aside before any question.
    assert!(!run.groups.iter().any(|g| g.column == "fishDataQF"));
    // What EFO calls a measurement of the column's words says more than ChEBI's "protein".
    assert_eq!(proposed("crp"), ("efo".into(), "EFO:0004458".into()));
    // A plural names its singular.
    assert_eq!(proposed("trig"), ("chebi".into(), "CHEBI:17855".into()));
    // `Ls` is the unit (L/s), not Leigh syndrome's abbreviation.
    let flow = run.groups.iter().find(|g| g.column == "flow_Ls");
    assert!(
        flow.is_none_or(|g| g.ontology != "mondo"),
        "{:#?}",
        run.groups
    );
}

#[test]
fn a_huge_column_is_read_in_bounded_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    // Nearly the largest card there may be: 380 KB of description, a profile of a thousand values.
    let description = "dissolved iron temperature ".repeat(14_000);
    let profile: Vec<String> = (0..5_000)
        .map(|i| format!("Peromyscus leucopus {i} 1%"))
        .collect();
    let text = format!(
        "# Dataset: TEST.2 / huge\nProduct: Huge\nSource: the tests\nSites: A\nRows: 1\n- Fe_mgL | {description} | float | mg/L | {}\n",
        profile.join(", ")
    );
    let card = card::parse(&text).unwrap();
    let e = Evidence::read(&card.columns[0], &index as &dyn Terms).unwrap();
    assert!(e.found.len() <= 12, "{}", e.found.len());
    assert!(e.found.iter().any(|f| f.curie == "CHEBI:18248"));
}

/// Real NCBITaxon terms (as `ncbitaxon.obo.gz` holds them): two passerines' lineages up to
/// the birds, and the MONDO term a column's name `common` also names.
const BIRDS: &str = "format-version: 1.2
ontology: ncbitaxon

[Term]
id: NCBITaxon:192204
name: Corvoidea
is_a: NCBITaxon:9126

[Term]
id: NCBITaxon:28725
name: Corvidae
is_a: NCBITaxon:192204

[Term]
id: NCBITaxon:28726
name: Cyanocitta
is_a: NCBITaxon:28725

[Term]
id: NCBITaxon:28727
name: Cyanocitta cristata
synonym: \"blue jay\" EXACT []
is_a: NCBITaxon:28726

[Term]
id: NCBITaxon:3073808
name: Telluraves
synonym: \"core landbirds\" EXACT []
is_a: NCBITaxon:3078114

[Term]
id: NCBITaxon:3073809
name: Australaves
is_a: NCBITaxon:3073808

[Term]
id: NCBITaxon:3078114
name: Neoaves
is_a: NCBITaxon:8825

[Term]
id: NCBITaxon:8782
name: Aves
synonym: \"birds\" EXACT []
is_a: NCBITaxon:436492

[Term]
id: NCBITaxon:8825
name: Neognathae
is_a: NCBITaxon:8782

[Term]
id: NCBITaxon:9126
name: Passeriformes
synonym: \"song birds\" EXACT []
is_a: NCBITaxon:3073809

[Term]
id: NCBITaxon:9183
name: Turdidae
synonym: \"thrushes\" EXACT []
is_a: NCBITaxon:9126

[Term]
id: NCBITaxon:9186
name: Turdus
is_a: NCBITaxon:9183

[Term]
id: NCBITaxon:9188
name: Turdus migratorius
synonym: \"American robin\" EXACT []
synonym: \"robin\" EXACT []
is_a: NCBITaxon:9186

";

const NOT_RARE: &str = "format-version: 1.2
ontology: mondo

[Term]
id: MONDO:0021137
name: not rare
synonym: \"common\" EXACT []
";

const BIRD_CARD: &str = "# Dataset: TEST.2 / birds
Product: Bird observations
Source: the tests
Sites: A
Rows: 1000
- common_name | English common name of the taxon | string | - | American Robin 3%, Blue Jay 3%, 486 more
- scientific_name | Scientific name of the taxon | string | - | Turdus migratorius 3%, Cyanocitta cristata 3%, 486 more
- host | Species the sample was taken from | string | - | Turdus migratorius 100%
";

/// Lineage: the values' taxa give the lowest taxon they share (the song birds, here), and the
/// group a curator names is the plainly named one it is a kind of (birds); their lineage
/// outweighs a word of the column's name that another ontology names (`common`); a column
/// of one species is that species.
#[test]
fn a_column_of_species_is_the_group_their_lineage_shares() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
    for (name, text) in [("ncbitaxon", BIRDS), ("mondo", NOT_RARE), ("pato", PATO)] {
        let file = dir.path().join(format!("{name}.obo"));
        std::fs::write(&file, text).unwrap();
        index.import(&file, |_| {}).unwrap();
    }
    let card = card::parse(BIRD_CARD).unwrap();
    let column = |name: &str| card.columns.iter().find(|c| c.name == name).unwrap();
    let e = Evidence::read(column("scientific_name"), &index as &dyn Terms).unwrap();
    let taxa = e.values_in("ncbitaxon").expect("values named in ncbitaxon");
    assert_eq!(taxa.named, 2);
    let common = taxa.common.as_ref().unwrap();
    assert_eq!(
        (common.curie.as_str(), common.label.as_str()),
        ("NCBITaxon:9126", "Passeriformes")
    );
    let group = taxa.group.as_ref().unwrap();
    assert_eq!(
        (group.curie.as_str(), group.label.as_str()),
        ("NCBITaxon:8782", "Aves")
    );

    let run = annotated(&card, &index, dir.path());
    let proposed = |column: &str| {
        let group = run.groups.iter().find(|g| g.column == column);
        group
            .and_then(|g| {
                g.winner
                    .as_ref()
                    .map(|w| (g.ontology.clone(), w.curie.clone()))
            })
            .unwrap_or_else(|| panic!("nothing for {column}: {:#?}", run.groups))
    };
    for name in ["common_name", "scientific_name"] {
        assert_eq!(
            proposed(name),
            ("ncbitaxon".into(), "NCBITaxon:8782".into()),
            "{name}"
        );
    }
    assert_eq!(
        proposed("host"),
        ("ncbitaxon".into(), "NCBITaxon:9188".into())
    );
}

#[test]
fn values_shown_only_as_examples_name_the_ontologys_own_kind() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- condition_text | Condition as the clinician wrote it | string | - | 1,512 distinct, e.g. pneumonia, asthma, chronic obstructive pulmonary disease, blank 4%\n",
    );
    let column = &card.columns[0];
    // With shares, these are respiratory diseases (as `airway`'s are below); as three
    // examples of 1,512, which three the profile shows is an accident: the column is of
    // diseases.
    let e = Evidence::read(column, &index as &dyn Terms).unwrap();
    let values = e.values_in("mondo").unwrap();
    assert_eq!(values.named, 3);
    assert_eq!(values.share, 0.0);
    assert_eq!(values.common.as_ref().unwrap().curie, "MONDO:0000001");
    let run = annotated(&card, &index, dir.path());
    assert_eq!(
        winner_of(&run, "condition_text").as_deref(),
        Some("MONDO:0000001")
    );
}

#[test]
fn values_that_range_over_nearly_a_whole_ontology_name_its_top_kind() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- admission_reason | Reason for admission, as coded | string | - | pneumonia 30%, type 2 diabetes mellitus 25%, heart disorder 20%, asthma 10%, 140 more\n\
         - airway | Airway condition | string | - | pneumonia 60%, asthma 40%\n",
    );
    let column = |name: &str| card.columns.iter().find(|c| c.name == name).unwrap();
    // Their lowest common term, `human disease`, is one step below MONDO's top: the column
    // is of diseases, not of human ones as opposed to others.
    let e = Evidence::read(column("admission_reason"), &index as &dyn Terms).unwrap();
    let common = e.values_in("mondo").unwrap().common.as_ref().unwrap();
    assert_eq!(common.curie, "MONDO:0000001");
    // Three steps below the top, the values' own kind stands.
    let e = Evidence::read(column("airway"), &index as &dyn Terms).unwrap();
    let common = e.values_in("mondo").unwrap().common.as_ref().unwrap();
    assert_eq!(common.curie, "MONDO:0005087");
    let run = annotated(&card, &index, dir.path());
    let group = run
        .groups
        .iter()
        .find(|g| g.column == "admission_reason")
        .unwrap();
    assert_eq!(group.ontology, "mondo");
    assert_eq!(
        group.winner.as_ref().map(|w| w.curie.as_str()),
        Some("MONDO:0000001")
    );
}

#[test]
fn values_that_are_qualities_name_their_attribute() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- gender | Gender of the participant | string | - | Male 49%, Female 51%\n\
         - gndr | Recorded at intake | string | - | M 50%, F 49%, U 1%\n\
         - SEX_CD | Coded (1 = Male, 2 = Female) | integer | - | 1 48%, 2 52%\n\
         - death | 0=alive at last contact, 1=dead | integer | - | 0 72%, 1 28%\n\
         - grade | Grade (A, B, C) | string | - | A 30%, B 50%, C 20%\n",
    );
    let column = |name: &str| card.columns.iter().find(|c| c.name == name).unwrap();
    let attribute = |name: &str| {
        let e = Evidence::read(column(name), &index as &dyn Terms).unwrap();
        e.values_in("pato")
            .and_then(|v| v.common.as_ref())
            .map(|t| t.curie.clone())
    };
    // Written out: female and male are kinds of `phenotypic sex`, whose plainly named
    // attribute is `biological sex` (one head word, qualified); not `organismal quality`.
    assert_eq!(attribute("gender").as_deref(), Some("PATO:0000047"));
    // The two letters sex is coded with.
    assert_eq!(attribute("gndr").as_deref(), Some("PATO:0000047"));
    // Codes whose legend the description gives.
    assert_eq!(attribute("SEX_CD").as_deref(), Some("PATO:0000047"));
    // 0 and 1 mark whether something holds: no values read from the legend.
    assert_eq!(attribute("death"), None);
    // Letters that are no sex codes name nothing.
    assert_eq!(attribute("grade"), None);

    let run = annotated(&card, &index, dir.path());
    let winner = |name: &str| winner_of(&run, name);
    // Whatever the column's name says (`gender` names no term): its values speak.
    for name in ["gender", "gndr", "SEX_CD"] {
        assert_eq!(
            winner(name).as_deref(),
            Some("PATO:0000047"),
            "{name}: {:#?}",
            run.groups
        );
    }
}

#[test]
fn a_stranger_s_columns_are_read_for_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- donor_organism.diseases.ontology_label | A disease the donor had at the time of sampling | string | - | asthma 30%, pneumonia 20%, type 2 diabetes mellitus 10%, normal 40%\n\
         - donor_organism.organism_age | Age of the organism at the time of sampling | string | - | 45 12%, 60 9%, 33 8%, 71 7%\n\
         - p00940 | Chloride, water, filtered, milligrams per liter | float | mg/L | 0.5 to 410, median 18\n\
         - Organism | Organism | string | - | mouse 100%\n",
    );
    let run = annotated(&card, &index, dir.path());
    let winner = |name: &str| winner_of(&run, name);
    // A dotted path is its last segment that says something, and "at the time of sampling"
    // says when, not what: the donor is no chemical, the time no quality of the column.
    assert_eq!(
        winner("donor_organism.diseases.ontology_label").as_deref(),
        Some("MONDO:0000001"),
        "{:#?}",
        run.groups
    );
    assert_eq!(
        winner("donor_organism.organism_age").as_deref(),
        Some("PATO:0000011"),
        "{:#?}",
        run.groups
    );
    // The chemical measured, not the water it was measured in.
    assert_eq!(
        winner("p00940").as_deref(),
        Some("CHEBI:17996"),
        "{:#?}",
        run.groups
    );
    // `mouse` names the genus and the species: a column of it is the species.
    assert_eq!(
        winner("Organism").as_deref(),
        Some("NCBITaxon:10090"),
        "{:#?}",
        run.groups
    );
}

/// A short synonym the ontology writes without capitals is a word: a column named by it
/// names the term (`race`), where one written with capitals (`REM`) is an abbreviation that a
/// lower-case `rem` does not name. A column recording a subject (`smoking_status`,
/// `smoking_frequency`: never, former, current) is that subject's, not a frequency.
#[test]
fn a_word_names_its_term_and_a_status_records_its_subject() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- race | Race of the participant | string | - | Caucasian 84%, Asian 7%, Hispanic 3%\n\
         - rem | Score of the participant at rem | string | - | a 50%, b 50%\n\
         - smoking_status | Smoking status | string | - | never 52%, former 35%, current 13%\n\
         - smoking_frequency | How often do you smoke cigarettes? | string | - | Never 92%, Rarely 3%, Daily 2%\n",
    );
    let found = |name: &str| named_by(&card, &index, name);
    assert_eq!(found("race"), ["EFO:0001799"]);
    assert!(found("rem").is_empty(), "{:?}", found("rem"));
    assert_eq!(found("smoking_frequency"), ["EFO:0004318"]);
    let run = annotated(&card, &index, dir.path());
    for name in ["smoking_status", "smoking_frequency"] {
        assert_eq!(
            winner_of(&run, name).as_deref(),
            Some("EFO:0004318"),
            "{name}: {:#?}",
            run.groups
        );
    }
}

/// What a reagent takes out of a sample is the substance measured, not the reagent: the iron
/// of "Oxalate-extractable iron"; an extractant named alone is still what it says.
#[test]
fn an_extractant_is_how_a_substance_was_measured() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- Ox_Fe | Oxalate-extractable iron | float | g/kg | 0.1 to 60.2, median 2.5\n\
         - ox | Oxalate | float | mg/L | 0.1 to 2.0, median 0.4\n",
    );
    let named = |name: &str| named_by(&card, &index, name);
    assert!(
        !named("Ox_Fe").contains(&"CHEBI:132952".to_owned()),
        "{:?}",
        named("Ox_Fe")
    );
    assert!(named("ox").contains(&"CHEBI:132952".to_owned()));
    let run = annotated(&card, &index, dir.path());
    assert_eq!(
        winner_of(&run, "Ox_Fe").as_deref(),
        Some("CHEBI:18248"),
        "{:#?}",
        run.groups
    );
    assert_eq!(
        winner_of(&run, "ox").as_deref(),
        Some("CHEBI:132952"),
        "{:#?}",
        run.groups
    );
}

/// A duration that runs until death is a survival time, whatever events its description
/// names as its ends; a duration that does not end at death stays a duration.
#[test]
fn a_time_until_death_is_a_survival_time() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let card = card_with(
        "- survival_months | Months from diagnosis to death or last follow-up | integer | month | 0 to 167, median 52\n\
         - futime | days from enrollment until death | integer | day | 0 to 5215, median 4302\n\
         - follow_up_days | Days from diagnosis to last follow up | integer | day | 0 to 900, median 300\n",
    );
    let run = annotated(&card, &index, dir.path());
    for name in ["survival_months", "futime"] {
        assert_eq!(
            winner_of(&run, name).as_deref(),
            Some("EFO:0000714"),
            "{name}: {:#?}",
            run.groups
        );
    }
    assert_ne!(
        winner_of(&run, "follow_up_days").as_deref(),
        Some("EFO:0000714"),
        "{:#?}",
        run.groups
    );
}
