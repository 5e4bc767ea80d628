//! The decision graph: a card's columns through the questions — annotate? which aspect?
//! which ontology? does each candidate term fit? what value? keep? — every decision kept in
//! a journal while the backend answers (no lock held: a backend may wait seconds a question),
//! then written to the sidecar in one short transaction; candidate terms of a column and
//! ontology form a group, kept proposals become AVU links with status `proposed`. It writes
//! no AVU.

use crate::learn::{logistic::sigmoid, winner};
use std::collections::BTreeSet;

use crate::store::sidecar::Sidecar;
use crate::store::{self, DbResult, Journal, Sink, decisions, groups, links, runs};
use serde::Serialize;
use serde_json::{Value, json};

use super::backend::{Answer, Backend, BackendError, logit, ontology_for};
use super::card::{Card, Column};
use super::evidence::{Evidence, Terms};
use super::policy::{Outcome, Policy};
use super::questions::{self, Question, State};
use mesh_avu::term_attribute;
use mesh_ontology::index::{Candidate, IndexError};

/// How many candidate terms a group weighs.
const CANDIDATES: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("decide sidecar: {0}")]
    Sidecar(#[from] store::DbError),
}

/// A group's winning candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Winner {
    pub decision_id: String,
    pub curie: String,
    pub label: String,
    /// p(it is the right term), as the group's `best_p`: the winner head's where the backend
    /// has one, else its p(fits).
    pub p: f64,
    /// Its p("yes, it fits"), as every candidate has one.
    pub p_fits: f64,
    /// The p from which the head that made `p` keeps a winner (chosen on the gold set's
    /// development part); `None`: kept when more likely right than not.
    pub keep_at: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupCandidate {
    pub decision_id: String,
    pub curie: String,
    pub label: String,
    /// p("yes, it fits").
    pub p: f64,
    /// The backend's `term.fits` features, read only where it has a winner head.
    #[serde(skip)]
    pub features: Vec<f64>,
}

/// One column and ontology: its candidates and what won.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub group_id: String,
    pub column: String,
    pub ontology: String,
    pub winner: Option<Winner>,
    pub top_p: f64,
    pub margin: f64,
    /// p(the best candidate is the right term), and how it was made.
    pub best_p: f64,
    pub best_calibration: String,
    pub outcome: &'static str,
    pub candidates: Vec<GroupCandidate>,
    /// What the questions before the candidates said, as the winner head reads it.
    #[serde(skip)]
    pub upstream: winner::Upstream,
}

/// A proposed AVU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    pub link_id: String,
    pub group_id: String,
    pub decision_id: String,
    pub attribute: String,
    pub value: String,
    pub unit: String,
    pub status: &'static str,
}

/// What a run decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub run_id: String,
    pub card_id: String,
    pub card_name: String,
    pub groups: Vec<Group>,
    pub proposed: Vec<Link>,
}

/// What the graph reads the index through (`evidence::Terms`): searches, exact names and
/// parents; a serving decide locks the index for each lookup only.
pub type Search<'a> = dyn Terms + 'a;

/// A new id: 32 hex digits, the first 12 the time in milliseconds and the rest random
/// (UUID version 7's layout). Ids made one after another sort together, so a run's rows go
/// to the end of the sidecar's key indexes instead of dirtying pages all over them.
pub(super) fn id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

fn options(q: &Question) -> Vec<String> {
    q.options.iter().map(|s| s.to_string()).collect()
}

/// Records one decision and its options; returns its id.
#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    tx: &dyn Sink,
    run_id: &str,
    parent: Option<&str>,
    question: &Question,
    subject: &Value,
    state: &Value,
    decided: Result<&Answer, &str>,
    outcome: Outcome,
) -> DbResult<String> {
    let decision_id = id();
    let state = State::of(state);
    let (level, calibration, answer, p, margin) = match decided {
        Ok(a) => (
            a.level.name(),
            Some(a.calibration.as_str()),
            a.answer.as_str(),
            Some(a.p),
            Some(a.margin),
        ),
        Err(rule_answer) => ("rule", None, rule_answer, None, None),
    };
    decisions::insert(
        tx,
        &decisions::NewDecision {
            id: &decision_id,
            run_id,
            parent,
            question_key: &question.key(),
            subject: &subject.to_string(),
            state_json: &state.json,
            state_hash: &state.hash,
            level,
            calibration,
            answer,
            p,
            margin,
            outcome: outcome.name(),
        },
    )?;
    if let Ok(a) = decided {
        for o in &a.options {
            decisions::option(tx, &decision_id, &o.option, o.score, o.p)?;
        }
    }
    Ok(decision_id)
}

