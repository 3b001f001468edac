//! The one face of a database connection that every store query is written against, whichever
//! backend runs it: the SQLite file ([`Db::sqlite`]) or a PostgreSQL server ([`Db::postgres`]).
//!
//! It is shaped like the part of `rusqlite` the store used before there were two backends
//! (`prepare_cached`, `query_map`, `query_row`, `execute`, `transaction`, [`OptionalExtension`]),
//! so a query reads the same as before; what differs between the engines is handled here:
//! - placeholders are written `?1`, `?2` (SQLite's); PostgreSQL gets them as `$1`, `$2`;
//! - a parameter is a [`Value`] (null, integer, real, text, bytes) and converts to whatever type
//!   PostgreSQL inferred for its place (an integer into `int2`/`int4`/`int8`/`bool`/`float8`);
//! - a row's cell reads back as the Rust type asked for from either engine's column types;
//! - [`Db::transaction_immediate`] is SQLite's `BEGIN IMMEDIATE` (the one writer) and, on
//!   PostgreSQL, a transaction holding a cluster-wide advisory lock, so the few checks that
//!   count then insert (quotas) stay exact with several server nodes.
//!
//! The SQL itself is written in the subset both engines share (`ON CONFLICT … DO UPDATE`,
//! `RETURNING`, `COALESCE`, `CAST(… AS BIGINT)` around sums); the schemas differ only in types
//! and are kept side by side (`schema::MIGRATIONS`, `pg::MIGRATIONS`).

use std::cell::RefCell;
use std::collections::HashMap;

use crate::error::StoreError;

/// The advisory lock a [`Db::transaction_immediate`] holds to its commit on PostgreSQL
/// ("OUTBRDWR").
pub(crate) const WRITE_LOCK: i64 = 0x4f55_5442_5244_5752;

/// A store query's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Which engine a [`Db`] runs on, for the rare statement that must differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// Statements kept parsed per PostgreSQL connection; past this the cache starts over (the store's
/// queries are a few hundred distinct strings, the dynamic ones included).
const PG_STATEMENT_CACHE: usize = 512;

/// One connection of the store, on the thread that owns it.
pub struct Db {
    conn: Conn,
    /// Transactions open on it (a nested one runs inside the outer one).
    depth: std::cell::Cell<u32>,
    /// Commits sent since [`Db::take_commits`] last looked (a `COMMIT`, or a write outside a
    /// transaction): a job whose connection broke after one cannot know whether it took effect.
    commits: std::cell::Cell<u32>,
}

enum Conn {
    Sqlite(rusqlite::Connection),
    Pg(Box<RefCell<PgConn>>),
}

pub(super) struct PgConn {
    pub(super) client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

impl PgConn {
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        if self.statements.len() >= PG_STATEMENT_CACHE {
            self.statements.clear();
        }
        let statement = self.client.prepare(&pg_placeholders(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({:?})", self.backend())
    }
}

impl Db {
    /// A SQLite connection.
    pub fn sqlite(conn: rusqlite::Connection) -> Db {
        Db {
            conn: Conn::Sqlite(conn),
            depth: std::cell::Cell::new(0),
            commits: std::cell::Cell::new(0),
        }
    }

    /// A PostgreSQL connection.
    pub fn postgres(client: postgres::Client) -> Db {
        Db {
            conn: Conn::Pg(Box::new(RefCell::new(PgConn { client, statements: HashMap::new() }))),
            depth: std::cell::Cell::new(0),
            commits: std::cell::Cell::new(0),
        }
    }

    /// How many commits were sent since the last call (see the field): the store's workers ask
    /// before and after each attempt of a job.
    pub(crate) fn take_commits(&self) -> u32 {
        self.commits.replace(0)
    }

    /// Counts `sql`, about to run, as a commit when it writes outside a transaction (PostgreSQL
    /// commits such a statement by itself).
    fn count_autocommit(&self, sql: &str) {
        let reads = sql.trim_start().get(..6).is_some_and(|w| w.eq_ignore_ascii_case("select"));
        if self.depth.get() == 0 && !reads {
            self.commits.set(self.commits.get() + 1);
        }
    }

    /// Whether the connection is gone (a PostgreSQL server restarted, a network cut, a session
    /// the server ended): the store's worker then connects again. A SQLite one never is.
    pub fn is_broken(&self) -> bool {
        match &self.conn {
            Conn::Sqlite(_) => false,
            Conn::Pg(c) => c.try_borrow().is_ok_and(|c| c.client.is_closed()),
        }
    }

