use super::*;

#[test]
fn placeholders_are_numbered_outside_quotes() {
    assert_eq!(pg_placeholders("SELECT ?1, ?2 WHERE a = ?1"), "SELECT $1, $2 WHERE a = $1");
    assert_eq!(pg_placeholders("VALUES (?, ?)"), "VALUES ($1, $2)");
    assert_eq!(pg_placeholders("SELECT '?1', \"?x\" , ?3"), "SELECT '?1', \"?x\" , $3");
    assert_eq!(pg_placeholders("SELECT 'it''s ?1', ?1"), "SELECT 'it''s ?1', $1");
}

fn pg() -> Db {
    let url = crate::pgtest::fresh_url().unwrap();
    crate::pg::off_runtime(|| Db::postgres(crate::pg::connect(&url).unwrap()))
}

#[test]
fn sums_counts_and_nulls_read_back_as_integers_on_postgres() {
    let db = pg();
    db.execute_batch("CREATE TABLE n (v BIGINT)").unwrap();
    for v in [123_456_789_012i64, -5, 70_000, 0] {
        db.execute("INSERT INTO n (v) VALUES (?1)", [v]).unwrap();
    }
    let (count, sum): (i64, i64) =
        db.query_row("SELECT COUNT(*), SUM(v) FROM n", (), |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert_eq!((count, sum), (4, 123_456_789_012 - 5 + 70_000));
    let none: Option<i64> =
        db.query_row("SELECT SUM(v) FROM n WHERE v > ?1", [i64::MAX], |r| r.get(0)).unwrap();
    assert_eq!(none, None);
    let negative: i64 = db.query_row("SELECT SUM(v) FROM n WHERE v < 0", (), |r| r.get(0)).unwrap();
    assert_eq!(negative, -5);
    // A fraction is refused rather than rounded.
    let fraction = db.query_row("SELECT CAST(1.5 AS NUMERIC)", (), |r| r.get::<_, i64>(0));
    assert!(fraction.is_err());
}

#[test]
fn a_failed_transaction_leaves_nothing_and_the_connection_serves_on() {
    let mut db = pg();
    db.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY)").unwrap();
    {
        let tx = db.transaction().unwrap();
        tx.execute("INSERT INTO t (k) VALUES (?1)", ["a"]).unwrap();
        assert!(tx.execute("INSERT INTO t (k) VALUES (?1)", ["a"]).is_err());
    }
    let n: i64 = db.query_row("SELECT COUNT(*) FROM t", (), |r| r.get(0)).unwrap();
    assert_eq!(n, 0);
    let tx = db.transaction_immediate().unwrap();
    tx.execute("INSERT INTO t (k) VALUES (?1)", ["b"]).unwrap();
    tx.commit().unwrap();
    let n: i64 = db.query_row("SELECT COUNT(*) FROM t", (), |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
}
