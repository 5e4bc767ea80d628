//! The local ontology index: terms imported from OBO files into SQLite with a full-text
//! index over labels, synonyms and definitions; search by words within one ontology,
//! obsolete terms left out. No network at run time.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::obo::{OboError, Reader};

/// A term found by a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub curie: String,
    pub label: String,
    pub definition: String,
    /// Higher is better; comparable within one search only.
    pub score: f64,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Imported {
    pub ontology: String,
    pub version: Option<String>,
    pub terms: u64,
    pub obsolete: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("ontology index {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error(transparent)]
    Obo(#[from] OboError),
    #[error("{file} names no ontology (no \"ontology:\" header and no term ids with a prefix)")]
    NoOntology { file: String },
}

/// The index on disk.
pub struct Index {
    db: Connection,
    path: String,
}

const SCHEMA: &str = "
    PRAGMA journal_mode = WAL;
    CREATE TABLE IF NOT EXISTS ontologies (
        name TEXT PRIMARY KEY,
        version TEXT,
        terms INTEGER NOT NULL,
        imported_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS terms (
        id INTEGER PRIMARY KEY,
        ontology TEXT NOT NULL,
        curie TEXT NOT NULL,
        label TEXT NOT NULL,
        synonyms TEXT NOT NULL,
        definition TEXT NOT NULL,
        parents TEXT NOT NULL,
        obsolete INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS terms_by_curie ON terms (curie);
    CREATE INDEX IF NOT EXISTS terms_by_ontology ON terms (ontology);
    -- Obsolete terms are not in here, so no search can find them. Contentless: the text
    -- lives in `terms`; rowid is the term's id.
    CREATE VIRTUAL TABLE IF NOT EXISTS term_text USING fts5 (
        label, synonyms, definition,
        content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
    );
";

/// How a term's synonyms are joined in one column.
const SYNONYM_SEPARATOR: &str = " | ";

/// Column weights for ranking: a word in the label counts most, in a definition least.
const RANK: &str = "bm25(term_text, 10.0, 5.0, 1.0)";

/// Bumped whenever the tables change; an index of another version is rebuilt empty.
const SCHEMA_VERSION: i64 = 3;

impl Index {
    /// Opens (creating) the index at `path`.
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        let name = path.display().to_string();
        let wrap = |source| IndexError::Sqlite {
            path: name.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let db = Connection::open(path).map_err(wrap)?;
        let version: i64 = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(wrap)?;
        let has_tables: bool = db
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'terms'",
                [],
                |r| r.get(0),
            )
            .map_err(wrap)?;
        if has_tables && version != SCHEMA_VERSION {
            tracing::warn!(
                "ontology index {name} was made by another version of mesh; it starts empty, import the ontologies again"
            );
            db.execute_batch(
                "DROP TABLE IF EXISTS term_vocab; DROP TABLE IF EXISTS term_text;
                 DROP TABLE IF EXISTS terms; DROP TABLE IF EXISTS ontologies;",
            )
            .map_err(wrap)?;
        }
        db.execute_batch(SCHEMA).map_err(wrap)?;
        db.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(wrap)?;
        Ok(Index { db, path: name })
    }

    fn wrap(&self, source: rusqlite::Error) -> IndexError {
        IndexError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Imports an OBO file, replacing any earlier import of the same ontology, in one
    /// transaction: a failed import leaves the index as it was. `progress` is told the
    /// number of terms read now and then.
    pub fn import(
        &mut self,
        file: &Path,
        mut progress: impl FnMut(u64),
    ) -> Result<Imported, IndexError> {
        let mut reader = Reader::open(file)?;
        let mut first = reader.next_term()?;
        let ontology = reader
            .header
            .ontology
            .clone()
            .or_else(|| {
                first
                    .as_ref()
                    .and_then(|t| t.id.split_once(':').map(|(p, _)| p.to_ascii_lowercase()))
            })
            .ok_or_else(|| IndexError::NoOntology {
                file: file.display().to_string(),
            })?
            .to_ascii_lowercase();
        let version = reader.header.data_version.clone();
        let path = self.path.clone();
        let wrap = |source| IndexError::Sqlite {
            path: path.clone(),
            source,
        };
        // The index can be rebuilt from the files; durability per statement buys nothing.
        self.db
            .execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -65536;")
            .map_err(wrap)?;
        let tx = self.db.transaction().map_err(wrap)?;
        {
            let old: Vec<i64> = {
                let mut q = tx
                    .prepare("SELECT id FROM terms WHERE ontology = ?1 AND obsolete = 0")
                    .map_err(wrap)?;
                q.query_map([&ontology], |r| r.get(0))
                    .map_err(wrap)?
                    .collect::<Result<_, _>>()
                    .map_err(wrap)?
            };
            let mut forget = tx
                .prepare("DELETE FROM term_text WHERE rowid = ?1")
                .map_err(wrap)?;
            for id in old {
                forget.execute([id]).map_err(wrap)?;
            }
            tx.execute("DELETE FROM terms WHERE ontology = ?1", [&ontology])
                .map_err(wrap)?;
        }
        let (mut terms, mut obsolete) = (0u64, 0u64);
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO terms (ontology, curie, label, synonyms, definition, parents, obsolete)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(wrap)?;
            let mut text = tx
                .prepare(
                    "INSERT INTO term_text (rowid, label, synonyms, definition)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(wrap)?;
            while let Some(term) = first
                .take()
                .map(Ok)
                .or_else(|| reader.next_term().transpose())
            {
                let term = term?;
                let synonyms = term.synonyms.join(SYNONYM_SEPARATOR);
                insert
                    .execute(params![
                        ontology,
                        term.id,
                        term.name,
                        synonyms,
                        term.definition,
                        term.parents.join(" "),
                        term.obsolete
                    ])
                    .map_err(wrap)?;
                if term.obsolete {
                    obsolete += 1;
                } else {
                    let rowid = tx.last_insert_rowid();
                    text.execute(params![rowid, term.name, synonyms, term.definition])
                        .map_err(wrap)?;
                }
                terms += 1;
                if terms.is_multiple_of(100_000) {
                    progress(terms);
                }
            }
            tx.execute(
                "INSERT OR REPLACE INTO ontologies (name, version, terms, imported_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    ontology,
                    version,
                    terms as i64,
                    mesh_sqlite::now_ms() as i64
                ],
            )
            .map_err(wrap)?;
        }
        tx.commit().map_err(wrap)?;
        progress(terms);
        Ok(Imported {
            ontology,
            version,
            terms,
            obsolete,
        })
    }

    /// The ontologies imported, with their versions and term counts.
    pub fn ontologies(&self) -> Result<Vec<(String, Option<String>, u64)>, IndexError> {
        let mut q = self
            .db
            .prepare_cached("SELECT name, version, terms FROM ontologies ORDER BY name")
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
            })
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }

    /// A term by CURIE within one ontology, obsolete or not: (label, obsolete).
    pub fn term(&self, ontology: &str, curie: &str) -> Result<Option<(String, bool)>, IndexError> {
        self.db
            .query_row(
                "SELECT label, obsolete FROM terms WHERE curie = ?1 AND ontology = ?2",
                [curie, ontology],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.wrap(e))
    }

    /// The best `limit` terms of `ontology` for `words`, best first; obsolete terms never.
    ///
    /// Full-text rank (bm25, the label weighing most) picks the field; among those, the
    /// label the words match best comes first: exactly, then wholly covered, then with fewer
    /// other words. "body mass" finds `mass` before `weight`, whose definition says "mass"
    /// more often; "Peromyscus leucopus" the species before its subspecies.
    pub fn search(
        &self,
        ontology: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        let asked: Vec<String> = words_of(words);
        if asked.is_empty() {
            return Ok(Vec::new());
        }
        let field = (limit * 5).max(50);
        // Terms with every word first: far fewer rows to rank than with any word. Only when
        // they are too few is the field widened to any word.
        let mut found = self.matching(ontology, &fts_query(&asked, " AND "), field)?;
        if found.len() < limit && asked.len() > 1 {
            for more in self.matching(ontology, &fts_query(&asked, " OR "), field)? {
                if !found.iter().any(|(c, _)| c.curie == more.0.curie) {
                    found.push(more);
                }
            }
        }
        // For the label or a synonym, whichever matches best: (exactly, share of the name
        // the words cover, share of the words the name covers, fewer extra words). Ties fall
        // back to the text rank.
        let fit = |name: &str| {
            let name = words_of(name);
            let covered = name.iter().filter(|w| asked.contains(w)).count();
            let used = asked.iter().filter(|w| name.contains(w)).count();
            (
                name == asked,
                (covered * 10) / name.len().max(1),
                (used * 10) / asked.len().max(1),
                std::cmp::Reverse(name.len()),
            )
        };
        let mut found: Vec<(Candidate, _)> = found
            .into_iter()
            .map(|(c, synonyms)| {
                let best = std::iter::once(c.label.as_str())
                    .chain(synonyms.split(SYNONYM_SEPARATOR).filter(|s| !s.is_empty()))
                    .map(fit)
                    .max()
                    .expect("a label");
                (c, best)
            })
            .collect();
        found.sort_by(|(a, ka), (b, kb)| kb.cmp(ka).then(b.score.total_cmp(&a.score)));
        let mut found: Vec<Candidate> = found.into_iter().map(|(c, _)| c).collect();
        found.truncate(limit);
        Ok(found)
    }
}

impl Index {
    /// Up to `limit` terms of `ontology` matching the FTS5 `query`, by text rank, each with
    /// its synonyms.
    fn matching(
        &self,
        ontology: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(Candidate, String)>, IndexError> {
        let mut q = self
            .db
            // The full-text match goes first (CROSS JOIN keeps that order) and `terms` is
            // only looked up by id; led by the ontology index, SQLite would walk a whole
            // ontology's terms.
            .prepare_cached(&format!(
                "SELECT t.curie, t.label, t.definition, {RANK} AS rank, t.synonyms
                 FROM term_text CROSS JOIN terms t ON t.id = term_text.rowid
                 WHERE term_text MATCH ?1 AND t.ontology = ?2
                 ORDER BY rank LIMIT ?3"
            ))
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map(
                params![query, ontology.to_ascii_lowercase(), limit as i64],
                |r| {
                    let candidate = Candidate {
                        curie: r.get(0)?,
                        label: r.get(1)?,
                        definition: r.get(2)?,
                        // bm25 is lower-is-better; flip it so higher is better.
                        score: -r.get::<_, f64>(3)?,
                    };
                    Ok((candidate, r.get::<_, String>(4)?))
                },
            )
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }
}

/// Words that say nothing about a term and are in a great many of them; searching for them
/// costs milliseconds and finds nothing better.
const STOPWORDS: [&str; 24] = [
    "of", "the", "a", "an", "in", "on", "at", "to", "for", "by", "with", "and", "or", "from",
    "per", "as", "is", "are", "be", "its", "that", "this", "which", "into",
];

fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Words as an FTS5 query: each word quoted, so no word is read as an operator.
fn fts_query(words: &[String], joined_by: &str) -> String {
    let terms: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    format!(
        "{{label synonyms definition}} : ({})",
        terms.join(joined_by)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/ontologies/pato.obo"
    );

    #[test]
    fn import_search_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        let done = index.import(Path::new(FIXTURE), |_| {}).unwrap();
        assert_eq!(done.ontology, "pato");
        assert!(done.terms > 20, "{done:?}");
        let found = index.search("pato", "length of the hind foot", 5).unwrap();
        assert_eq!(found[0].curie, "PATO:0000122", "{found:?}");
        let found = index.search("pato", "body mass", 5).unwrap();
        assert_eq!(found[0].curie, "PATO:0000125", "{found:?}");
        // Obsolete terms are never found; other ontologies are not searched.
        let found = index.search("pato", "obsolete", 20).unwrap();
        assert!(
            found.iter().all(|c| !c.label.starts_with("obsolete")),
            "{found:?}"
        );
        assert!(index.search("cl", "length", 5).unwrap().is_empty());
        // Importing again replaces, it does not add.
        let again = index.import(Path::new(FIXTURE), |_| {}).unwrap();
        assert_eq!(again.terms, done.terms);
        assert_eq!(index.ontologies().unwrap()[0].2, done.terms);
        assert_eq!(
            index.search("pato", "length of the hind foot", 5).unwrap()[0].curie,
            "PATO:0000122"
        );
        // Words that are operators to FTS5 are only words.
        assert!(index.search("pato", "AND OR NOT \"(*", 5).is_ok());
    }
}
