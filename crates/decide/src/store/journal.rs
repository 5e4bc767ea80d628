//! The journal: a run's statements kept in memory while the backend answers (no lock held:
//! a backend may wait seconds a question), then written in one short transaction — on
//! PostgreSQL the rows of each INSERT as one statement per table.

use std::cell::RefCell;

use super::sidecar::Sidecar;
use super::{Db, DbResult, Param, Value as SqlValue};

/// Where decisions are written: a transaction, or a journal to replay into one later.
pub trait Sink {
    fn run(&self, sql: &'static str, params: &[&dyn Param]) -> DbResult<()>;
}

impl<T: Sink + ?Sized> Sink for &T {
    fn run(&self, sql: &'static str, params: &[&dyn Param]) -> DbResult<()> {
        (**self).run(sql, params)
    }
}

impl Sink for Db {
    fn run(&self, sql: &'static str, params: &[&dyn Param]) -> DbResult<()> {
        self.execute(sql, params).map(|_| ())
    }
}

/// An `INSERT … VALUES (…)` with `?N` marks, as one statement for many rows.
struct ManyRows {
    head: &'static str,
    row: &'static str,
    tail: &'static str,
    /// The marks in a row (`?1` … `?width`).
    width: u32,
}

impl ManyRows {
    /// The statement's parts, if it is one row of values and nothing after them.
    fn of(sql: &'static str) -> Option<ManyRows> {
        let values = sql.find("VALUES")?;
        let open = values + sql[values..].find('(')?;
        let close = open + sql[open..].find(')')?;
        let row = &sql[open..=close];
        // A call, or a parenthesis in quotes (the row then ends inside them, its quotes
        // odd): not read here, written row by row.
        if row[1..].contains('(') || !row.matches('\'').count().is_multiple_of(2) {
            return None;
        }
        let width = row
            .split('?')
            .skip(1)
            .filter_map(|m| {
                m.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
                    .parse::<u32>()
                    .ok()
            })
            .max()?;
        Some(ManyRows {
            head: &sql[..open],
            row,
            tail: &sql[close + 1..],
            width,
        })
    }

    /// The statement for `n` rows: row r's `?k` as `?(r·width + k)`.
    fn sql(&self, n: usize) -> String {
        let mut out = String::from(self.head);
        for r in 0..n {
            if r > 0 {
                out.push_str(", ");
            }
            let mut chars = self.row.chars().peekable();
            while let Some(c) = chars.next() {
                out.push(c);
                if c == '?' {
                    let mut digits = String::new();
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        digits.push(d);
                    }
                    let k: u32 = digits.parse().unwrap_or(0);
                    out.push_str(&(r as u32 * self.width + k).to_string());
                }
            }
        }
        out.push_str(self.tail);
        out
    }
}

/// Statements kept in memory, with their values, to be written in one transaction.
#[derive(Default)]
pub struct Journal(RefCell<Vec<(&'static str, Vec<SqlValue>)>>);

impl Sink for Journal {
    fn run(&self, sql: &'static str, params: &[&dyn Param]) -> DbResult<()> {
        let owned = params.iter().map(|p| p.value()).collect();
        self.0.borrow_mut().push((sql, owned));
        Ok(())
    }
}

impl Journal {
    /// Writes everything in one transaction: the sidecar is held only for this. On
    /// PostgreSQL, where each statement is a round trip to the server, the rows of each
    /// INSERT go as one statement per table (in the order the journal first met each; the
    /// references are checked at commit), the rest after them in order.
    pub fn write(self, sidecar: &mut Sidecar) -> DbResult<()> {
        let tx = sidecar.db.transaction()?;
        let statements = self.0.into_inner();
        if !tx.is_shared() {
            for (sql, values) in statements {
                tx.run(
                    sql,
                    &values.iter().map(|v| v as &dyn Param).collect::<Vec<_>>(),
                )?;
            }
            return tx.commit();
        }
        let mut inserts: Vec<(&'static str, Vec<Vec<SqlValue>>)> = Vec::new();
        let mut rest = Vec::new();
        for (sql, values) in statements {
            if !sql.trim_start().starts_with("INSERT") {
                rest.push((sql, values));
            } else if let Some((_, rows)) = inserts.iter_mut().find(|(s, _)| *s == sql) {
                rows.push(values);
            } else {
                inserts.push((sql, vec![values]));
            }
        }
        for (sql, rows) in inserts {
            let Some(many) = ManyRows::of(sql) else {
                for values in rows {
                    tx.run(
                        sql,
                        &values.iter().map(|v| v as &dyn Param).collect::<Vec<_>>(),
                    )?;
                }
                continue;
            };
            // PostgreSQL takes at most 65535 parameters in one statement.
            for chunk in rows.chunks((65_535 / many.width.max(1) as usize).max(1)) {
                let values: Vec<&dyn Param> =
                    chunk.iter().flatten().map(|v| v as &dyn Param).collect();
                tx.execute(&many.sql(chunk.len()), &values)?;
            }
        }
        for (sql, values) in rest {
            tx.run(
                sql,
                &values.iter().map(|v| v as &dyn Param).collect::<Vec<_>>(),
            )?;
        }
        tx.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_rows_number_each_rows_marks_on() {
        let many =
            ManyRows::of("INSERT INTO t (a, b, c) VALUES (?1, 'x', ?2) ON CONFLICT DO NOTHING")
                .unwrap();
        assert_eq!(many.width, 2);
        assert_eq!(
            many.sql(3),
            "INSERT INTO t (a, b, c) VALUES (?1, 'x', ?2), (?3, 'x', ?4), (?5, 'x', ?6) ON CONFLICT DO NOTHING"
        );
        assert!(ManyRows::of("INSERT INTO t (a) VALUES (lower(?1))").is_none());
        assert!(ManyRows::of("INSERT INTO t (a, b) VALUES (?1, ')')").is_none());
        assert!(ManyRows::of("UPDATE t SET a = ?1").is_none());
    }
}
