//! Sentence embeddings as evidence: [`Terms`] that also knows how near in meaning a column's
//! text is to a term, by all-MiniLM-L6-v2 (`embed.rs`) over the column and the term vectors
//! stored at import (`ontology import --vectors`). Everything else passes through to the
//! index. A term without a stored vector, or a text the model fails on, has no similarity:
//! the lexical evidence stands alone there.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mesh_ontology::index::{Candidate, IndexError, Named, Searched};
use mesh_ontology::vectors::{OntologyVectors, TermVectors};

use crate::embed::{DIM, Embedder, Vector};
use crate::evidence::Terms;

/// [`Terms`] with meaning: the index's lookups, and the cosine of a text's embedding with a
/// term's label (or nearest synonym). A text is embedded once per `Semantic`. Without an
/// embedder (decide's default) it is the index alone.
pub struct Semantic<'a> {
    terms: &'a dyn Terms,
    embedder: Option<&'a Embedder>,
    texts: RefCell<HashMap<String, Option<Vector>>>,
    /// Each ontology's vectors, unit length, read once (for [`Terms::nearest`]).
    tables: RefCell<HashMap<String, Rc<OntologyVectors>>>,
}

impl<'a> Semantic<'a> {
    pub fn new(terms: &'a dyn Terms, embedder: Option<&'a Embedder>) -> Semantic<'a> {
        Semantic {
            terms,
            embedder,
            texts: RefCell::default(),
            tables: RefCell::default(),
        }
    }

    /// `text`'s embedding, remembered; none when the model fails on it (logged).
    fn embedding(&self, embedder: &Embedder, text: &str) -> Option<Vector> {
        if let Some(v) = self.texts.borrow().get(text) {
            return *v;
        }
        let v = match embedder.embed(&[text]) {
            Ok(mut v) => v.pop(),
            Err(e) => {
                tracing::warn!(error = %e, "could not embed a column's text; lexical evidence only");
                None
            }
        };
        self.texts.borrow_mut().insert(text.to_owned(), v);
        v
    }

    /// `ontology`'s vectors scaled to unit length, read from the index once.
    fn table(&self, ontology: &str) -> Result<Rc<OntologyVectors>, IndexError> {
        if let Some(t) = self.tables.borrow().get(ontology) {
            return Ok(Rc::clone(t));
        }
        let mut t = self.terms.ontology_vectors(ontology)?;
        if t.dim == DIM {
            for row in t.data.chunks_mut(DIM) {
                let norm = row.iter().map(|y| y * y).sum::<f32>().sqrt();
                if norm > 0.0 {
                    row.iter_mut().for_each(|y| *y /= norm);
                }
            }
        } else {
            // Another model's vectors (or none): nothing to compare with.
            t = OntologyVectors::default();
        }
        let t = Rc::new(t);
        self.tables
            .borrow_mut()
            .insert(ontology.to_owned(), Rc::clone(&t));
        Ok(t)
    }
}

/// The cosine of a unit vector with a stored one (dequantised, so near unit length).
fn cosine(a: &Vector, b: &[f32]) -> f64 {
    if b.len() != DIM {
        return 0.0;
    }
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm: f32 = b.iter().map(|y| y * y).sum::<f32>().sqrt();
    if norm > 0.0 {
        f64::from(dot / norm)
    } else {
        0.0
    }
}

impl Terms for Semantic<'_> {
    fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        self.terms.search(ontology, words, limit)
    }
    fn search_remembering(
        &self,
        searched: &Searched,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        self.terms
            .search_remembering(searched, ontology, words, limit)
    }
    fn named(&self, text: &str) -> Result<Vec<Named>, IndexError> {
        self.terms.named(text)
    }
    fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        self.terms.named_all(texts)
    }
    fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError> {
        self.terms.parents(curie)
    }
    fn label(&self, curie: &str) -> Result<Option<String>, IndexError> {
        self.terms.label(curie)
    }
    fn about(&self, curie: &str) -> Result<Option<mesh_ontology::index::About>, IndexError> {
        self.terms.about(curie)
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
        let Some(embedder) = self.embedder else {
            return self.terms.similarity(text, ontology, curies);
        };
        let stored = self.terms.term_vectors(ontology, curies)?;
        // An ontology imported without vectors costs no embedding.
        if stored.is_empty() {
            return Ok(vec![None; curies.len()]);
        }
        let Some(column) = self.embedding(embedder, text) else {
            return Ok(vec![None; curies.len()]);
        };
        let by_curie: HashMap<&str, &TermVectors> =
            stored.iter().map(|t| (t.curie.as_str(), t)).collect();
        Ok(curies
            .iter()
            .map(|c| {
                by_curie.get(c).map(|t| {
                    std::iter::once(&t.label)
                        .chain(&t.synonyms)
                        .map(|v| cosine(&column, v))
                        .fold(f64::MIN, f64::max)
                })
            })
            .collect())
    }
    fn ontology_vectors(&self, ontology: &str) -> Result<OntologyVectors, IndexError> {
        self.terms.ontology_vectors(ontology)
    }
    fn nearest(&self, text: &str, ontology: &str, k: usize) -> Result<Vec<Candidate>, IndexError> {
        let Some(embedder) = self.embedder else {
            return self.terms.nearest(text, ontology, k);
        };
        let table = self.table(ontology)?;
        if table.terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let Some(column) = self.embedding(embedder, text) else {
            return Ok(Vec::new());
        };
        // Every row scanned (tens of thousands of 384-float rows: a few ms); each term by its
        // nearest name.
        let mut best = vec![f32::MIN; table.terms.len()];
        for (row, &term) in table.data.chunks(DIM).zip(&table.of) {
            let dot: f32 = row.iter().zip(column.iter()).map(|(x, y)| x * y).sum();
            if dot > best[term] {
                best[term] = dot;
            }
        }
        let mut order: Vec<usize> = (0..best.len()).collect();
        let k = k.min(order.len());
        order.select_nth_unstable_by(k - 1, |a, b| best[*b].total_cmp(&best[*a]));
        order.truncate(k);
        order.sort_by(|a, b| best[*b].total_cmp(&best[*a]));
        Ok(order
            .into_iter()
            .map(|i| Candidate {
                curie: table.terms[i].0.clone(),
                label: table.terms[i].1.clone(),
                definition: String::new(),
                score: f64::from(best[i]),
            })
            .collect())
    }
}
