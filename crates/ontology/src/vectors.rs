//! Term vectors in the ontology index: embeddings of each term's label and synonyms, made
//! by decide (which runs the model; this crate only stores and returns the numbers) at
//! import and kept beside the terms, one row per text. An import that replaces an ontology's
//! terms drops its vectors with them.
//!
//! A vector is stored as int8: each component times 127 over the vector's largest
//! magnitude, rounded, after a little-endian f32 of that scale (4 + dim bytes, 388 for 384
//! dimensions instead of 1,536 as f32). Read back, a unit vector's cosine with the original
//! is above 0.9999.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::index::{Index, IndexError};

/// The texts of one term to embed: which term, its label and its synonyms in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermTexts {
    pub id: i64,
    pub curie: String,
    pub label: String,
    pub synonyms: Vec<String>,
}

/// The vectors of one term, dequantised: its label's, and each synonym's in order (none for
/// a term whose synonyms were not embedded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TermVectors {
    pub curie: String,
    pub label: Vec<f32>,
    pub synonyms: Vec<Vec<f32>>,
}

/// What an ontology's vectors are: the model that made them, their length, how many terms
/// and texts have one, and when (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VectorSet {
    pub ontology: String,
    pub model: String,
    pub dim: usize,
    pub terms: u64,
    pub vectors: u64,
    pub made_ms: u64,
}

/// `vector` as stored: the f32 scale, then one i8 per component.
pub fn quantise(vector: &[f32]) -> Vec<u8> {
    let max = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let mut out = Vec::with_capacity(4 + vector.len());
    out.extend_from_slice(&scale.to_le_bytes());
    out.extend(
        vector
            .iter()
            .map(|x| ((x / scale).round().clamp(-127.0, 127.0) as i8) as u8),
    );
    out
}

/// A stored vector back as f32s; `None` for bytes that are not one.
pub fn dequantise(bytes: &[u8]) -> Option<Vec<f32>> {
    let (scale, values) = bytes.split_first_chunk::<4>()?;
    let scale = f32::from_le_bytes(*scale);
    Some(values.iter().map(|&b| f32::from(b as i8) * scale).collect())
}

impl Index {
    /// Every term of `ontology` that is not obsolete, with its label and synonyms, by id.
    pub fn texts_to_embed(&self, ontology: &str) -> Result<Vec<TermTexts>, IndexError> {
        let ontology = ontology.to_ascii_lowercase();
        let mut q = self
            .db
            .prepare(
                "SELECT id, curie, label, synonyms FROM terms
                 WHERE ontology = ?1 AND obsolete = 0 ORDER BY id",
            )
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map([&ontology], |r| {
                let synonyms: String = r.get(3)?;
                Ok(TermTexts {
                    id: r.get(0)?,
                    curie: r.get(1)?,
                    label: r.get(2)?,
                    synonyms: crate::index::synonyms_of(&synonyms),
                })
            })
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }

    /// Replaces `ontology`'s vectors with those `fill` gives to the writer it is handed, in
    /// one transaction: if `fill` fails, the index keeps what it had.
    pub fn store_vectors<E: From<IndexError>>(
        &mut self,
        ontology: &str,
        model: &str,
        dim: usize,
        fill: impl FnOnce(&mut VectorWriter<'_>) -> Result<(), E>,
    ) -> Result<VectorSet, E> {
        let ontology = ontology.to_ascii_lowercase();
        let path = self.path.clone();
        let wrap = |source| IndexError::Sqlite {
            path: path.clone(),
            source,
        };
        self.db
            .execute_batch("PRAGMA synchronous = OFF;")
            .map_err(wrap)?;
        let tx = self.db.transaction().map_err(wrap)?;
        tx.execute(
            "DELETE FROM term_vectors WHERE id IN (SELECT id FROM terms WHERE ontology = ?1)",
            [&ontology],
        )
        .map_err(wrap)?;
        tx.execute("DELETE FROM vector_sets WHERE ontology = ?1", [&ontology])
            .map_err(wrap)?;
        let mut writer = VectorWriter {
            tx: &tx,
            path: &path,
            dim,
            vectors: 0,
            terms: 0,
        };
        fill(&mut writer)?;
        let (terms, vectors) = (writer.terms, writer.vectors);
        let set = VectorSet {
            ontology,
            model: model.to_owned(),
            dim,
            terms,
            vectors,
            made_ms: mesh_sqlite::now_ms(),
        };
        tx.execute(
            "INSERT INTO vector_sets (ontology, model, dim, terms, vectors, made_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                set.ontology,
                set.model,
                dim as i64,
                terms as i64,
                vectors as i64,
                set.made_ms as i64
            ],
        )
        .map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        Ok(set)
    }

