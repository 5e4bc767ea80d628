//! What a column says about its terms before any ranking: terms its name or description
//! names exactly (a label or an exact synonym, in any ontology), terms its values name, the
//! lowest term that covers those values, and the kind of quantity its unit measures. Read
//! from the index's exact names (`Index::named`), deterministic, kept in the decisions'
//! state so that explain shows it and the backend answers from it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::backend::words;
use super::card::{Column, example_values, profile_values};
use super::elements;
use mesh_ontology::index::{About, Candidate, Index, IndexError, Named, Searched};
use mesh_ontology::vectors::{OntologyVectors, TermVectors};

/// What decide reads the index through: searches, exact names and parents.
pub trait Terms {
    fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError>;
    /// `search`, with the full-text fields of the caller's earlier searches in `searched`
    /// (`Index::search_remembering`); without an index, `search`.
    fn search_remembering(
        &self,
        searched: &Searched,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        let _ = searched;
        self.search(ontology, words, limit)
    }
    fn named(&self, text: &str) -> Result<Vec<Named>, IndexError>;
    /// `named` for many texts at once: each text that names terms, with them.
    fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        let mut out = Vec::new();
        for t in texts {
            let found = self.named(t)?;
            if !found.is_empty() {
                out.push((t.clone(), found));
            }
        }
        Ok(out)
    }
    fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError>;
    /// A live term's label by CURIE.
    fn label(&self, curie: &str) -> Result<Option<String>, IndexError>;
    /// A live term's label, synonyms and rank by CURIE.
    fn about(&self, curie: &str) -> Result<Option<About>, IndexError>;
    /// The stored vectors of `curies` of `ontology`, for those that have one (none at all
    /// when the ontology was imported without `--vectors`).
    fn term_vectors(
        &self,
        _ontology: &str,
        _curies: &[&str],
    ) -> Result<Vec<TermVectors>, IndexError> {
        Ok(Vec::new())
    }
    /// How near in meaning `text` is to each of `curies` of `ontology` (a cosine, -1 to 1),
    /// `None` where that is not known: the index alone knows no meaning (`semantic.rs` does).
    fn similarity(
        &self,
        _text: &str,
        _ontology: &str,
        curies: &[&str],
    ) -> Result<Vec<Option<f64>>, IndexError> {
        Ok(vec![None; curies.len()])
    }
    /// Every stored vector of `ontology` (none when it was imported without `--vectors`).
    fn ontology_vectors(&self, _ontology: &str) -> Result<OntologyVectors, IndexError> {
        Ok(OntologyVectors::default())
    }
    /// The `k` terms of `ontology` nearest in meaning to `text` (by their label or any
    /// synonym), nearest first: recall beyond the words. The index alone knows no meaning.
    fn nearest(
        &self,
        _text: &str,
        _ontology: &str,
        _k: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        Ok(Vec::new())
    }
}

/// The ontology a CURIE's prefix names, as the index names ontologies.
pub(crate) fn ontology_of(curie: &str) -> String {
    curie
        .split_once(':')
        .map(|(p, _)| p.to_ascii_lowercase())
        .unwrap_or_default()
}

impl Terms for Index {
    fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        Index::search(self, ontology, words, limit)
    }
    fn search_remembering(
        &self,
        searched: &Searched,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        Index::search_remembering(self, searched, ontology, words, limit)
    }
    fn named(&self, text: &str) -> Result<Vec<Named>, IndexError> {
        Index::named(self, text)
    }
    fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        Index::named_all(self, texts)
    }
    fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError> {
        Index::parents(self, curie)
    }
    fn about(&self, curie: &str) -> Result<Option<About>, IndexError> {
        Index::about(self, curie)
    }
    fn label(&self, curie: &str) -> Result<Option<String>, IndexError> {
        Ok(self
            .term(&ontology_of(curie), curie)?
            .filter(|(_, obsolete)| !obsolete)
            .map(|(label, _)| label))
    }
    fn term_vectors(
        &self,
        ontology: &str,
        curies: &[&str],
    ) -> Result<Vec<TermVectors>, IndexError> {
        Index::vectors(self, ontology, curies)
    }
    fn ontology_vectors(&self, ontology: &str) -> Result<OntologyVectors, IndexError> {
        Index::ontology_vectors(self, ontology)
    }
}

/// The index behind a lock (a serving decide): locked for each lookup only.
impl Terms for std::sync::Mutex<Index> {
    fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .search(ontology, words, limit)
    }
    fn search_remembering(
        &self,
        searched: &Searched,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .search_remembering(searched, ontology, words, limit)
    }
    fn named(&self, text: &str) -> Result<Vec<Named>, IndexError> {
        self.lock().unwrap_or_else(|p| p.into_inner()).named(text)
    }
    fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .named_all(texts)
    }
    fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .parents(curie)
    }
    fn label(&self, curie: &str) -> Result<Option<String>, IndexError> {
        Terms::label(&*self.lock().unwrap_or_else(|p| p.into_inner()), curie)
    }
    fn about(&self, curie: &str) -> Result<Option<About>, IndexError> {
        self.lock().unwrap_or_else(|p| p.into_inner()).about(curie)
    }
    fn term_vectors(
        &self,
        ontology: &str,
        curies: &[&str],
    ) -> Result<Vec<TermVectors>, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .vectors(ontology, curies)
    }
    fn ontology_vectors(&self, ontology: &str) -> Result<OntologyVectors, IndexError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .ontology_vectors(ontology)
    }
}

/// [`Terms`] remembering its exact names, parents and labels (a run's columns ask for
/// many of the same), and its searches' full-text fields.
pub struct Memo<'a> {
    terms: &'a dyn Terms,
    searched: Searched,
    named: RefCell<HashMap<String, Vec<Named>>>,
    parents: RefCell<HashMap<String, Vec<String>>>,
    labels: RefCell<HashMap<String, Option<String>>>,
    abouts: RefCell<HashMap<String, Option<About>>>,
}

impl<'a> Memo<'a> {
    pub fn new(terms: &'a dyn Terms) -> Memo<'a> {
        Memo {
            terms,
            searched: Searched::default(),
            named: RefCell::default(),
            parents: RefCell::default(),
            labels: RefCell::default(),
            abouts: RefCell::default(),
        }
    }
}

/// `key`'s value from `cache`, or `look_up`'s, remembered.
fn remembered<V: Clone>(
    cache: &RefCell<HashMap<String, V>>,
    key: &str,
    look_up: impl FnOnce() -> Result<V, IndexError>,
) -> Result<V, IndexError> {
    if let Some(found) = cache.borrow().get(key) {
        return Ok(found.clone());
    }
    let found = look_up()?;
    cache.borrow_mut().insert(key.to_owned(), found.clone());
    Ok(found)
}

impl Terms for Memo<'_> {
    fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        self.terms
            .search_remembering(&self.searched, ontology, words, limit)
    }
    fn named(&self, text: &str) -> Result<Vec<Named>, IndexError> {
        remembered(&self.named, text, || self.terms.named(text))
    }
    fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        let unknown: Vec<String> = {
            let known = self.named.borrow();
            texts
                .iter()
                .filter(|t| !known.contains_key(*t))
                .cloned()
                .collect()
        };
        if !unknown.is_empty() {
            let found = self.terms.named_all(&unknown)?;
            let mut known = self.named.borrow_mut();
            for t in unknown {
                known.entry(t).or_default();
            }
            for (t, named) in found {
                known.insert(t, named);
            }
        }
        let known = self.named.borrow();
        Ok(texts
            .iter()
            .filter_map(|t| {
                let found = &known[t];
                (!found.is_empty()).then(|| (t.clone(), found.clone()))
            })
            .collect())
    }
    fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError> {
        remembered(&self.parents, curie, || self.terms.parents(curie))
    }
    fn label(&self, curie: &str) -> Result<Option<String>, IndexError> {
        remembered(&self.labels, curie, || self.terms.label(curie))
    }
    fn about(&self, curie: &str) -> Result<Option<About>, IndexError> {
        remembered(&self.abouts, curie, || self.terms.about(curie))
    }
    fn term_vectors(
        &self,
        ontology: &str,
        curies: &[&str],
    ) -> Result<Vec<TermVectors>, IndexError> {
        self.terms.term_vectors(ontology, curies)
    }
    fn similarity(
        &self,
        text: &str,
        ontology: &str,
        curies: &[&str],
    ) -> Result<Vec<Option<f64>>, IndexError> {
        self.terms.similarity(text, ontology, curies)
    }
    fn ontology_vectors(&self, ontology: &str) -> Result<OntologyVectors, IndexError> {
        self.terms.ontology_vectors(ontology)
    }
    fn nearest(&self, text: &str, ontology: &str, k: usize) -> Result<Vec<Candidate>, IndexError> {
        self.terms.nearest(text, ontology, k)
    }
}

