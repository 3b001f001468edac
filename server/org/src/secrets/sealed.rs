//! Sealing and opening org secrets: the server's key, the `org_secrets` rows, validation of
//! names, hosts and values.

pub use outboard_base::secret::SecretValue;
use outboard_base::secret::{wipe, Wiped};
use outboard_base::util::now_rfc3339;
use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};
use outboard_store::{org_id_by_name, org_name, Store, StoreError};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::binding::Binding;
use super::error::SecretError;
use super::limits::*;

/// The key that seals org secrets.
pub struct SecretKey {
    key: LessSafeKey,
    source: KeySource,
}

/// Where the key came from (for `Debug` and the start log; never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    Env,
    File(PathBuf),
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey").field("source", &self.source).finish_non_exhaustive()
    }
}

impl SecretKey {
    /// `OUTBOARD_SECRET_KEY` (64 hex chars = 32 bytes) when set; else `<data_dir>/secret.key`
    /// (32 random bytes, created 0600 on first use with O_EXCL; refuse to use an existing key file
    /// whose mode lets group/other read it, saying how to fix it: chmod 600).
    /// An empty `OUTBOARD_SECRET_KEY` counts as unset.
    pub fn load(data_dir: &Path) -> Result<SecretKey, SecretError> {
        SecretKey::load_with(data_dir, std::env::var_os(KEY_ENV))
    }

    /// [`SecretKey::load`] with the environment variable's value given (tests cannot set the
    /// process environment without racing each other).
    pub(crate) fn load_with(
        data_dir: &Path,
        env: Option<std::ffi::OsString>,
    ) -> Result<SecretKey, SecretError> {
        match env {
            Some(hex) if !hex.is_empty() => {
                SecretKey::from_hex(hex.to_str().ok_or(SecretError::BadEnvKey)?)
            }
            _ => SecretKey::from_file(&data_dir.join(KEY_FILE)),
        }
    }

    /// Where the key came from, for the start log: `env` or the key file's path.
    pub fn source(&self) -> String {
        match &self.source {
            KeySource::Env => KEY_ENV.to_owned(),
            KeySource::File(path) => path.display().to_string(),
        }
    }