fn column_state(card: &Card, column: &Column) -> Value {
    json!({
        "card": {"name": card.name, "product": card.product},
        "column": {
            "name": column.name,
            "description": column.description,
            "kind": column.kind,
            "unit": column.unit.clone().unwrap_or_default(),
            "profile": column.profile,
        }
    })
}

/// The AVU's value, as the value-kind question answered.
pub fn value_for(kind: &str, column: &str, profile: &str, label: &str) -> String {
    match kind {
        "term label" => label.to_owned(),
        "observed value" => profile.to_owned(),
        _ => column.to_owned(),
    }
}

/// Candidates taken from the terms nearest in meaning (with sentence embeddings only).
const NEAREST: usize = 3;

/// Candidates taken from a search on the column's name alone.
const NAME_CANDIDATES: usize = 5;

/// The words to search an ontology with: for organisms the column's most frequent value
/// (the taxa are in the data, not in the column's name); otherwise its name and description.
fn search_words(column: &Column, aspect: &str) -> String {
    if aspect == "organism" {
        let first = column.profile.split(',').next().unwrap_or_default();
        let name: Vec<&str> = first
            .split_whitespace()
            .take_while(|w| !w.ends_with('%'))
            .collect();
        if !name.is_empty() {
            return name.join(" ");
        }
    }
    let mut words = super::backend::words(column.name_read());
    words.extend(super::backend::words(&column.description));
    // Not the unit it is counted in (`mic_mgL`, "Albumin (g/dL)"): no term's word.
    let unit = super::evidence::unit_words(column.unit.as_deref().unwrap_or_default());
    words.retain(|w| !unit.contains(w));
    // Each word once: a description that says the name again ("Phosphate concentration")
    // adds nothing to look for, and every repeated word is one more pass over its matches
    // in the full-text index (and the name, if that is all, is not searched again apart).
    let mut seen = std::collections::HashSet::new();
    words.retain(|w| seen.insert(w.clone()));
    words.join(" ")
}

/// A column's candidate terms in `ontology`, best evidence first: the term of a value that is
/// nearly every row, else the lowest term above its named values; then the terms its name
/// and description name exactly; then what the search finds. Each once, at most
/// [`CANDIDATES`].
fn candidates_for(
    column: &Column,
    aspect: &str,
    ontology: &str,
    evidence: &Evidence,
    search: &Search,
) -> Result<Vec<Candidate>, IndexError> {
    let mut out: Vec<Candidate> = Vec::new();
    let add = |curie: &str, label: &str, out: &mut Vec<Candidate>| {
        if !out.iter().any(|c| c.curie == curie) {
            out.push(Candidate {
                curie: curie.to_owned(),
                label: label.to_owned(),
                definition: String::new(),
                score: 0.0,
            });
        }
    };
    if let Some(v) = evidence.values_in(ontology) {
        for t in v.only.iter().chain(&v.group).chain(&v.common) {
            add(&t.curie, &t.label, &mut out);
        }
    }
    for f in evidence.found.iter().filter(|f| f.ontology == ontology) {
        add(&f.curie, &f.label, &mut out);
    }
    // The column's name alone says what the column is, where its description lists what its
    // values are ("sex": "1=Male, 2=Female"): its best few terms, before the whole search.
    let name = super::backend::words(column.name_read()).join(" ");
    let words = search_words(column, aspect);
    if aspect != "organism" && !name.is_empty() && name != words {
        for c in search.search(ontology, &name, NAME_CANDIDATES)? {
            add(&c.curie, &c.label, &mut out);
        }
    }
    for c in search.search(ontology, &words, CANDIDATES)? {
        if !out.iter().any(|o| o.curie == c.curie) {
            out.push(c);
        }
    }
    out.truncate(CANDIDATES);
    // With sentence embeddings, the terms nearest in meaning that the words missed (`wbc`:
    // leukocyte): recall beyond the words, ranked with the rest. Nothing without a model.
    for c in search.nearest(&column_text(column), ontology, NEAREST)? {
        add(&c.curie, &c.label, &mut out);
    }
    Ok(out)
}