/// A term named exactly by a phrase of the column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Found {
    pub phrase: String,
    /// `name`, `description`, `unit` (the quality its unit measures) or `symbol` (the element
    /// a symbol in its name stands for).
    pub from: String,
    pub ontology: String,
    pub curie: String,
    pub label: String,
    /// Its label matched, not a synonym.
    pub by_label: bool,
    /// Named by the element a word of the column names ("nitrogen atom" for `nitrogen`): one
    /// word of the column, however ChEBI spells it.
    #[serde(default)]
    pub element: bool,
    /// Named only with single characters and stopwords left out (`ca` for `Ca(2+)`).
    #[serde(default)]
    pub loose: bool,
    /// Words in the phrase: a longer phrase says more.
    pub words: usize,
    /// Other phrases of the column that name the same term (`Fe` and `iron`).
    pub also: usize,
    /// `is_a` steps up to the ontology's top: of two terms a phrase names, the more general
    /// one, unless the column says more.
    pub depth: usize,
}

/// The terms a column's values name, in one ontology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Values {
    pub ontology: String,
    /// Distinct values named by a term of the ontology.
    pub named: usize,
    /// Their share of the rows, as the profile gives it (0–1).
    pub share: f64,
    /// The value's term when one value is nearly every row (≥ 90 %).
    pub only: Option<Term>,
    /// The lowest term every named value is (`is_a`), when there are two or more.
    pub common: Option<Term>,
    /// For taxa, the group the column surveys: from `common` up, the first taxon with a
    /// common name (see [`surveyed_group`]).
    #[serde(default)]
    pub group: Option<Term>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Term {
    pub curie: String,
    pub label: String,
}

/// Everything read about one column.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub found: Vec<Found>,
    pub values: Vec<Values>,
    /// What the unit measures: `concentration`, `temperature`, `conductivity`, `length`,
    /// `area`, `volume`, `mass`, `density`, `area density`, `time`, `share`, or none.
    pub unit: Option<String>,
}

/// At most this many exact names kept per column (longest phrases first).
const KEEP: usize = 12;
/// Longest description phrase looked up, in words.
const LONGEST: usize = 4;
/// Words of a column's name looked up.
const NAME_WORDS: usize = 12;
/// Words of a column's description looked up.
const DESCRIPTION_WORDS: usize = 40;

impl Evidence {
    /// Reads what `column` names, from its name, description, unit and profile.
    pub fn read(column: &Column, terms: &dyn Terms) -> Result<Evidence, IndexError> {
        let mut found = Vec::new();
        let mut seen = BTreeSet::new();
        let unit = unit_kind(column.unit.as_deref().unwrap_or_default());
        let description: Vec<String> = words(&column.description)
            .into_iter()
            .take(DESCRIPTION_WORDS)
            .collect();
        // Bounded, whatever a card holds: a name's first words.
        let name: Vec<String> = words(column.name_read())
            .into_iter()
            .take(NAME_WORDS)
            .collect();
        let mut asked = phrases(column, unit, &name, &description);
        // The quality a unit measures, by its name (a duration for hours, a temperature for °C).
        if let Some(quality) = unit.and_then(unit_quality) {
            asked.push(Asked::new("unit", quality.to_owned()));
        }
        // A single letter of the name or description (`F=Female`) is a code, not a term's
        // name: never looked up. An element's symbol is read as one on purpose (`symbol`).
        asked.retain(|a| a.from == "symbol" || a.from == "unit" || a.text.chars().count() > 1);
        let mut first: HashMap<String, Asked> = HashMap::new();
        let mut texts = Vec::new();
        for a in asked {
            if seen.insert(a.text.clone()) {
                texts.push(a.text.clone());
                first.insert(a.text.clone(), a);
            }
        }
        // As far as its words are read.
        let written = format!(
            "{} {}",
            prefix(column.name_read(), NAME_TEXT),
            prefix(&column.description, DESCRIPTION_TEXT)
        );
        // The name as one phrase: a short word that is all of it is the column's subject
        // (`race`), whatever it also abbreviates.
        let whole = name.join(" ");
        for (phrase, named) in terms.named_all(&texts)? {
            let a = &first[&phrase];
            for n in named {
                let whole_word = n.word && a.from == "name" && phrase == whole;
                if (a.from == "name" || a.from == "description")
                    && !whole_word
                    && (!synonym_counts(&phrase, n.by_label, &written)
                        || (n.ontology == "ncbitaxon"
                            && n.by_label
                            && common_word(&n.candidate.label, &written)))
                {
                    continue;
                }
                found.push(Found {
                    words: a.words,
                    phrase: phrase.clone(),
                    from: a.from.to_owned(),
                    ontology: n.ontology,
                    curie: n.candidate.curie,
                    label: n.candidate.label,
                    by_label: n.by_label,
                    loose: n.loose,
                    element: a.element,
                    also: 0,
                    depth: 0,
                });
            }
        }
        drop_basis(&mut found, &description);
        drop_containers(&mut found, &name, &description);
        drop_circumstances(&mut found, &description);
        drop_extractants(&mut found, &description);
        if unit == Some("time") {
            drop_endpoints(&mut found, &description);
            // Said more narrowly, the unit's quality is a survival time, not any duration.
            if found.iter().any(|f| f.phrase == SURVIVAL) {
                found.retain(|f| f.from != "unit" || f.phrase == SURVIVAL);
            }
        }
        if column.unit.is_none() {
            drop_forms(&mut found, &name);
        }
        if matches!(unit, Some("concentration" | "activity")) {
            drop_specimens(&mut found);
            drop_media(&mut found);
        }
        // A term several phrases name: its best phrase kept, counting the others.
        let mut named_by: BTreeMap<String, usize> = BTreeMap::new();
        for f in &found {
            *named_by.entry(f.curie.clone()).or_default() += 1;
        }
        // Longest phrases first, the name before the description, labels before synonyms.
        found.sort_by(|a, b| {
            b.words
                .cmp(&a.words)
                .then((a.from != "name").cmp(&(b.from != "name")))
                .then(a.loose.cmp(&b.loose))
                .then(b.by_label.cmp(&a.by_label))
        });
        let mut kept: Vec<Found> = Vec::new();
        for mut f in found {
            if kept.iter().any(|k| k.curie == f.curie) {
                continue;
            }
            f.also = named_by[&f.curie] - 1;
            kept.push(f);
            if kept.len() == KEEP {
                break;
            }
        }
        for f in &mut kept {
            f.depth = depth(&f.curie, terms)?;
        }
        let mut values = values(&column.profile, terms)?;
        values.extend(legend(&column.profile, &kept, &values, terms)?);
        Ok(Evidence {
            found: kept,
            values,
            unit: unit.map(str::to_owned),
        })
    }

    /// How strongly the column's own words name a term of `ontology` (0 none, higher more):
    /// the longest phrase that does, a label counting more than a synonym.
    pub fn named_in(&self, ontology: &str) -> f64 {
        self.found
            .iter()
            .filter(|f| f.ontology == ontology)
            .map(|f| {
                let words = if f.element { 1 } else { f.words };
                let named = words as f64 + if f.by_label { 0.5 } else { 0.0 };
                let named = if f.loose { named - 0.5 } else { named };
                // The name says what the column is; its description also says of what.
                if f.from == "name" { 1.5 * named } else { named }
            })
            .fold(0.0, f64::max)
    }

    /// The values' evidence for `ontology`, if its terms name some of them.
    pub fn values_in(&self, ontology: &str) -> Option<&Values> {
        self.values.iter().find(|v| v.ontology == ontology)
    }
}

/// Words a name ends with to say how a column records its subject, not what it is about
/// (`smoking_status`, `alcohol_frequency`: never, former, current; daily, rarely).
const FORMS: [&str; 2] = ["status", "frequency"];

/// What a name ending in one of [`FORMS`] records (`smoking` of `smoking_status`), if the
/// words before it are all its words.
pub fn recorded(name: &[String]) -> Option<String> {
    let (last, before) = name.split_last()?;
    (FORMS.contains(&last.as_str()) && !before.is_empty()).then(|| before.join(" "))
}

/// A column without a unit named `<subject> status` or `<subject> frequency`, whose subject
/// names a term of EFO (a behaviour, an exposure, a condition: `smoking`), records that
/// subject: the form word (PATO's `frequency`) names no term of the column.
fn drop_forms(found: &mut Vec<Found>, name: &[String]) {
    let Some(subject) = recorded(name) else {
        return;
    };
    let form = &name[name.len() - 1];
    if found
        .iter()
        .any(|f| f.from == "name" && !f.loose && f.ontology == "efo" && f.phrase == subject)
    {
        found.retain(|f| !(f.from == "name" && &f.phrase == form));
    }
}

/// The body fluids a laboratory measures in: a column of amounts of a substance or an
/// enzyme's activity (not `Urine volume (mL)`) that names
/// one (`serum albumin`, "Albumin, refrigerated serum (g/dL)", "Urine albumin to creatinine
/// ratio") says where the analyte was measured, not what was.
const SPECIMENS: [&str; 9] = [
    "serum",
    "blood serum",
    "plasma",
    "blood plasma",
    "blood",
    "whole blood",
    "urine",
    "saliva",
    "cerebrospinal fluid",
];

/// The media a chemical is measured in that ChEBI names as a chemical of its own.
const MEDIA: [&str; 1] = ["water"];