    fn from_hex(hex: &str) -> Result<SecretKey, SecretError> {
        let hex = hex.trim().as_bytes();
        if hex.len() != KEY_BYTES * 2 {
            return Err(SecretError::BadEnvKey);
        }
        let mut bytes = [0u8; KEY_BYTES];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            match (hex_digit(pair[0]), hex_digit(pair[1])) {
                (Some(hi), Some(lo)) => bytes[i] = hi << 4 | lo,
                _ => {
                    wipe(&mut bytes);
                    return Err(SecretError::BadEnvKey);
                }
            }
        }
        SecretKey::from_bytes(bytes, KeySource::Env)
    }

    fn from_file(path: &Path) -> Result<SecretKey, SecretError> {
        let io = |source| SecretError::KeyFileIo { path: path.to_owned(), source };
        let mut bytes = [0u8; KEY_BYTES];
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(mut file) => {
                getrandom::getrandom(&mut bytes).map_err(|e| SecretError::Random(e.to_string()))?;
                let written = file.write_all(&bytes).and_then(|()| file.sync_all());
                if let Err(e) = written {
                    wipe(&mut bytes);
                    // A partial key file would be refused at the next start; remove it so the
                    // next attempt makes a whole one.
                    let _ = std::fs::remove_file(path);
                    return Err(io(e));
                }
                SecretKey::from_bytes(bytes, KeySource::File(path.to_owned()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Checked on the open descriptor, so the file read is the file checked.
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(path)
                    .map_err(io)?;
                let meta = file.metadata().map_err(io)?;
                if !meta.file_type().is_file() {
                    return Err(SecretError::KeyFileBad {
                        path: path.to_owned(),
                        what: "not a regular file".into(),
                    });
                }
                let mode = meta.mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(SecretError::KeyFileMode { path: path.to_owned(), mode });
                }
                let mut content = Vec::with_capacity(KEY_BYTES + 1);
                let read = (&mut file).take(KEY_BYTES as u64 + 1).read_to_end(&mut content);
                if let Err(e) = read {
                    wipe(&mut content);
                    return Err(io(e));
                }
                if content.len() != KEY_BYTES {
                    let what = format!("{} bytes", content.len());
                    wipe(&mut content);
                    return Err(SecretError::KeyFileBad { path: path.to_owned(), what });
                }
                bytes.copy_from_slice(&content);
                wipe(&mut content);
                SecretKey::from_bytes(bytes, KeySource::File(path.to_owned()))
            }
            Err(e) => Err(io(e)),
        }
    }

    fn from_bytes(mut bytes: [u8; KEY_BYTES], source: KeySource) -> Result<SecretKey, SecretError> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &bytes);
        wipe(&mut bytes);
        let unbound = unbound.map_err(|_| SecretError::Random("invalid key length".into()))?;
        Ok(SecretKey { key: LessSafeKey::new(unbound), source })
    }

    /// Seals `value` for the row `(org, host, name)`: `(nonce, ciphertext || tag)`.
    pub(crate) fn seal(
        &self,
        org: &OrgId,
        host: &str,
        name: &str,
        value: &SecretValue,
    ) -> Result<([u8; NONCE_LEN], Vec<u8>), SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::getrandom(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let tag_len = CHACHA20_POLY1305.tag_len();
        // Room for the tag up front, so appending it does not leave a copy in freed memory.
        let mut buf = Wiped(Vec::with_capacity(value.expose().len() + tag_len));
        buf.0.extend_from_slice(value.expose().as_bytes());
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(org, host, name)),
                &mut buf.0,
            )
            .map_err(|_| SecretError::BadValue("it cannot be sealed"))?;
        Ok((nonce, std::mem::take(&mut buf.0)))
    }

    /// Opens what [`SecretKey::seal`] made for the same row; `None` when it does not open.
    pub(crate) fn open(
        &self,
        org: &OrgId,
        host: &str,
        name: &str,
        nonce: &[u8],
        sealed: Vec<u8>,
    ) -> Option<SecretValue> {
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        // On failure ring leaves the buffer's content unspecified: it is wiped either way.
        let mut buf = Wiped(sealed);
        let len = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(org, host, name)),
                &mut buf.0,
            )
            .ok()?
            .len();
        buf.0.truncate(len);
        match String::from_utf8(std::mem::take(&mut buf.0)) {
            Ok(text) => Some(SecretValue::new(text)),
            Err(e) => {
                drop(Wiped(e.into_bytes()));
                None
            }
        }
    }
}

/// The `host` part of a sandbox host token's sealing context; with an empty org id, which no
/// org has, it never collides with an org secret's.
pub(crate) const HOST_TOKEN_ROW: &str = "sandbox-host";

pub(crate) fn host_token_org() -> OrgId {
    OrgId(String::new())
}

pub(crate) fn aad(org: &OrgId, host: &str, name: &str) -> Vec<u8> {
    format!("{}\0{host}\0{name}", org.0).into_bytes()
}

pub(crate) fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One stored secret as listed (no value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    /// `host` or `host:port`.
    pub host: String,
    /// The secret's name.
    pub name: String,
    /// When it was last set, RFC 3339.
    pub created_at: String,
    /// Its binding to the sandbox's outbound HTTP, if any (`--inject-header`).
    pub binding: Binding,
}