/// What the ontology's structure says of each candidate against the others: `depth` above the
/// shallowest (of two terms the column names alike, the more general), `covers`, how many of
/// the others are kinds of it ("biological sex" above "phenotypic sex" and "male", "mixed
/// sex" above none), and `unit_fits`, whether it is a kind of the quality the column's unit
/// measures (1), of a quality other units measure (-1), neither (-0.4), or the unit measures
/// none in this ontology (0); and `similarity`, the cosine of the column's text with the
/// candidate's label, where sentence embeddings are in use and the term has a vector.
fn structure(
    column: &Column,
    found: &[Candidate],
    ontology: &str,
    evidence: &Evidence,
    terms: &Search,
) -> Result<Vec<Value>, IndexError> {
    // How near in meaning the column is to each candidate (with sentence embeddings only).
    let curies: Vec<&str> = found.iter().map(|c| c.curie.as_str()).collect();
    let similarity = terms.similarity(&column_text(column), ontology, &curies)?;
    let lineages = found
        .iter()
        .map(|c| super::evidence::lineage(&c.curie, terms))
        .collect::<Result<Vec<Vec<String>>, _>>()?;
    let shallowest = lineages.iter().map(Vec::len).min().unwrap_or(0);
    let unit: Vec<&str> = evidence
        .found
        .iter()
        .filter(|f| f.from == "unit" && f.ontology == ontology)
        .map(|f| f.curie.as_str())
        .collect();
    // The qualities other units measure: a candidate that is a kind of one of them is the
    // wrong quality for this unit; one that is none of them (PATO's "distance" for metres)
    // says nothing either way.
    let mut named_others: Vec<String> = Vec::new();
    if !unit.is_empty() {
        for quality in super::evidence::UNIT_QUALITIES {
            for n in terms.named(quality)? {
                let curie = n.candidate.curie;
                if n.ontology == ontology && !n.loose && !unit.contains(&curie.as_str()) {
                    named_others.push(curie);
                }
            }
        }
    }
    let others: Vec<&str> = named_others.iter().map(String::as_str).collect();
    // The column's possible values, not what it is: terms its description or values name
    // (not its name) that are siblings of another such term — `female` and `male` in
    // "Sex (1=Male, 2=Female)", whose kind (biological sex) is what the column is about.
    let named_by_name: BTreeSet<&str> = evidence
        .found
        .iter()
        .filter(|f| f.from == "name")
        .map(|f| f.curie.as_str())
        .collect();
    let by_content = |c: &Candidate| {
        !named_by_name.contains(c.curie.as_str())
            && evidence
                .found
                .iter()
                .any(|f| f.curie == c.curie && f.from == "description" && !f.loose)
    };
    let alternative: Vec<bool> = found
        .iter()
        .zip(&lineages)
        .map(|(c, lineage)| {
            by_content(c)
                && found.iter().zip(&lineages).any(|(o, l)| {
                    o.curie != c.curie
                        && by_content(o)
                        && l.first() == lineage.first()
                        && !l.is_empty()
                })
        })
        .collect();
    Ok(found
        .iter()
        .zip(&lineages)
        .zip(&alternative)
        .map(|((c, lineage), alternative)| {
            let covers = lineages.iter().filter(|l| l.contains(&c.curie)).count();
            let kind_of = |qualities: &[&str]| {
                qualities.contains(&c.curie.as_str())
                    || lineage.iter().any(|a| qualities.contains(&a.as_str()))
            };
            let unit_fits: f64 = if unit.is_empty() {
                0.0
            } else if kind_of(&unit) {
                1.0
            } else if kind_of(&others) {
                -1.0
            } else {
                // Not what the unit measures, but no other unit's quality either: less sure
                // (PATO files distance apart from the 1-D extents a metre measures).
                -0.4
            };
            json!({
                "depth": lineage.len() - shallowest,
                "covers": covers,
                "unit_fits": unit_fits,
                "alternative": alternative,
            })
        })
        .zip(similarity)
        .map(|(mut s, similarity)| {
            if let Some(similarity) = similarity {
                s["similarity"] = json!(similarity);
            }
            s
        })
        .collect())
}

