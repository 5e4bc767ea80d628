//! Backends answer a question about a state with a probability per option. The embedded
//! backend is deterministic: it scores each option from the state's words (column name,
//! description, type, unit, profile; a candidate's label and synonyms) and turns the scores
//! into probabilities with a softmax. Its answers are level L0: uncalibrated.

use crate::learn::winner::WinnerModel;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::evidence::Evidence;
use super::questions::{self, Question};

/// How far a probability can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Level {
    /// Straight from the backend's scores.
    L0,
    /// Calibrated on labels (the learning issue).
    L1,
    /// A fitted head (the learning issue).
    L2,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::L0 => "L0",
            Level::L1 => "L1",
            Level::L2 => "L2",
        }
    }
}

/// One option's score and probability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scored {
    pub option: String,
    pub score: f64,
    pub p: f64,
}

/// A backend's answer to one question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// In the order asked.
    pub options: Vec<Scored>,
    pub answer: String,
    pub p: f64,
    /// The answer's probability minus the runner-up's.
    pub margin: f64,
    pub level: Level,
    /// How the probabilities were made: `none: …` where nothing fitted them on labels
    /// (`none: softmax(T=1) of the backend's scores`), else the calibration applied.
    pub calibration: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("question {0} has no options to choose from")]
    NoOptions(String),
    #[error("the backend cannot answer {kind}: {why}")]
    Unanswerable { kind: String, why: String },
}

/// Something that answers questions.
pub trait Backend: Send + Sync {
    /// Its name as health reports and bundles record it.
    fn name(&self) -> String;

    fn ask(
        &self,
        question: &Question,
        state: &Value,
        options: &[String],
    ) -> Result<Answer, BackendError>;

    /// What an L2 head learns from for a yes/no question: the logit first (what L1
    /// calibrates), then whatever else the backend can say about the state.
    fn features(&self, question: &Question, state: &Value) -> Result<Vec<f64>, BackendError> {
        Ok(vec![logit(&self.ask(question, state, &yes_no())?)])
    }
    /// The head that says how likely a column's best candidate is right, from the
    /// candidates' `term.fits` features (see [`crate::learn::winner`]); `None`: this backend
    /// has none, and the winner's p is its p(fits), uncalibrated.
    fn winner_head(&self) -> Option<&WinnerModel> {
        None
    }

    /// Which of a candidate's `term.fits` features the winner head reads (all, unless the
    /// backend says fewer).
    fn winner_inputs(&self, fits: &[f64]) -> Vec<f64> {
        fits.to_vec()
    }
}

/// The options of a yes/no question.
pub fn yes_no() -> Vec<String> {
    vec!["yes".into(), "no".into()]
}

/// score(yes) − score(no): with scores as log-weights, the log-odds of yes.
pub fn logit(answer: &Answer) -> f64 {
    let score = |o: &str| {
        answer
            .options
            .iter()
            .find(|s| s.option == o)
            .map(|s| s.score)
            .unwrap_or(0.0)
    };
    score("yes") - score("no")
}

/// Scores into probabilities; the answer is the most probable option (the first on a tie).
pub fn answer_from_scores(options: &[String], scores: &[f64], temperature: f64) -> Answer {
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scores
        .iter()
        .map(|s| ((s - max) / temperature).exp())
        .collect();
    let total: f64 = exps.iter().sum();
    let scored: Vec<Scored> = options
        .iter()
        .zip(scores)
        .zip(&exps)
        .map(|((o, s), e)| Scored {
            option: o.clone(),
            score: *s,
            p: e / total,
        })
        .collect();
    let mut order: Vec<usize> = (0..scored.len()).collect();
    order.sort_by(|a, b| scored[*b].p.total_cmp(&scored[*a].p).then(a.cmp(b)));
    let best = &scored[order[0]];
    let runner_up = order.get(1).map(|i| scored[*i].p).unwrap_or(0.0);
    Answer {
        answer: best.option.clone(),
        p: best.p,
        margin: best.p - runner_up,
        level: Level::L0,
        // Scores made into probabilities, not fitted on labels: said so.
        calibration: format!("none: softmax(T={temperature}) of the backend's scores"),
        options: scored,
    }
}

/// The embedded, deterministic backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Embedded;

/// Words that point at an aspect.
const ASPECT_WORDS: [(&str, &[&str]); 7] = [
    (
        "quality",
        &[
            "length",
            "mass",
            "weight",
            "sex",
            "colour",
            "color",
            "size",
            "height",
            "width",
            "depth",
            "temperature",
            "area",
            "volume",
            "shape",
            "age",
        ],
    ),
    (
        "anatomy",
        &[
            "foot", "hindfoot", "ear", "tail", "leaf", "root", "organ", "tissue", "skull", "wing",
            "body", "eye",
            // A stage of life (adult, larva) is UBERON's (life cycle stage), not a quality.
            "stage",
        ],
    ),
    (
        "organism",
        &[
            "species",
            "taxon",
            "scientific",
            "organism",
            "genus",
            "taxonomic",
        ],
    ),
    (
        "chemical",
        &[
            "concentration",
            "nitrate",
            "nitrogen",
            "carbon",
            "phosphate",
            "chemical",
            "compound",
            "solute",
        ],
    ),
    (
        "disease",
        &[
            "disease",
            "infection",
            "pathogen",
            "parasite",
            "lesion",
            "symptom",
        ],
    ),
    ("cell", &["cell", "cellular", "cytometry"]),
    (
        "experimental factor",
        &[
            "treatment",
            "method",
            "protocol",
            "instrument",
            "assay",
            "sampling",
        ],
    ),
];

