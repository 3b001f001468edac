//! Orgs, users and their tokens (stored as SHA-256 only).

use outboard_shared::{OrgId, UserId};

use outboard_base::digest::hash_token;
use outboard_base::util::{new_id, now_rfc3339, random_token};

use crate::db::{params, Db, OptionalExtension};
use crate::error::StoreError;
use crate::rows::{user_from_row, UserRow};

/// The id of the org named `name`, if it exists.
pub fn org_id_by_name(c: &Db, name: &str) -> Result<Option<OrgId>, StoreError> {
    Ok(c.query_row("SELECT id FROM orgs WHERE name = ?1", [name], |r| r.get(0))
        .optional()?
        .map(OrgId))
}

/// The name of the org `id` (for messages), or its id when it has none.
pub fn org_name(c: &Db, id: &OrgId) -> String {
    c.query_row("SELECT name FROM orgs WHERE id = ?1", [&id.0], |r| r.get(0))
        .unwrap_or_else(|_| id.0.clone())
}

pub fn ensure_org(c: &Db, name: &str) -> Result<OrgId, StoreError> {
    if let Some(id) =
        c.query_row("SELECT id FROM orgs WHERE name = ?1", [name], |r| r.get(0)).optional()?
    {
        return Ok(OrgId(id));
    }
    let id = new_id("o");
    c.execute(
        "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![id, name, now_rfc3339()],
    )?;
    Ok(OrgId(id))
}

pub fn find_user(c: &Db, org_id: &OrgId, name: &str) -> Result<Option<UserRow>, StoreError> {
    c.query_row(
        "SELECT u.id, u.name, o.id, o.name FROM users u JOIN orgs o ON o.id = u.org_id
         WHERE u.org_id = ?1 AND u.name = ?2",
        params![org_id.0, name],
        user_from_row,
    )
    .optional()
}

pub fn insert_user(c: &Db, org_id: &OrgId, org: &str, name: &str) -> Result<UserRow, StoreError> {
    let id = new_id("u");
    c.execute(
        "INSERT INTO users (id, org_id, name, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, org_id.0, name, now_rfc3339()],
    )?;
    Ok(UserRow {
        id: UserId(id),
        name: name.to_owned(),
        org_id: org_id.clone(),
        org: org.to_owned(),
    })
}

pub fn insert_token(c: &Db, user: &UserId, label: &str) -> Result<String, StoreError> {
    let token = random_token().map_err(StoreError::Random)?;
    c.execute(
        "INSERT INTO tokens (token_hash, user_id, label, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![hash_token(&token), user.0, label, now_rfc3339()],
    )?;
    Ok(token)
}