    /// The engine underneath.
    pub fn backend(&self) -> Backend {
        match self.conn {
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Pg(_) => Backend::Postgres,
        }
    }

    /// The PostgreSQL connection itself (migrations, leases); `None` on SQLite.
    pub(super) fn with_pg<R>(&self, f: impl FnOnce(&mut PgConn) -> R) -> Option<R> {
        match &self.conn {
            Conn::Sqlite(_) => None,
            Conn::Pg(c) => Some(f(&mut c.borrow_mut())),
        }
    }

    /// A statement, parsed once per connection and kept.
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        match &self.conn {
            Conn::Sqlite(c) => Ok(Statement::Sqlite(c.prepare_cached(sql)?)),
            Conn::Pg(_) => Ok(Statement::Pg { db: self, sql: sql.to_owned() }),
        }
    }

    /// A statement (kept parsed too: the store's statements repeat).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        self.prepare_cached(sql)
    }

    /// Runs one statement; the rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of a query, mapped; [`StoreError::NoRows`] when there is none.
    pub fn query_row<P, T, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// Runs statements separated by `;` with no parameters (schemas).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.conn {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Pg(c) => {
                self.count_autocommit(sql);
                Ok(c.borrow_mut().client.batch_execute(sql)?)
            }
        }
    }

    /// Opens a transaction: committed by [`Transaction::commit`], rolled back when dropped
    /// without. Inside another one it joins the outer transaction.
    pub fn transaction(&mut self) -> Result<Transaction<'_>> {
        self.begin(false)
    }

    /// A transaction that writes alone: SQLite's `BEGIN IMMEDIATE`; on PostgreSQL one holding
    /// the store's advisory lock, so checks that count rows before inserting one (quotas) see
    /// every other node's commits and none in between.
    pub fn transaction_immediate(&mut self) -> Result<Transaction<'_>> {
        self.begin(true)
    }

    fn begin(&mut self, immediate: bool) -> Result<Transaction<'_>> {
        let depth = self.depth.get();
        if depth == 0 {
            match (&self.conn, immediate) {
                (Conn::Sqlite(c), false) => c.prepare_cached("BEGIN")?.execute([]).map(drop)?,
                (Conn::Sqlite(c), true) => {
                    c.prepare_cached("BEGIN IMMEDIATE")?.execute([]).map(drop)?
                }
                (Conn::Pg(c), false) => c.borrow_mut().client.batch_execute("BEGIN")?,
                (Conn::Pg(c), true) => c.borrow_mut().client.batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({})",
                    WRITE_LOCK
                ))?,
            }
        } else if immediate && self.backend() == Backend::Postgres {
            // Joining an outer transaction: the lock is taken where it was not yet (held to
            // the outer commit; taking it twice is harmless).
            self.execute_batch(&format!("SELECT pg_advisory_xact_lock({})", WRITE_LOCK))?;
        }
        self.depth.set(depth + 1);
        Ok(Transaction { db: self, done: false })
    }

    fn end(&self, commit: bool) -> Result<()> {
        let depth = self.depth.get().saturating_sub(1);
        self.depth.set(depth);
        if depth > 0 {
            return Ok(());
        }
        let sql = if commit { "COMMIT" } else { "ROLLBACK" };
        if commit {
            self.commits.set(self.commits.get() + 1);
        }
        match &self.conn {
            Conn::Sqlite(c) => {
                let done = c.prepare_cached(sql)?.execute([]).map(drop);
                if done.is_err() && !c.is_autocommit() {
                    let _ = c.execute_batch("ROLLBACK");
                }
                Ok(done?)
            }
            Conn::Pg(c) => Ok(c.borrow_mut().client.batch_execute(sql)?),
        }
    }
}

/// An open transaction; derefs to its [`Db`].
pub struct Transaction<'a> {
    db: &'a mut Db,
    done: bool,
}

impl Transaction<'_> {
    /// Commits (or, nested, leaves the commit to the outer transaction).
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.db.end(true)
    }

    /// Rolls back.
    pub fn rollback(mut self) -> Result<()> {
        self.done = true;
        self.db.end(false)
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.db.end(false);
        }
    }
}