/// The ontologies the questions choose among.
const ASPECT_ONTOLOGIES: [&str; 7] = ["pato", "uberon", "ncbitaxon", "chebi", "mondo", "cl", "efo"];

/// Where each aspect's terms come from.
pub fn ontology_for(aspect: &str) -> &'static str {
    match aspect {
        "quality" => "pato",
        "anatomy" => "uberon",
        "organism" => "ncbitaxon",
        "chemical" => "chebi",
        "disease" => "mondo",
        "cell" => "cl",
        _ => "efo",
    }
}

/// Lower-cased words of a text, camelCase split (`hindfootLength` → hindfoot, length).
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            previous_lower = false;
            continue;
        }
        // camelCase splits, but not after a single letter: `pH` is one word, not p and h;
        // so is the `pH` that ends a camelCase word (`soilInWaterpH`: soil, in, water, ph).
        if c.is_uppercase() && previous_lower && word.chars().count() > 1 {
            let ph =
                c == 'H' && word.ends_with('p') && !chars.peek().is_some_and(|n| n.is_lowercase());
            if ph {
                word.pop();
                out.push(std::mem::take(&mut word));
                word.push('p');
            } else {
                out.push(std::mem::take(&mut word));
            }
        }
        previous_lower = c.is_lowercase();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The value at `path` (`/column/name`), as `Value::pointer` finds it but without making a
/// string of each step (the paths here have no `~` escapes): the scoring reads a state's
/// fields about twenty times per candidate, and `pointer`'s allocations were 7% of a run.
fn at<'a>(state: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('/').skip(1).try_fold(state, |v, step| match v {
        Value::Object(map) => map.get(step),
        Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn field<'a>(state: &'a Value, path: &str) -> &'a str {
    at(state, path).and_then(Value::as_str).unwrap_or_default()
}

/// What names the column ([`crate::card::name_of`]).
fn name_of(state: &Value) -> &str {
    crate::card::name_of(
        field(state, "/column/name"),
        field(state, "/column/description"),
    )
}

/// The column's words: name, description and unit; the profile's only when categorical.
fn column_words(state: &Value) -> Vec<String> {
    let mut w = words(name_of(state));
    w.extend(words(field(state, "/column/description")));
    w.extend(words(field(state, "/column/unit")));
    w
}

/// The evidence the graph read about the column (`evidence.rs`), if the state carries it.
fn evidence(state: &Value) -> Option<Evidence> {
    state
        .get("evidence")
        // Read in place: a copy of the evidence first cost as much as reading it.
        .and_then(|e| <Evidence as serde::Deserialize>::deserialize(e).ok())
}

/// The aspect whose usual ontology `ontology` is.
fn aspect_of(ontology: &str) -> &'static str {
    match ontology {
        "pato" => "quality",
        "uberon" => "anatomy",
        "ncbitaxon" => "organism",
        "chebi" => "chemical",
        "mondo" => "disease",
        "cl" => "cell",
        _ => "experimental factor",
    }
}

/// How much the evidence points at each ontology: terms the column's words name exactly
/// (the longest phrase), terms its values name (by their share of the rows), and what its
/// unit measures (a concentration is of a chemical named in the column; a temperature, a
/// conductivity, a length, a mass or a time is a quality).
fn evidence_for(ontology: &str, e: &Evidence) -> f64 {
    let mut score = 2.0 * e.named_in(ontology).min(4.0);
    if let Some(v) = e.values_in(ontology) {
        score += 1.5 + 3.0 * v.share;
        // Values whose lineages meet in a group (birds, insects, rodents): a column of that
        // group's members, however small each one's share of the rows (a survey's long tail
        // of species, 3% each).
        if v.only.is_some() {
            // One value in nearly every row: the column is about that one thing (`Organism
            // part: urine 100%` is urine, whatever kind of term its name names).
            score += ONLY_VALUE;
        } else if v.group.is_some() {
            score += LINEAGE;
        } else if v.common.is_some() && v.named >= 3 {
            // Three or more values that are kinds of one term (sites that are organs,
            // diagnoses that are diseases): what the column is, whatever a phrase of its
            // description names elsewhere ("anatomical site": EFO's body part).
            score += VALUES_KIND;
        }
    }
    match e.unit.as_deref() {
        // A concentration is of the chemical the column names, unless another ontology's
        // name for it says more ("C-reactive protein measurement" over "protein").
        Some("concentration")
            if ontology == "chebi"
                && e.named_in("chebi") > 0.0
                && ASPECT_ONTOLOGIES
                    .iter()
                    .all(|o| e.named_in(o) <= e.named_in("chebi")) =>
        {
            score += 2.5
        }
        // An enzyme's activity: EFO's measurement of it, never the chemical its name holds.
        Some("activity") if ontology == "efo" => score += 3.0,
        Some("activity") if ontology == "chebi" => score -= 2.0,
        // A percentage of a chemical it names (carbon of dry mass): the chemical's content.
        Some("share") if ontology == "chebi" && e.named_in("chebi") > 0.0 => score += 1.5,
        Some(
            "temperature" | "conductivity" | "length" | "area" | "volume" | "mass" | "density"
            | "area density" | "time",
        ) if ontology == "pato" => score += 2.0,
        _ => {}
    }
    score
}

