//! Per-org tool policies: for each tool pattern, whether a call runs (`allow`), waits for a
//! person's answer (`ask`, see the harness's approvals) or is refused (`deny`).
//!
//! An admin sets them (`outboard-server admin policy set --org ORG PATTERN allow|ask|deny`). A
//! PATTERN is a tool name, where `*` matches any run of characters (`mcp__github__*`, `Bash`,
//! `*`), optionally followed by an argument pattern in parentheses that the call's main argument
//! must match:
//!
//! | tool | its argument |
//! |---|---|
//! | `Read`, `Write`, `Edit` | `file_path`, normalised (`/skills/../memory/a.md` is `/memory/a.md`) |
//! | `Glob`, `Grep` | `path` (`/workspace` when absent) |
//! | `Bash` | `command` |
//! | `WebFetch` | `url` |
//! | `Task` | `subagent_type` (`general-purpose` when absent) |
//!
//! In a path argument `*` stays within one path component and `**` crosses them
//! (`Write(/skills/**)`); in a command or URL `*` matches anything (`Bash(git push*)`). Other
//! tools (MCP tools among them) have no argument, so a pattern with one never matches them.
//!
//! Which rule applies: the most specific of those that match — one with an argument beats one
//! without, then the one with more literal characters — and of equally specific ones the
//! strictest (`deny` over `ask` over `allow`). So `ask mcp__github__*` with `allow
//! mcp__github__get_*` asks for everything of that server but its getters. A call no rule
//! matches is allowed: attaching a server or a tool is already the admin's decision.
//!
//! Rules are read when a turn starts, so an admin's change reaches the next turn of every
//! session.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use outboard_shared::OrgId;
use outboard_store::db::params;
use serde_json::Value;

use outboard_base::util::now_rfc3339;
use outboard_store::{org_id_by_name, Store, StoreError};

/// The most rules one org holds: a policy is a short list an admin reads; this keeps a loop of
/// `admin policy set` from growing every turn's start without bound.
pub const MAX_RULES: usize = 256;

/// The longest pattern (bytes).
pub const MAX_PATTERN_BYTES: usize = 256;

/// A policy problem, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The org does not exist.
    #[error("no org named {0:?}: create it with `outboard-server admin user add NAME --org ORG`")]
    NoOrg(String),
    /// The pattern or decision is not understood.
    #[error("{0}")]
    Invalid(String),
    /// The org has [`MAX_RULES`] rules already.
    #[error(
        "org {0:?} has {MAX_RULES} tool rules already, the most it may hold: remove some with \
         `admin policy rm`, or use `*` patterns to cover several tools with one rule"
    )]
    TooMany(String),
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a rule says about the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// Run.
    Allow,
    /// Wait for a person's answer.
    Ask,
    /// Refuse; the model is told the policy refuses it.
    Deny,
}

impl Decision {
    /// Parses `allow`, `ask`, `deny`.
    pub fn parse(word: &str) -> Result<Decision, PolicyError> {
        match word.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(Decision::Allow),
            "ask" => Ok(Decision::Ask),
            "deny" => Ok(Decision::Deny),
            other => Err(PolicyError::Invalid(format!(
                "{other:?} is not a decision: give allow, ask or deny"
            ))),
        }
    }

    /// The word.
    pub fn word(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// How a tool's argument is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgKind {
    /// A path: `*` within a component, `**` across.
    Path,
    /// Free text (a command, a URL, a name): `*` matches anything.
    Text,
}

/// The argument a policy matches for `tool`, and how, when the tool has one.
fn argument_of(tool: &str) -> Option<(&'static str, ArgKind, &'static str)> {
    Some(match tool {
        "Read" | "Write" | "Edit" => ("file_path", ArgKind::Path, ""),
        "Glob" | "Grep" => ("path", ArgKind::Path, "/workspace"),
        "Bash" => ("command", ArgKind::Text, ""),
        "WebFetch" => ("url", ArgKind::Text, ""),
        "Task" => ("subagent_type", ArgKind::Text, "general-purpose"),
        _ => return None,
    })
}

