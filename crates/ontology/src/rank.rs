//! The full-text rank of a search: FTS5's bm25, computed as `fts5_aux.c` computes it, with
//! what bm25 reads again on every search kept between searches. bm25 counts, for each word of
//! a query, every row of the index that holds it (the word's document frequency, read by a
//! pass over its whole list of rows), and reads each matched row's size in tokens from the
//! index's sizes table (a statement run per row). Both depend only on what the index holds:
//! kept here until it changes (`Kept::hold_at`), a search that meets a word or a row again
//! reads neither; each statement first checks the file's data version (SQLite's, which any
//! connection's commit moves) and forgets what it kept when it moved. The score is bm25's to
//! the bit (same operations in the same order, the same `log`); the tests compare the two.
//!
//! Registered on the index's connection as the FTS5 function `mesh_bm25(term_text, w…)`,
//! where `w…` weigh the columns as bm25's do.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;
use rusqlite::ffi;

/// The SQL name of the function.
const FUNCTION: &str = "mesh_bm25";

/// The most phrases whose row counts are kept (a few MiB).
pub(crate) const MOST_KEPT_PHRASES: usize = 50_000;

/// The highest rowid whose size is kept (32 MiB of sizes at most).
const MOST_KEPT_ROWS: usize = 1 << 24;

/// BM25's constants, as FTS5 fixes them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// What bm25 would read again: each query word's document frequency, and each row's size in
/// tokens (index: rowid; 0, not known yet, or too large to keep in 16 bits).
#[derive(Default)]
pub(crate) struct Kept {
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// The file's data version what is held was read at.
    version: Option<u32>,
    /// A phrase's tokens (each followed by a 0 byte) → the rows holding it.
    rows_holding: HashMap<Vec<u8>, i64>,
    sizes: Vec<u16>,
}

impl Kept {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many phrases' row counts are kept.
    #[cfg(test)]
    pub(crate) fn phrases(&self) -> usize {
        self.held().rows_holding.len()
    }