/// What the embedded backend reads off a candidate term.
struct TermFit {
    /// The share of the label's words the column (or value) has (0.8 for a synonym it spells
    /// whole).
    covered: f64,
    /// Words of the label and synonyms the column has, at most 4.
    shared: f64,
    /// The candidate's place in the index's ranking.
    rank: f64,
    /// The column's name or description names the candidate exactly: the phrase's words
    /// (at most 4), more for its label than a synonym; 0 when it does not.
    exact: f64,
    /// The candidate is the term of the column's values (the one value of nearly every
    /// row, or the lowest term above them all).
    values: f64,
    /// `is_a` steps from the candidate to its ontology's top (at most 20), above the
    /// shallowest candidate's: of terms the column names alike, the general one.
    depth: f64,
    /// Other candidates that are kinds of this one (at most 4): the term they have in
    /// common ("biological sex" before "mixed sex").
    covers: f64,
    /// The column's unit measures a quality of this ontology: 1 when the candidate is it or
    /// a kind of it (depth for feet: a length), -1 when it is a quality other units measure
    /// (length for days), -0.4 when neither, else 0.
    unit_fits: f64,
    /// How near in meaning the column is to the candidate (a cosine), with sentence
    /// embeddings and a stored vector for the term; none otherwise.
    similarity: Option<f64>,
    /// Every word of the column's name is a word of the label (`lifeStage`: life cycle
    /// stage; `sex`: biological sex): 1, else 0.
    names_column: f64,
    /// One of the column's possible values, not what it is: named by its description
    /// alongside a sibling (`female` and `male` in "1=Male, 2=Female"): 1, else 0.
    alternative: f64,
    /// Every phrase of the column naming it lies inside a longer one naming another term of
    /// its ontology (`acid` in "uric acid"): the column says more than this term, 1; else 0.
    inside: f64,
    /// The column counts amounts of substance or charge (mmol/L, mEq/L): 1 for an element's
    /// ion (`sodium(1+)`: what a serum electrolyte is), -1 for the atom, else 0.
    ion: f64,
}

/// What carried a candidate's fit, as people read it: each part of the embedded backend's
/// score with what it adds (positive first, largest first; parts that add nothing left
/// out). The evidence `decide_explain` shows for a winner.
pub fn carried_by(kind: &str, state: &Value) -> Vec<(String, f64)> {
    let t = term_fit(kind, state);
    let mut parts: Vec<(String, f64)> = vec![
        ("the column's values name it".into(), 3.5 * t.values),
        (
            "the column's name or description names it exactly".into(),
            1.5 * t.exact,
        ),
        (
            format!(
                "the column has {:.0}% of its label's words",
                100.0 * t.covered
            ),
            3.0 * t.covered,
        ),
        (
            match t.shared as u64 {
                1 => "a word of its label or synonyms is the column's".into(),
                n => format!("{n} words of its label and synonyms are the column's"),
            },
            0.5 * t.shared,
        ),
        (
            if t.unit_fits >= 0.0 {
                "the column's unit measures it".into()
            } else {
                "the column's unit measures another quality".into()
            },
            2.5 * t.unit_fits,
        ),
        (
            match t.covers as u64 {
                1 => "another candidate is a kind of it".into(),
                n => format!("{n} other candidates are kinds of it"),
            },
            0.5 * t.covers,
        ),
        (
            format!("{} steps deeper than the shallowest candidate", t.depth),
            -0.3 * t.depth,
        ),
        (
            format!("ranked {} by the index", t.rank + 1.0),
            -0.2 * t.rank,
        ),
    ];
    parts.push((
        "its label has every word of the column's name".into(),
        NAMES_COLUMN * t.names_column,
    ));
    parts.push((
        "the description names it as one of the column's values".into(),
        -ALTERNATIVE * t.alternative,
    ));
    parts.push((
        "the column names it only inside a longer name of another term".into(),
        -INSIDE * t.inside,
    ));
    parts.push((
        if t.ion > 0.0 {
            "an ion, in a column of amounts of substance or charge".into()
        } else {
            "an atom, in a column of amounts of substance or charge".into()
        },
        ION * t.ion,
    ));
    if let Some(s) = t.similarity {
        parts.push((
            format!("near in meaning (cosine {s:.2})"),
            SIMILARITY * (s - SIMILAR),
        ));
    }
    parts.retain(|(_, w)| w.abs() >= 0.05);
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    parts
}

/// What a label that has every word of the column's name adds.
const NAMES_COLUMN: f64 = 1.0;

/// The places in [`Embedded`]'s `term.fits` features of what the winner head reads: every
/// one (with the column's unit the head adds, they tell right winners from wrong ones that
/// the score alone cannot: held out on the development part, Brier 0.132 against 0.144).
const WINNER_INPUTS: [usize; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];

/// What an ion adds (and an atom loses) in a column of amounts of substance or charge.
const ION: f64 = 2.0;

/// What naming a term only inside a longer name of another takes away.
const INSIDE: f64 = 2.0;

/// What being one of the values the description lists takes away.
const ALTERNATIVE: f64 = 2.5;

/// How much more likely a column is to be annotated when its values name three or more
/// terms of one ontology.
const SEVERAL_NAMED: f64 = 1.5;

/// The share of a column's filled rows its named values must hold to speak for the whole
/// column.
const WHOLE_COLUMN: f64 = 0.9;