/// A parsed PATTERN.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    tool: GlobMatcher,
    /// The argument pattern, compiled both ways: which one applies depends on the tool matched.
    arg: Option<(GlobMatcher, GlobMatcher)>,
    /// Literal characters: how specific it is.
    literal: usize,
}

impl Pattern {
    /// Parses `NAME` or `NAME(ARG)`; `*` in NAME matches any run of characters.
    pub fn parse(text: &str) -> Result<Pattern, PolicyError> {
        let text = text.trim();
        let bad = |why: &str| PolicyError::Invalid(format!("tool pattern {text:?}: {why}"));
        if text.is_empty() {
            return Err(bad("it is empty; give a tool name such as Bash or mcp__github__*"));
        }
        if text.len() > MAX_PATTERN_BYTES {
            return Err(bad(&format!("it is longer than {MAX_PATTERN_BYTES} bytes")));
        }
        let (name, arg) = match text.split_once('(') {
            None => (text, None),
            Some((name, rest)) => {
                let Some(arg) = rest.strip_suffix(')') else {
                    return Err(bad("an argument pattern ends with `)`, as in Write(/skills/**)"));
                };
                if arg.is_empty() {
                    return Err(bad("the argument pattern in parentheses is empty"));
                }
                (name, Some(arg))
            }
        };
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*'))
        {
            return Err(bad(
                "a tool name is letters, digits, `_`, `-` and `*` (Bash, WebFetch, mcp__github__*)",
            ));
        }
        let glob = |pattern: &str, separator: bool| {
            GlobBuilder::new(pattern)
                .literal_separator(separator)
                .backslash_escape(true)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| bad(&e.to_string()))
        };
        let tool = glob(name, false)?;
        let arg = match arg {
            Some(a) => Some((glob(a, true)?, glob(a, false)?)),
            None => None,
        };
        let literal = text.chars().filter(|c| !matches!(c, '*' | '?' | '(' | ')')).count();
        Ok(Pattern { text: text.to_owned(), tool, arg, literal })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a call of `tool` with `input` matches.
    pub fn matches(&self, tool: &str, input: &Value) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        let Some((as_path, as_text)) = &self.arg else { return true };
        let Some((field, kind, default)) = argument_of(tool) else { return false };
        let raw = input.get(field).and_then(Value::as_str).unwrap_or(default);
        match kind {
            ArgKind::Path => as_path.is_match(normal_path(raw)),
            ArgKind::Text => as_text.is_match(raw),
        }
    }

    /// How specific it is: an argument first, then literal characters.
    fn specificity(&self) -> (bool, usize) {
        (self.arg.is_some(), self.literal)
    }
}

