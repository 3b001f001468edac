//! Fences around text the model must read as data, not instructions: org memory, skills, the
//! project's `AGENTS.md`; attribute values escaped, a fence name the body cannot close.

/// The opening tag (with `attrs`) and the closing tag of a fence around `body` that `body` does
/// not contain (see [`org_prompt`]).
pub(crate) fn fence(body: &str, attrs: &[(&str, String)]) -> (String, String) {
    let digest = outboard_org::tokens::hex_sha256(body.as_bytes());
    fence_named(body, &digest[..8], attrs)
}

/// [`fence`] for the project's instructions file (see [`project`]): its own tag, so a
/// reader tells a repository's text from the org's.
pub(crate) fn project_fence(body: &str, attrs: &[(&str, String)]) -> (String, String) {
    let digest = outboard_org::tokens::hex_sha256(body.as_bytes());
    fence_stem("project-data", body, &digest[..8], attrs)
}

/// [`fence`] with the tag's seed given (tests need a seed they know).
pub(crate) fn fence_named(body: &str, seed: &str, attrs: &[(&str, String)]) -> (String, String) {
    fence_stem("org-data", body, seed, attrs)
}

/// A fence whose tag is `stem-seed`, lengthened until `body` does not contain its closing tag.
pub(crate) fn fence_stem(
    stem: &str,
    body: &str,
    seed: &str,
    attrs: &[(&str, String)],
) -> (String, String) {
    let lower = body.to_lowercase();
    let mut name = format!("{stem}-{seed}");
    let mut n = 0u32;
    while lower.contains(&format!("</{name}")) {
        n += 1;
        name = format!("{stem}-{seed}-{n}");
    }
    let mut open = format!("<{name}");
    for (key, value) in attrs {
        open.push_str(&format!(" {key}=\"{}\"", escape_attr(value)));
    }
    open.push('>');
    (open, format!("</{name}>"))
}

/// An attribute value that cannot end its quotes or its tag, on one line.
pub(crate) fn escape_attr(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
