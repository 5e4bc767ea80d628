//! The local ontology index: terms imported from OBO files into SQLite with a full-text
//! index over labels, synonyms and definitions; search by words within one ontology,
//! obsolete terms left out. No network at run time.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use mesh_sqlite::{MigrateError, open_migrated};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use crate::obo::{OboError, Reader};
use crate::rank::{self, RankError};

/// A term found by a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub curie: String,
    pub label: String,
    pub definition: String,
    /// Higher is better; comparable within one search only.
    pub score: f64,
}

/// The full-text fields of one caller's searches, remembered for its later ones: a run's
/// columns search the same words again (a name whose description only repeats it is searched
/// alone and with the description, one field each time). Good while the index does not change
/// under it: for one run.
#[derive(Default)]
pub struct Searched(RefCell<HashMap<Field, Vec<(Candidate, String)>>>);

/// A field as [`Index::matching`] ranks it: ontology, full-text query, how many.
type Field = (String, String, usize);

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
    #[error(
        "ontology index {path} has schema version {found}, newer than this mesh knows ({known}); use a newer mesh, or import the ontologies into another index file"
    )]
    TooNew {
        path: String,
        found: i64,
        known: usize,
    },
    #[error("ontology index {path}: {source}")]
    Rank { path: String, source: RankError },
    #[error(transparent)]
    Obo(#[from] OboError),
    #[error("{file} names no ontology (no \"ontology:\" header and no term ids with a prefix)")]
    NoOntology { file: String },
}

/// The index on disk.
pub struct Index {
    pub(crate) db: Connection,
    pub(crate) path: String,
    /// What the connection's rank keeps between searches (`rank`).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) rank: std::sync::Arc<rank::Kept>,
}

/// What the index keeps of a term beside its text: its label, synonyms and rank.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct About {
    pub label: String,
    pub synonyms: Vec<String>,
    /// The taxonomic rank (`class`, `order`, `species`) where the file gave one.
    pub rank: Option<String>,
}

/// The index's migrations (`mesh_sqlite::open_migrated`: `user_version` counts the steps
/// applied).
///
/// Before the index moved onto the shared scheme it kept `user_version` itself: 3 for the
/// tables below, and an index of any other version was emptied and made again. The steps are
/// numbered so that version and count coincide: an index the old code wrote (version 3) has
/// applied all three and is opened as it is. Steps 1 and 2 stand for versions no released
/// mesh wrote and do nothing; step 3 is the old version 3, and, like the old code, first
/// drops whatever tables an index of an earlier version had (their terms lacked columns), so
/// such an index starts empty and its ontologies are imported again.
const MIGRATIONS: &[&str] = &[
    "-- 1: no index was ever written at this version.",
    "-- 2: no index was ever written at this version.",
    "
    DROP TABLE IF EXISTS term_vocab;
    DROP TABLE IF EXISTS term_text;
    DROP TABLE IF EXISTS terms;
    DROP TABLE IF EXISTS ontologies;
    CREATE TABLE ontologies (
        name TEXT PRIMARY KEY,
        version TEXT,
        terms INTEGER NOT NULL,
        imported_ms INTEGER NOT NULL
    );
    CREATE TABLE terms (
        id INTEGER PRIMARY KEY,
        ontology TEXT NOT NULL,
        curie TEXT NOT NULL,
        label TEXT NOT NULL,
        synonyms TEXT NOT NULL,
        definition TEXT NOT NULL,
        parents TEXT NOT NULL,
        obsolete INTEGER NOT NULL
    );
    CREATE INDEX terms_by_curie ON terms (curie);
    CREATE INDEX terms_by_ontology ON terms (ontology);
    -- Obsolete terms are not in here, so no search can find them. Contentless: the text
    -- lives in `terms`; rowid is the term's id.
    CREATE VIRTUAL TABLE term_text USING fts5 (
        label, synonyms, definition,
        content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
    );
    ",
    "
    -- 4: term vectors (crate::vectors), one row per text embedded: n 0 is the label, n 1..
    -- the synonyms in order; id is the term's. Made by decide after an import; an import
    -- that replaces an ontology's terms deletes them.
    CREATE TABLE term_vectors (
        id INTEGER NOT NULL,
        n INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (id, n)
    ) WITHOUT ROWID;
    CREATE TABLE vector_sets (
        ontology TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        terms INTEGER NOT NULL,
        vectors INTEGER NOT NULL,
        made_ms INTEGER NOT NULL
    );
    ",
    "
    -- 5: every live term's label and synonyms as their words (`name_key`), so that a term
    -- named exactly by a column's words is found without ranking.
    -- Filled by imports; `Index::open` fills it for terms imported before this step.
    -- loose: the name with what `words_of` drops dropped (single characters, stopwords):
    -- `Ca(2+)` is also `ca`, but says less than a name kept whole.
    CREATE TABLE term_names (
        name TEXT NOT NULL,
        id INTEGER NOT NULL,
        loose INTEGER NOT NULL,
        PRIMARY KEY (name, id)
    ) WITHOUT ROWID;
    CREATE INDEX term_names_by_id ON term_names (id);
    ",
    "
    -- 6: a term's taxonomic rank, where its file says (NCBITaxon's `has_rank`); an
    -- ontology imported before keeps none until it is imported again.
    ALTER TABLE terms ADD COLUMN rank TEXT;
    ",
    // 7: the full-text index merged into one segment, as every import now leaves it
    // (`OPTIMIZE`).
    OPTIMIZE,
];

