//! The fence in SQL: a store that checks fencing tokens itself, in SQLite.
//!
//! The table `fences` keeps, for each lock name, the largest token the
//! database has seen. A write raises it and writes the row in one
//! transaction, and only with a token at least as large as the largest
//! (the rule of `quorumlock::fenced::admits`: equal is accepted, so one
//! holder may write several times); a smaller token changes nothing.
//!
//! Shared by `examples/fenced_sqlite.rs` and `tests/fenced.rs`.

// Each includer uses its own part of it.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use quorumlock::fenced::FencedWrite;
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

/// The fences, and the resource they guard: documents, each with the token
/// of its last write. Tokens are SQLite integers (up to `i64::MAX`, which
/// the lock's counters never pass).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fences (
    lock    TEXT PRIMARY KEY,
    largest INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    id    TEXT PRIMARY KEY,
    body  TEXT NOT NULL,
    token INTEGER NOT NULL
);
";

/// Raises the fence of lock ?1 to the token ?2 when the token is at least
/// its largest, or records it when the lock has no fence yet: one row
/// changed when admitted, none when rejected.
const RAISE: &str = "
INSERT INTO fences (lock, largest) VALUES (?1, ?2)
ON CONFLICT (lock) DO UPDATE SET largest = excluded.largest
WHERE excluded.largest >= fences.largest
";

/// Opens (or creates) the database at `path`, with its tables. Each client
/// has a connection of its own; writers wait for each other up to 5 s.
pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    let db = Connection::open(path)?;
    db.busy_timeout(Duration::from_secs(5))?;
    db.execute_batch(SCHEMA)?;
    Ok(db)
}

/// Writes `body` to the document `id` with the token `token` of the lock
/// `lock`, if the token is admitted: the fence check, the raise and the
/// write in one transaction, taken for writing at its start (`BEGIN
/// IMMEDIATE`), so no other writer comes between the check and the write.
pub fn write(
    db: &mut Connection,
    lock: &str,
    token: u64,
    id: &str,
    body: &str,
) -> rusqlite::Result<FencedWrite> {
    let token = to_sql(token)?;
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if tx.execute(RAISE, params![lock, token])? == 0 {
        let largest = tx.query_row(
            "SELECT largest FROM fences WHERE lock = ?1",
            params![lock],
            |row| token_at(row, 0),
        )?;
        // Dropping the transaction rolls it back: nothing was written.
        return Ok(FencedWrite::Rejected { largest });
    }
    tx.execute(
        "INSERT INTO documents (id, body, token) VALUES (?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token",
        params![id, body, token],
    )?;
    tx.commit()?;
    Ok(FencedWrite::Written)
}

/// The largest token the database has seen for `lock`, `None` if none.
pub fn largest(db: &Connection, lock: &str) -> rusqlite::Result<Option<u64>> {
    db.query_row(
        "SELECT largest FROM fences WHERE lock = ?1",
        params![lock],
        |row| token_at(row, 0),
    )
    .optional()
}

/// The document `id`: its body and the token of its last write.
pub fn read(db: &Connection, id: &str) -> rusqlite::Result<Option<(String, u64)>> {
    db.query_row(
        "SELECT body, token FROM documents WHERE id = ?1",
        params![id],
        |row| Ok((row.get(0)?, token_at(row, 1)?)),
    )
    .optional()
}

/// A token as SQLite keeps it: an `INTEGER`, at most `i64::MAX`.
fn to_sql(token: u64) -> rusqlite::Result<i64> {
    i64::try_from(token).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// The token in column `i` of `row`.
fn token_at(row: &Row<'_>, i: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(i)?;
    u64::try_from(v)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Integer, Box::new(e)))
}