/// `path` as the file tools resolve it: an org path normalised, a workspace path made absolute
/// under `/workspace` with `.` and `..` applied, so `/skills/../memory/x` is matched as
/// `/memory/x`.
fn normal_path(path: &str) -> String {
    if let Ok(outboard_vfs::Route::Org(org)) = outboard_vfs::route(path) {
        return org.to_string();
    }
    let absolute =
        if path.starts_with('/') { path.to_owned() } else { format!("/workspace/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for component in absolute.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// One rule: a pattern and its decision.
#[derive(Debug, Clone)]
pub struct Rule {
    /// What it matches.
    pub pattern: Pattern,
    /// What it says.
    pub decision: Decision,
}

/// An org's rules, as read when a turn starts.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Rules from `(pattern, decision)` pairs; one that no longer parses is skipped with a
    /// warning (it was valid when set).
    pub fn from_rows(rows: Vec<(String, String)>) -> Rules {
        let mut rules = Vec::with_capacity(rows.len());
        for (pattern, decision) in rows {
            match (Pattern::parse(&pattern), Decision::parse(&decision)) {
                (Ok(pattern), Ok(decision)) => rules.push(Rule { pattern, decision }),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!("skipping a stored tool rule: {e}");
                }
            }
        }
        Rules { rules }
    }

    /// No rules: every call runs.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule that applies to a call of `tool` with `input` (see the module header), `None`
    /// when none matches (the call runs).
    pub fn decide(&self, tool: &str, input: &Value) -> Option<&Rule> {
        self.rules.iter().filter(|r| r.pattern.matches(tool, input)).max_by(|a, b| {
            a.pattern.specificity().cmp(&b.pattern.specificity()).then(a.decision.cmp(&b.decision))
        })
    }
}

/// The rules of `org`, in the order they were set.
pub async fn load(store: &Store, org: &OrgId) -> Result<Rules, StoreError> {
    let org = org.clone();
    let rows = store
        .call(move |c| {
            let mut stmt = c.prepare(
                "SELECT pattern, decision FROM org_tool_policies WHERE org_id = ?1
                 ORDER BY set_at, pattern",
            )?;
            let rows = stmt
                .query_map([&org.0], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<(String, String)>, _>>()?;
            Ok(rows)
        })
        .await?;
    Ok(Rules::from_rows(rows))
}

async fn org_id(store: &Store, org: &str) -> Result<OrgId, PolicyError> {
    let name = org.to_owned();
    store
        .call(move |c| org_id_by_name(c, &name))
        .await?
        .ok_or_else(|| PolicyError::NoOrg(org.to_owned()))
}

/// `admin policy set --org ORG PATTERN DECISION`: adds the rule or changes its decision.
pub async fn set(
    store: &Store,
    org: &str,
    pattern: &str,
    decision: Decision,
) -> Result<(), PolicyError> {
    let pattern = Pattern::parse(pattern)?.as_str().to_owned();
    let id = org_id(store, org).await?;
    let full = store
        .call(move |c| {
            let tx = c.transaction()?;
            let count: i64 = tx.query_row(
                "SELECT COUNT(*) FROM org_tool_policies WHERE org_id = ?1 AND pattern != ?2",
                params![id.0, pattern],
                |r| r.get(0),
            )?;
            if count as usize >= MAX_RULES {
                return Ok(true);
            }
            tx.execute(
                "INSERT INTO org_tool_policies (org_id, pattern, decision, set_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (org_id, pattern) DO UPDATE SET decision = ?3, set_at = ?4",
                params![id.0, pattern, decision.word(), now_rfc3339()],
            )?;
            tx.commit()?;
            Ok(false)
        })
        .await?;
    if full {
        return Err(PolicyError::TooMany(org.to_owned()));
    }
    Ok(())
}

/// `admin policy rm --org ORG PATTERN`; `false` when there was no such rule.
pub async fn remove(store: &Store, org: &str, pattern: &str) -> Result<bool, PolicyError> {
    let pattern = pattern.trim().to_owned();
    let id = org_id(store, org).await?;
    Ok(store
        .call(move |c| {
            Ok(c.execute(
                "DELETE FROM org_tool_policies WHERE org_id = ?1 AND pattern = ?2",
                params![id.0, pattern],
            )? > 0)
        })
        .await?)
}

/// `admin policy ls --org ORG`: one line per rule, and what applies to the rest.
pub async fn show(store: &Store, org: &str) -> Result<String, PolicyError> {
    let id = org_id(store, org).await?;
    let rows = store
        .call(move |c| {
            let mut stmt = c.prepare(
                "SELECT pattern, decision, set_at FROM org_tool_policies WHERE org_id = ?1
                 ORDER BY pattern",
            )?;
            let rows = stmt
                .query_map([&id.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<(String, String, String)>, _>>()?;
            Ok(rows)
        })
        .await?;
    let mut text = format!("org {org}: {} tool rule(s)\n", rows.len());
    let width = rows.iter().map(|(p, _, _)| p.len()).max().unwrap_or(0);
    for (pattern, decision, at) in rows {
        text.push_str(&format!("  {pattern:<width$}  {decision:<5}  set {at}\n"));
    }
    text.push_str("  any other call: allow\n");
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn rules(pairs: &[(&str, &str)]) -> Rules {
        Rules::from_rows(pairs.iter().map(|(p, d)| (p.to_string(), d.to_string())).collect())
    }

    fn decide(rules: &Rules, tool: &str, input: Value) -> Option<(String, Decision)> {
        rules.decide(tool, &input).map(|r| (r.pattern.as_str().to_owned(), r.decision))
    }

    #[test]
    fn names_match_with_stars_and_unmatched_calls_run() {
        let r = rules(&[("mcp__github__*", "ask"), ("Bash", "deny")]);
        assert_eq!(
            decide(&r, "mcp__github__create_issue", json!({})),
            Some(("mcp__github__*".into(), Decision::Ask))
        );
        assert_eq!(decide(&r, "Bash", json!({"command": "ls"})).unwrap().1, Decision::Deny);
        assert_eq!(decide(&r, "mcp__linear__list", json!({})), None);
        assert_eq!(decide(&r, "Read", json!({"file_path": "/workspace/a"})), None);
    }

    #[test]
    fn the_most_specific_rule_wins_and_ties_go_to_the_strictest() {
        let r = rules(&[
            ("mcp__github__*", "ask"),
            ("mcp__github__get_*", "allow"),
            ("*", "allow"),
            ("mcp__github__get_*", "deny"),
        ]);
        // Two rules with the same pattern cannot be stored; from rows, the stricter wins.
        assert_eq!(decide(&r, "mcp__github__get_issue", json!({})).unwrap().1, Decision::Deny);
        assert_eq!(decide(&r, "mcp__github__create_issue", json!({})).unwrap().1, Decision::Ask);
        assert_eq!(decide(&r, "Glob", json!({})).unwrap().1, Decision::Allow);
    }

    #[test]
    fn org_paths_are_matched_normalised_and_stars_stay_in_a_component() {
        let r = rules(&[("Write(/skills/**)", "ask"), ("Edit(/memory/MEMORY.md)", "ask")]);
        let ask = Some(Decision::Ask);
        let d = |tool: &str, path: &str| decide(&r, tool, json!({"file_path": path})).map(|x| x.1);
        assert_eq!(d("Write", "/skills/deploy/SKILL.md"), ask);
        assert_eq!(d("Write", "/memory/../skills/x.md"), ask);
        assert_eq!(d("Write", "/workspace/skills/x.md"), None);
        assert_eq!(d("Edit", "/memory//MEMORY.md"), ask);
        assert_eq!(d("Edit", "/memory/other.md"), None);
        // An argument pattern never matches a tool without that argument.
        assert_eq!(decide(&r, "mcp__fs__Write", json!({"file_path": "/skills/x"})), None);
        let one = rules(&[("Read(/workspace/*)", "deny")]);
        let read = |p: &str| decide(&one, "Read", json!({"file_path": p})).map(|x| x.1);
        assert_eq!(read("/workspace/a.txt"), Some(Decision::Deny));
        assert_eq!(read("/workspace/src/a.txt"), None);
        assert_eq!(read("a.txt"), Some(Decision::Deny), "relative paths are under /workspace");
    }

    #[test]
    fn commands_and_urls_match_as_text() {
        let r =
            rules(&[("Bash", "allow"), ("Bash(git push*)", "ask"), ("WebFetch(*evil*)", "deny")]);
        let bash = |c: &str| decide(&r, "Bash", json!({"command": c})).map(|x| x.1);
        assert_eq!(bash("git push origin main"), Some(Decision::Ask));
        assert_eq!(bash("git status"), Some(Decision::Allow));
        let fetch = decide(&r, "WebFetch", json!({"url": "https://evil.example/a/b"}));
        assert_eq!(fetch.map(|x| x.1), Some(Decision::Deny));
    }

    #[test]
    fn bad_patterns_and_decisions_say_what_to_write() {
        for bad in ["", "Write(/skills/**", "Write()", "Bash(ls) x", "mcp github"] {
            let e = Pattern::parse(bad).unwrap_err().to_string();
            assert!(e.contains("tool pattern"), "{bad:?}: {e}");
        }
        assert!(Decision::parse("maybe").unwrap_err().to_string().contains("allow, ask or deny"));
        assert_eq!(Decision::parse(" ASK ").unwrap(), Decision::Ask);
    }
}