    /// What `ontology`'s vectors are; none when it has none.
    pub fn vector_set(&self, ontology: &str) -> Result<Option<VectorSet>, IndexError> {
        self.db
            .query_row(
                "SELECT ontology, model, dim, terms, vectors, made_ms FROM vector_sets
                 WHERE ontology = ?1",
                [ontology.to_ascii_lowercase()],
                |r| {
                    Ok(VectorSet {
                        ontology: r.get(0)?,
                        model: r.get(1)?,
                        dim: r.get::<_, i64>(2)? as usize,
                        terms: r.get::<_, i64>(3)? as u64,
                        vectors: r.get::<_, i64>(4)? as u64,
                        made_ms: r.get::<_, i64>(5)? as u64,
                    })
                },
            )
            .optional()
            .map_err(|e| self.wrap(e))
    }

    /// The vectors of the terms of `ontology` named by `curies`, in the order asked; a CURIE
    /// with no vector (not in the ontology, obsolete, or its ontology not embedded) is left
    /// out.
    pub fn vectors(&self, ontology: &str, curies: &[&str]) -> Result<Vec<TermVectors>, IndexError> {
        let ontology = ontology.to_ascii_lowercase();
        // An ontology without vectors has none to look up; and a term is found by its CURIE,
        // never by scanning its ontology (a plan made without the bound values may choose
        // that, and CHEBI holds 200,000 terms).
        if self.vector_set(&ontology)?.is_none() {
            return Ok(Vec::new());
        }
        let mut q = self
            .db
            .prepare_cached(
                "SELECT v.n, v.vector FROM terms t INDEXED BY terms_by_curie
                 JOIN term_vectors v ON v.id = t.id
                 WHERE t.curie = ?1 AND t.ontology = ?2 ORDER BY v.n",
            )
            .map_err(|e| self.wrap(e))?;
        let mut out = Vec::with_capacity(curies.len());
        for curie in curies {
            let rows: Vec<(i64, Vec<u8>)> = q
                .query_map(params![curie, ontology], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(|e| self.wrap(e))?
                .collect::<Result<_, _>>()
                .map_err(|e| self.wrap(e))?;
            let mut vectors = rows.iter().filter_map(|(_, b)| dequantise(b));
            if rows.first().is_some_and(|(n, _)| *n == 0)
                && let Some(label) = vectors.next()
            {
                out.push(TermVectors {
                    curie: (*curie).to_owned(),
                    label,
                    synonyms: vectors.collect(),
                });
            }
        }
        Ok(out)
    }
}

/// Every stored vector of one ontology, dequantised: a term's label and each synonym are
/// rows of their own, so a nearest-neighbour search finds a term by any of its names.
#[derive(Debug, Clone, Default)]
pub struct OntologyVectors {
    /// Per row, the term's CURIE and label.
    pub terms: Vec<(String, String)>,
    /// Per row, the index into `terms`.
    pub of: Vec<usize>,
    /// Rows of `dim` components each, one after another.
    pub data: Vec<f32>,
    pub dim: usize,
}

impl Index {
    /// Every vector stored for `ontology`'s live terms (empty when it has none), for a
    /// search by meaning over the whole ontology (decide's recall by embedding).
    pub fn ontology_vectors(&self, ontology: &str) -> Result<OntologyVectors, IndexError> {
        let ontology = ontology.to_ascii_lowercase();
        // An ontology without vectors (NCBITaxon's 1.26 M terms) is not scanned for none.
        if self.vector_set(&ontology)?.is_none() {
            return Ok(OntologyVectors::default());
        }
        let mut q = self
            .db
            .prepare(
                "SELECT t.curie, t.label, v.vector FROM terms t JOIN term_vectors v ON v.id = t.id
                 WHERE t.ontology = ?1 AND t.obsolete = 0 ORDER BY t.id, v.n",
            )
            .map_err(|e| self.wrap(e))?;
        let mut rows = q.query([&ontology]).map_err(|e| self.wrap(e))?;
        let mut out = OntologyVectors::default();
        while let Some(r) = rows.next().map_err(|e| self.wrap(e))? {
            let curie: String = r.get(0).map_err(|e| self.wrap(e))?;
            let bytes: Vec<u8> = r.get(2).map_err(|e| self.wrap(e))?;
            let Some(v) = dequantise(&bytes) else {
                continue;
            };
            if out.dim == 0 {
                out.dim = v.len();
            }
            if v.len() != out.dim {
                continue;
            }
            if out.terms.last().is_none_or(|(c, _)| *c != curie) {
                let label: String = r.get(1).map_err(|e| self.wrap(e))?;
                out.terms.push((curie, label));
            }
            out.of.push(out.terms.len() - 1);
            out.data.extend(v);
        }
        Ok(out)
    }
}

/// Takes the vectors of one ontology inside [`Index::store_vectors`]'s transaction.
pub struct VectorWriter<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    path: &'a str,
    dim: usize,
    vectors: u64,
    terms: u64,
}