impl std::ops::Deref for Transaction<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        self.db
    }
}

impl std::ops::DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut Db {
        self.db
    }
}

/// A prepared statement of either engine.
pub enum Statement<'a> {
    /// SQLite's own, from its statement cache.
    Sqlite(rusqlite::CachedStatement<'a>),
    /// PostgreSQL's, prepared (once per connection) when first run.
    Pg {
        /// The connection.
        db: &'a Db,
        /// The statement as written (`?N` placeholders).
        sql: String,
    },
}

impl Statement<'_> {
    /// Runs it; the rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        let values = params.values();
        match self {
            Statement::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(values.iter()))?),
            Statement::Pg { db, sql } => pg_run(db, sql, &values, |c, s, p| {
                c.execute(s, p).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            }),
        }
    }

    /// Every row, mapped by `f`, in order.
    pub fn query_map<P, T, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        let values = params.values();
        let mut out = Vec::new();
        match self {
            Statement::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(values.iter()))?;
                while let Some(row) = rows.next()? {
                    out.push(f(&Row::Sqlite(row)));
                }
            }
            Statement::Pg { db, sql } => {
                for row in pg_run(db, sql, &values, |c, s, p| c.query(s, p))? {
                    out.push(f(&Row::Pg(&row)));
                }
            }
        }
        Ok(out.into_iter())
    }

    /// The first row, mapped; [`StoreError::NoRows`] when there is none.
    pub fn query_row<P, T, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let values = params.values();
        match self {
            Statement::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(values.iter()))?;
                match rows.next()? {
                    Some(row) => f(&Row::Sqlite(row)),
                    None => Err(StoreError::NoRows),
                }
            }
            Statement::Pg { db, sql } => {
                match pg_run(db, sql, &values, |c, s, p| c.query_opt(s, p))? {
                    Some(row) => f(&Row::Pg(&row)),
                    None => Err(StoreError::NoRows),
                }
            }
        }
    }

    /// Whether the query returns any row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        self.query_row(params, |_| Ok(())).optional().map(|r| r.is_some())
    }
}

fn pg_run<R>(
    db: &Db,
    sql: &str,
    values: &[Value<'_>],
    run: impl FnOnce(
        &mut postgres::Client,
        &postgres::Statement,
        &[&(dyn postgres::types::ToSql + Sync)],
    ) -> std::result::Result<R, postgres::Error>,
) -> Result<R> {
    db.with_pg(|pg| {
        let statement = pg.statement(sql)?;
        db.count_autocommit(sql);
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            values.iter().map(|v| v as &(dyn postgres::types::ToSql + Sync)).collect();
        Ok(run(&mut pg.client, &statement, &params)?)
    })
    .unwrap_or_else(|| Err(StoreError::Corrupt("not a PostgreSQL connection".into())))
}

/// `?1` → `$1` (and a bare `?` → the next number), outside quoted strings and identifiers.
pub(super) fn pg_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut next = 1u32;
    while let Some(ch) = chars.next() {
        match quote {
            Some(q) => {
                out.push(ch);
                if ch == q {
                    quote = None;
                }
            }
            None if ch == '\'' || ch == '"' => {
                quote = Some(ch);
                out.push(ch);
            }
            None if ch == '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                out.push('$');
                if digits.is_empty() {
                    out.push_str(&next.to_string());
                    next += 1;
                } else {
                    out.push_str(&digits);
                }
            }
            None => out.push(ch),
        }
    }
    out
}

/// A row of either engine.
pub enum Row<'a> {
    /// SQLite's.
    Sqlite(&'a rusqlite::Row<'a>),
    /// PostgreSQL's.
    Pg(&'a postgres::Row),
}

/// What a column index may be (a number, as in `rusqlite`).
pub trait ColumnIndex {
    /// The index.
    fn index(&self) -> usize;
}

impl ColumnIndex for usize {
    fn index(&self) -> usize {
        *self
    }
}

