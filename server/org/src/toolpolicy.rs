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
//! | `NotebookEdit` | `notebook_path`, normalised the same way |
//! | `Glob`, `Grep` | `path` (`/workspace` when absent) |
//! | `Bash` | each simple command of `command`, and the line as written (below) |
//! | `WebFetch` | `url` |
//! | `WebSearch` | `query` |
//! | `Task` | `subagent_type` (`general-purpose` when absent) |
//!
//! In a path argument `*` stays within one path component and `**` crosses them
//! (`Write(/skills/**)`); in a command or URL `*` matches anything (`Bash(git push*)`). Other
//! tools (MCP tools among them) have no argument, so a pattern with one never matches them.
//!
//! A `Bash` line is judged command by command (`outboard_bashguard::commands`): every simple
//! command of the parsed line — in lists, pipelines, subshells, substitutions, `bash -c '…'`,
//! `eval '…'`, behind `env`, `sudo`, `timeout`, `nice`, `xargs` and the other wrappers — as its
//! words with quotes and escapes undone and the name by its basename, so ` git push`,
//! `true; git push`, `/usr/bin/git push` and `c\url` are `git push` and `curl` to a rule; the
//! line as written (trimmed) is judged too. Each gets its rule as below, and the call gets the
//! strictest of their answers. A command that is only known when it runs (`$cmd push`,
//! `eval "$x"`, `git $sub`, a line that does not parse cleanly) cannot be judged: it gets the
//! rules that could match some completion of what is known (for `git $sub`, those that could
//! match a text starting `git `) and, if one of them is stricter than `allow`, the call asks a
//! person (the request says why; a headless run that answers by itself refuses it).
//!
//! Which rule applies to one text: the most specific of those that match — one with an argument
//! beats one without, then the one with more literal characters — and of equally specific ones
//! the strictest (`deny` over `ask` over `allow`). So `ask mcp__github__*` with `allow
//! mcp__github__get_*` asks for everything of that server but its getters. A call no rule
//! matches is allowed: attaching a server or a tool is already the admin's decision.
//!
//! An `allow` for the session (see the harness's approvals) covers the rules that asked, for
//! that tool name: a later call runs unasked only when every rule that asks about it was
//! granted so, and never when part of it could not be judged.
//!
//! Rules are read when a turn starts, so an admin's change reaches the next turn of every
//! session.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use outboard_shared::OrgId;
use outboard_store::db::params;
use regex_automata::hybrid::dfa::DFA;
use regex_automata::{Anchored, Input};
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
        "NotebookEdit" => ("notebook_path", ArgKind::Path, ""),
        "Glob" | "Grep" => ("path", ArgKind::Path, "/workspace"),
        "Bash" => ("command", ArgKind::Text, ""),
        "WebFetch" => ("url", ArgKind::Text, ""),
        "WebSearch" => ("query", ArgKind::Text, ""),
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
    /// The argument pattern as text, run over a command's known prefix: could a completion of
    /// it match? (`None`: no argument, or a pattern too large for a lazy DFA: anything could.)
    prefix: Option<DFA>,
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
                .map_err(|e| bad(&e.to_string()))
        };
        let tool = glob(name, false)?.compile_matcher();
        let (arg, prefix) = match arg {
            Some(a) => {
                let text = glob(a, false)?;
                let prefix = prefix_dfa(text.regex());
                (Some((glob(a, true)?.compile_matcher(), text.compile_matcher())), prefix)
            }
            None => (None, None),
        };
        let literal = text.chars().filter(|c| !matches!(c, '*' | '?' | '(' | ')')).count();
        Ok(Pattern { text: text.to_owned(), tool, arg, prefix, literal })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it matches `tool` with the argument `subject` (already normalised).
    fn matches(&self, tool: &str, subject: &Subject) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        let Some((as_path, as_text)) = &self.arg else { return true };
        match subject.kind {
            None => false,
            Some(ArgKind::Path) => as_path.is_match(&subject.text),
            Some(ArgKind::Text) => as_text.is_match(&subject.text),
        }
    }

    /// Whether it could match `tool` with an argument that starts with `known` and goes on
    /// with what only run time knows.
    fn could_match(&self, tool: &str, known: &str) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        if self.arg.is_none() {
            return true;
        }
        let Some(dfa) = &self.prefix else { return true };
        let mut cache = dfa.create_cache();
        let input = Input::new(known).anchored(Anchored::Yes);
        let Ok(mut state) = dfa.start_state_forward(&mut cache, &input) else { return true };
        for &byte in known.as_bytes() {
            match dfa.next_state(&mut cache, state, byte) {
                Ok(next) if next.is_dead() => return false,
                Ok(next) if next.is_quit() => return true,
                Ok(next) => state = next,
                Err(_) => return true,
            }
        }
        !state.is_dead()
    }

    /// How specific it is: an argument first, then literal characters.
    fn specificity(&self) -> (bool, usize) {
        (self.arg.is_some(), self.literal)
    }
}

