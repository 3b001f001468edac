//! Org events for a person: the `org_context` line.

/// The files an `org_context` event names, at most this many (then "and N more").
const ORG_CONTEXT_SHOWN: usize = 6;

/// An `org_context` event, for a person: which org files the turn's prompt quotes anew, at
/// which version and by whom. Each field is org text: shown on one line, control characters
/// replaced.
pub fn org_context_line(files: &[outboard_shared::OrgContextFile]) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).take(200).collect()
    };
    let changed = files.iter().any(|f| f.previous.is_some());
    let mut parts: Vec<String> = files
        .iter()
        .take(ORG_CONTEXT_SHOWN)
        .map(|f| {
            let was = match f.previous {
                Some(v) => format!(" (was v{v})"),
                None if changed => " (new)".to_owned(),
                None => String::new(),
            };
            format!("{} v{} by {}{was}", clean(&f.path), f.version, clean(&f.author))
        })
        .collect();
    if files.len() > ORG_CONTEXT_SHOWN {
        parts.push(format!("and {} more", files.len() - ORG_CONTEXT_SHOWN));
    }
    let head = match changed {
        true => "org files in this prompt changed",
        false => "org files in this prompt",
    };
    format!("{head}: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::OrgContextFile;

    fn file(path: &str, version: u64, author: &str, previous: Option<u64>) -> OrgContextFile {
        OrgContextFile { path: path.into(), version, author: author.into(), previous }
    }

    #[test]
    fn an_org_context_names_each_file_its_version_and_author() {
        assert_eq!(
            org_context_line(&[file("/memory/MEMORY.md", 3, "alice", None)]),
            "org files in this prompt: /memory/MEMORY.md v3 by alice"
        );
        assert_eq!(
            org_context_line(&[
                file("/skills/fmt/SKILL.md", 4, "mallory\nadmin", Some(3)),
                file("/agents/rev.md", 1, "bob", None),
            ]),
            "org files in this prompt changed: /skills/fmt/SKILL.md v4 by mallory\u{fffd}admin \
             (was v3), /agents/rev.md v1 by bob (new)"
        );
        let many: Vec<_> =
            (0..9).map(|i| file(&format!("/skills/s{i}/SKILL.md"), 1, "x", None)).collect();
        assert!(org_context_line(&many).ends_with(", and 3 more"));
    }
}