/// A concentration is of something in its medium, never of the medium ("Orthophosphate,
/// water, filtered", mg/L): the medium's names are dropped from a column of concentrations
/// (`water content` in percent is no concentration, and keeps its water).
fn drop_media(found: &mut Vec<Found>) {
    found.retain(|f| !(f.ontology == "chebi" && MEDIA.contains(&f.label.as_str())));
}

/// Drops the anatomy a specimen word names from a measured column's evidence.
fn drop_specimens(found: &mut Vec<Found>) {
    found.retain(|f| !(f.ontology == "uberon" && SPECIMENS.contains(&f.phrase.as_str())));
}

/// What a column is measured in or per (`UMIs counted in the cell`, `nitrate in water`,
/// `mass per leaf`, `soilInWaterpH`) is where or of what unit, not what it measures: a term
/// the description or the name names only right after `in`, `in the`, `per`, `within` or
/// `inside` (and the name does not name otherwise) is dropped. `name` and `description` are
/// their words.
fn drop_containers(found: &mut Vec<Found>, name: &[String], description: &[String]) {
    let contained_at = |words: &[String], at: usize| {
        let before = |k: usize| at.checked_sub(k).map(|i| words[i].as_str());
        matches!(before(1), Some("in" | "per" | "within" | "inside"))
            || (before(1) == Some("the") && matches!(before(2), Some("in" | "within" | "inside")))
    };
    let contained = |phrase: &str, words: &[String]| {
        let at = occurrences(phrase, words);
        !at.is_empty() && at.iter().all(|a| contained_at(words, *a))
    };
    // Named by the name only as its container (`Water` in `soilInWaterpH`).
    let name_contained = |f: &Found| f.from == "name" && contained(&f.phrase, name);
    let by_name: Vec<String> = found
        .iter()
        .filter(|f| f.from == "name" && !name_contained(f))
        .map(|f| f.curie.clone())
        .collect();
    let from_description = |f: &Found| f.from == "description" && !by_name.contains(&f.curie);
    // The words of every phrase named only as a container: `dry mass` in "per dry mass".
    let mut inside = vec![false; description.len()];
    for f in found.iter().filter(|f| from_description(f)) {
        let at = occurrences(&f.phrase, description);
        if !at.is_empty() && at.iter().all(|a| contained_at(description, *a)) {
            let n = f.phrase.split(' ').count();
            for a in at {
                inside[a..a + n].iter_mut().for_each(|w| *w = true);
            }
        }
    }
    // A term named only within those words (`mass` of `dry mass`) goes with them.
    found.retain(|f| {
        if name_contained(f) {
            return by_name.contains(&f.curie);
        }
        if !from_description(f) {
            return true;
        }
        let n = f.phrase.split(' ').count();
        let at = occurrences(&f.phrase, description);
        at.is_empty() || !at.iter().all(|a| inside[*a..*a + n].iter().all(|w| *w))
    });
}

/// Where `phrase` occurs in `description`'s words, as word positions.
fn occurrences(phrase: &str, description: &[String]) -> Vec<usize> {
    let words: Vec<&str> = phrase.split(' ').collect();
    let n = words.len();
    (0..(description.len() + 1).saturating_sub(n))
        .filter(|at| {
            description[*at..*at + n]
                .iter()
                .map(String::as_str)
                .eq(words.iter().copied())
        })
        .collect()
}

/// Words that say a substance was measured as what one reagent or medium takes out of a
/// sample: "Oxalate-extractable iron", "DTPA extractable zinc", "water-soluble carbon",
/// "exchangeable calcium".
const EXTRACTED: [&str; 5] = [
    "extractable",
    "extracted",
    "exchangeable",
    "soluble",
    "leachable",
];

/// The reagent or medium named right before one of [`EXTRACTED`] is how a substance was
/// measured, not what: a ChEBI term the description names only there is dropped when it
/// names another chemical (the iron of "Oxalate-extractable iron", not the oxalate).
fn drop_extractants(found: &mut Vec<Found>, description: &[String]) {
    let at_extractant = |a: usize, n: usize| {
        description
            .get(a + n)
            .is_some_and(|w| EXTRACTED.contains(&w.as_str()))
    };
    let extractant = |f: &Found| {
        let n = f.phrase.split(' ').count();
        let at = occurrences(&f.phrase, description);
        f.from == "description"
            && f.ontology == "chebi"
            && !at.is_empty()
            && at.iter().all(|a| at_extractant(*a, n))
    };
    let extractants: Vec<bool> = found.iter().map(extractant).collect();
    let measured = found
        .iter()
        .zip(&extractants)
        .any(|(f, x)| f.ontology == "chebi" && !x && f.from != "unit");
    if measured {
        let by_name: Vec<String> = found
            .iter()
            .filter(|f| f.from == "name" || f.from == "symbol")
            .map(|f| f.curie.clone())
            .collect();
        let mut x = extractants.into_iter();
        found.retain(|f| {
            let extractant = x.next().unwrap_or(false);
            by_name.contains(&f.curie) || !extractant
        });
    }
}

/// Words after which a description says when or under what the values were taken (`Age of
/// the organism at the time of sampling`, `Weight at birth`, `Stage during treatment`), not
/// what they are.
const CIRCUMSTANCE: [&str; 8] = [
    "at", "during", "when", "while", "upon", "until", "since", "after",
];

/// A term the description names only after its circumstance begins (`time` in "at the time
/// of sampling") and the name does not name is not what the column holds: dropped, as
/// [`drop_containers`] drops what a column is counted in.
fn drop_circumstances(found: &mut Vec<Found>, description: &[String]) {
    drop_after(found, description, |w| CIRCUMSTANCE.contains(&w));
}

/// Drops what the description names only from its first word (after the first) that
/// `starts` says begins what is not the column's subject, unless the name names it too.
fn drop_after(found: &mut Vec<Found>, description: &[String], starts: impl Fn(&str) -> bool) {
    let Some(from) = description
        .iter()
        .skip(1)
        .position(|w| starts(w))
        .map(|i| i + 1)
    else {
        return;
    };
    let by_name: Vec<String> = found
        .iter()
        .filter(|f| f.from == "name")
        .map(|f| f.curie.clone())
        .collect();
    found.retain(|f| {
        if f.from != "description" || by_name.contains(&f.curie) {
            return true;
        }
        let at = occurrences(&f.phrase, description);
        at.is_empty() || at.iter().any(|a| *a < from)
    });
}

/// An element a compound is counted as ("nitrate as nitrogen", "ammonium nitrogen") is not
/// what the column measures: when the description names a ChEBI compound and then such an
/// element, the element's names are dropped. Not so "total dissolved nitrogen". `description`
/// is bounded, as its lookups are.
fn drop_basis(found: &mut Vec<Found>, description: &[String]) {
    let compound = |phrase: &str| {
        found.iter().any(|f| {
            f.ontology == "chebi"
                && f.phrase == phrase
                && !f.loose
                && !f.element
                && elements::is_name(phrase).is_none()
        })
    };
    let mut basis = Vec::new();
    let mut named = false;
    for pair in description.windows(2) {
        let (before, w) = (&pair[0], &pair[1]);
        named |= compound(before);
        if let Some(element) = elements::is_name(w)
            && named
            && (before == "as" || compound(before))
        {
            basis.push(element);
        }
    }
    if basis.is_empty() {
        return;
    }
    found.retain(|f| {
        let of = elements::of_substance(&f.phrase).or_else(|| elements::is_name(&f.phrase));
        !(f.ontology == "chebi" && basis.iter().any(|b| of == Some(*b)))
    });
}

/// A text looked up for a column, where it came from, and how many of the column's words it
/// stands for (what a longer match is worth).
struct Asked {
    from: &'static str,
    text: String,
    words: usize,
    /// An element's substance ("nitrogen atom" for `nitrogen`).
    element: bool,
}

impl Asked {
    fn new(from: &'static str, text: String) -> Asked {
        let words = text.split(' ').count();
        Asked {
            from,
            text,
            words,
            element: false,
        }
    }
}

/// The words of a unit that are units (`mg`, `l` of `mg/L`), not what it counts (`co2` of
/// `µmol CO2 m-2 s-1`, `chl` of `µg chl a/L`).
pub fn unit_words(unit: &str) -> Vec<String> {
    const UNITS: [&str; 36] = [
        "mg",
        "ug",
        "ng",
        "pg",
        "g",
        "kg",
        "l",
        "ml",
        "dl",
        "ul",
        "m",
        "cm",
        "mm",
        "km",
        "s",
        "h",
        "hr",
        "min",
        "mol",
        "mmol",
        "umol",
        "nmol",
        "meq",
        "iu",
        "u",
        "pct",
        "percent",
        "liter",
        "litre",
        "milligram",
        "microgram",
        "gram",
        "per",
        "day",
        "days",
        "ppm",
    ];
    words(&unit.replace(['µ', 'μ'], "u"))
        .into_iter()
        .filter(|w| UNITS.contains(&w.as_str()))
        .collect()
}