/// A lazy DFA of a glob's regex. Globs match bytes (`(?-u)`), so the regex may match invalid
/// UTF-8; `None` when it cannot be built (then every prefix could match).
fn prefix_dfa(regex: &str) -> Option<DFA> {
    DFA::builder()
        .syntax(regex_automata::util::syntax::Config::new().utf8(false))
        .thompson(regex_automata::nfa::thompson::Config::new().utf8(false))
        .build(regex)
        .ok()
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

    /// How the rules answer a call of `tool` with `input` (see the module header).
    /// `granted` says whether an `ask` rule was allowed for the rest of the session for this
    /// tool: such a rule answers `allow`.
    pub fn judge(
        &self,
        tool: &str,
        input: &Value,
        granted: &dyn Fn(&Rule) -> bool,
    ) -> Judgement<'_> {
        let mut judged = Judgement::default();
        for subject in subjects(tool, input) {
            // What is known is judged as written: a lower bound on a longer command's answer.
            if let Some(rule) = self.applying(tool, &subject) {
                judged.take(rule, granted);
            }
            if subject.complete {
                continue;
            }
            let unsure = self
                .rules
                .iter()
                .filter(|r| r.pattern.could_match(tool, &subject.text))
                .filter(|r| r.decision != Decision::Allow && !granted(r))
                .max_by(|a, b| strictness(a).cmp(&strictness(b)));
            if let (Some(rule), None) = (unsure, &judged.unjudged) {
                judged.unjudged = Some((rule, unjudged_why(&subject.text)));
            }
        }
        judged
    }

    /// The rule that applies to one text (see the module header).
    fn applying(&self, tool: &str, subject: &Subject) -> Option<&Rule> {
        self.rules.iter().filter(|r| r.pattern.matches(tool, subject)).max_by(|a, b| {
            a.pattern.specificity().cmp(&b.pattern.specificity()).then(a.decision.cmp(&b.decision))
        })
    }
}

/// Which of two rules that could apply is the stricter: the decision, then the more specific.
fn strictness(rule: &Rule) -> (Decision, (bool, usize)) {
    (rule.decision, rule.pattern.specificity())
}

/// Why a command could not be judged, for the person asked.
fn unjudged_why(known: &str) -> String {
    if known.is_empty() {
        return "a command of this line is only known when it runs (a variable or substitution \
                as its name, `eval` or `bash -c` of one, or a line that does not parse cleanly)"
            .to_owned();
    }
    format!("the command `{known}…` goes on with words only known when it runs")
}

/// How the rules answer one call.
#[derive(Debug, Default)]
pub struct Judgement<'r> {
    /// The first `deny` that applies.
    deny: Option<&'r Rule>,
    /// The `ask` rules that apply and were not granted for the session, in order, once each.
    asks: Vec<&'r Rule>,
    /// A rule stricter than `allow` that could apply to a command not known before it runs.
    unjudged: Option<(&'r Rule, String)>,
}

impl<'r> Judgement<'r> {
    fn take(&mut self, rule: &'r Rule, granted: &dyn Fn(&Rule) -> bool) {
        match rule.decision {
            Decision::Allow => {}
            Decision::Deny => {
                self.deny.get_or_insert(rule);
            }
            Decision::Ask if granted(rule) => {}
            Decision::Ask => {
                if !self.asks.iter().any(|r| r.pattern.as_str() == rule.pattern.as_str()) {
                    self.asks.push(rule);
                }
            }
        }
    }