impl VectorWriter<'_> {
    /// Stores the vectors of term `id` (of [`TermTexts`]): its label's first, then its
    /// synonyms' in order. Each must be `dim` long.
    pub fn put(&mut self, id: i64, vectors: &[&[f32]]) -> Result<(), IndexError> {
        let wrap = |source| IndexError::Sqlite {
            path: self.path.to_owned(),
            source,
        };
        let mut insert = self
            .tx
            .prepare_cached("INSERT INTO term_vectors (id, n, vector) VALUES (?1, ?2, ?3)")
            .map_err(wrap)?;
        for (n, v) in vectors.iter().enumerate() {
            assert_eq!(v.len(), self.dim, "a vector of the set's length");
            insert
                .execute(params![id, n as i64, quantise(v)])
                .map_err(wrap)?;
            self.vectors += 1;
        }
        self.terms += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/ontologies/pato.obo"
    );

    /// A made-up unit vector for text `i`.
    fn unit(i: usize, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim)
            .map(|k| (((i * 31 + k * 17) % 97) as f32 - 48.0) / 48.0)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn quantised_vectors_keep_their_direction() {
        for i in 0..50 {
            let v = unit(i, 384);
            let bytes = quantise(&v);
            assert_eq!(bytes.len(), 4 + 384);
            let back = dequantise(&bytes).unwrap();
            assert!(cosine(&v, &back) > 0.9999, "{}", cosine(&v, &back));
        }
        assert_eq!(dequantise(&quantise(&[0.0; 4])).unwrap(), vec![0.0; 4]);
        assert_eq!(dequantise(&[1, 2]), None);
    }

    #[test]
    fn vectors_are_stored_read_and_dropped_with_their_terms() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        let texts = index.texts_to_embed("pato").unwrap();
        assert!(texts.len() > 20);
        let mass = texts.iter().find(|t| t.curie == "PATO:0000125").unwrap();
        assert_eq!(mass.label, "mass");
        let set = index
            .store_vectors("pato", "test-model", 8, |w| {
                for t in &texts {
                    let vs: Vec<Vec<f32>> = (0..=t.synonyms.len())
                        .map(|n| unit(t.id as usize * 10 + n, 8))
                        .collect();
                    let vs: Vec<&[f32]> = vs.iter().map(Vec::as_slice).collect();
                    w.put(t.id, &vs)?;
                }
                Ok::<_, IndexError>(())
            })
            .unwrap();
        assert_eq!(set.terms, texts.len() as u64);
        assert_eq!(index.vector_set("PATO").unwrap(), Some(set));
        let got = index
            .vectors("pato", &["PATO:0000125", "PATO:nothing", "PATO:0000122"])
            .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].curie, "PATO:0000125");
        assert_eq!(got[1].curie, "PATO:0000122");
        assert!(cosine(&got[0].label, &unit(mass.id as usize * 10, 8)) > 0.999);
        assert_eq!(got[0].synonyms.len(), mass.synonyms.len());
        assert!(index.vectors("cl", &["PATO:0000125"]).unwrap().is_empty());
        let all = index.ontology_vectors("pato").unwrap();
        assert_eq!((all.terms.len(), all.dim), (texts.len(), 8));
        assert_eq!(all.data.len(), all.of.len() * 8);
        assert!(
            all.terms
                .iter()
                .any(|(c, l)| c == "PATO:0000125" && l == "mass")
        );

        // A failed fill leaves the vectors as they were.
        let failed = index.store_vectors("pato", "other", 8, |_| {
            Err(IndexError::NoOntology { file: "x".into() })
        });
        assert!(failed.is_err());
        assert_eq!(
            index.vector_set("pato").unwrap().unwrap().model,
            "test-model"
        );

        // Importing the ontology again drops its vectors: they were of the old terms.
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        assert_eq!(index.vector_set("pato").unwrap(), None);
        assert!(index.vectors("pato", &["PATO:0000125"]).unwrap().is_empty());
        let rows: i64 = index
            .db
            .query_row("SELECT count(*) FROM term_vectors", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0);
    }
}