    /// Forgets everything if the file changed since what is held was read.
    fn hold_at(&self, version: u32) {
        let mut held = self.held();
        if held.version != Some(version) {
            *held = Held {
                version: Some(version),
                ..Held::default()
            };
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error("FTS5's API was not found on the connection")]
    NoFts5,
    #[error("FTS5 refused the function {FUNCTION} (code {0})")]
    Refused(c_int),
}

/// Registers [`FUNCTION`] on `db`, with what it keeps shared by the connection (which drops
/// its share with the function) and the caller.
pub(crate) fn register(db: &Connection) -> Result<Arc<Kept>, RankError> {
    let api = fts5_api(db).ok_or(RankError::NoFts5)?;
    // SAFETY: `api` is the connection's live fts5_api.
    let create = unsafe { (*api).xCreateFunction }.ok_or(RankError::NoFts5)?;
    let kept = Arc::new(Kept::default());
    let user = Arc::into_raw(kept.clone()) as *mut c_void;
    // SAFETY: the name is NUL-terminated; `user` is an Arc's share that `drop_kept` releases
    // when FTS5 drops the function with the connection.
    let rc = unsafe {
        create(
            api,
            c"mesh_bm25".as_ptr(),
            user,
            Some(mesh_bm25),
            Some(drop_kept),
        )
    };
    if rc != ffi::SQLITE_OK {
        // Refused, FTS5 keeps nothing and calls no destructor.
        // SAFETY: `user` was made above and given to nobody.
        unsafe { drop_kept(user) };
        return Err(RankError::Refused(rc));
    }
    Ok(kept)
}

/// The connection's `fts5_api`, as FTS5's documentation says to get it (`SELECT fts5(?1)`
/// with a pointer bound).
fn fts5_api(db: &Connection) -> Option<*mut ffi::fts5_api> {
    let mut api: *mut ffi::fts5_api = std::ptr::null_mut();
    // SAFETY: the handle is the live connection's, used on this thread only for this call;
    // the statement is finalized before returning; the bound pointer outlives the step.
    unsafe {
        let handle = db.handle();
        let mut stmt: *mut ffi::sqlite3_stmt = std::ptr::null_mut();
        let sql = c"SELECT fts5(?1)";
        if ffi::sqlite3_prepare_v2(handle, sql.as_ptr(), -1, &mut stmt, std::ptr::null_mut())
            != ffi::SQLITE_OK
        {
            return None;
        }
        ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        ffi::sqlite3_step(stmt);
        ffi::sqlite3_finalize(stmt);
    }
    (!api.is_null()).then_some(api)
}

unsafe extern "C" fn drop_kept(user: *mut c_void) {
    // SAFETY: `user` is the share `register` made with `Arc::into_raw`, released once.
    drop(unsafe { Arc::from_raw(user as *const Kept) });
}

/// What one statement's rows share (FTS5's auxdata): as bm25's `Fts5Bm25Data`.
struct Query {
    idf: Vec<f64>,
    avgdl: f64,
    freq: Vec<f64>,
}

unsafe extern "C" fn drop_query(query: *mut c_void) {
    // SAFETY: made by `Box::into_raw` in `query`, dropped once by FTS5.
    drop(unsafe { Box::from_raw(query as *mut Query) });
}

unsafe extern "C" fn count_row(
    _api: *const ffi::Fts5ExtensionApi,
    _fts: *mut ffi::Fts5Context,
    hits: *mut c_void,
) -> c_int {
    // SAFETY: `hits` is the i64 `rows_holding` passes.
    unsafe { *(hits as *mut i64) += 1 };
    ffi::SQLITE_OK
}

/// FTS5 calls the API's functions through these; each is there in every FTS5 this crate
/// builds with (version 3 and later), and their absence is an error, not a crash.
macro_rules! call {
    ($api:expr, $f:ident ( $($arg:expr),* )) => {
        match (*$api).$f {
            Some(f) => f($($arg),*),
            None => return Err(ffi::SQLITE_ERROR),
        }
    };
}

/// The statement's shared data, made on its first row as bm25 makes it.
///
/// # Safety
/// `api`, `fts` and `ctx` are the ones FTS5 passed the function.
unsafe fn query(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    kept: &Kept,
) -> Result<*mut Query, c_int> {
    unsafe {
        let found = call!(api, xGetAuxdata(fts, 0)) as *mut Query;
        if !found.is_null() {
            return Ok(found);
        }
        // The statement's read transaction has begun: the version is the file's as it reads.
        let mut version: u32 = 0;
        check(ffi::sqlite3_file_control(
            ffi::sqlite3_context_db_handle(ctx),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_DATA_VERSION,
            (&mut version as *mut u32).cast(),
        ))?;
        kept.hold_at(version);
        let phrases = call!(api, xPhraseCount(fts));
        let (mut rows, mut tokens) = (0i64, 0i64);
        check(call!(api, xRowCount(fts, &mut rows)))?;
        check(call!(api, xColumnTotalSize(fts, -1, &mut tokens)))?;
        let avgdl = tokens as f64 / rows as f64;
        let mut idf = Vec::with_capacity(phrases.max(0) as usize);
        for i in 0..phrases {
            let hits = rows_holding(api, fts, i, kept)?;
            let v = (((rows - hits) as f64 + 0.5) / (hits as f64 + 0.5)).ln();
            idf.push(if v <= 0.0 { 1e-6 } else { v });
        }
        let query = Box::into_raw(Box::new(Query {
            freq: vec![0.0; idf.len()],
            idf,
            avgdl,
        }));
        let rc = call!(api, xSetAuxdata(fts, query.cast(), Some(drop_query)));
        // On failure FTS5 has already called `drop_query`.
        check(rc)?;
        Ok(query)
    }
}

/// How many rows hold phrase `i`: kept, or counted as bm25 counts them (`xQueryPhrase`).
///
/// # Safety
/// As [`query`].
unsafe fn rows_holding(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    i: c_int,
    kept: &Kept,
) -> Result<i64, c_int> {
    unsafe {
        // The phrase's tokens name it: every search asks every column (see `Index::search`).
        let mut key = Vec::new();
        let named = (*api).iVersion >= 3 && (*api).xQueryToken.is_some();
        if named {
            for t in 0..call!(api, xPhraseSize(fts, i)) {
                let (mut text, mut len) = (std::ptr::null(), 0);
                check(call!(api, xQueryToken(fts, i, t, &mut text, &mut len)))?;
                if !text.is_null() && len > 0 {
                    key.extend_from_slice(std::slice::from_raw_parts(text.cast(), len as usize));
                }
                key.push(0);
            }
            if let Some(hits) = kept.held().rows_holding.get(&key) {
                return Ok(*hits);
            }
        }
        let mut hits = 0i64;
        check(call!(
            api,
            xQueryPhrase(fts, i, (&mut hits as *mut i64).cast(), Some(count_row))
        ))?;
        if named {
            let mut held = kept.held();
            // Searches' words are the callers' (any card's): past the bound, what was kept is
            // forgotten rather than grown, so a flood of new words costs counting, not memory.
            if held.rows_holding.len() >= MOST_KEPT_PHRASES {
                held.rows_holding.clear();
            }
            held.rows_holding.insert(key, hits);
        }
        Ok(hits)
    }
}

fn check(rc: c_int) -> Result<(), c_int> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// The row's size in tokens: kept, or read as bm25 reads it (`xColumnSize`).
///
/// # Safety
/// As [`query`].
unsafe fn size(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    kept: &Kept,
) -> Result<c_int, c_int> {
    unsafe {
        let rowid = call!(api, xRowid(fts));
        let at = usize::try_from(rowid).ok();
        if let Some(at) = at
            && let Some(&size) = kept.held().sizes.get(at)
            && size != 0
        {
            return Ok(c_int::from(size));
        }
        let mut size: c_int = 0;
        check(call!(api, xColumnSize(fts, -1, &mut size)))?;
        // Rows are kept by rowid, dense as an import numbers them; one far beyond any index's
        // size is not kept (the vector would be as long as its rowid).
        if let (Some(at), Ok(small)) = (at.filter(|at| *at < MOST_KEPT_ROWS), u16::try_from(size)) {
            let mut held = kept.held();
            if held.sizes.len() <= at {
                held.sizes.resize(at + 1, 0);
            }
            held.sizes[at] = small;
        }
        Ok(size)
    }
}

/// The score of the current row, as bm25's: minus the sum over the query's phrases.
///
/// # Safety
/// As [`query`]; `args` holds `n` values.
unsafe fn score(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n: c_int,
    args: *mut *mut ffi::sqlite3_value,
) -> Result<f64, c_int> {
    unsafe {
        let kept = &*(call!(api, xUserData(fts)) as *const Kept);
        let query = &mut *query(api, fts, ctx, kept)?;
        query.freq.iter_mut().for_each(|f| *f = 0.0);
        let mut instances = 0;
        check(call!(api, xInstCount(fts, &mut instances)))?;
        for i in 0..instances {
            let (mut phrase, mut column, mut offset) = (0, 0, 0);
            check(call!(
                api,
                xInst(fts, i, &mut phrase, &mut column, &mut offset)
            ))?;
            let w = if n > column {
                ffi::sqlite3_value_double(*args.add(column as usize))
            } else {
                1.0
            };
            if let Some(f) = query.freq.get_mut(phrase as usize) {
                *f += w;
            }
        }
        let d = f64::from(size(api, fts, kept)?);
        let mut score = 0.0;
        for (idf, f) in query.idf.iter().zip(&query.freq) {
            score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * d / query.avgdl)));
        }
        Ok(-score)
    }
}