impl Row<'_> {
    /// Cell `idx` as a `T`.
    pub fn get<I: ColumnIndex, T: FromCell>(&self, idx: I) -> Result<T> {
        let idx = idx.index();
        let cell = self.cell(idx)?;
        T::from_cell(cell).map_err(|want| StoreError::Type { column: idx, want })
    }

    fn cell(&self, idx: usize) -> Result<Cell<'_>> {
        match self {
            Row::Sqlite(r) => Ok(match r.get_ref(idx)? {
                rusqlite::types::ValueRef::Null => Cell::Null,
                rusqlite::types::ValueRef::Integer(i) => Cell::Int(i),
                rusqlite::types::ValueRef::Real(f) => Cell::Real(f),
                rusqlite::types::ValueRef::Text(t) => Cell::Text(
                    std::str::from_utf8(t).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                ),
                rusqlite::types::ValueRef::Blob(b) => Cell::Blob(b),
            }),
            Row::Pg(r) => pg_cell(r, idx),
        }
    }
}

fn pg_cell<'a>(r: &'a postgres::Row, idx: usize) -> Result<Cell<'a>> {
    use postgres::types::Type;
    let Some(column) = r.columns().get(idx) else {
        return Err(StoreError::Type { column: idx, want: "a column that exists" });
    };
    let ty = column.type_().clone();
    let cell = if ty == Type::INT8 {
        r.try_get::<_, Option<i64>>(idx)?.map(Cell::Int)
    } else if ty == Type::INT4 {
        r.try_get::<_, Option<i32>>(idx)?.map(|i| Cell::Int(i.into()))
    } else if ty == Type::INT2 {
        r.try_get::<_, Option<i16>>(idx)?.map(|i| Cell::Int(i.into()))
    } else if ty == Type::BOOL {
        r.try_get::<_, Option<bool>>(idx)?.map(|b| Cell::Int(b.into()))
    } else if ty == Type::FLOAT8 {
        r.try_get::<_, Option<f64>>(idx)?.map(Cell::Real)
    } else if ty == Type::FLOAT4 {
        r.try_get::<_, Option<f32>>(idx)?.map(|f| Cell::Real(f.into()))
    } else if ty == Type::NUMERIC {
        // What PostgreSQL makes of `SUM(bigint)`; the store's sums are whole numbers.
        r.try_get::<_, Option<WholeNumeric>>(idx)?.map(|n| Cell::Int(n.0))
    } else if ty == Type::BYTEA {
        r.try_get::<_, Option<&[u8]>>(idx)?.map(Cell::Blob)
    } else if ty == Type::TEXT || ty == Type::VARCHAR || ty == Type::NAME || ty == Type::BPCHAR {
        r.try_get::<_, Option<&str>>(idx)?.map(Cell::Text)
    } else {
        return Err(StoreError::Type {
            column: idx,
            want: "a column of a type the store reads (cast sums to BIGINT)",
        });
    };
    Ok(cell.unwrap_or(Cell::Null))
}

/// A `NUMERIC` that holds a whole number fitting an `i64` (sums of integer columns).
struct WholeNumeric(i64);

impl<'a> postgres::types::FromSql<'a> for WholeNumeric {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        // The binary form: digit count, weight (of the first base-10000 digit), sign, scale,
        // then the digits.
        let word = |i: usize| -> std::result::Result<i16, String> {
            raw.get(i * 2..i * 2 + 2)
                .map(|b| i16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "a truncated NUMERIC".to_owned())
        };
        let (ndigits, weight, sign) = (word(0)?, word(1)?, word(2)? as u16);
        if sign == 0xC000 {
            return Err("NaN is not a number of the store's".into());
        }
        let mut value: i128 = 0;
        for i in 0..ndigits.max(0) as usize {
            let exponent = i64::from(weight) - i as i64;
            let digit = i128::from(word(4 + i)?);
            if exponent < 0 {
                if digit != 0 {
                    return Err("a fraction where the store expects a whole number".into());
                }
                continue;
            }
            let scale = 10_000i128.checked_pow(exponent as u32).ok_or("a NUMERIC too large")?;
            value = digit
                .checked_mul(scale)
                .and_then(|d| value.checked_add(d))
                .ok_or("a NUMERIC too large")?;
        }
        if sign == 0x4000 {
            value = -value;
        }
        Ok(WholeNumeric(i64::try_from(value).map_err(|_| "a NUMERIC too large")?))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::NUMERIC
    }
}

/// A cell as either engine gave it.
#[derive(Debug, Clone, Copy)]
pub enum Cell<'a> {
    /// NULL.
    Null,
    /// An integer (booleans are 0 and 1).
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

/// A Rust type a cell reads as; `Err` names what was expected.
pub trait FromCell: Sized {
    /// The conversion.
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str>;
}