/// The org secrets of this server: the store plus the key that seals them. Cheap to clone.
#[derive(Clone)]
pub struct Secrets {
    pub(crate) store: Store,
    pub(crate) key: Arc<SecretKey>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Secrets {
    /// Secrets in `store`, sealed with `key`.
    pub fn new(store: Store, key: SecretKey) -> Secrets {
        Secrets { store, key: Arc::new(key) }
    }

    /// Seals the join token of the sandbox host `name` (the sandbox hosts registry): `(nonce,
    /// sealed)`, bound to that name (a sealed token copied to another host's row does not open).
    pub fn seal_host_token(
        &self,
        name: &str,
        token: &SecretValue,
    ) -> Result<(Vec<u8>, Vec<u8>), SecretError> {
        let (nonce, sealed) = self.key.seal(&host_token_org(), HOST_TOKEN_ROW, name, token)?;
        Ok((nonce.to_vec(), sealed))
    }

    /// Opens what [`Secrets::seal_host_token`] made for `name`; `None` when it does not open
    /// (another key, another name).
    pub fn open_host_token(
        &self,
        name: &str,
        nonce: &[u8],
        sealed: Vec<u8>,
    ) -> Option<SecretValue> {
        self.key.open(&host_token_org(), HOST_TOKEN_ROW, name, nonce, sealed)
    }

    /// The id of the org named `name` (for the admin commands).
    pub async fn org_by_name(&self, name: &str) -> Result<OrgId, SecretError> {
        let owned = name.to_owned();
        self.store
            .call(move |c| org_id_by_name(c, &owned))
            .await?
            .ok_or_else(|| SecretError::NoOrg(name.to_owned()))
    }

    /// Stores `value` as `name` for `host` in `org`, replacing a value of the same name. The
    /// host and name are validated ([`validate_host`], [`validate_name`]); the value must be
    /// non-empty, at most [`MAX_VALUE_BYTES`], without control characters (one trailing newline,
    /// as `echo` writes, is dropped).
    pub async fn set(
        &self,
        org: &OrgId,
        host: &str,
        name: &str,
        value: SecretValue,
    ) -> Result<(), SecretError> {
        self.set_with(org, host, name, value, &Binding::default()).await
    }

    /// [`Secrets::set`], with the secret bound to the sandbox's outbound HTTP for its host as
    /// `binding` says (`--inject-header`, `--placeholder`, `--upstream-ca`); setting a secret
    /// again replaces its binding too.
    pub async fn set_with(
        &self,
        org: &OrgId,
        host: &str,
        name: &str,
        value: SecretValue,
        binding: &Binding,
    ) -> Result<(), SecretError> {
        let host = validate_host(host)?;
        validate_name(name)?;
        let value = validate_value(value)?;
        binding.check(&value)?;
        let (nonce, sealed) = self.key.seal(org, &host, name, &value)?;
        drop(value);
        let columns = binding.columns();
        let (org, name, key) = (org.clone(), name.to_owned(), Arc::clone(&self.key));
        self.store
            .call(move |c| {
                let tx = c.transaction()?;
                if org_name_opt(&tx, &org)?.is_none() {
                    return Ok(Err(SecretError::NoOrg(org.0.clone())));
                }
                let any: Option<SealedRow> = tx
                    .query_row(
                        "SELECT org_id, host, name, nonce, sealed FROM org_secrets LIMIT 1",
                        (),
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                    )
                    .optional()?;
                if let Some((o, h, n, nonce, sealed)) = any {
                    let o = OrgId(o);
                    if key.open(&o, &h, &n, &nonce, sealed).is_none() {
                        return Ok(Err(SecretError::KeyMismatch {
                            org: org_name(&tx, &o),
                            host: h,
                            name: n,
                        }));
                    }
                }
                let (inject_header, placeholders, upstream_ca) = columns.clone();
                tx.execute(
                    "INSERT INTO org_secrets (org_id, host, name, nonce, sealed, created_at,
                         inject_header, placeholders, upstream_ca)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT (org_id, host, name) DO UPDATE SET
                         nonce = excluded.nonce, sealed = excluded.sealed,
                         created_at = excluded.created_at, inject_header = excluded.inject_header,
                         placeholders = excluded.placeholders, upstream_ca = excluded.upstream_ca",
                    params![
                        org.0,
                        host,
                        name,
                        nonce.as_slice(),
                        sealed,
                        now_rfc3339(),
                        inject_header,
                        placeholders,
                        upstream_ca
                    ],
                )?;
                tx.commit()?;
                Ok(Ok(()))
            })
            .await?
    }