unsafe extern "C" fn mesh_bm25(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n: c_int,
    args: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 passes its live API, context and `n` argument values for this call.
    unsafe {
        match score(api, fts, ctx, n, args) {
            Ok(score) => ffi::sqlite3_result_double(ctx, score),
            Err(rc) => ffi::sqlite3_result_error_code(ctx, rc),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::index::Index;

    fn fixture(name: &str) -> String {
        format!(
            "{}/../../tests/ontologies/{name}.obo",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    /// Queries as searches make them: one word, any of several, all of several, and words
    /// some rows hold more than once and in more than one column.
    const QUERIES: [&str; 6] = [
        "{label synonyms definition} : (\"length\")",
        "{label synonyms definition} : (\"body\" OR \"mass\")",
        "{label synonyms definition} : (\"length\" OR \"of\" OR \"the\" OR \"hind\" OR \"foot\")",
        "{label synonyms definition} : (\"quality\" AND \"which\")",
        "{label synonyms definition} : (\"stage\" OR \"adult\" OR \"mus\")",
        "{label synonyms definition} : (\"a\" OR \"artery\")",
    ];

    /// Every matching row's score by `mesh_bm25` and by FTS5's own bm25.
    fn scores(index: &Index, query: &str) -> Vec<(i64, f64, f64)> {
        let mut q = index
            .db
            .prepare(
                "SELECT rowid, mesh_bm25(term_text, 10.0, 5.0, 1.0),
                        bm25(term_text, 10.0, 5.0, 1.0)
                 FROM term_text WHERE term_text MATCH ?1 ORDER BY rowid",
            )
            .unwrap();
        q.query_map([query], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn same_as_bm25(index: &Index) {
        let mut compared = 0;
        for query in QUERIES {
            for (rowid, ours, bm25) in scores(index, query) {
                assert_eq!(ours.to_bits(), bm25.to_bits(), "{query}, row {rowid}");
                compared += 1;
            }
        }
        assert!(compared > 20, "{compared} rows compared");
    }

    #[test]
    fn the_score_is_bm25s_to_the_bit() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        for o in ["pato", "uberon", "ncbitaxon"] {
            index.import(Path::new(&fixture(o)), |_| {}).unwrap();
        }
        // The first time counted and read, then kept.
        same_as_bm25(&index);
        same_as_bm25(&index);
    }

    /// A flood of searches for words never seen before, as anyone's cards may bring: what
    /// is kept stays within its bound, and the scores stay bm25's.
    #[test]
    fn a_flood_of_new_words_keeps_no_more_than_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
        index.import(Path::new(&fixture("pato")), |_| {}).unwrap();
        let mut q = index
            .db
            .prepare("SELECT mesh_bm25(term_text) FROM term_text WHERE term_text MATCH ?1")
            .unwrap();
        for n in 0..super::MOST_KEPT_PHRASES + 10 {
            let query = format!("\"length\" OR \"w{n}\"");
            let scored = q.query_map([query], |r| r.get::<_, f64>(0)).unwrap();
            assert!(scored.map(Result::unwrap).count() > 0);
        }
        drop(q);
        let kept = index.rank.phrases();
        assert!(
            (1..=super::MOST_KEPT_PHRASES).contains(&kept),
            "{kept} phrases kept"
        );
        same_as_bm25(&index);
    }

    #[test]
    fn what_is_kept_is_forgotten_when_the_index_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let mut index = Index::open(&path).unwrap();
        index.import(Path::new(&fixture("pato")), |_| {}).unwrap();
        same_as_bm25(&index);
        // Another connection's import: every count and the rows' ids change.
        let mut other = Index::open(&path).unwrap();
        other.import(Path::new(&fixture("uberon")), |_| {}).unwrap();
        other.import(Path::new(&fixture("pato")), |_| {}).unwrap();
        same_as_bm25(&index);
        // This connection's own.
        index
            .import(Path::new(&fixture("ncbitaxon")), |_| {})
            .unwrap();
        same_as_bm25(&index);
    }
}