/// How much more the values point at their ontology when their lineages meet in a named
/// group (`Values::group`): as much as a one-word name of the column's own.
const LINEAGE: f64 = 2.0;
/// How much more the values point at their ontology when one value is nearly every row.
const ONLY_VALUE: f64 = 4.0;
/// The same for values that are kinds of one term of any other ontology.
const VALUES_KIND: f64 = 2.0;

/// How much less likely an integer column without a unit is to be annotated.
const UNITLESS_INTEGER: f64 = 1.5;

/// How much less likely a string column is to be annotated when its values name no term.
const STRING_WITHOUT_TERMS: f64 = 1.5;

/// The score of "no" for a candidate: "yes" must beat it.
const NO_FIT: f64 = 1.5;

/// all-MiniLM-L6-v2's cosine of a column's text with a term's label: above `SIMILAR`
/// counts for the term, below against, `SIMILARITY` per unit.
const SIMILAR: f64 = 0.45;
const SIMILARITY: f64 = 2.0;

impl TermFit {
    fn fit(&self) -> f64 {
        3.0 * self.covered + 0.5 * self.shared - 0.2 * self.rank
            + 1.5 * self.exact
            + 3.5 * self.values
            - 0.3 * self.depth
            + 0.5 * self.covers
            + 2.5 * self.unit_fits
            + self.similarity.map_or(0.0, |s| SIMILARITY * (s - SIMILAR))
            + NAMES_COLUMN * self.names_column
            - ALTERNATIVE * self.alternative
            - INSIDE * self.inside
            + ION * self.ion
    }
}

/// Whether a unit counts amounts of substance or charge (mmol/L, mmol L-1, mEq/L).
fn molar(unit: &str) -> bool {
    let u = unit.to_ascii_lowercase();
    u.contains("mol") || u.contains("meq") || u.contains("eq/")
}

/// The metals a laboratory or a water sample holds as their ions (serum sodium is
/// `sodium(1+)`); not nitrogen, phosphorus or carbon, whose totals are counted in moles too.
const IONIC: [&str; 9] = [
    "lithium",
    "sodium",
    "potassium",
    "rubidium",
    "caesium",
    "magnesium",
    "calcium",
    "strontium",
    "barium",
];

/// Whether a label names an ion of one of [`IONIC`] (`sodium(1+)`, `calcium(2+)`).
fn ion_of_element(label: &str) -> bool {
    label.split_once('(').is_some_and(|(element, charge)| {
        IONIC.contains(&element) && (charge.ends_with("+)") || charge.ends_with("-)"))
    })
}

/// Whether a label is the atom of one of [`IONIC`].
fn atom_of_ionic(label: &str) -> bool {
    label
        .strip_suffix(" atom")
        .is_some_and(|element| IONIC.contains(&element))
}