/// The forms a column's unit takes in its name (`flow_Ls` for L/s, `As_ugL` for µg/L,
/// `hba1c_pct` for percent): a unit names no term, whatever an abbreviation says (`LS` is
/// Leigh syndrome in MONDO, `PCT` porphyria).
fn unit_forms(column: &Column, kind: Option<&str>) -> Vec<String> {
    // Its unit words only: the `CO2` of `µmol CO2 m-2 s-1` is what is counted, and looked up.
    let pieces = unit_words(column.unit.as_deref().unwrap_or_default());
    let mut forms = pieces.clone();
    forms.push(pieces.concat());
    if kind == Some("share") {
        forms.extend(["pct", "perc", "percent"].map(str::to_owned));
    }
    forms.retain(|f| !f.is_empty());
    forms
}

/// The singular of an English plural, for the last word of a phrase (`triglycerides`);
/// none for a word that is not one.
pub fn singular(word: &str) -> Option<&str> {
    if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") {
        Some(&word[..word.len() - 1])
    } else {
        None
    }
}

/// How much of a name and a description is read as written (for isotopes, capitals),
/// beside their words (bounded by [`NAME_WORDS`] and `DESCRIPTION_WORDS`).
pub(crate) const NAME_TEXT: usize = 256;
pub(crate) const DESCRIPTION_TEXT: usize = 1024;

/// The most isotopes a column's name or description is read for.
const ISOTOPES: usize = 4;

/// Phrases to look up: the whole name, each word of it, and every run of one to four words
/// of the description; the singular of a run ending in a plural; each run as the EFO names
/// a measurement of it ("C-reactive protein measurement"); the element a word or symbol
/// names.
/// `unit` is what the column's unit measures ([`unit_kind`]); `name` and `description`
/// their words, as many as are looked up (a megabyte of description is not a million
/// lookups).
fn phrases(
    column: &Column,
    unit: Option<&str>,
    name: &[String],
    description: &[String],
) -> Vec<Asked> {
    let mut out = Vec::new();
    let units = unit_forms(column, unit);
    if !name.is_empty() {
        out.push(Asked::new("name", name.join(" ")));
        // Joined (`hindfoot`, `no3`) and apart, but not the unit it ends with.
        out.push(Asked::new("name", name.concat()));
        for w in name.iter().filter(|w| !units.contains(w)) {
            out.push(Asked::new("name", w.clone()));
        }
    }
    // A description that spells the unit (`Creatine Phosphokinase (CPK) (IU/L)`) names no
    // term by it: the unit is what the values count, not what the column is about.
    let unit_only = |run: &[String]| run.iter().all(|w| units.contains(w));
    for len in (1..=LONGEST).rev() {
        for run in description.windows(len).filter(|r| !unit_only(r)) {
            out.push(Asked::new("description", run.join(" ")));
        }
    }
    // Up to three words: EFO's measurements and plural heads are short.
    for len in (1..LONGEST).rev() {
        for run in description.windows(len) {
            let (last, before) = run.split_last().expect("a run has words");
            let one = singular(last);
            let mut text = before.to_vec();
            text.push(one.unwrap_or(last).to_owned());
            let text = text.join(" ");
            if one.is_some() {
                out.push(Asked {
                    words: len,
                    ..Asked::new("description", text.clone())
                });
            }
            // EFO names what a column of measured values is: "<run> measurement".
            if !run.iter().any(|w| w == "measurement") {
                out.push(Asked {
                    words: len,
                    ..Asked::new("description", format!("{text} measurement"))
                });
            }
        }
    }
    // A duration that ends at death ("Months from diagnosis to death or last follow-up",
    // `days_to_death`) is a survival time, as clinical data name it: the quality its unit
    // measures, said more narrowly.
    if unit == Some("time") && (until_death(name) || until_death(description)) {
        out.push(Asked {
            words: 3,
            ..Asked::new("unit", SURVIVAL.to_owned())
        });
    }
    // An element's name means the element (ChEBI's "nitrogen atom"), not the radical or ion
    // a bare "nitrogen" or "iron" names there.
    for (from, ws) in [("name", name), ("description", description)] {
        for w in ws {
            if let Some(element) = elements::is_name(w) {
                out.push(Asked {
                    element: true,
                    ..Asked::new(from, elements::substance(element))
                });
            }
        }
    }
    // An isotope in its notation (`d15N`): more than its element's name says, the isotope
    // a ratio is measured of over the element a description names ("nitrogen stable isotope
    // ratio, delta 15N").
    for (from, text) in [
        ("name", prefix(column.name_read(), NAME_TEXT)),
        ("description", prefix(&column.description, DESCRIPTION_TEXT)),
    ] {
        // As far as the name's and description's words are read, and a few isotopes at most.
        for isotope in elements::isotopes(text, ISOTOPES) {
            out.push(Asked {
                words: 3,
                ..Asked::new(from, isotope)
            });
        }
    }
    // A symbol (`Fe`, `K`), spelled exactly, when the column is an amount of something or is
    // named by the symbol alone: `In` in `soilInWater` is no indium, `C` in `temp_C` no carbon.
    let amount = matches!(unit, Some("concentration" | "share"));
    let pieces = elements::pieces(column.name_read());
    let alone = pieces.len() == 1;
    for piece in pieces.into_iter().take(NAME_WORDS) {
        if let Some(element) = elements::by_symbol(piece).filter(|_| amount || alone) {
            // A symbol is one word, whatever ChEBI calls its element.
            out.push(Asked {
                words: 1,
                ..Asked::new("symbol", elements::substance(element))
            });
        }
    }
    out
}

/// A duration's description names the events it runs between ("Months from diagnosis to
/// death or last follow-up"): what it names only from its first `from`, `to`, `until` or
/// `till` on, and the name does not, is an endpoint, not what the column measures.
fn drop_endpoints(found: &mut Vec<Found>, description: &[String]) {
    drop_after(found, description, |w| {
        matches!(w, "from" | "to" | "until" | "till")
    });
}

/// What a duration until death is called.
const SURVIVAL: &str = "survival time";

/// Whether `words` say a time runs to a death: `to`, `until` or `till`, then `death` or
/// `died` within three words ("to death or last follow-up", "until the patient died").
fn until_death(words: &[String]) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        matches!(w.as_str(), "to" | "until" | "till")
            && words[i + 1..]
                .iter()
                .take(3)
                .any(|d| d == "death" || d == "died")
    })
}

/// The forms a value may name a term by: as written; the part in parentheses and the part
/// before them (`Adelie Penguin (Pygoscelis adeliae)`); and a scientific name without its
/// authority (`Perca flavescens (Mitchill, 1814)`, `Esox lucius Linnaeus, 1758`).
pub fn value_forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    // A label written after its ontology's prefix (`UBERON:feces`, as sample sheets carry
    // them): the label.
    if let Some((prefix, label)) = value.split_once(':')
        && !prefix.is_empty()
        && prefix.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
        && label.chars().any(char::is_alphabetic)
    {
        forms.push(label.trim().to_owned());
    }
    if let (Some(open), Some(close)) = (value.find('('), value.rfind(')'))
        && open < close
    {
        forms.push(value[open + 1..close].trim().to_owned());
        forms.push(value[..open].trim().to_owned());
    }
    // Clinical coding's "not otherwise specified" (`Brain, NOS`).
    if let Some(head) = value
        .strip_suffix(", NOS")
        .or_else(|| value.strip_suffix(" NOS"))
    {
        forms.push(head.trim().to_owned());
    }
    let words: Vec<&str> = value.split_whitespace().collect();
    let latin = |w: &str| w.chars().all(|c| c.is_ascii_lowercase()) && w.len() > 2;
    if words.len() > 2
        && words[0].chars().next().is_some_and(char::is_uppercase)
        && words[0].chars().skip(1).all(|c| c.is_ascii_lowercase())
        && latin(words[1])
        && !latin(words[2])
    {
        forms.push(format!("{} {}", words[0], words[1]));
    }
    forms.retain(|f| f.chars().filter(|c| c.is_alphabetic()).count() >= 2);
    forms.dedup();
    forms
}