/// What a column says, as one text to embed: its name's words, its description and unit
/// (`length of stay: Nights in hospital (day)`).
fn column_text(column: &Column) -> String {
    let mut text = super::backend::words(column.name_read()).join(" ");
    if !column.description.is_empty() {
        text.push_str(": ");
        text.push_str(&column.description);
    }
    if let Some(unit) = &column.unit {
        text.push_str(&format!(" ({unit})"));
    }
    text
}

/// Runs the graph on a card: what it decided, and the journal that records it (write it
/// with [`Journal::write`]). Nothing is locked while the backend answers.
pub fn annotate(
    card: &Card,
    search: &Search,
    backend: &dyn Backend,
    policy: &Policy,
    actor: Option<&str>,
    bundle: Option<&str>,
) -> Result<(Run, Journal), GraphError> {
    annotate_reporting(
        card,
        search,
        backend,
        policy,
        actor,
        bundle,
        &mut |_, _, _| {},
    )
}

/// [`annotate`], telling `column_done` after each column: how many are done, of how many,
/// and the column's name.
pub fn annotate_reporting(
    card: &Card,
    search: &Search,
    backend: &dyn Backend,
    policy: &Policy,
    actor: Option<&str>,
    bundle: Option<&str>,
    column_done: &mut dyn FnMut(usize, usize, &str),
) -> Result<(Run, Journal), GraphError> {
    // A card's columns look up many of the same names and parents: once each per run.
    let memo = super::evidence::Memo::new(search);
    let search: &Search = &memo;
    let run_id = id();
    let journal = Journal::default();
    runs::begin(
        &journal,
        &runs::NewRun {
            id: &run_id,
            card_id: &card.id,
            card_name: &card.name,
            actor,
            backend: &backend.name(),
            bundle,
            questions_lock: questions::LOCK,
        },
    )?;
    let asker = Asker {
        journal: &journal,
        run_id: &run_id,
        backend,
        policy,
    };
    let mut groups = Vec::new();
    let mut proposed = Vec::new();
    for (i, column) in card.columns.iter().enumerate() {
        if let Some((group, link)) = asker.column(card, column, search)? {
            proposed.extend(link);
            groups.push(group);
        }
        column_done(i + 1, card.columns.len(), &column.name);
    }
    runs::finish(&journal, &run_id)?;
    let run = Run {
        run_id,
        card_id: card.id.clone(),
        card_name: card.name.clone(),
        groups,
        proposed,
    };
    Ok((run, journal))
}

/// The index of a group's best candidate by p: the first found of those tied highest (the
/// candidates come in the order found, best evidence first). `ps` is not empty.
pub(crate) fn best_of(ps: &[f64]) -> usize {
    (0..ps.len()).fold(0, |best, i| if ps[i] > ps[best] { i } else { best })
}

/// The AVU's value where no backend can say: the column's name.
pub(crate) const VALUE_KIND_CONVENTION: &str = "column name";

/// Records the convention as the value kind under `parent`, a rule with `why`: where no
/// backend is asked (a pick in a run annotate recorded before it asked every group).
pub(crate) fn value_kind_by_convention(
    sink: &dyn Sink,
    run_id: &str,
    parent: &str,
    subject: &Value,
    state: &Value,
    why: &str,
) -> DbResult<String> {
    let mut rule_state = state.clone();
    rule_state["rule"] = json!(format!(
        "the value is the column's name, as every AVU decide writes names it ({why})"
    ));
    record(
        sink,
        run_id,
        Some(parent),
        &questions::VALUE_KIND,
        subject,
        &rule_state,
        Err(VALUE_KIND_CONVENTION),
        Outcome::Rule,
    )?;
    Ok(VALUE_KIND_CONVENTION.to_owned())
}

/// A run asking its questions: the backend answers, the policy decides, the journal keeps.
struct Asker<'a> {
    journal: &'a Journal,
    run_id: &'a str,
    backend: &'a dyn Backend,
    policy: &'a Policy,
}

/// A question answered and recorded.
struct Asked {
    answer: Answer,
    outcome: Outcome,
    decision_id: String,
}