impl FromCell for i64 {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        match cell {
            Cell::Int(i) => Ok(i),
            _ => Err("an integer"),
        }
    }
}

macro_rules! int_cells {
    ($($t:ty),*) => {$(
        impl FromCell for $t {
            fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
                <$t>::try_from(i64::from_cell(cell)?).map_err(|_| "an integer in range")
            }
        }
    )*};
}
int_cells!(i32, u32, u64, usize, u16, u8, i16);

impl FromCell for bool {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        Ok(i64::from_cell(cell).map_err(|_| "a boolean")? != 0)
    }
}

impl FromCell for f64 {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        match cell {
            Cell::Real(f) => Ok(f),
            Cell::Int(i) => Ok(i as f64),
            _ => Err("a number"),
        }
    }
}

impl FromCell for String {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        match cell {
            Cell::Text(t) => Ok(t.to_owned()),
            _ => Err("text"),
        }
    }
}

impl FromCell for Vec<u8> {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        match cell {
            Cell::Blob(b) => Ok(b.to_vec()),
            Cell::Text(t) => Ok(t.as_bytes().to_vec()),
            _ => Err("bytes"),
        }
    }
}

impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: Cell<'_>) -> Result<Self, &'static str> {
        match cell {
            Cell::Null => Ok(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

/// A parameter as both engines take it.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

/// A Rust value usable as a parameter.
pub trait ToValue {
    /// The parameter.
    fn to_value(&self) -> Value<'_>;
}

macro_rules! int_values {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value<'_> {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_values!(i64, i32, u32, u64, usize, u16, u8, i16);

impl ToValue for bool {
    fn to_value(&self) -> Value<'_> {
        Value::Int(i64::from(*self))
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value<'_> {
        Value::Real(*self)
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl<const N: usize> ToValue for [u8; N] {
    fn to_value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value<'_> {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value<'_> {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}

impl ToValue for Value<'_> {
    fn to_value(&self) -> Value<'_> {
        *self
    }
}

/// What a statement's parameters may be given as: `()`, an array of one type, or [`params!`]
/// (a slice of mixed ones).
pub trait Params {
    /// The parameters, in order.
    fn values(&self) -> Vec<Value<'_>>;
}

impl Params for () {
    fn values(&self) -> Vec<Value<'_>> {
        Vec::new()
    }
}

impl<T: ToValue, const N: usize> Params for [T; N] {
    fn values(&self) -> Vec<Value<'_>> {
        self.iter().map(ToValue::to_value).collect()
    }
}

impl Params for &[&dyn ToValue] {
    fn values(&self) -> Vec<Value<'_>> {
        self.iter().map(|v| v.to_value()).collect()
    }
}

impl<T: ToValue> Params for &Vec<T> {
    fn values(&self) -> Vec<Value<'_>> {
        self.iter().map(ToValue::to_value).collect()
    }
}

/// Mixed parameters: `params![id, seq, text]`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[&dyn $crate::db::ToValue] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::db::ToValue),+] as &[&dyn $crate::db::ToValue] };
}
pub use crate::params;

/// `rusqlite`'s `.optional()`: no row is `None`, not an error.
pub trait OptionalExtension<T> {
    /// The conversion.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(StoreError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(i),
            Value::Real(f) => ValueRef::Real(f),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl postgres::types::ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        use postgres::types::Type;
        match *self {
            Value::Null => Ok(postgres::types::IsNull::Yes),
            Value::Int(i) if *ty == Type::INT8 => i.to_sql(ty, out),
            Value::Int(i) if *ty == Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
            Value::Int(i) if *ty == Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
            Value::Int(i) if *ty == Type::BOOL => (i != 0).to_sql(ty, out),
            Value::Int(i) if *ty == Type::FLOAT8 => (i as f64).to_sql(ty, out),
            Value::Real(f) if *ty == Type::FLOAT8 => f.to_sql(ty, out),
            Value::Text(t) if *ty == Type::BYTEA => t.as_bytes().to_sql(ty, out),
            Value::Text(t) => t.to_sql(ty, out),
            Value::Blob(b) if *ty == Type::BYTEA => b.to_sql(ty, out),
            other => Err(format!("a {other:?} cannot be sent as {ty}").into()),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

#[cfg(test)]
mod tests;