/// Per ontology, the values its terms name; with the term of a value that is nearly every
/// row, or the lowest term above all named values.
fn values(profile: &str, terms: &dyn Terms) -> Result<Vec<Values>, IndexError> {
    let mut by_ontology: BTreeMap<String, Vec<(f64, Term)>> = BTreeMap::new();
    let all = profile_values(profile);
    // Shares of the rows that hold a value: a column mostly blank is about what its filled
    // rows say (`blank 88%, female 6%, male 5%` is a column of sexes).
    let blank: f64 = all
        .iter()
        .filter(|(v, _)| v == "blank")
        .map(|(_, s)| s)
        .sum();
    let filled = (1.0 - blank).max(0.01);
    let all = sex_letters(all);
    // A value that is a number or a one-letter code (`F`, `M`, `U`) names nothing.
    let values: Vec<(String, f64)> = all
        .into_iter()
        .filter(|(v, _)| v != "blank")
        .take(8)
        .filter(|(v, _)| v.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .map(|(v, s)| (v, (s / filled).min(1.0)))
        .collect();
    // And the values it shows only as examples, at no share: what the column holds, too.
    let mut values = values;
    for v in example_values(profile).into_iter().take(8) {
        if v.chars().filter(|c| c.is_alphabetic()).count() >= 2
            && !values.iter().any(|(w, _)| *w == v)
        {
            values.push((v, 0.0));
        }
    }
    // In the profile's order (answers come back in it), so the same card sums alike; each
    // value in the forms it may name a term by (`Adelie Penguin (Pygoscelis adeliae)`).
    let mut asked: Vec<String> = Vec::new();
    let mut of_value: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, (v, _)) in values.iter().enumerate() {
        for form in value_forms(v) {
            let of = of_value.entry(form.clone()).or_default();
            if of.is_empty() {
                asked.push(form);
            }
            if !of.contains(&i) {
                of.push(i);
            }
        }
    }
    // One term per ontology and value: the first form's that names one, its label's, else
    // the first synonym's.
    let mut taken: BTreeSet<(usize, String)> = BTreeSet::new();
    for (form, named) in terms.named_all(&asked)? {
        let named = narrower_taxa_first(named, terms)?;
        for &i in &of_value[&form] {
            let share = values[i].1;
            for n in &named {
                if lower_case_abbreviation(&form, n.by_label, &values[i].0) {
                    continue;
                }
                if !taken.insert((i, n.ontology.clone())) {
                    continue;
                }
                by_ontology.entry(n.ontology.clone()).or_default().push((
                    share,
                    Term {
                        curie: n.candidate.curie.clone(),
                        label: n.candidate.label.clone(),
                    },
                ));
            }
        }
    }
    let mut out = Vec::new();
    for (ontology, named) in by_ontology {
        let share: f64 = named.iter().map(|(s, _)| s).sum();
        let only = named
            .iter()
            .find(|(s, _)| *s >= 0.9)
            .map(|(_, t)| t.clone());
        let common = if named.len() >= 2 {
            let curies: Vec<String> = named.iter().map(|(_, t)| t.curie.clone()).collect();
            match kind_of_values(&ontology, &curies, terms)? {
                // Examples of many (no share): which few the profile shows is an accident,
                // so the column is of the ontology's own kind (chemical entity, disease).
                Some(c) if share == 0.0 && ontology != TAXA => Some(top_of(c, terms)?),
                other => other,
            }
        } else {
            None
        };
        let group = match &common {
            Some(c) if ontology == TAXA => surveyed_group(c, terms)?,
            _ => None,
        };
        out.push(Values {
            ontology,
            named: named.len(),
            share: share.min(1.0),
            only,
            common,
            group,
        });
    }
    Ok(out)
}

/// A value's taxa with the narrower before a broader one it also names by a common name
/// (`mouse`: Mus musculus before the genus Mus, `rat`: Rattus norvegicus before Rattus): a
/// column of one such value is of the species people mean by it. A label named whole stays
/// first; other ontologies' terms keep their order.
fn narrower_taxa_first(mut named: Vec<Named>, terms: &dyn Terms) -> Result<Vec<Named>, IndexError> {
    let taxa: Vec<&str> = named
        .iter()
        .filter(|n| n.ontology == TAXA && !n.by_label)
        .map(|n| n.candidate.curie.as_str())
        .collect();
    if taxa.len() < 2 {
        return Ok(named);
    }
    // How many of the value's other taxa each one is a kind of.
    let mut below: HashMap<String, usize> = HashMap::new();
    for curie in &taxa {
        let above = lineage(curie, terms)?;
        let n = taxa
            .iter()
            .filter(|t| above.iter().any(|a| a == *t))
            .count();
        below.insert((*curie).to_owned(), n);
    }
    // Stable: only taxa move, and only among themselves (each ontology's terms are taken
    // apart).
    named.sort_by_key(|n| {
        if n.ontology != TAXA {
            return (true, false, std::cmp::Reverse(0));
        }
        let deeper = below.get(&n.candidate.curie).copied().unwrap_or(0);
        (false, !n.by_label, std::cmp::Reverse(deeper))
    });
    Ok(named)
}

/// The term values of `ontology` are all kinds of, as a column of them is annotated.
fn kind_of_values(
    ontology: &str,
    curies: &[String],
    terms: &dyn Terms,
) -> Result<Option<Term>, IndexError> {
    let common = common_ancestor(curies, terms)?;
    Ok(match common {
        // Values that are qualities (female, male) are values of an attribute, and the
        // column is that attribute: their parent named plainly (`phenotypic sex` →
        // `biological sex`, see [`attribute`]), nothing where they meet only near the
        // top of the qualities (`organismal quality`: a column of anything).
        Some(c) if ontology == QUALITIES => attribute(c, terms)?,
        // Values whose lowest common term is within a step or two of the ontology's top
        // (`human disease`, `anatomical structure`) range over nearly all of it: the
        // column names the ontology's own kind (disease, anatomical entity), not the
        // accident of which few values the profile shows.
        Some(c) if ontology != TAXA => Some(top_kind(c, terms)?),
        other => other,
    })
}

/// A profile of one-letter values that are `M` and `F` (with `U` for unknown, in either
/// case): the letters every sex column is coded with, read as the values they stand for.
/// Only the pair: one letter alone, or with others, may be anything.
fn sex_letters(values: Vec<(String, f64)>) -> Vec<(String, f64)> {
    let letters: BTreeSet<String> = values
        .iter()
        .filter(|(v, _)| v != "blank")
        .map(|(v, _)| v.to_ascii_uppercase())
        .collect();
    let coded = letters.contains("M")
        && letters.contains("F")
        && letters
            .iter()
            .all(|l| matches!(l.as_str(), "M" | "F" | "U"));
    if !coded {
        return values;
    }
    values
        .into_iter()
        .map(|(v, s)| match v.to_ascii_uppercase().as_str() {
            "M" => ("male".to_owned(), s),
            "F" => ("female".to_owned(), s),
            _ => (v, s),
        })
        .collect()
}

/// A column of codes whose description gives their legend ("Sex (1 = Male, 2 = Female)",
/// values `1` and `2`): the terms its description names that are siblings — two or more of
/// one ontology with the same first parent — are its values, every row one of them. Nothing
/// for an ontology the values already name, or when the values are not codes (numbers, or
/// at most two letters).
fn legend(
    profile: &str,
    found: &[Found],
    values: &[Values],
    terms: &dyn Terms,
) -> Result<Vec<Values>, IndexError> {
    let codes: Vec<String> = profile_values(profile)
        .into_iter()
        .map(|(v, _)| v)
        .filter(|v| v != "blank")
        .collect();
    let is_code = |v: &String| {
        v.parse::<f64>().is_ok() || (v.chars().count() <= 2 && v.chars().all(char::is_alphanumeric))
    };
    // Codes 0 and 1 are a mark whether the 1 holds ("0=alive, 1=dead": died), not a choice
    // between two values: a yes/no column, which stays unannotated.
    let mark = codes.len() == 2 && codes.iter().all(|c| c == "0" || c == "1");
    if codes.len() < 2 || mark || !codes.iter().all(is_code) {
        return Ok(Vec::new());
    }
    let mut by_parent: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in found {
        if f.from != "description" || f.loose || values.iter().any(|v| v.ontology == f.ontology) {
            continue;
        }
        if let Some(parent) = terms.parents(&f.curie)?.into_iter().next() {
            let listed = by_parent.entry((f.ontology.clone(), parent)).or_default();
            if !listed.contains(&f.curie) {
                listed.push(f.curie.clone());
            }
        }
    }
    let mut out: Vec<Values> = Vec::new();
    for ((ontology, _), listed) in by_parent {
        if listed.len() < 2 || out.iter().any(|v| v.ontology == ontology) {
            continue;
        }
        out.push(Values {
            named: listed.len(),
            share: 1.0,
            only: None,
            common: kind_of_values(&ontology, &listed, terms)?,
            group: None,
            ontology,
        });
    }
    Ok(out)
}

/// How near an ontology's top a term is taken for the top itself ([`top_kind`]).
const NEAR_THE_TOP: usize = 2;

/// The attribute quality values are values of: from their lowest common quality up its first
/// parents while the parent's label has the same head word (`phenotypic sex` → `biological
/// sex`; not on to `organismal quality`) — PATO names an attribute and its kinds by one
/// head word, qualified. `None` when that is within [`NEAR_THE_TOP`] steps of the top: values
/// that meet only there (`present` and `absent` in `amount`, under `quantitative`, under
/// `quality`) are no attribute a column is about.
fn attribute(common: Term, terms: &dyn Terms) -> Result<Option<Term>, IndexError> {
    let head = |label: &str| label.rsplit(' ').next().unwrap_or(label).to_owned();
    let mut at = common;
    loop {
        let Some(parent) = terms.parents(&at.curie)?.into_iter().next() else {
            break;
        };
        let Some(label) = terms.label(&parent)? else {
            break;
        };
        if head(&label) != head(&at.label) {
            break;
        }
        at = Term {
            curie: parent,
            label,
        };
    }
    Ok((lineage(&at.curie, terms)?.len() > NEAR_THE_TOP).then_some(at))
}

