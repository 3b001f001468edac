//! Token usage reports: the org's model calls grouped by session, user or day.

use outboard_shared::{OrgId, SessionId, Usage, UsageGroup, UsageRow};

use crate::db::{params, Db};
use crate::error::StoreError;

/// The rows of `usage/report` for `org` (see [`Store::usage_report`]).
pub fn usage_report(
    c: &Db,
    org: &OrgId,
    by: UsageGroup,
    session: Option<&SessionId>,
    since: Option<&str>,
) -> Result<Vec<UsageRow>, StoreError> {
    let key = match by {
        UsageGroup::Session => "m.session_id",
        UsageGroup::User => "COALESCE(u.name, m.user_id)",
        UsageGroup::Day => "substr(m.at, 1, 10)",
    };
    let sql = format!(
        "SELECT {key} AS k, m.model, COUNT(*), SUM(m.input_tokens), SUM(m.output_tokens),
                SUM(m.cache_read_tokens), SUM(m.cache_write_tokens)
         FROM model_usage m LEFT JOIN users u ON u.id = m.user_id
         WHERE m.org_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR m.session_id = ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR m.at >= ?3)
         GROUP BY k, m.model ORDER BY k, m.model"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![org.0, session.map(|s| s.0.as_str()), since], |r| {
        let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        Ok(UsageRow {
            key: r.get(0)?,
            model: r.get(1)?,
            calls: n(2)?,
            usage: Usage {
                input_tokens: n(3)?,
                output_tokens: n(4)?,
                cache_read_tokens: n(5)?,
                cache_write_tokens: n(6)?,
            },
        })
    })?;
    rows.collect::<Result<Vec<_>, _>>()
}