/// Merges the full-text index into one segment. Imports write it as many segments, and a
/// search opens an iterator per word in each of them, for the match and again for bm25's
/// count of the rows holding the word: that was a sixth of annotate's instructions. Merged,
/// a word is one seek; what a search finds and its rank do not change (the same rows, the
/// same sizes and counts).
const OPTIMIZE: &str = "INSERT INTO term_text (term_text) VALUES ('optimize');";

/// The migration that (re)creates the tables; an index that has not applied it yet and has
/// tables is emptied by it.
const TABLES_STEP: usize = 3;

/// How a term's synonyms are joined in one column.
const SYNONYM_SEPARATOR: &str = " | ";

/// How much of the index file is read through a memory map (address space, not memory).
const MAP_SIZE: &str = "PRAGMA mmap_size = 4294967296;";

/// Column weights for ranking: a word in the label counts most, in a definition least. bm25's
/// score, with the counts and sizes it reads kept between searches (`rank`).
const RANK: &str = "mesh_bm25(term_text, 10.0, 5.0, 1.0)";

impl Index {
    /// Opens (creating) the index at `path` and brings its schema up to date. An index from
    /// before the current tables starts empty (a warning says to import again); one from a
    /// newer mesh is refused, not altered.
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        let name = path.display().to_string();
        if tables_to_drop(path) {
            tracing::warn!(
                "ontology index {name} was made by an older version of mesh; it starts empty, import the ontologies again"
            );
        }
        // WAL and synchronous=NORMAL come with the scheme; an import sets its own pragmas.
        // Searches read pages all over a file of hundreds of MiB: mapped, a page read is a
        // memory access instead of a read call and a copy into SQLite's small cache.
        let db = open_migrated(path, MIGRATIONS, MAP_SIZE).map_err(|e| match e {
            MigrateError::Sqlite(source) => IndexError::Sqlite {
                path: name.clone(),
                source,
            },
            MigrateError::TooNew { found, known } => IndexError::TooNew {
                path: name.clone(),
                found,
                known,
            },
        })?;
        // Without the planner's stability guarantee, SQLite plans a search again each time
        // its words are bound (the plan may depend on them): that re-preparing, down to
        // FTS5's own statements, was a third of a short search. The plans here do not
        // depend on the words.
        db.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|source| IndexError::Sqlite {
                path: name.clone(),
                source,
            })?;
        // The rank keeps what it read for later searches, with the connection.
        let rank = rank::register(&db).map_err(|source| IndexError::Rank {
            path: name.clone(),
            source,
        })?;
        let mut index = Index {
            db,
            path: name,
            rank,
        };
        index.fill_names()?;
        Ok(index)
    }

    /// Fills `term_names` for live terms imported before it existed (once: an import
    /// keeps it filled).
    fn fill_names(&mut self) -> Result<(), IndexError> {
        let missing: bool = self
            .db
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM terms WHERE obsolete = 0)
                    AND NOT EXISTS (SELECT 1 FROM term_names)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.wrap(e))?;
        if !missing {
            return Ok(());
        }
        tracing::info!(
            "ontology index {}: indexing term names exactly, once",
            self.path
        );
        let path = self.path.clone();
        let wrap = |source| IndexError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.db.transaction().map_err(wrap)?;
        {
            let mut terms = tx
                .prepare("SELECT id, label, synonyms FROM terms WHERE obsolete = 0")
                .map_err(wrap)?;
            let mut name = tx
                .prepare("INSERT OR IGNORE INTO term_names (name, id, loose) VALUES (?1, ?2, ?3)")
                .map_err(wrap)?;
            let mut rows = terms.query([]).map_err(wrap)?;
            while let Some(row) = rows.next().map_err(wrap)? {
                let (id, label, synonyms): (i64, String, String) = (
                    row.get(0).map_err(wrap)?,
                    row.get(1).map_err(wrap)?,
                    row.get(2).map_err(wrap)?,
                );
                for (n, loose) in names_of(&label, &synonyms) {
                    name.execute(params![n, id, loose]).map_err(wrap)?;
                }
            }
        }
        tx.commit().map_err(wrap)
    }

    pub(crate) fn wrap(&self, source: rusqlite::Error) -> IndexError {
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
            // The vectors were of the terms replaced.
            tx.execute(
                "DELETE FROM term_vectors WHERE id IN (SELECT id FROM terms WHERE ontology = ?1)",
                [&ontology],
            )
            .map_err(wrap)?;
            tx.execute("DELETE FROM vector_sets WHERE ontology = ?1", [&ontology])
                .map_err(wrap)?;
            tx.execute(
                "DELETE FROM term_names WHERE id IN (SELECT id FROM terms WHERE ontology = ?1)",
                [&ontology],
            )
            .map_err(wrap)?;
            tx.execute("DELETE FROM terms WHERE ontology = ?1", [&ontology])
                .map_err(wrap)?;
        }
        let (mut terms, mut obsolete) = (0u64, 0u64);
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO terms (ontology, curie, label, synonyms, definition, parents, obsolete, rank)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(wrap)?;
            let mut text = tx
                .prepare(
                    "INSERT INTO term_text (rowid, label, synonyms, definition)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(wrap)?;
            let mut name = tx
                .prepare("INSERT OR IGNORE INTO term_names (name, id, loose) VALUES (?1, ?2, ?3)")
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
                        term.obsolete,
                        term.rank
                    ])
                    .map_err(wrap)?;
                if term.obsolete {
                    obsolete += 1;
                } else {
                    let rowid = tx.last_insert_rowid();
                    text.execute(params![rowid, term.name, synonyms, term.definition])
                        .map_err(wrap)?;
                    for (n, loose) in names_of(&term.name, &synonyms) {
                        name.execute(params![n, rowid, loose]).map_err(wrap)?;
                    }
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
            tx.execute_batch(OPTIMIZE).map_err(wrap)?;
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

    /// The live terms, of every ontology, whose label or an exact synonym is `text` word for
    /// word (case and punctuation aside), each with its ontology and whether
    /// it was the label that matched; labels first.
    pub fn named(&self, text: &str) -> Result<Vec<Named>, IndexError> {
        let found = self.named_all(&[text.to_owned()])?;
        Ok(found.into_iter().next().map(|(_, n)| n).unwrap_or_default())
    }

    /// [`Index::named`] for many texts in one query: each text's terms, in the order asked
    /// (texts that name nothing left out).
    pub fn named_all(&self, texts: &[String]) -> Result<Vec<(String, Vec<Named>)>, IndexError> {
        let keys: Vec<String> = texts.iter().map(|t| name_key(t)).collect();
        if keys.iter().all(String::is_empty) {
            return Ok(Vec::new());
        }
        // A JSON array for `json_each`: keys are letters, digits and blanks only, nothing to
        // escape.
        let asked = format!(
            "[{}]",
            keys.iter()
                .map(|k| format!("\"{k}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut q = self
            .db
            .prepare_cached(
                "SELECT t.curie, t.label, t.definition, 0.0, t.synonyms, t.ontology, t.parents,
                        n.loose, n.name
                 FROM term_names n CROSS JOIN terms t ON t.id = n.id
                 WHERE n.name IN (SELECT value FROM json_each(?1)) AND t.obsolete = 0
                 ORDER BY n.name, n.loose, t.id",
            )
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map([&asked], |r| {
                let (candidate, synonyms) = candidate(r)?;
                let loose: bool = r.get(7)?;
                let name: String = r.get(8)?;
                let by_label = !loose && name_key(&candidate.label) == name;
                // A synonym the ontology spells with no capital is a word (`race`), not an
                // abbreviation (`BE`, `pH`).
                let word = !loose
                    && !by_label
                    && synonyms_of(&synonyms)
                        .iter()
                        .any(|s| name_key(s) == name && !s.chars().any(char::is_uppercase));
                Ok((
                    name.clone(),
                    Named {
                        ontology: r.get(5)?,
                        loose,
                        by_label,
                        word,
                        parents: r
                            .get::<_, String>(6)?
                            .split_whitespace()
                            .map(str::to_owned)
                            .collect(),
                        candidate,
                    },
                ))
            })
            .map_err(|e| self.wrap(e))?;
        let mut by_name: std::collections::HashMap<String, Vec<Named>> = Default::default();
        for row in rows {
            let (name, named) = row.map_err(|e| self.wrap(e))?;
            let found = by_name.entry(name).or_default();
            if found.len() < 50 {
                found.push(named);
            }
        }
        for found in by_name.values_mut() {
            found.sort_by_key(|n| (n.loose, !n.by_label));
        }
        // Texts alike but for case or punctuation (`Fe`, `fe`) share a key: each gets it.
        Ok(texts
            .iter()
            .zip(&keys)
            .filter_map(|(text, key)| Some((text.clone(), by_name.get(key)?.clone())))
            .collect())
    }

    /// A live term's label, synonyms and rank, by CURIE; `None` for a term not in the index.
    pub fn about(&self, curie: &str) -> Result<Option<About>, IndexError> {
        self.db
            .prepare_cached(
                "SELECT label, synonyms, rank FROM terms WHERE curie = ?1 AND obsolete = 0 LIMIT 1",
            )
            .and_then(|mut q| {
                q.query_row([curie], |r| {
                    let synonyms: String = r.get(1)?;
                    Ok(About {
                        label: r.get(0)?,
                        synonyms: synonyms_of(&synonyms),
                        rank: r.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(|e| self.wrap(e))
    }

    /// A live term's direct `is_a` parents, by CURIE; none for a term not in the index.
    pub fn parents(&self, curie: &str) -> Result<Vec<String>, IndexError> {
        let parents: Option<String> = self
            .db
            .prepare_cached("SELECT parents FROM terms WHERE curie = ?1 AND obsolete = 0 LIMIT 1")
            .and_then(|mut q| q.query_row([curie], |r| r.get(0)).optional())
            .map_err(|e| self.wrap(e))?;
        Ok(parents
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect())
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
        self.search_remembering(&Searched::default(), ontology, words, limit)
    }

    /// [`Index::search`], its fields taken from `searched` where an earlier search there
    /// ranked them, and kept there.
    pub fn search_remembering(
        &self,
        searched: &Searched,
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
        let mut found = self.matched(searched, ontology, &fts_query(&asked, " AND "), field)?;
        if found.len() < limit && asked.len() > 1 {
            for more in self.matched(searched, ontology, &fts_query(&asked, " OR "), field)? {
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
    /// [`Index::matching`], remembered in `searched`.
    fn matched(
        &self,
        searched: &Searched,
        ontology: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(Candidate, String)>, IndexError> {
        let key = (ontology.to_owned(), query.to_owned(), limit);
        if let Some(found) = searched.0.borrow().get(&key) {
            return Ok(found.clone());
        }
        let found = self.matching(ontology, query, limit)?;
        searched.0.borrow_mut().insert(key, found.clone());
        Ok(found)
    }

    /// Up to `limit` terms of `ontology` matching the FTS5 `query`, by text rank (ties by
    /// id), each with its synonyms.
    fn matching(
        &self,
        ontology: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(Candidate, String)>, IndexError> {
        let ontology = ontology.to_ascii_lowercase();
        let Some((first, last)) = self.ids_of(&ontology)? else {
            return Ok(Vec::new());
        };
        // Ranked inside the full-text index, within the ontology's ids, and only the best
        // looked up in `terms`: a widened search matches thousands of terms, and a lookup
        // each cost as much as ranking them. The ids of one import are consecutive (one
        // transaction, each id the next), so the range holds no other ontology's terms; the
        // join checks it, and should it ever not hold, the whole match is filtered instead.
        let mut q = self
            .db
            .prepare_cached(&format!(
                "SELECT t.curie, t.label, t.definition, m.rank, t.synonyms, t.ontology = ?5
                 FROM (SELECT rowid AS id, {RANK} AS rank FROM term_text
                       WHERE term_text MATCH ?1 AND rowid BETWEEN ?2 AND ?3
                       ORDER BY rank, rowid LIMIT ?4) AS m
                 CROSS JOIN terms t ON t.id = m.id
                 ORDER BY m.rank, m.id"
            ))
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map(params![query, first, last, limit as i64, ontology], |r| {
                Ok((candidate(r)?, r.get::<_, bool>(5)?))
            })
            .map_err(|e| self.wrap(e))?;
        let found: Vec<_> = rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))?;
        if found.iter().all(|(_, ours)| *ours) {
            return Ok(found.into_iter().map(|(c, _)| c).collect());
        }
        self.matching_filtered(&ontology, query, limit)
    }

    /// The first and last id of `ontology`'s terms; none when it has none.
    fn ids_of(&self, ontology: &str) -> Result<Option<(i64, i64)>, IndexError> {
        let mut q = self
            .db
            .prepare_cached(
                "SELECT (SELECT min(id) FROM terms WHERE ontology = ?1),
                        (SELECT max(id) FROM terms WHERE ontology = ?1)",
            )
            .map_err(|e| self.wrap(e))?;
        let (first, last): (Option<i64>, Option<i64>) = q
            .query_row([ontology], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.wrap(e))?;
        Ok(first.zip(last))
    }

    /// [`Index::matching`] by filtering every term the query matches: right whatever the ids.
    fn matching_filtered(
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
                 ORDER BY rank, t.id LIMIT ?3"
            ))
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map(params![query, ontology, limit as i64], candidate)
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }
}

/// A row of curie, label, definition, rank and synonyms as a candidate and its synonyms.
fn candidate(r: &rusqlite::Row) -> rusqlite::Result<(Candidate, String)> {
    let candidate = Candidate {
        curie: r.get(0)?,
        label: r.get(1)?,
        definition: r.get(2)?,
        // bm25 is lower-is-better; flip it so higher is better.
        score: -r.get::<_, f64>(3)?,
    };
    Ok((candidate, r.get(4)?))
}

/// A name as `term_names` keeps it: every run of letters and digits, lower-cased, one blank
/// apart. Nothing is dropped (`iron(0)` is not `iron`, `D-NAME` not `name`).
pub fn name_key(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A term's label and synonyms as `term_names` keeps them, each once: whole, then loose
/// (`true`) where that differs.
fn names_of(label: &str, synonyms: &str) -> Vec<(String, bool)> {
    let texts: Vec<&str> = std::iter::once(label)
        .chain(synonyms.split(SYNONYM_SEPARATOR))
        .collect();
    let mut names: Vec<(String, bool)> = texts
        .iter()
        .map(|t| (name_key(t), false))
        .chain(texts.iter().map(|t| (words_of(t).join(" "), true)))
        .filter(|(n, _)| !n.is_empty())
        .collect();
    // Whole before loose: the same name kept once, as whole when it is.
    names.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    names.dedup_by(|later, earlier| later.0 == earlier.0);
    names
}

/// A term named exactly, found by [`Index::named`].
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub ontology: String,
    pub candidate: Candidate,
    /// Its label matched (not a synonym), whole.
    pub by_label: bool,
    /// A synonym matched that the ontology writes without a capital: a word (`race` of
    /// "ethnic group"), where one with capitals is an abbreviation (`BE`).
    pub word: bool,
    /// Only with single characters and stopwords left out (`ca` for `Ca(2+)`).
    pub loose: bool,
    /// Its direct `is_a` parents.
    pub parents: Vec<String>,
}

/// A term's synonyms as stored in one column, each apart.
pub(crate) fn synonyms_of(joined: &str) -> Vec<String> {
    joined
        .split(SYNONYM_SEPARATOR)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether the file at `path` is an index with tables that the migrations will drop: one
/// from before the current tables. Only for the warning: a missing file is not created, and
/// anything unreadable says no (opening it then says why).
fn tables_to_drop(path: &Path) -> bool {
    let Ok(db) = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE) else {
        return false;
    };
    let peek = || -> rusqlite::Result<bool> {
        let version: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let has_tables: bool = db.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'terms'",
            [],
            |r| r.get(0),
        )?;
        Ok(has_tables && version < TABLES_STEP as i64)
    };
    peek().unwrap_or(false)
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

    #[test]
    fn a_run_remembers_its_fields_and_finds_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        let searched = Searched::default();
        for (words, limit) in [
            ("body mass", 5),
            ("length of the hind foot", 8),
            ("body mass of the", 8),
            ("hind foot length", 5),
            ("body mass", 3),
        ] {
            assert_eq!(
                index
                    .search_remembering(&searched, "pato", words, limit)
                    .unwrap(),
                index.search("pato", words, limit).unwrap(),
                "{words}"
            );
        }
        // "body mass", with stopwords or another limit, is one field (and one widened).
        let fields = searched.0.borrow();
        let body = fields.keys().filter(|(_, q, _)| q.contains("body")).count();
        assert!((1..=2).contains(&body), "{:?}", fields.keys());
    }

    #[test]
    fn an_import_leaves_the_full_text_index_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        let curies =
            |found: Vec<Candidate>| -> Vec<String> { found.into_iter().map(|c| c.curie).collect() };
        let first = curies(index.search("pato", "length of the hind foot", 5).unwrap());
        // Each import's transaction writes a segment of its own; merged, there is one.
        let uberon = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/ontologies/uberon.obo"
        );
        index.import(Path::new(uberon), |_| {}).unwrap();
        let segments: i64 = index
            .db
            .query_row("SELECT count(DISTINCT segid) FROM term_text_idx", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(segments, 1);
        // The scores move with what else the index holds (bm25 counts every row), the
        // terms found do not.
        assert_eq!(
            curies(index.search("pato", "length of the hind foot", 5).unwrap()),
            first
        );
    }

    #[test]
    fn a_term_keeps_its_synonyms_and_rank() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ncbitaxon.obo");
        std::fs::write(
            &file,
            "format-version: 1.4\nontology: ncbitaxon\n\n[Term]\nid: NCBITaxon:8782\nname: Aves\nsynonym: \"birds\" EXACT []\nproperty_value: has_rank NCBITaxon:class\nis_a: NCBITaxon:8492\n\n[Term]\nid: NCBITaxon:8492\nname: Archosauria\n",
        )
        .unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(&file, |_| {}).unwrap();
        let aves = index.about("NCBITaxon:8782").unwrap().unwrap();
        assert_eq!(aves.label, "Aves");
        assert_eq!(aves.synonyms, ["birds"]);
        assert_eq!(aves.rank.as_deref(), Some("class"));
        let above = index.about("NCBITaxon:8492").unwrap().unwrap();
        assert_eq!((above.synonyms.len(), above.rank), (0, None));
        assert_eq!(index.about("NCBITaxon:1").unwrap(), None);
    }

    #[test]
    fn names_asked_together_answer_each_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        let texts: Vec<String> = ["Mass", "mass", "no such name", "LENGTH", "\"mass\"]"]
            .map(String::from)
            .to_vec();
        let found = index.named_all(&texts).unwrap();
        let asked: Vec<&str> = found.iter().map(|(t, _)| t.as_str()).collect();
        // Texts that share a key each get its terms, in the order asked; quotes and brackets
        // in a card are no part of the query.
        assert_eq!(asked, ["Mass", "mass", "LENGTH", "\"mass\"]"]);
        assert!(found.iter().all(|(_, n)| !n.is_empty()));
        assert_eq!(found[0].1, found[1].1);
        assert_eq!(found[0].1[0].candidate.curie, "PATO:0000125");
        assert_eq!(index.named("mass").unwrap(), found[0].1);
    }

    #[test]
    fn a_term_of_another_ontology_among_the_ids_is_not_found() {
        // Imports give an ontology consecutive ids; should another ontology's term sit
        // among them, the search filters by ontology instead of trusting the range.
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        let before = index.search("pato", "body mass", 5).unwrap();
        let (first, last) = index.ids_of("pato").unwrap().unwrap();
        let inside: i64 = index
            .db
            .query_row(
                "SELECT id FROM terms WHERE id > ?1 AND id < ?2 AND curie NOT IN
                   ('PATO:0000125', 'PATO:0000122') AND obsolete = 0 LIMIT 1",
                [first, last],
                |r| r.get(0),
            )
            .unwrap();
        index
            .db
            .execute_batch(&format!(
                "DELETE FROM term_text WHERE rowid = {inside};
                 DELETE FROM terms WHERE id = {inside};
                 INSERT INTO terms (id, ontology, curie, label, synonyms, definition, parents, obsolete)
                   VALUES ({inside}, 'cl', 'CL:0000001', 'body mass', '', 'body mass', '', 0);
                 INSERT INTO term_text (rowid, label, synonyms, definition)
                   VALUES ({inside}, 'body mass', '', 'body mass');"
            ))
            .unwrap();
        let found = index.search("pato", "body mass", 5).unwrap();
        assert!(
            found.iter().all(|c| c.curie.starts_with("PATO:")),
            "{found:?}"
        );
        assert_eq!(found[0].curie, before[0].curie);
        assert_eq!(
            index.search("cl", "body mass", 5).unwrap()[0].curie,
            "CL:0000001"
        );
    }

    /// What `Index::open` ran before the index moved onto `open_migrated` (the tables of
    /// its `SCHEMA_VERSION` 3), as it wrote them.
    const OLD_SCHEMA_3: &str = "
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
        CREATE VIRTUAL TABLE IF NOT EXISTS term_text USING fts5 (
            label, synonyms, definition,
            content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
        );
    ";

    /// One term as the old import wrote it: a row in `terms`, its text in `term_text`.
    fn old_term(db: &Connection, curie: &str, label: &str, definition: &str) {
        db.execute(
            "INSERT INTO terms (ontology, curie, label, synonyms, definition, parents, obsolete)
             VALUES ('pato', ?1, ?2, '', ?3, '', 0)",
            params![curie, label, definition],
        )
        .unwrap();
        db.execute(
            "INSERT INTO term_text (rowid, label, synonyms, definition) VALUES (?1, ?2, '', ?3)",
            params![db.last_insert_rowid(), label, definition],
        )
        .unwrap();
    }

    fn user_version(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn an_index_the_old_scheme_wrote_opens_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(OLD_SCHEMA_3).unwrap();
            db.pragma_update(None, "user_version", 3).unwrap();
            old_term(&db, "PATO:0000122", "length", "A 1-D extent quality.");
            old_term(&db, "PATO:0000125", "mass", "A physical quality of matter.");
            db.execute(
                "INSERT INTO ontologies (name, version, terms, imported_ms)
                 VALUES ('pato', 'releases/2025-05-14', 2, 1)",
                [],
            )
            .unwrap();
        }
        assert!(!tables_to_drop(&path), "nothing to empty");
        let mut index = Index::open(&path).unwrap();
        // Version 3 of the old scheme is three steps applied: nothing ran, nothing was lost
        // (step 4 only adds the vector tables).
        assert_eq!(user_version(&path), MIGRATIONS.len() as i64);
        assert_eq!(
            index.ontologies().unwrap(),
            vec![("pato".to_owned(), Some("releases/2025-05-14".to_owned()), 2)]
        );
        assert_eq!(
            index.search("pato", "length", 5).unwrap()[0].curie,
            "PATO:0000122"
        );
        assert_eq!(
            index.term("pato", "PATO:0000125").unwrap(),
            Some(("mass".to_owned(), false))
        );
        // And it takes imports as an index made now does.
        let done = index.import(Path::new(FIXTURE), |_| {}).unwrap();
        assert_eq!(index.ontologies().unwrap()[0].2, done.terms);
        assert_eq!(
            index.search("pato", "length of the hind foot", 5).unwrap()[0].curie,
            "PATO:0000122"
        );
    }

    #[test]
    fn an_index_from_before_the_version_starts_empty() {
        // The first index (no user_version; terms without synonyms): the old code emptied
        // it, and so does step 3.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE ontologies (name TEXT PRIMARY KEY, version TEXT,
                     terms INTEGER NOT NULL, imported_ms INTEGER NOT NULL);
                 CREATE TABLE terms (id INTEGER PRIMARY KEY, ontology TEXT NOT NULL,
                     curie TEXT NOT NULL, label TEXT NOT NULL, definition TEXT NOT NULL,
                     parents TEXT NOT NULL, obsolete INTEGER NOT NULL);
                 INSERT INTO terms VALUES (1, 'pato', 'PATO:0000122', 'length', '', '', 0);
                 INSERT INTO ontologies VALUES ('pato', NULL, 1, 1);",
            )
            .unwrap();
        }
        assert!(tables_to_drop(&path), "the warning is given");
        let mut index = Index::open(&path).unwrap();
        assert_eq!(user_version(&path), MIGRATIONS.len() as i64);
        assert!(index.ontologies().unwrap().is_empty());
        assert_eq!(index.term("pato", "PATO:0000122").unwrap(), None);
        index.import(Path::new(FIXTURE), |_| {}).unwrap();
        assert_eq!(
            index.search("pato", "body mass", 5).unwrap()[0].curie,
            "PATO:0000125"
        );
        drop(index);
        // Once migrated, nothing is emptied again.
        assert!(!tables_to_drop(&path));
        assert!(!Index::open(&path).unwrap().ontologies().unwrap().is_empty());
    }

    #[test]
    fn an_index_from_a_newer_mesh_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        Index::open(&path)
            .unwrap()
            .import(Path::new(FIXTURE), |_| {})
            .unwrap();
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", MIGRATIONS.len() as i64 + 1)
            .unwrap();
        let Err(e) = Index::open(&path) else {
            panic!("a newer index opened")
        };
        assert!(
            matches!(
                e,
                IndexError::TooNew { found, known, .. }
                    if found == MIGRATIONS.len() as i64 + 1 && known == MIGRATIONS.len()
            ),
            "{e:?}"
        );
        let message = e.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("use a newer mesh"), "{message}");
        // Not altered: still the newer version, the terms still there.
        assert_eq!(user_version(&path), MIGRATIONS.len() as i64 + 1);
        let terms: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM terms", [], |r| r.get(0))
            .unwrap();
        assert!(terms > 20);
    }

    #[test]
    fn the_index_is_a_wal_file() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        let mode: String = index
            .db
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        // NORMAL: 1.
        let synchronous: i64 = index
            .db
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(synchronous, 1);
    }
}