/// The top of `term`'s first-parent lineage (itself at the top).
fn top_of(term: Term, terms: &dyn Terms) -> Result<Term, IndexError> {
    top_within(term, usize::MAX, terms)
}

/// `common`, or the top of its first-parent lineage when that is at most [`NEAR_THE_TOP`]
/// steps above it.
fn top_kind(common: Term, terms: &dyn Terms) -> Result<Term, IndexError> {
    top_within(common, NEAR_THE_TOP, terms)
}

/// The top of `term`'s first-parent lineage when that is at most `steps` above it, else
/// `term`.
fn top_within(term: Term, steps: usize, terms: &dyn Terms) -> Result<Term, IndexError> {
    let mut lineage = lineage(&term.curie, terms)?;
    if lineage.len() > steps {
        return Ok(term);
    }
    let Some(top) = lineage.pop() else {
        return Ok(term);
    };
    Ok(match terms.label(&top)? {
        Some(label) => Term { curie: top, label },
        None => term,
    })
}

/// The ontology of taxa.
const TAXA: &str = "ncbitaxon";

/// How far above the values' common taxon the surveyed group is looked for.
const GROUP_CLIMB: usize = 10;

/// Ranks a surveyed group is never above: past a class, a column's species are "animals".
const ABOVE_A_GROUP: [&str; 5] = [
    "superclass",
    "subphylum",
    "phylum",
    "superphylum",
    "kingdom",
];

/// The group a column of several taxa surveys, as a curator names it: from the values' lowest
/// common taxon up its first parents, the first with a common name — an exact synonym in
/// lower case for a kind in the plural (`birds`, `rodents`, `ground beetles`, `copepods`) —
/// not climbing past a class (the rank, where the index keeps ranks: `has_rank`). A group
/// named only as a kind of a broader one (`song birds`, `winged insects`, `hard ticks`: every
/// common name a qualified plural) is read as that broader group when its lineage reaches a
/// taxon with the plain name (`birds`, `insects`, `ticks`) within as many steps: the values a
/// profile shows are its commonest few, and a curator names the group they belong to by the
/// plain name. `None` when no group is found within [`GROUP_CLIMB`] steps.
pub fn surveyed_group(common: &Term, terms: &dyn Terms) -> Result<Option<Term>, IndexError> {
    let Some((group, names)) = named_group(&common.curie, terms, &|n| common_name(n))? else {
        return Ok(None);
    };
    // The head of each qualified name: `birds` of `song birds`.
    let heads: Vec<&str> = names
        .iter()
        .map(|n| n.rsplit(' ').next().unwrap_or(n))
        .collect();
    if names.is_empty() || names.iter().any(|n| !n.contains(' ')) {
        return Ok(Some(group));
    }
    let Some(parent) = terms.parents(&group.curie)?.into_iter().next() else {
        return Ok(Some(group));
    };
    let plain = |n: &str| heads.contains(&n);
    Ok(Some(
        named_group(&parent, terms, &plain)?.map_or(group, |(broader, _)| broader),
    ))
}

/// From `curie` up its first parents (at most [`GROUP_CLIMB`] steps, not past a class), the
/// first taxon with a synonym that `named` accepts, and those synonyms; a class is taken
/// whatever its synonyms (the ranks above it are no group a column surveys).
fn named_group(
    curie: &str,
    terms: &dyn Terms,
    named: &dyn Fn(&str) -> bool,
) -> Result<Option<(Term, Vec<String>)>, IndexError> {
    let mut at = curie.to_owned();
    for _ in 0..=GROUP_CLIMB {
        let Some(about) = terms.about(&at)? else {
            return Ok(None);
        };
        let names: Vec<String> = about
            .synonyms
            .iter()
            .filter(|s| named(s))
            .cloned()
            .collect();
        let term = Term {
            curie: at.clone(),
            label: about.label.clone(),
        };
        if !names.is_empty() {
            return Ok(Some((term, names)));
        }
        match about.rank.as_deref() {
            Some("class") => return Ok(Some((term, Vec::new()))),
            Some(r) if ABOVE_A_GROUP.contains(&r) => return Ok(None),
            _ => {}
        }
        match terms.parents(&at)?.into_iter().next() {
            Some(p) => at = p,
            None => return Ok(None),
        }
    }
    Ok(None)
}

/// A taxon's common name for a kind of animals: lower case, words of letters (a hyphen
/// allowed), the last a plural (`birds`, `hard ticks`, `ray-finned fishes`); not a list
/// (`mice and others`).
fn common_name(synonym: &str) -> bool {
    let words: Vec<&str> = synonym.split(' ').collect();
    synonym.len() >= 4
        && words.len() <= 3
        && !words
            .iter()
            .any(|w| matches!(*w, "and" | "or" | "other" | "others"))
        && words
            .iter()
            .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        && words
            .last()
            .is_some_and(|w| w.len() > 3 && w.ends_with('s') && !w.ends_with("ss"))
}

/// The `is_a` steps from `curie` up its first parents to a term without parents (at most
/// [`DEPTH`]): how general a term is, one lookup a level.
pub fn depth(curie: &str, terms: &dyn Terms) -> Result<usize, IndexError> {
    Ok(lineage(curie, terms)?.len())
}

/// The terms above `curie` along its first parents, nearest first (at most [`DEPTH`]).
pub fn lineage(curie: &str, terms: &dyn Terms) -> Result<Vec<String>, IndexError> {
    let mut at = curie.to_owned();
    let mut seen = BTreeSet::from([at.clone()]);
    let mut above = Vec::new();
    for _ in 0..DEPTH {
        match terms.parents(&at)?.into_iter().next() {
            Some(p) if seen.insert(p.clone()) => {
                above.push(p.clone());
                at = p;
            }
            _ => break,
        }
    }
    Ok(above)
}

/// The name of the quality a kind of unit measures.
fn unit_quality(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "temperature" => "temperature",
        "conductivity" => "electrical conductivity",
        // Length, depth, height, diameter, thickness: all kinds of it.
        "length" => "1-D extent",
        "area" => "area",
        "volume" => "volume",
        "mass" => "mass",
        "density" => "mass density",
        "area density" => "area density",
        "time" => "duration",
        _ => return None,
    })
}

/// Every quality a unit measures: a candidate that is a kind of one the column's unit does
/// not measure (a length for a column in days) is the wrong quality.
pub const UNIT_QUALITIES: [&str; 9] = [
    "temperature",
    "electrical conductivity",
    "1-D extent",
    "area",
    "volume",
    "mass",
    "mass density",
    "area density",
    "duration",
];

/// The ontology of qualities, whose values' common parent is not the column's term.
const QUALITIES: &str = "pato";

/// How far up `is_a` a common ancestor is looked for.
const DEPTH: usize = 40;