    /// What happens to the call: `deny` if any part is denied, `ask` if any part asks or could
    /// not be judged, else `allow`.
    pub fn decision(&self) -> Decision {
        if self.deny.is_some() {
            Decision::Deny
        } else if !self.asks.is_empty() || self.unjudged.is_some() {
            Decision::Ask
        } else {
            Decision::Allow
        }
    }

    /// The rule to name: the denying one, the first that asks, or the one that could apply to
    /// what could not be judged; `None` when the call runs.
    pub fn rule(&self) -> Option<&'r Rule> {
        self.deny.or_else(|| self.asks.first().copied()).or(self.unjudged.as_ref().map(|u| u.0))
    }

    /// What an `allow` for the session would cover: these rules, for this tool name. Empty
    /// when only a part that could not be judged asks.
    pub fn covers(&self) -> Vec<String> {
        self.asks.iter().map(|r| r.pattern.as_str().to_owned()).collect()
    }

    /// Why part of the call could not be judged before it runs, when that is so.
    pub fn unjudged(&self) -> Option<&str> {
        self.unjudged.as_ref().map(|u| u.1.as_str())
    }
}

/// One text a call's rules are matched against: its argument (normalised) or, for `Bash`, the
/// line and each of its commands.
#[derive(Debug)]
struct Subject {
    /// How it is matched; `None`: the tool has no argument.
    kind: Option<ArgKind>,
    text: String,
    /// False: `text` is only the start of what runs.
    complete: bool,
}