    /// The org's secrets, by host then name; never values.
    pub async fn list(&self, org: &OrgId) -> Result<Vec<SecretInfo>, SecretError> {
        let org = org.clone();
        Ok(self
            .store
            .call(move |c| {
                let mut stmt = c.prepare(
                    "SELECT host, name, created_at, inject_header, placeholders, upstream_ca
                     FROM org_secrets WHERE org_id = ?1 ORDER BY host, name",
                )?;
                let rows = stmt
                    .query_map([&org.0], |r| {
                        Ok(SecretInfo {
                            host: r.get(0)?,
                            name: r.get(1)?,
                            created_at: r.get(2)?,
                            binding: Binding::from_columns(r.get(3)?, r.get(4)?, r.get(5)?),
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?)
    }

    /// Removes one secret; `false` when there was none of that host and name.
    pub async fn remove(&self, org: &OrgId, host: &str, name: &str) -> Result<bool, SecretError> {
        let host = validate_host(host)?;
        validate_name(name)?;
        let (org, name) = (org.clone(), name.to_owned());
        Ok(self
            .store
            .call(move |c| {
                Ok(c.execute(
                    "DELETE FROM org_secrets WHERE org_id = ?1 AND host = ?2 AND name = ?3",
                    params![org.0, host, name],
                )? > 0)
            })
            .await?)
    }

    /// The credential to use for `host` (the normalized authority, as [`host_key`] writes it:
    /// `host` or `host:port`, lowercase, no default port). When several names exist for one
    /// host, the most recently set wins (ties: the last name in byte order).
    pub async fn for_host(
        &self,
        org: &OrgId,
        host: &str,
    ) -> Result<Option<SecretValue>, SecretError> {
        let (org, host) = (org.clone(), host.to_ascii_lowercase());
        let row = self
            .store
            .call(move |c| {
                let row = c
                    .query_row(
                        "SELECT name, nonce, sealed FROM org_secrets WHERE org_id = ?1 AND host = ?2
                         ORDER BY created_at DESC, name DESC LIMIT 1",
                        params![org.0, host],
                        |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, Vec<u8>>(2)?)),
                    )
                    .optional()?;
                Ok(row.map(|row| (org_name(c, &org), org.clone(), host.clone(), row)))
            })
            .await?;
        let Some((org_label, org, host, (name, nonce, sealed))) = row else {
            return Ok(None);
        };
        match self.key.open(&org, &host, &name, &nonce, sealed) {
            Some(value) => Ok(Some(value)),
            None => Err(SecretError::WrongKey { org: org_label, host, name }),
        }
    }
}

impl Secrets {
    /// Every secret of `org` named `name`, with its host, opened (for `{secret:NAME}` in an MCP
    /// server's headers or environment, the MCP client, which picks among them); most recently
    /// set first.
    pub async fn named(
        &self,
        org: &OrgId,
        name: &str,
    ) -> Result<Vec<(String, SecretValue)>, SecretError> {
        let (id, owned) = (org.clone(), name.to_owned());
        let rows: Vec<(String, Vec<u8>, Vec<u8>)> = self
            .store
            .call(move |c| {
                let mut stmt = c.prepare(
                    "SELECT host, nonce, sealed FROM org_secrets WHERE org_id = ?1 AND name = ?2
                     ORDER BY created_at DESC, host",
                )?;
                let rows = stmt
                    .query_map(params![id.0, owned], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (host, nonce, sealed) in rows {
            match self.key.open(org, &host, name, &nonce, sealed) {
                Some(value) => out.push((host, value)),
                None => {
                    let (org, name) = (org.0.clone(), name.to_owned());
                    return Err(SecretError::WrongKey { org, host, name });
                }
            }
        }
        Ok(out)
    }
}

/// A stored secret as selected: org id, host, name, nonce, sealed value.
pub(crate) type SealedRow = (String, String, String, Vec<u8>, Vec<u8>);

pub(crate) fn org_name_opt(
    c: &outboard_store::db::Db,
    org: &OrgId,
) -> Result<Option<String>, StoreError> {
    c.query_row("SELECT name FROM orgs WHERE id = ?1", [&org.0], |r| r.get(0)).optional()
}

/// The key under which a URL's credential is stored: `host` or `host:port`, lowercase, an IPv6
/// address in brackets in its canonical form, and the scheme's default port left out
/// (`https://h:443` -> `h`, `http://h:80` -> `h`).
pub fn host_key(scheme: &str, host: &str, port: Option<u16>) -> String {
    let host = host.to_ascii_lowercase();
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&host);
    let host = match bare.parse::<std::net::Ipv6Addr>() {
        Ok(ip) => format!("[{ip}]"),
        Err(_) => host.clone(),
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    };
    match port {
        Some(p) if Some(p) != default => format!("{host}:{p}"),
        _ => host,
    }
}

/// Checks and normalizes a host as an admin types it: `host` or `host:port` (letters, digits,
/// `.` and `-`; an IPv6 address in brackets), lowercased; `:443` and `:80`, the default ports of
/// git's HTTP transports, are left out as [`host_key`] does.
pub fn validate_host(host: &str) -> Result<String, SecretError> {
    let bad = |why| SecretError::BadHost { host: host.to_owned(), why };
    if host.contains('@') {
        return Err(SecretError::HostWithCredential);
    }
    if host.is_empty() {
        return Err(bad("it is empty"));
    }
    if host.len() > MAX_HOST_BYTES {
        return Err(SecretError::BadHost {
            host: format!("{}…", host.chars().take(40).collect::<String>()),
            why: "it is too long",
        });
    }
    if host.contains("://") {
        return Err(bad("it has a scheme"));
    }
    if host.contains('/') {
        return Err(bad("it has a path"));
    }
    let lower = host.to_ascii_lowercase();
    let (name, port) = if let Some(rest) = lower.strip_prefix('[') {
        let (ip, after) =
            rest.split_once(']').ok_or_else(|| bad("an IPv6 address lacks its ']'"))?;
        let ip =
            ip.parse::<std::net::Ipv6Addr>().map_err(|_| bad("not an IPv6 address in brackets"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("text after the IPv6 address"))?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (name, port) = match lower.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (lower.as_str(), None),
        };
        if name.is_empty() {
            return Err(bad("the host name is empty"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return Err(bad("a host name has only letters, digits, '.' and '-'"));
        }
        if name.starts_with(['.', '-']) || name.ends_with('-') || name.contains("..") {
            return Err(bad("not a host name"));
        }
        (name.to_owned(), port)
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(bad("the port is not a number from 1 to 65535")),
        },
    };
    Ok(match port {
        Some(p) if p != 443 && p != 80 => format!("{name}:{p}"),
        _ => name,
    })
}

/// Checks a secret's name: 1 to [`MAX_NAME_BYTES`] of `[A-Za-z0-9_.-]`, and not a token.
pub fn validate_name(name: &str) -> Result<(), SecretError> {
    if TOKEN_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err(SecretError::NameIsToken);
    }
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        let shown = if name.len() > MAX_NAME_BYTES {
            format!("{}…", name.chars().take(MAX_NAME_BYTES).collect::<String>())
        } else {
            name.to_owned()
        };
        Err(SecretError::BadName { name: shown })
    }
}

/// Checks a value: one trailing newline (`\n` or `\r\n`) dropped, then non-empty, at most
/// [`MAX_VALUE_BYTES`], no control characters.
pub fn validate_value(mut value: SecretValue) -> Result<SecretValue, SecretError> {
    value.drop_line_end();
    if value.expose().is_empty() {
        return Err(SecretError::BadValue("it is empty: pipe the token into the command's stdin"));
    }
    if value.expose().len() > MAX_VALUE_BYTES {
        return Err(SecretError::BadValue("it is longer than 4 KiB: give the token itself"));
    }
    if value.expose().chars().any(char::is_control) {
        return Err(SecretError::BadValue(
            "it holds a control character (a newline inside, a tab): give the token on one line",
        ));
    }
    Ok(value)
}