/// The lowest term every one of `curies` is (each counts as its own ancestor): of the
/// ancestors they share, the one nearest to them (the least summed distance).
fn common_ancestor(curies: &[String], terms: &dyn Terms) -> Result<Option<Term>, IndexError> {
    let mut distances: Vec<BTreeMap<String, usize>> = Vec::new();
    for c in curies {
        let mut seen: BTreeMap<String, usize> = BTreeMap::from([(c.clone(), 0)]);
        let mut frontier = vec![c.clone()];
        for depth in 1..=DEPTH {
            let mut next = Vec::new();
            for f in &frontier {
                for p in terms.parents(f)? {
                    if !seen.contains_key(&p) {
                        seen.insert(p.clone(), depth);
                        next.push(p);
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        distances.push(seen);
    }
    let Some((first, others)) = distances.split_first() else {
        return Ok(None);
    };
    let mut shared: Vec<(usize, &String)> = first
        .iter()
        .filter(|(c, _)| others.iter().all(|o| o.contains_key(*c)))
        .map(|(c, d)| (d + others.iter().map(|o| o[c]).sum::<usize>(), c))
        .collect();
    shared.sort();
    // Only a term the index has: a parent named in a file need not be one of its terms. Not
    // a class that sorts terms by something ("disease by body system or component"): that
    // is no kind a curator names a column by.
    for (_, curie) in shared {
        if let Some(label) = terms.label(curie)?
            && !label.contains(" by ")
        {
            return Ok(Some(Term {
                curie: curie.clone(),
                label,
            }));
        }
    }
    Ok(None)
}

/// Whether `text` writes the lower-case `word` somewhere as an abbreviation: a capital
/// after its first letter (`pH`, `BMI`), or a capital first in a word of at most three
/// letters (`Fe`, `Ca`). A longer word capitalised only first is a sentence's first word
/// ("Life stage of …" does not write the synonym `life` of "life cycle").
pub fn written_with_capitals(text: &str, word: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.match_indices(word).any(|(at, w)| {
        let written = &text[at..at + w.len()];
        let mut chars = written.chars();
        let first = chars.next().is_some_and(char::is_uppercase);
        chars.any(char::is_uppercase) || (first && written.chars().count() <= 3)
    })
}

/// Whether a one-word label written with a capital (a genus: `Data`, `This`, `Phos`) is
/// met in the text only as the common word it also is, never with its capital.
fn common_word(label: &str, text: &str) -> bool {
    let mut chars = label.chars();
    chars.next().is_some_and(char::is_uppercase)
        && chars.all(char::is_lowercase)
        && !crate::elements::pieces(text).contains(&label)
}

/// Whether a phrase a synonym matched is an abbreviation the text does not write as one: a
/// short single word (`be`, `was`, `cf.`) that names a term only by its synonym (`BE`,
/// `CF`) and is written without capitals — the common word, not the term.
fn lower_case_abbreviation(phrase: &str, by_label: bool, text: &str) -> bool {
    !by_label && phrase.len() <= 4 && !phrase.contains(' ') && !written_with_capitals(text, phrase)
}

/// Whether a phrase of a column's name or description names the term it matched: a label,
/// a longer phrase, or a short synonym the column writes as an abbreviation (`pH`, `BMI`) —
/// any short word, in a column written without capitals, which cannot tell (`soil_ph`).
pub fn synonym_counts(phrase: &str, by_label: bool, column: &str) -> bool {
    !lower_case_abbreviation(phrase, by_label, column) || !column.chars().any(char::is_uppercase)
}

/// The start of `text`, at most `bytes` long, cut at a character.
pub(crate) fn prefix(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Siemens or mhos (or milli-, micro-, deci-) per centimetre or metre, as water quality
/// writes a conductivity (`µS/cm`, `dS/m`, `umhos/cm`, `mS cm-1`, `SpC uS/cm @25C`): not a
/// count per cubic millimetre (`cells/mm3`) or a time per minute (`ms/min`), which merely
/// begin alike. `u` is lower case, with µ written u.
fn conductance_per_length(u: &str) -> bool {
    let conductance = |w: &str| {
        [
            "s", "ms", "us", "ds", "mho", "mhos", "mmho", "mmhos", "umho", "umhos",
        ]
        .contains(&w)
    };
    // The leading letters of what follows are exactly a length's: `cm`, `m` (then a digit,
    // a space, `@` or the end).
    let length = |d: &str| {
        let letters: String = d.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        letters == "cm" || letters == "m"
    };
    // `uS/cm`, `us / cm`: the last word before the slash over the first after it.
    if let Some((over, under)) = u.split_once('/') {
        let last = over.split_whitespace().last().unwrap_or_default();
        let first = under.split_whitespace().next().unwrap_or_default();
        if conductance(last) && length(first) {
            return true;
        }
    }
    // `mS cm-1`, `S m^-1`: a conductance, then a length to the power −1.
    let words: Vec<&str> = u.split_whitespace().collect();
    words.windows(2).any(|w| {
        conductance(w[0]) && ["cm-1", "m-1", "cm^-1", "m^-1", "cm⁻¹", "m⁻¹"].contains(&w[1])
    })
}

/// What a unit measures, read off its spelling.
pub fn unit_kind(unit: &str) -> Option<&'static str> {
    let u = unit.trim().to_lowercase().replace(['µ', 'μ'], "u");
    if u.is_empty() || u == "-" {
        return None;
    }
    let per_volume = [
        "/l",
        "/ml",
        "/dl",
        "/m3",
        "per liter",
        "per litre",
        "per milliliter",
        "per deciliter",
        "per kilogram",
        "per gram",
        "/kg",
        "/g",
    ]
    .iter()
    .any(|p| u.contains(p));
    // Spelled out too (`milligram per liter`), and read before the `per` (`milliliter per
    // kilogram` is no amount of a substance).
    let numerator = u
        .split(" per ")
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default();
    let amount = ["mol", "meq", "ppm", "ppb", "ppt", "mg", "ug", "ng", "gram"]
        .iter()
        .any(|p| numerator.contains(p))
        || numerator.ends_with('g');
    // Enzyme units per volume (U/L, IU/L): a catalytic activity, which a chemical's amount
    // is not (EFO measures it: "alanine aminotransferase measurement").
    let spaced = u.replace(' ', "");
    if [
        "u/l", "iu/l", "u/liter", "iu/liter", "u/ml", "iu/ml", "units/l", "kat/l", "ukat/l",
    ]
    .contains(&spaced.as_str())
    {
        return Some("activity");
    }
    // A mass per volume of a material, per area of ground or leaf: no chemical's amount.
    if [
        "g/cm3", "gcm-3", "g/cm^3", "kg/m3", "kgm-3", "kg/m^3", "t/m3",
    ]
    .contains(&spaced.as_str())
    {
        return Some("density");
    }
    if [
        // Not kg/m2: that is a body mass index.
        "g/m2", "gm-2", "g/m^2", "kg/ha", "t/ha", "mg/cm2", "g/cm2",
    ]
    .contains(&spaced.as_str())
    {
        return Some("area density");
    }
    if (per_volume && amount)
        || ["ppm", "ppb", "mmol", "umol", "nmol", "meq"]
            .iter()
            .any(|p| u.contains(p))
    {
        return Some("concentration");
    }
    if conductance_per_length(&u) || u.contains("siemens") {
        return Some("conductivity");
    }
    if u.contains("°c")
        || u.contains("degc")
        || u.contains("deg c")
        || u.contains("celsius")
        || u.contains("°f")
        || u.contains("kelvin")
        || u == "k"
        || u == "c"
    {
        return Some("temperature");
    }
    if [
        "mm",
        "cm",
        "km",
        "meter",
        "metre",
        "millimeter",
        "centimeter",
        "foot",
        "feet",
        "inch",
        "m",
    ]
    .iter()
    .any(|p| u == *p)
    {
        return Some("length");
    }
    if [
        "g",
        "kg",
        "mg",
        "gram",
        "grams",
        "kilogram",
        "milligram",
        "lb",
        "pound",
    ]
    .iter()
    .any(|p| u == *p)
    {
        return Some("mass");
    }
    if [
        "s", "sec", "second", "seconds", "min", "minute", "minutes", "h", "hour", "hours", "day",
        "days", "week", "weeks", "month", "months", "year", "years", "yr",
    ]
    .iter()
    .any(|p| u == *p)
    {
        return Some("time");
    }
    if [
        "m2", "km2", "cm2", "mm2", "ha", "hectare", "hectares", "m^2",
    ]
    .contains(&u.as_str())
    {
        return Some("area");
    }
    if ["l", "ml", "ul", "litre", "liter", "m3", "cm3", "m^3"].contains(&u.as_str()) {
        return Some("volume");
    }
    // A share, however written (`weight percent`, `wt%`, `mass %`, `percent dry mass`).
    if u == "%"
        || u == "percent"
        || u.starts_with("percent ")
        || u.ends_with(" percent")
        || u.ends_with(" %")
        || u.starts_with("wt") && u.contains('%')
    {
        return Some("share");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A term `phrase` names, from `from`, in `ontology`, as the tests below need one.
    fn found_as(phrase: &str, from: &str, ontology: &str, curie: &str) -> Found {
        Found {
            phrase: phrase.into(),
            from: from.into(),
            ontology: ontology.into(),
            curie: curie.into(),
            label: phrase.into(),
            by_label: true,
            element: false,
            loose: false,
            words: phrase.split(' ').count(),
            also: 0,
            depth: 0,
        }
    }

    #[test]
    fn what_a_column_is_counted_in_or_per_is_not_what_it_measures() {
        let found = |phrase: &str, from: &str, curie: &str| found_as(phrase, from, "x", curie);
        let description: Vec<String> =
            "umis counted in the cell area per dry mass of the cell wall"
                .split(' ')
                .map(str::to_owned)
                .collect();
        let mut f = vec![
            found("cell", "description", "C:1"),
            found("umis", "description", "U:1"),
            found("dry mass", "description", "D:1"),
            found("mass", "description", "M:1"),
            found("area", "description", "A:1"),
        ];
        drop_containers(&mut f, &[], &description);
        let kept: Vec<&str> = f.iter().map(|f| f.phrase.as_str()).collect();
        // `cell` is also named outside a container ("of the cell wall"): kept.
        assert_eq!(kept, ["cell", "umis", "area"]);
        // What the name names stays, wherever the description puts it.
        let mut f = vec![
            found("cell", "description", "C:1"),
            found("cell", "name", "C:1"),
        ];
        let description: Vec<String> = ["genes", "in", "the", "cell"].map(String::from).to_vec();
        drop_containers(&mut f, &[], &description);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn a_common_name_is_a_plural_kind() {
        for yes in [
            "birds",
            "rodents",
            "hard ticks",
            "ray-finned fishes",
            "mosquitos",
        ] {
            assert!(common_name(yes), "{yes}");
        }
        for no in [
            "rodent",
            "mice and others",
            "Aves",
            "grass",
            "lizard buzzard",
            "fish",
        ] {
            assert!(!common_name(no), "{no}");
        }
    }

    #[test]
    fn a_value_names_terms_in_its_forms() {
        assert_eq!(
            value_forms("Adelie Penguin (Pygoscelis adeliae)"),
            [
                "Adelie Penguin (Pygoscelis adeliae)",
                "Pygoscelis adeliae",
                "Adelie Penguin"
            ]
        );
        assert_eq!(
            value_forms("Perca flavescens (Mitchill, 1814)"),
            [
                "Perca flavescens (Mitchill, 1814)",
                "Mitchill, 1814",
                "Perca flavescens"
            ]
        );
        assert_eq!(
            value_forms("Esox lucius Linnaeus, 1758"),
            ["Esox lucius Linnaeus, 1758", "Esox lucius"]
        );
        // Not a scientific name; bytes that are not ASCII do not trip it.
        assert_eq!(value_forms("heart failure"), ["heart failure"]);
        assert_eq!(value_forms("Brain, NOS"), ["Brain, NOS", "Brain"]);
        assert_eq!(value_forms("UBERON:feces"), ["UBERON:feces", "feces"]);
        assert_eq!(value_forms("UBERON:0001988"), ["UBERON:0001988"]);
        assert_eq!(value_forms("Éclair de lune x"), ["Éclair de lune x"]);
        assert_eq!(value_forms("F"), Vec::<String>::new());
    }

    #[test]
    fn profiles_give_their_values_with_shares() {
        let v = profile_values(
            "classical monocyte 21%, CD4-positive, alpha-beta T cell 18%, B cell 9%, 24 more",
        );
        assert_eq!(
            v,
            [
                ("classical monocyte".to_owned(), 0.21),
                ("CD4-positive, alpha-beta T cell".to_owned(), 0.18),
                ("B cell".to_owned(), 0.09)
            ]
        );
        assert!(profile_values("18 to 1150, median 240").is_empty());
        assert_eq!(profile_values("blood 100%"), [("blood".to_owned(), 1.0)]);
        // After examples, a share is its own item's.
        assert_eq!(
            profile_values("1,206 distinct, e.g. DMD, CFTR, HTT, blank 58%"),
            [("blank".to_owned(), 0.58)]
        );
    }

    #[test]
    fn profiles_give_their_examples_without_shares() {
        assert_eq!(
            example_values("4,620 distinct, e.g. Bisphenol A, Atrazine, Perfluoro..., blank 4%"),
            ["Bisphenol A", "Atrazine"]
        );
        assert_eq!(
            example_values("DMSO 12%, 30,616 distinct, e.g. mevastatin, BRD-K01975608"),
            ["mevastatin", "BRD-K01975608"]
        );
        assert!(example_values("pneumonia 30%, asthma 10%, 140 more").is_empty());
    }

    #[test]
    fn plurals_and_units_in_names() {
        assert_eq!(singular("triglycerides"), Some("triglyceride"));
        assert_eq!(singular("mass"), None);
        assert_eq!(singular("status"), None);
        assert_eq!(singular("gas"), None);
        let column = |name: &str, unit: &str| Column {
            name: name.into(),
            description: String::new(),
            kind: "float".into(),
            unit: Some(unit.into()),
            profile: String::new(),
            identifier: None,
            line: 1,
        };
        let forms = unit_forms(&column("flow_Ls", "L/s"), unit_kind("L/s"));
        assert!(forms.contains(&"ls".to_owned()), "{forms:?}");
        let forms = unit_forms(&column("As_ugL", "µg/L"), unit_kind("µg/L"));
        assert!(forms.contains(&"ugl".to_owned()), "{forms:?}");
        let forms = unit_forms(&column("sand_pct", "%"), unit_kind("%"));
        assert!(forms.contains(&"pct".to_owned()), "{forms:?}");
        // The unit is not looked up as a word of the name; the rest is.
        let flow = column("flow_Ls", "L/s");
        let asked: Vec<String> = phrases(&flow, unit_kind("L/s"), &words(flow.name_read()), &[])
            .into_iter()
            .map(|a| a.text)
            .collect();
        assert!(asked.contains(&"flow".to_owned()));
        assert!(!asked.contains(&"ls".to_owned()), "{asked:?}");
    }

    #[test]
    fn units_say_what_they_measure() {
        for (u, k) in [
            ("mg/L", "concentration"),
            ("µg/L", "concentration"),
            ("mg N/L", "concentration"),
            ("mmol/mol", "concentration"),
            ("µS/cm", "conductivity"),
            ("dS/m", "conductivity"),
            ("uS/cm @25C", "conductivity"),
            ("umhos/cm", "conductivity"),
            ("mmhos/cm", "conductivity"),
            ("µS cm-1", "conductivity"),
            ("S m^-1", "conductivity"),
            ("SpC uS/cm", "conductivity"),
            ("°C", "temperature"),
            ("millimeter", "length"),
            ("gram", "mass"),
            ("g/m2", "area density"),
            ("g cm-3", "density"),
            ("ha", "area"),
            ("mL", "volume"),
            ("day", "time"),
            ("weight percent", "share"),
            ("wt%", "share"),
            ("milligram per liter", "concentration"),
            ("U/L", "activity"),
            ("IU/L", "activity"),
            ("g/L", "concentration"),
        ] {
            assert_eq!(unit_kind(u), Some(k), "{u}");
        }
        assert_eq!(unit_kind("-"), None);
        for (u, not) in [
            ("cells/mm3", "a count"),
            ("ms/min", "a time per minute"),
            ("us/ml", "a count per volume"),
        ] {
            assert_ne!(
                unit_kind(u),
                Some("conductivity"),
                "{u}: {not}, not siemens"
            );
        }
        assert_ne!(
            unit_kind("mL/kg/min"),
            Some("concentration"),
            "no amount before its per"
        );
    }

    #[test]
    fn a_short_word_names_a_term_by_its_synonym_only_when_written_as_an_abbreviation() {
        let text = "sex Sex of the beetle, when it could be told";
        assert!(lower_case_abbreviation("be", false, text));
        assert!(
            !lower_case_abbreviation("be", true, text),
            "a label is a label"
        );
        assert!(!lower_case_abbreviation(
            "do",
            false,
            "DO_sat Dissolved oxygen"
        ));
        assert!(lower_case_abbreviation("cf.", false, "cf."));
        assert!(!lower_case_abbreviation("tal", false, "TAL"));
        assert!(
            !lower_case_abbreviation("blood", false, "blood"),
            "not short"
        );
    }

    #[test]
    fn a_genus_named_like_a_common_word_is_met_only_with_its_capital() {
        let text = "is_primary_data Whether this is the canonical copy of the cell";
        assert!(common_word("Data", text));
        assert!(common_word("This", text));
        assert!(!common_word("Pygoscelis", "Pygoscelis adeliae counts"));
        assert!(!common_word("cell", text), "a label without a capital");
        assert!(!common_word("Turdus migratorius", text), "two words");
        assert!(
            !common_word("Fungi", "FungiBiomass"),
            "a camel-case word is a word"
        );
    }

    #[test]
    fn a_measured_column_names_its_specimen_not_what_it_measures() {
        let named = |phrase: &str, ontology: &str| {
            found_as(phrase, "description", ontology, &format!("{ontology}:1"))
        };
        let mut found = vec![
            named("serum", "uberon"),
            named("albumin", "chebi"),
            named("liver", "uberon"),
        ];
        drop_specimens(&mut found);
        let left: Vec<&str> = found.iter().map(|f| f.phrase.as_str()).collect();
        assert_eq!(left, ["albumin", "liver"]);
    }

    #[test]
    fn a_chemical_measured_in_water_is_that_chemical() {
        let named = |phrase: &str| {
            found_as(
                phrase,
                "description",
                "chebi",
                &format!("CHEBI:{}", phrase.len()),
            )
        };
        let mut found = vec![named("water"), named("nitrate")];
        drop_media(&mut found);
        let left: Vec<&str> = found.iter().map(|f| f.phrase.as_str()).collect();
        assert_eq!(left, ["nitrate"]);
        // A concentration of nothing else named is still not of water.
        let mut found = vec![named("water")];
        drop_media(&mut found);
        assert!(found.is_empty());
    }

    #[test]
    fn what_a_description_says_after_at_or_during_is_when_not_what() {
        let named = |phrase: &str, from: &str, curie: &str| found_as(phrase, from, "pato", curie);
        let description = words("Age of the organism at the time of sampling");
        let mut found = vec![
            named("age", "description", "P:1"),
            named("time", "description", "P:2"),
            named("organism", "description", "P:3"),
        ];
        drop_circumstances(&mut found, &description);
        let left: Vec<&str> = found.iter().map(|f| f.phrase.as_str()).collect();
        assert_eq!(left, ["age", "organism"]);
        // What the name names too stays; so does a phrase also said before the circumstance.
        let description = words("Time to event, time at the last visit");
        let mut found = vec![
            named("time", "description", "P:2"),
            named("visit", "description", "P:4"),
            named("visit", "name", "P:4"),
        ];
        drop_circumstances(&mut found, &description);
        assert_eq!(found.len(), 3);
        // A description that begins with the word says no circumstance.
        let description = words("At sea temperature");
        let mut found = vec![named("temperature", "description", "P:5")];
        drop_circumstances(&mut found, &description);
        assert_eq!(found.len(), 1);
    }
}
