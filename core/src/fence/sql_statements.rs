//! The fence table's statements ([`FenceSql`]) for each database, run by [`super::sql`];
//! built, like the lease table's (`mutex_sql.rs`), from the words and placeholders of
//! `dialect.rs`.

use std::time::Duration;

use crate::backend::sql::dialect::{Flavor, SchemaSql, Stmt, compile, schema, words};
use crate::backend::sql::session::Col;
use crate::error::Result;

/// The fence table's statements for one database and table name.
#[derive(Debug)]
pub(crate) struct FenceSql {
    pub schema: SchemaSql,
    /// Reads the resource's row, locking it for the transaction.
    pub lock: Stmt,
    /// Reads the resource's row without locking it.
    pub read: Stmt,
    /// Creates the resource's row (autocommit) when it is missing.
    pub seed: Stmt,
    pub set_lock: Stmt,
    pub advance: Stmt,
    /// Stores the record of token origins; `None` on a table without the `origins` column
    /// (made by hand before it existed, with `create_table=false`).
    pub set_origins: Option<Stmt>,
    /// Fails when the table has no `origins` column.
    pub probe_origins: Stmt,
    /// Adds the `origins` column to a table made before it existed.
    pub add_origins: Stmt,
}

impl FenceSql {
    /// The statements of a fence table; `origins` says whether the table has the `origins`
    /// column (added in place of a layout change: earlier versions never read it).
    pub fn new(flavor: Flavor, t: &str, timeout: Duration, origins: bool) -> Result<Self> {
        let w = words(flavor);
        let c = |sql: &str, cols: &[Col]| compile(flavor, sql, cols);
        let create = vec![c(
            &format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource {} NOT NULL PRIMARY KEY, token {} NOT NULL, lock_key {}, origins {}){}",
                w.bin_name, w.int, w.text, w.text, w.table_options
            ),
            &[],
        )?];
        let (columns, cols): (&str, &[Col]) = if origins {
            (
                "token, lock_key, origins",
                &[Col::Int, Col::Text, Col::Text],
            )
        } else {
            ("token, lock_key", &[Col::Int, Col::Text])
        };
        Ok(FenceSql {
            schema: schema(flavor, vec![t.to_string()], create, timeout)?,
            lock: c(
                &format!(
                    "SELECT {columns} FROM {t} WHERE resource = :resource{}",
                    w.for_update
                ),
                cols,
            )?,
            read: c(
                &format!("SELECT {columns} FROM {t} WHERE resource = :resource"),
                cols,
            )?,
            set_origins: origins
                .then(|| {
                    c(
                        &format!("UPDATE {t} SET origins = :origins WHERE resource = :resource"),
                        &[],
                    )
                })
                .transpose()?,
            probe_origins: c(&format!("SELECT origins FROM {t} WHERE 1 = 0"), &[])?,
            add_origins: c(
                &format!("ALTER TABLE {t} ADD COLUMN origins {}", w.text),
                &[],
            )?,
            seed: c(
                &format!(
                    "{} {t} (resource, token, lock_key) VALUES (:resource, -1, NULL){}",
                    w.insert_ignore, w.on_conflict_nothing
                ),
                &[],
            )?,
            set_lock: c(
                &format!("UPDATE {t} SET lock_key = :lock_key WHERE resource = :resource"),
                &[],
            )?,
            advance: c(
                &format!(
                    "UPDATE {t} SET token = :token WHERE resource = :resource AND token <= :token"
                ),
                &[],
            )?,
        })
    }
}