fn term_fit(kind: &str, state: &Value) -> TermFit {
    // A column's values count too: the taxa of a species column are in its profile.
    let asked: Vec<String> = if kind == questions::CHOOSER.kind {
        words(field(state, "/value"))
    } else {
        // Not the unit a name or description writes (`mic_mgL`: no `MG(0:0/15:0/0:0)`).
        let unit = crate::evidence::unit_words(field(state, "/column/unit"));
        let mut w = column_words(state);
        w.retain(|x| !unit.contains(x));
        w.extend(words(field(state, "/column/profile")));
        // A plural covers its singular (`Triglycerides`: triglyceride).
        let singulars: Vec<String> = w
            .iter()
            .filter_map(|x| crate::evidence::singular(x).map(str::to_owned))
            .collect();
        w.extend(singulars);
        w
    };
    let mut names = words(field(state, "/candidate/label"));
    if let Some(syn) = at(state, "/candidate/synonyms").and_then(Value::as_array) {
        for s in syn.iter().filter_map(Value::as_str) {
            names.extend(words(s));
        }
    }
    // A number in a label (`iron(2+)`) is not matched by the numbers of a column's profile.
    let number = |w: &String| w.chars().all(|c| c.is_ascii_digit());
    names.retain(|w| !number(w));
    let label: Vec<String> = words(field(state, "/candidate/label"))
        .into_iter()
        .filter(|w| !number(w))
        .collect();
    let curie = field(state, "/candidate/curie");
    let (mut exact, mut values, mut by_synonym, mut inside) = (0.0f64, 0.0, 0.0f64, 0.0);
    // The one value of nearly every row is that value's term, however deep it sits.
    let mut the_only_value = false;
    // The column as written (a short synonym counts only where it is written with a capital).
    let column = format!(
        "{} {}",
        crate::evidence::prefix(name_of(state), crate::evidence::NAME_TEXT),
        crate::evidence::prefix(
            field(state, "/column/description"),
            crate::evidence::DESCRIPTION_TEXT
        )
    );
    if let Some(e) = evidence(state) {
        for f in e.found.iter().filter(|f| f.curie == curie) {
            // A longer phrase, a label, more phrases naming it, and (between terms named
            // alike) the more general term. The unit's quality is one name, however long.
            let words = if f.from == "unit" || f.from == "symbol" {
                1.0
            } else {
                (f.words as f64).min(4.0)
            };
            let named = match (f.loose, f.by_label) {
                (true, _) => words - 0.5,
                (false, true) => words + 1.0,
                (false, false) => words + 0.5,
            };
            exact = exact.max(named + 0.5 * (f.also as f64).min(2.0) - 0.05 * f.depth as f64);
            // A synonym the column spells whole covers the term (`pH` for acidity), a little
            // less than its label would.
            // A short synonym is an abbreviation: only when the column writes it as one
            // (`pH`, `BMI`), not as the common word or unit it also spells (`was`, `pct`).
            if !f.loose
                && !f.by_label
                && (f.from == "name" || f.from == "description")
                && crate::evidence::synonym_counts(&f.phrase, false, &column)
            {
                by_synonym = 0.8;
            }
        }
        let ontology = field(state, "/candidate/ontology");
        // A phrase inside a longer one the column says, naming another term of the ontology.
        // (EFO's "<run> measurement" compared by its run: "alanine" in "alanine
        // aminotransferase". The longer phrase counts however loosely it names its term: the
        // column says it.)
        let run = |p: &str| format!(" {} ", p.strip_suffix(" measurement").unwrap_or(p));
        let mine: Vec<_> = e
            .found
            .iter()
            .filter(|f| f.curie == curie && !f.loose && f.from != "unit")
            .map(|f| (f, run(&f.phrase)))
            .collect();
        let others: Vec<_> = if mine.is_empty() {
            Vec::new()
        } else {
            e.found
                .iter()
                .filter(|o| o.curie != curie)
                .map(|o| (o, run(&o.phrase)))
                .collect()
        };
        let within = |(f, r): &(&crate::evidence::Found, String)| {
            others.iter().any(|(o, or)| {
                o.ontology == f.ontology && o.from == f.from && or.len() > r.len() && or.contains(r)
            })
        };
        if !mine.is_empty() && mine.iter().all(within) {
            inside = 1.0;
        }
        if let Some(v) = e.values_in(ontology) {
            // The group a taxon column surveys over the lowest taxon its few values share.
            let is =
                |t: &Option<crate::evidence::Term>| t.as_ref().is_some_and(|t| t.curie == curie);
            the_only_value = is(&v.only);
            if the_only_value {
                // Nearly every row names it: the column is about that one thing, more than
                // about the kind its name says.
                values = 2.0;
            } else if is(&v.group) {
                values = 1.0;
            } else if is(&v.common) {
                values = if v.group.is_some() { 0.5 } else { 1.0 };
            }
        }
    }
    let label_text = field(state, "/candidate/label");
    let ion = if !molar(field(state, "/column/unit")) {
        0.0
    } else if ion_of_element(label_text) {
        1.0
    } else if atom_of_ionic(label_text) {
        -1.0
    } else {
        0.0
    };
    TermFit {
        exact,
        values,
        inside,
        ion,
        depth: if the_only_value {
            0.0
        } else {
            at(state, "/candidate/depth")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(20) as f64
        },
        covers: at(state, "/candidate/covers")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(4) as f64,
        unit_fits: at(state, "/candidate/unit_fits")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            .clamp(-1.0, 1.0),
        similarity: at(state, "/candidate/similarity")
            .and_then(Value::as_f64)
            .map(|s| s.clamp(-1.0, 1.0)),
        covered: (label.iter().filter(|w| asked.contains(w)).count() as f64
            / label.len().max(1) as f64)
            .max(by_synonym),
        shared: (names.iter().filter(|w| asked.contains(w)).count() as f64).min(4.0),
        rank: at(state, "/candidate/rank")
            .and_then(Value::as_u64)
            .unwrap_or(0) as f64,
        names_column: {
            let name: Vec<String> = words(name_of(state))
                .into_iter()
                .map(|w| {
                    crate::evidence::singular(&w)
                        .map(str::to_owned)
                        .unwrap_or(w)
                })
                .collect();
            f64::from(u8::from(
                !name.is_empty() && name.iter().all(|w| label.contains(w)),
            ))
        },
        alternative: if at(state, "/candidate/alternative")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            1.0
        } else {
            0.0
        },
    }
}

impl Backend for Embedded {
    fn name(&self) -> String {
        "embedded".into()
    }

    fn winner_head(&self) -> Option<&WinnerModel> {
        crate::learn::winner::default_model().filter(|m| m.backend == self.name())
    }

    /// Every part of the fit (with the margin, ontology and unit the head adds): alone, the
    /// score hardly tells a right winner from a wrong one among those proposed, and a
    /// threshold on it keeps them no more often right (docs/learning.md).
    fn winner_inputs(&self, fits: &[f64]) -> Vec<f64> {
        WINNER_INPUTS
            .iter()
            .filter_map(|i| fits.get(*i).copied())
            .collect()
    }

    fn features(&self, question: &Question, state: &Value) -> Result<Vec<f64>, BackendError> {
        if question.kind == questions::TERM_FITS.kind || question.kind == questions::CHOOSER.kind {
            let t = term_fit(question.kind, state);
            return Ok(vec![
                t.fit() - NO_FIT,
                t.covered,
                t.shared,
                t.rank,
                t.exact,
                t.values,
                t.depth,
                t.covers,
                t.unit_fits,
                t.similarity.unwrap_or(0.0),
                t.names_column,
                t.alternative,
                t.inside,
                t.ion,
            ]);
        }
        Ok(vec![logit(&self.ask(question, state, &yes_no())?)])
    }