/// What a call of `tool` with `input` is judged on.
fn subjects(tool: &str, input: &Value) -> Vec<Subject> {
    let Some((field, kind, default)) = argument_of(tool) else {
        return vec![Subject { kind: None, text: String::new(), complete: true }];
    };
    let raw = input.get(field).and_then(Value::as_str).unwrap_or(default);
    let text = match kind {
        ArgKind::Path => normal_path(raw),
        ArgKind::Text => raw.trim().to_owned(),
    };
    let mut subjects = vec![Subject { kind: Some(kind), text, complete: true }];
    if tool == "Bash" {
        subjects.extend(outboard_bashguard::commands(raw).into_iter().map(|c| Subject {
            kind: Some(ArgKind::Text),
            text: c.text,
            complete: c.complete,
        }));
    }
    subjects
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

    /// The rule named and the decision; `None` when the call runs with no rule to name.
    fn decide(rules: &Rules, tool: &str, input: Value) -> Option<(String, Decision)> {
        let judged = rules.judge(tool, &input, &|_| false);
        judged.rule().map(|r| (r.pattern.as_str().to_owned(), judged.decision()))
    }

    fn bash(rules: &Rules, command: &str) -> Decision {
        rules.judge("Bash", &json!({ "command": command }), &|_| false).decision()
    }

    #[test]
    fn names_match_with_stars_and_unmatched_calls_run() {
        let r = rules(&[("mcp__github__*", "ask"), ("Bash", "deny")]);
        assert_eq!(
            decide(&r, "mcp__github__create_issue", json!({})),
            Some(("mcp__github__*".into(), Decision::Ask))
        );
        assert_eq!(bash(&r, "ls"), Decision::Deny);
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
        assert_eq!(r.judge("Glob", &json!({}), &|_| false).decision(), Decision::Allow);
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
        let notebooks = rules(&[("NotebookEdit(/workspace/reports/**)", "deny")]);
        let nb = |path: &str| {
            decide(&notebooks, "NotebookEdit", json!({"notebook_path": path})).map(|x| x.1)
        };
        assert_eq!(nb("reports/q1.ipynb"), Some(Decision::Deny), "its path is its argument");
        assert_eq!(nb("/workspace/x/../reports/a/q2.ipynb"), Some(Decision::Deny));
        assert_eq!(nb("/workspace/drafts/q1.ipynb"), None);
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
        assert_eq!(bash(&r, "git push origin main"), Decision::Ask);
        assert_eq!(bash(&r, "git status"), Decision::Allow);
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

    /// The attacks of issue 36 (they all ran when rules matched the raw string) and the shapes
    /// a line hides a command in.
    #[test]
    fn every_simple_command_of_a_bash_line_is_judged_by_its_normalised_name() {
        let r = rules(&[("Bash(git push*)", "deny"), ("Bash(curl*)", "deny")]);
        for line in [
            " git push",
            "true; git push",
            "/usr/bin/git push",
            "c\\url --version",
            "\"git\" 'push' origin",
            "ls | git push",
            "ls && (cd x; git push)",
            "echo $(curl -s a)",
            "echo `git push`",
            "bash -c 'git push'",
            "sh -c \"true && curl a\"",
            "env GIT_TRACE=1 git push",
            "echo main | xargs git push origin",
            "timeout 5 git push",
            "nice -n 10 curl a",
            "sudo -u me /usr/bin/git push",
            "eval 'git push'",
            "if true; then git push; fi",
            "for i in 1; do curl a; done",
        ] {
            assert_eq!(bash(&r, line), Decision::Deny, "{line:?}");
        }
        let named = decide(&r, "Bash", json!({"command": "true; c\\url a"})).unwrap();
        assert_eq!(named, ("Bash(curl*)".to_owned(), Decision::Deny));
        for line in ["git status", "echo git push", "ls | grep curl", "cat curl.txt"] {
            assert_eq!(bash(&r, line), Decision::Allow, "{line:?}");
        }
    }

    #[test]
    fn a_command_not_known_before_it_runs_asks_when_a_stricter_rule_could_apply() {
        let r = rules(&[("Bash(git push*)", "deny"), ("Bash(ls*)", "allow")]);
        for line in ["$cmd push", "eval \"$x\"", "git $sub", "bash -c \"$x\"", "$(echo git) push"] {
            let judged = r.judge("Bash", &json!({ "command": line }), &|_| false);
            assert_eq!(judged.decision(), Decision::Ask, "{line:?}");
            assert_eq!(judged.rule().map(|r| r.pattern.as_str()), Some("Bash(git push*)"));
            assert!(judged.unjudged().is_some(), "{line:?}");
            assert!(judged.covers().is_empty(), "a session grant covers nothing unjudged");
        }
        // What is known already rules the rule out: no completion of `ls ` or `cd ` is `git push`.
        for line in ["ls $dir", "cd \"$HOME\" && ls *.txt", "echo $x"] {
            assert_eq!(bash(&r, line), Decision::Allow, "{line:?}");
        }
        // What is known already matches a deny: refused, not asked.
        assert_eq!(bash(&r, "git push $remote"), Decision::Deny);
        // With no rule stricter than allow for Bash, nothing is unjudged.
        let open = rules(&[("Bash(ls*)", "allow"), ("Read", "ask")]);
        assert_eq!(bash(&open, "$cmd push"), Decision::Allow);
    }

    #[test]
    fn a_session_grant_covers_the_rules_that_asked_and_nothing_else() {
        let r = rules(&[("Bash(echo*)", "ask"), ("Bash(rm*)", "ask")]);
        let first = r.judge("Bash", &json!({"command": "echo first"}), &|_| false);
        assert_eq!((first.decision(), first.covers()), (Decision::Ask, vec!["Bash(echo*)".into()]));
        let granted = |rule: &Rule| rule.pattern.as_str() == "Bash(echo*)";
        let judge = |c: &str| r.judge("Bash", &json!({ "command": c }), &granted);
        assert_eq!(judge("echo again").decision(), Decision::Allow);
        let rm = judge("rm -rf x");
        assert_eq!((rm.decision(), rm.covers()), (Decision::Ask, vec!["Bash(rm*)".into()]));
        let both = judge("echo a; rm b");
        assert_eq!((both.decision(), both.covers()), (Decision::Ask, vec!["Bash(rm*)".into()]));
        // A rule without an argument covers the tool, as it says.
        let tool = rules(&[("Bash", "ask")]);
        let covers = tool.judge("Bash", &json!({"command": "ls; rm x"}), &|_| false).covers();
        assert_eq!(covers, vec!["Bash".to_owned()]);
    }
}