impl Asker<'_> {
    /// Asks `question` about `state` and records the answer under `parent`.
    fn ask(
        &self,
        question: &Question,
        parent: Option<&str>,
        subject: &Value,
        state: &Value,
    ) -> Result<Asked, GraphError> {
        let answer = self.backend.ask(question, state, &options(question))?;
        let outcome = self.policy.outcome(question, &answer);
        let decision_id = record(
            self.journal,
            self.run_id,
            parent,
            question,
            subject,
            state,
            Ok(&answer),
            outcome,
        )?;
        Ok(Asked {
            answer,
            outcome,
            decision_id,
        })
    }

    /// What the AVU's value is, recorded under `parent`: the backend's answer where it can
    /// give one; else the convention (the column's name), recorded as a rule with the reason —
    /// never as a probability nobody measured.
    fn value_kind(
        &self,
        parent: &str,
        subject: &Value,
        state: &Value,
    ) -> Result<String, GraphError> {
        let q = &questions::VALUE_KIND;
        match self.backend.ask(q, state, &options(q)) {
            Ok(answer) => {
                let outcome = self.policy.outcome(q, &answer);
                record(
                    self.journal,
                    self.run_id,
                    Some(parent),
                    q,
                    subject,
                    state,
                    Ok(&answer),
                    outcome,
                )?;
                Ok(answer.answer)
            }
            Err(BackendError::Unanswerable { why, .. }) => Ok(value_kind_by_convention(
                self.journal,
                self.run_id,
                parent,
                subject,
                state,
                &why,
            )?),
            Err(e) => Err(e.into()),
        }
    }

    /// One column through the graph: its group, when it is annotated and the search finds
    /// candidates, and the AVU proposed for it, if any.
    fn column(
        &self,
        card: &Card,
        column: &Column,
        search: &Search,
    ) -> Result<Option<(Group, Option<Link>)>, GraphError> {
        let subject = json!({"column": column.name});
        let state = column_state(card, column);
        if let Some(why) = column.identifier {
            let mut rule_state = state.clone();
            rule_state["rule"] = json!(why);
            record(
                self.journal,
                self.run_id,
                None,
                &questions::ANNOTATE,
                &subject,
                &rule_state,
                Err("no"),
                Outcome::Rule,
            )?;
            return Ok(None);
        }
        let evidence = Evidence::read(column, search)?;
        let mut state = state;
        state["evidence"] = serde_json::to_value(&evidence).expect("evidence serialises");
        let root = self.ask(&questions::ANNOTATE, None, &subject, &state)?;
        if root.outcome != Outcome::Proposed {
            return Ok(None);
        }
        // The backend's own logit (a bundle's answer keeps the backend's scores): the head
        // reads the backend's scores, whatever a bundle makes of them.
        let annotate = logit(&root.answer);
        let root = root.decision_id;
        let (aspect, ontology, evidence_for) = self.ontology(&root, &subject, &state)?;
        let upstream = winner::Upstream::of(annotate, evidence_for);
        let found = candidates_for(column, &aspect, &ontology, &evidence, search)?;
        if found.is_empty() {
            return Ok(None);
        }
        let structure = structure(column, &found, &ontology, &evidence, search)?;
        let candidates = self.candidates(&root, &subject, &state, &ontology, &found, &structure)?;
        let group = self.group(column, &subject, ontology, upstream, candidates, search)?;
        let link = match &group.winner {
            Some(w) => self.propose(column, &subject, &state, &group, w)?,
            None => {
                // A group without a winner may still be picked from: its value kind asked
                // now, about its best candidate, so that a pick later asks the backend
                // nothing (feedback writes inside a transaction, under the sidecar's lock).
                let ps: Vec<f64> = group.candidates.iter().map(|c| c.p).collect();
                let best = &group.candidates[best_of(&ps)];
                let mut avu_state = state.clone();
                avu_state["winner"] =
                    json!({"curie": best.curie, "label": best.label, "p": group.best_p});
                // Asked ahead of a pick that may never come: a backend that fails here costs
                // the group its asked kind (the convention stands in, said so), not the run.
                match self.value_kind(&best.decision_id, &subject, &avu_state) {
                    Ok(_) => {}
                    Err(GraphError::Backend(e)) => {
                        value_kind_by_convention(
                            self.journal,
                            self.run_id,
                            &best.decision_id,
                            &subject,
                            &avu_state,
                            &format!("the backend could not say: {e}"),
                        )?;
                    }
                    Err(e) => return Err(e),
                }
                None
            }
        };
        Ok(Some((group, link)))
    }

    /// Which aspect a column describes and which ontology its terms come from: the
    /// ontology question's answer when proposed, else the aspect's usual one; with the
    /// ontology question's own score for the ontology it is (what the evidence says for it).
    fn ontology(
        &self,
        root: &str,
        subject: &Value,
        state: &Value,
    ) -> Result<(String, String, f64), GraphError> {
        let aspect = self.ask(&questions::ASPECT, Some(root), subject, state)?;
        let mut onto_state = state.clone();
        onto_state["aspect"] = json!(aspect.answer.answer);
        let onto = self.ask(
            &questions::ONTOLOGY,
            Some(&aspect.decision_id),
            subject,
            &onto_state,
        )?;
        let aspect = aspect.answer.answer;
        let ontology = if onto.outcome == Outcome::Proposed {
            onto.answer.answer
        } else {
            ontology_for(&aspect).to_owned()
        };
        let score = onto
            .answer
            .options
            .iter()
            .find(|o| o.option == ontology)
            .map_or(0.0, |o| o.score);
        Ok((aspect, ontology, score))
    }

    /// Whether each term found fits the column, in the order found.
    fn candidates(
        &self,
        root: &str,
        subject: &Value,
        state: &Value,
        ontology: &str,
        found: &[Candidate],
        structure: &[Value],
    ) -> Result<Vec<(GroupCandidate, Outcome)>, GraphError> {
        let mut candidates = Vec::new();
        for (rank, c) in found.iter().enumerate() {
            let mut fit_state = state.clone();
            let mut candidate = json!({
                "curie": c.curie, "label": c.label, "ontology": ontology, "rank": rank
            });
            if let (Value::Object(c), Value::Object(s)) = (&mut candidate, &structure[rank]) {
                c.extend(s.clone());
            }
            fit_state["candidate"] = candidate;
            let fits = self.ask(&questions::TERM_FITS, Some(root), subject, &fit_state)?;
            let features = match self.backend.winner_head() {
                Some(_) => self.backend.features(&questions::TERM_FITS, &fit_state)?,
                None => Vec::new(),
            };
            let p_yes = fits
                .answer
                .options
                .iter()
                .find(|o| o.option == "yes")
                .map(|o| o.p)
                .unwrap_or(0.0);
            candidates.push((
                GroupCandidate {
                    decision_id: fits.decision_id,
                    curie: c.curie.clone(),
                    label: c.label.clone(),
                    p: p_yes,
                    features,
                },
                fits.outcome,
            ));
        }
        Ok(candidates)
    }

    /// A column's candidates as a group: the best, its margin over the next, the winner when
    /// the policy proposes the best; recorded with its candidates in the order found.
    fn group(
        &self,
        column: &Column,
        subject: &Value,
        ontology: String,
        upstream: winner::Upstream,
        candidates: Vec<(GroupCandidate, Outcome)>,
        search: &Search,
    ) -> Result<Group, GraphError> {
        let group_id = id();
        let ps: Vec<f64> = candidates.iter().map(|(c, _)| c.p).collect();
        let first = best_of(&ps);
        let (best, best_outcome) = &candidates[first];
        let top_p = best.p;
        let next = (0..ps.len())
            .filter(|i| *i != first)
            .map(|i| ps[i])
            .fold(f64::NEG_INFINITY, f64::max);
        let margin = top_p - if next.is_finite() { next } else { 0.0 };
        let group_outcome = if *best_outcome == Outcome::Proposed {
            Outcome::Proposed
        } else {
            Outcome::Abstain
        };
        let (best_p, best_calibration, keep_at) =
            self.best_p(&candidates, first, &ontology, upstream, column, search)?;
        let winner = (group_outcome == Outcome::Proposed).then(|| Winner {
            decision_id: best.decision_id.clone(),
            curie: best.curie.clone(),
            label: best.label.clone(),
            p: best_p,
            p_fits: best.p,
            keep_at,
        });
        groups::insert(
            self.journal,
            &groups::NewGroup {
                id: &group_id,
                run_id: self.run_id,
                subject: &subject.to_string(),
                ontology: &ontology,
                winner: winner.as_ref().map(|w| w.decision_id.as_str()),
                top_p,
                margin,
                outcome: group_outcome.name(),
                best_p,
                best_calibration: &best_calibration,
            },
        )?;
        for (rank, (c, _)) in candidates.iter().enumerate() {
            groups::candidate(
                self.journal,
                &group_id,
                &c.decision_id,
                &c.curie,
                &c.label,
                rank,
            )?;
        }
        Ok(Group {
            group_id,
            column: column.name.clone(),
            ontology,
            winner,
            top_p,
            margin,
            best_p,
            best_calibration,
            outcome: group_outcome.name(),
            candidates: candidates.into_iter().map(|(c, _)| c).collect(),
            upstream,
        })
    }

    /// How likely candidate `best` is the right term: the winner head's p over its features,
    /// its margin over the next (both the backend's own, whatever a bundle makes of them) and
    /// its ontology, with the p from which that head keeps a winner; else its p(fits), said
    /// to be uncalibrated.
    fn best_p(
        &self,
        candidates: &[(GroupCandidate, Outcome)],
        best: usize,
        ontology: &str,
        upstream: winner::Upstream,
        column: &Column,
        search: &Search,
    ) -> Result<(f64, String, Option<f64>), GraphError> {
        let fits = candidates[best].0.p;
        let uncalibrated = || {
            (
                fits,
                "none: its p(fits); the backend has no winner head".to_owned(),
                None,
            )
        };
        let Some(head) = self.backend.winner_head() else {
            return Ok(uncalibrated());
        };
        let raw = |c: &GroupCandidate| c.features.first().map(|z| sigmoid(*z));
        let Some(own) = raw(&candidates[best].0) else {
            return Ok(uncalibrated());
        };
        let next = candidates
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != best)
            .filter_map(|(_, (c, _))| raw(c))
            .fold(0.0, f64::max);
        let x = winner::features(
            &self.backend.winner_inputs(&candidates[best].0.features),
            own - next,
            ontology,
            column.unit.is_some(),
            winner::Said::of(&column.description, &candidates[best].0.curie, search)?,
            upstream,
        );
        Ok(match head.p(&x) {
            Some(p) => (p, head.calibration("shipped"), head.keep_at),
            None => uncalibrated(),
        })
    }

    /// For a group's winner: what the AVU's value is and whether to keep it; the link
    /// proposed when kept.
    fn propose(
        &self,
        column: &Column,
        subject: &Value,
        state: &Value,
        group: &Group,
        w: &Winner,
    ) -> Result<Option<Link>, GraphError> {
        let mut avu_state = state.clone();
        // Keep reads how likely the winner is right: the winner head's p where the backend has
        // one (a winner kept when more likely right than not), else its p(fits).
        avu_state["winner"] = json!({"curie": w.curie, "label": w.label, "p": w.p});
        // The head's own threshold, chosen where its precision held (learn/winner.rs).
        if let Some(at) = w.keep_at {
            avu_state["winner"]["keep_at"] = json!(at);
        }
        let kind = self.value_kind(&w.decision_id, subject, &avu_state)?;
        let keep = self.ask(&questions::KEEP, Some(&w.decision_id), subject, &avu_state)?;
        if keep.outcome != Outcome::Proposed {
            return Ok(None);
        }
        let link = Link {
            link_id: id(),
            group_id: group.group_id.clone(),
            decision_id: keep.decision_id,
            attribute: term_attribute(&group.ontology, &w.label),
            value: value_for(&kind, &column.name, &column.profile, &w.label),
            unit: w.curie.clone(),
            status: "proposed",
        };
        links::insert(
            self.journal,
            &links::NewLink {
                id: &link.link_id,
                run_id: self.run_id,
                group_id: &link.group_id,
                decision_id: &link.decision_id,
                attribute: &link.attribute,
                value: &link.value,
                unit: &link.unit,
                status: link.status,
            },
        )?;
        Ok(Some(link))
    }
}