    fn ask(
        &self,
        question: &Question,
        state: &Value,
        options: &[String],
    ) -> Result<Answer, BackendError> {
        if options.is_empty() {
            return Err(BackendError::NoOptions(question.key()));
        }
        let scores: Vec<f64> = match question.kind {
            k if k == questions::ANNOTATE.kind => {
                let kind = field(state, "/column/kind");
                let described = column_words(state);
                let informative = ASPECT_WORDS
                    .iter()
                    .flat_map(|(_, ws)| ws.iter())
                    .any(|w| described.iter().any(|d| d == w));
                let free_text = ["remarks", "notes", "comment", "comments", "description"]
                    .iter()
                    .any(|w| described.first().is_some_and(|d| d == w));
                let mut yes = 0.0;
                if informative {
                    yes += 2.0;
                }
                let unitless = field(state, "/column/unit").is_empty();
                if !unitless {
                    yes += 1.0;
                }
                if matches!(kind, "float" | "integer" | "number") {
                    yes += 0.5;
                }
                // Whole numbers without a unit are counts, ranks, scores and years far more
                // often than a quality a term names.
                if kind == "integer" && unitless {
                    yes -= UNITLESS_INTEGER;
                }
                if free_text {
                    yes -= 3.0;
                }
                // A column whose words or values name terms is about something a term names.
                if let Some(e) = evidence(state) {
                    let named = ASPECT_ONTOLOGIES
                        .iter()
                        .map(|o| e.named_in(o))
                        .fold(0.0, f64::max);
                    if named >= 1.5 {
                        yes += 1.0;
                    }
                    if e.values.iter().any(|v| v.share >= 0.5) {
                        yes += 1.0;
                    }
                    // Values that name several terms of one ontology (pneumonia, heart
                    // failure; bluegill, walleye): a column of things a term names, whatever
                    // its share of the rows the profile lists.
                    if e.values.iter().any(|v| v.named >= 3) {
                        yes += SEVERAL_NAMED;
                    } else if e
                        .values
                        .iter()
                        .any(|v| v.common.is_some() && v.share >= WHOLE_COLUMN)
                    {
                        // Fewer values, but every row one of them and all kinds of one term
                        // (female and male: biological sex): the column is that term's,
                        // whatever its name (`gender`) says.
                        yes += SEVERAL_NAMED;
                    }
                    // A column of words whose values name nothing (dispositions, methods,
                    // location names) is rarely about a term, whatever its name says: a
                    // curator annotates a categorical column by what its values are.
                    // Unless the column's name is a term's name or names a quality (`sex`,
                    // with values M and F): a quality's values are often codes, while
                    // organisms, tissues and diseases are named by theirs.
                    let values_named = e.values.iter().any(|v| v.share >= 0.2 || v.named >= 2);
                    let name = words(name_of(state));
                    let whole = name.join(" ");
                    // Or a subject its form records (`smoking` of `smoking_status`), which
                    // EFO names: the column is that subject's, as a quality's is.
                    let recorded = crate::evidence::recorded(&name);
                    let records = e.found.iter().any(|f| {
                        f.from == "name"
                            && !f.loose
                            && f.ontology == "efo"
                            && recorded.as_ref() == Some(&f.phrase)
                    });
                    if records {
                        yes += 1.0;
                    }
                    let name_named = records
                        || e.found
                            .iter()
                            .any(|f| f.from == "name" && !f.loose && f.phrase == whole)
                        || ASPECT_WORDS
                            .iter()
                            .filter(|(a, _)| *a == "quality")
                            .flat_map(|(_, ws)| ws.iter())
                            .any(|w| name.iter().any(|n| n == w));
                    if kind == "string" && !values_named && !name_named {
                        yes -= STRING_WITHOUT_TERMS;
                    }
                }
                options
                    .iter()
                    .map(|o| if o == "yes" { yes } else { 1.0 })
                    .collect()
            }
            k if k == questions::ASPECT.kind => {
                let e = evidence(state).unwrap_or_default();
                // The evidence for the aspect's usual ontology.
                let from_evidence = |aspect: &str| {
                    ASPECT_ONTOLOGIES
                        .iter()
                        .filter(|o| aspect_of(o) == aspect)
                        .map(|o| evidence_for(o, &e))
                        .fold(0.0, f64::max)
                };
                let described = column_words(state);
                // A measured value (with a unit) is a quality of something, whatever the
                // something is: "length of the hind foot" is a length.
                // Not so a concentration: an amount of a chemical per volume or mass.
                // A concentration of a chemical the column names; of nothing it names (`Minimum
                // inhibitory concentration`, mg/L), the measured quality it is.
                let concentration =
                    e.unit.as_deref() == Some("concentration") && e.named_in("chebi") > 0.0;
                let activity = e.unit.as_deref() == Some("activity");
                let measured =
                    !field(state, "/column/unit").is_empty() && !concentration && !activity;
                options
                    .iter()
                    .map(|o| {
                        let hits = ASPECT_WORDS
                            .iter()
                            .find(|(a, _)| a == o)
                            .map(|(_, ws)| {
                                ws.iter()
                                    .filter(|w| described.iter().any(|d| d == *w))
                                    .count()
                            })
                            .unwrap_or(0) as f64;
                        let base =
                            if (o == "quality" && measured) || (o == "chemical" && concentration) {
                                hits + 1.5
                            } else {
                                hits
                            };
                        base + from_evidence(o)
                    })
                    .collect()
            }
            k if k == questions::ONTOLOGY.kind => {
                let wanted = ontology_for(field(state, "/aspect"));
                let e = evidence(state).unwrap_or_default();
                options
                    .iter()
                    .map(|o| {
                        let prior = if o == wanted { 3.0 } else { 0.0 };
                        prior + evidence_for(o, &e)
                    })
                    .collect()
            }
            k if k == questions::TERM_FITS.kind || k == questions::CHOOSER.kind => {
                let fit = term_fit(k, state).fit();
                options
                    .iter()
                    .map(|o| if o == "yes" { fit } else { NO_FIT })
                    .collect()
            }
            k if k == questions::VALUE_KIND.kind => {
                // Nothing on a card tells these scores what the AVU's value should be: a
                // fixed answer is no probability. The graph applies the convention (the
                // column's name) as a rule, and says so.
                return Err(BackendError::Unanswerable {
                    kind: k.into(),
                    why: "nothing on the card tells the embedded backend what the value should be"
                        .into(),
                });
            }
            k if k == questions::KEEP.kind => {
                let p = at(state, "/winner/p")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.5);
                // Even where the head says its winners stop being right often enough
                // (`keep_at`, chosen on the development part), else at an even chance.
                let even = at(state, "/winner/keep_at")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.5);
                options
                    .iter()
                    .map(|o| if o == "yes" { 4.0 * p } else { 4.0 * even })
                    .collect()
            }
            other => {
                return Err(BackendError::Unanswerable {
                    kind: other.into(),
                    why: "no scoring rule".into(),
                });
            }
        };
        Ok(answer_from_scores(options, &scores, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_as_a_json_pointer_finds_it() {
        let state = json!({"column": {"name": "sex", "tags": ["a", "b"]}, "winner": {"p": 0.7}});
        for path in [
            "/column/name",
            "/column/tags/1",
            "/column/tags/2",
            "/winner/p",
            "/winner/q",
            "/column/name/x",
            "",
        ] {
            assert_eq!(at(&state, path), state.pointer(path), "{path}");
        }
    }
    use serde_json::json;

    fn opts(q: &Question) -> Vec<String> {
        q.options.iter().map(|s| s.to_string()).collect()
    }

    fn column(name: &str, description: &str, kind: &str, unit: &str) -> Value {
        json!({"column": {"name": name, "description": description, "kind": kind, "unit": unit}})
    }

    #[test]
    fn abbreviations_are_written_with_capitals() {
        use crate::evidence::written_with_capitals;
        assert!(written_with_capitals("soilInCaClpH", "ph"));
        assert!(written_with_capitals("BMI body mass", "bmi"));
        assert!(!written_with_capitals("sand_pct Sand, percent", "pct"));
        assert!(!written_with_capitals("Café, was", "was"));
        assert!(written_with_capitals("Fe_mgL Dissolved iron", "fe"));
        assert!(!written_with_capitals(
            "lifeStage Life stage of the animal",
            "life"
        ));
    }

    #[test]
    fn words_split_camel_case() {
        assert_eq!(words("hindfootLength"), ["hindfoot", "length"]);
        assert_eq!(words("pH_H2O"), ["ph", "h2o"]);
        assert_eq!(words("soilInWaterpH"), ["soil", "in", "water", "ph"]);
        assert_eq!(words("soilInCaClpH"), ["soil", "in", "ca", "cl", "ph"]);
        assert_eq!(words("stepHeight"), ["step", "height"]);
        assert_eq!(
            words("scientificName, as given"),
            ["scientific", "name", "as", "given"]
        );
    }

    #[test]
    fn probabilities_sum_to_one_and_the_margin_is_to_the_runner_up() {
        let a = answer_from_scores(&["a".into(), "b".into(), "c".into()], &[2.0, 1.0, 0.0], 1.0);
        let total: f64 = a.options.iter().map(|o| o.p).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert_eq!(a.answer, "a");
        assert!((a.margin - (a.options[0].p - a.options[1].p)).abs() < 1e-12);
        assert_eq!(a.level, Level::L0);
    }

    #[test]
    fn the_embedded_backend_reads_the_card() {
        let b = Embedded;
        let foot = column(
            "hindfootLength",
            "Length of the hind foot",
            "float",
            "millimeter",
        );
        assert_eq!(
            b.ask(&questions::ANNOTATE, &foot, &opts(&questions::ANNOTATE))
                .unwrap()
                .answer,
            "yes"
        );
        let remarks = column("remarks", "Technician remarks", "string", "");
        assert_eq!(
            b.ask(&questions::ANNOTATE, &remarks, &opts(&questions::ANNOTATE))
                .unwrap()
                .answer,
            "no"
        );
        assert_eq!(
            b.ask(&questions::ASPECT, &foot, &opts(&questions::ASPECT))
                .unwrap()
                .answer,
            "quality"
        );
        // A life stage is no quality (PATO's "life span" is not one): a stage of life.
        let stage = column(
            "lifeStage",
            "Life stage of the captured animal",
            "string",
            "",
        );
        assert_ne!(
            b.ask(&questions::ASPECT, &stage, &opts(&questions::ASPECT))
                .unwrap()
                .answer,
            "quality"
        );
        let species = column(
            "scientificName",
            "Scientific name of the captured animal",
            "string",
            "",
        );
        assert_eq!(
            b.ask(&questions::ASPECT, &species, &opts(&questions::ASPECT))
                .unwrap()
                .answer,
            "organism"
        );
        let asks = json!({"aspect": "organism"});
        assert_eq!(
            b.ask(&questions::ONTOLOGY, &asks, &opts(&questions::ONTOLOGY))
                .unwrap()
                .answer,
            "ncbitaxon"
        );
        let mut fits = foot.clone();
        fits["candidate"] = json!({"label": "length", "synonyms": [], "rank": 0});
        let yes = b
            .ask(&questions::TERM_FITS, &fits, &opts(&questions::TERM_FITS))
            .unwrap();
        fits["candidate"] = json!({"label": "momentum", "synonyms": [], "rank": 4});
        let no = b
            .ask(&questions::TERM_FITS, &fits, &opts(&questions::TERM_FITS))
            .unwrap();
        assert_eq!((yes.answer.as_str(), no.answer.as_str()), ("yes", "no"));
        assert!(yes.options[0].p > no.options[0].p);
        // Deterministic: the same question about the same state, the same answer.
        assert_eq!(
            b.ask(&questions::TERM_FITS, &fits, &opts(&questions::TERM_FITS))
                .unwrap(),
            no
        );
    }

    /// p(fits) of a candidate (`label`, in ChEBI) for `state`, with `found` as the evidence.
    fn p_fits(state: &Value, curie: &str, label: &str, found: Value) -> f64 {
        let mut s = state.clone();
        s["candidate"] =
            json!({"curie": curie, "label": label, "ontology": "chebi", "synonyms": [], "rank": 0});
        s["evidence"] = json!({"found": found, "values": [], "unit": null});
        Embedded
            .ask(&questions::TERM_FITS, &s, &opts(&questions::TERM_FITS))
            .unwrap()
            .options[0]
            .p
    }

    fn found(phrase: &str, curie: &str, label: &str) -> Value {
        json!({"phrase": phrase, "from": "description", "ontology": "chebi", "curie": curie,
               "label": label, "by_label": true, "words": phrase.split(' ').count(),
               "also": 0, "depth": 0})
    }

    #[test]
    fn an_electrolyte_counted_in_moles_is_its_ion_and_in_grams_its_element() {
        let atom = || found("sodium", "CHEBI:26708", "sodium atom");
        let serum = column("sodium", "Serum sodium", "float", "mmol/L");
        let (ion_p, atom_p) = (
            p_fits(&serum, "CHEBI:29101", "sodium(1+)", json!([atom()])),
            p_fits(&serum, "CHEBI:26708", "sodium atom", json!([atom()])),
        );
        assert!(ion_p > atom_p, "mmol/L: ion {ion_p} atom {atom_p}");
        let soil = column("Na", "Sodium in the sample", "float", "mg/kg");
        let (ion_p, atom_p) = (
            p_fits(&soil, "CHEBI:29101", "sodium(1+)", json!([atom()])),
            p_fits(&soil, "CHEBI:26708", "sodium atom", json!([atom()])),
        );
        assert!(atom_p > ion_p, "mg/kg: ion {ion_p} atom {atom_p}");
        assert!(ion_of_element("calcium(2+)") && ion_of_element("potassium(1+)"));
        assert!(!ion_of_element("sodium atom") && !ion_of_element("MG(0:0/15:0/0:0)"));
        // Total nitrogen in µmol/L is the element.
        assert!(!atom_of_ionic("nitrogen atom") && !ion_of_element("phosphorus(1+)"));
        assert!(molar("mmol L-1") && molar("mEq/L") && !molar("mg/L"));
    }

    #[test]
    fn a_term_named_only_inside_a_longer_name_of_another_loses_to_it() {
        let urate = column("LBXSUA", "Uric acid (mg/dL)", "float", "mg/dL");
        let named = json!([
            found("uric acid", "CHEBI:27226", "uric acid"),
            found("acid", "CHEBI:37527", "acid"),
        ]);
        let whole = p_fits(&urate, "CHEBI:27226", "uric acid", named.clone());
        let part = p_fits(&urate, "CHEBI:37527", "acid", named);
        assert!(whole > part, "uric acid {whole}, acid {part}");
        // Named on its own as well, it loses nothing.
        let alone = json!([found("acid", "CHEBI:37527", "acid")]);
        assert!(p_fits(&urate, "CHEBI:37527", "acid", alone) > part);
    }

    #[test]
    fn a_concentration_of_nothing_the_column_names_is_a_quality() {
        let mut mic = column(
            "mic_mgL",
            "Minimum inhibitory concentration",
            "float",
            "mg/L",
        );
        mic["evidence"] = json!({"found": [found("concentration", "PATO:0000033", "concentration of")
            .as_object().cloned().map(|mut f| { f.insert("ontology".into(), json!("pato")); f })],
            "values": [], "unit": "concentration"});
        let aspect = Embedded
            .ask(&questions::ASPECT, &mic, &opts(&questions::ASPECT))
            .unwrap();
        assert_eq!(aspect.answer, "quality");
        // Of a chemical it names, the chemical.
        let mut nitrate = column("NO3", "Nitrate", "float", "mg/L");
        nitrate["evidence"] = json!({"found": [found("nitrate", "CHEBI:17632", "nitrate")],
            "values": [], "unit": "concentration"});
        let aspect = Embedded
            .ask(&questions::ASPECT, &nitrate, &opts(&questions::ASPECT))
            .unwrap();
        assert_eq!(aspect.answer, "chemical");
    }
}