/// Runs the graph and writes its journal: for callers that hold the sidecar anyway.
pub fn annotate_into(
    card: &Card,
    search: &Search,
    backend: &dyn Backend,
    policy: &Policy,
    sidecar: &mut Sidecar,
    actor: Option<&str>,
    bundle: Option<&str>,
) -> Result<Run, GraphError> {
    let (run, journal) = annotate(card, search, backend, policy, actor, bundle)?;
    journal.write(sidecar)?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Embedded;
    use crate::card;
    use crate::params;
    use mesh_ontology::index::Index;
    use std::path::Path;

    #[test]
    fn ids_are_uuids_that_sort_by_time() {
        let first = id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = id();
        assert!(first < second, "{first} {second}");
        let parsed = uuid::Uuid::parse_str(&second).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(second.len(), 32);
    }

    #[test]
    fn the_example_card_through_the_graph() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("ontology.sqlite")).unwrap();
        for o in ["pato", "uberon", "ncbitaxon"] {
            let f = format!(
                "{}/../../tests/ontologies/{o}.obo",
                env!("CARGO_MANIFEST_DIR")
            );
            index.import(Path::new(&f), |_| {}).unwrap();
        }
        let mut sidecar = Sidecar::open(&dir.path().join("sidecar.sqlite")).unwrap();
        let card = card::parse(include_str!("../../../tests/cards/example.md")).unwrap();
        let run = annotate_into(
            &card,
            &index,
            &Embedded,
            &Policy::defaults(),
            &mut sidecar,
            Some("ann@PEOPLE"),
            None,
        )
        .unwrap();

        let winner = |column: &str| {
            run.groups
                .iter()
                .find(|g| g.column == column)
                .and_then(|g| g.winner.as_ref())
                .map(|w| w.curie.as_str())
        };
        assert_eq!(
            winner("hindfootLength"),
            Some("PATO:0000122"),
            "{:#?}",
            run.groups
        );
        assert_eq!(winner("earLength"), Some("PATO:0000122"));
        assert_eq!(
            winner("scientificName"),
            Some("NCBITaxon:10041"),
            "{:#?}",
            run.groups
        );
        // Identifier columns were set aside by rule, with no probabilities.
        let rules: i64 = sidecar
            .db
            .query_row(
                "SELECT count(*) FROM decisions WHERE run_id = ?1 AND level = 'rule' AND p IS NULL
                   AND question_key NOT LIKE 'avu.value_kind%'",
                params![&run.run_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rules, 4, "uid, plotID, collectDate, remarks");
        // The AVU's value is the convention, said as a rule with its reason: no probability
        // the backend never measured.
        let (kinds, ruled): (i64, i64) = sidecar
            .db
            .query_row(
                "SELECT count(*), count(*) FILTER (WHERE level = 'rule' AND p IS NULL
                   AND state_json LIKE '%the value is the column''s name%')
                 FROM decisions WHERE run_id = ?1 AND question_key LIKE 'avu.value_kind%'",
                params![&run.run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert!(kinds > 0);
        assert_eq!(kinds, ruled);
        let (links, groups): (i64, i64) = sidecar
            .db
            .query_row(
                "SELECT (SELECT count(*) FROM avu_links WHERE run_id = ?1 AND status = 'proposed'),
                        (SELECT count(*) FROM candidate_groups WHERE run_id = ?1)",
                params![&run.run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(links as usize, run.proposed.len());
        assert_eq!(groups as usize, run.groups.len());
        // Every group, with a winner or not, has its value kind: a pick later asks no backend.
        let with_kind: i64 = sidecar
            .db
            .query_row(
                "SELECT count(DISTINCT c.group_id) FROM group_candidates c
                   JOIN decisions d ON d.parent_id = c.decision_id
                 WHERE d.run_id = ?1 AND d.question_key LIKE 'avu.value_kind%'",
                params![&run.run_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(with_kind, groups);
        let hind = run
            .proposed
            .iter()
            .find(|l| l.unit == "PATO:0000122")
            .unwrap_or_else(|| {
                let best: Vec<(&str, f64)> = run
                    .groups
                    .iter()
                    .map(|g| (g.column.as_str(), g.best_p))
                    .collect();
                panic!("hindfootLength's length not kept; each group's best p: {best:?}")
            });
        assert_eq!(hind.attribute, "pato.length");
    }
}
