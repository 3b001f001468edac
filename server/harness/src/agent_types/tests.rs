use super::*;
use outboard_org::orgfs::{Author, Precondition};
use outboard_shared::FileOp;
use outboard_vfs::OrgPath;
use pretty_assertions::assert_eq;

fn ok(file: &str, text: &str) -> Parsed {
    let parsed = parse(file, text, false);
    assert_eq!(parsed.problem, None, "{file} should be usable");
    parsed
}

fn problem(file: &str, text: &str) -> String {
    let parsed = parse(file, text, false);
    match parsed.problem {
        Some(problem) => problem,
        None => panic!("{file} should have a problem: {parsed:?}"),
    }
}

fn tools(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|t| (*t).to_owned()).collect())
}

#[test]
fn claude_codes_format_with_a_comma_separated_tools_string() {
    let parsed = ok(
        "code-reviewer.md",
        "---\nname: code-reviewer\ndescription: Expert code review. Use after changes.\n\
         tools: Read, Grep, Glob, Bash\nmodel: sonnet\ncolor: red\n---\n\nYou are a senior \
         reviewer.\n\nBe brief.\n",
    );
    assert_eq!(parsed.name, "code-reviewer");
    assert_eq!(parsed.description, "Expert code review. Use after changes.");
    assert_eq!(parsed.tools, tools(&["Read", "Grep", "Glob", "Bash"]));
    assert_eq!(parsed.model.as_deref(), Some("sonnet"));
    assert_eq!(parsed.prompt, "You are a senior reviewer.\n\nBe brief.");
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
}

#[test]
fn tools_as_a_yaml_list_block_or_flow() {
    let block = ok(
        "explorer.md",
        "---\nname: explorer\ndescription: Finds code\ntools:\n  - Glob\n  # the searches\n  - Grep # search\n  \
         - \"Read\"\n---\nExplore.\n",
    );
    assert_eq!(block.tools, tools(&["Glob", "Grep", "Read"]));
    let flow =
        ok("explorer.md", "---\nname: explorer\ndescription: x\ntools: [Read, 'Grep']\n---\nx");
    assert_eq!(flow.tools, tools(&["Read", "Grep"]));
    let none = ok("explorer.md", "---\nname: explorer\ndescription: x\n---\nx");
    assert_eq!(none.tools, None, "no `tools`: every subagent tool");
    let null = ok("explorer.md", "---\nname: explorer\ndescription: x\ntools:\n---\nx");
    assert_eq!(null.tools, None, "an empty `tools:` is YAML's null: not given");
}

#[test]
fn quoted_folded_and_multi_line_descriptions() {
    let quoted = ok(
        "a.md",
        "---\nname: a\ndescription: \"Use it when:\\n- tests fail\\n\\\"quoted\\\"\"\n---\nx",
    );
    assert_eq!(quoted.description, "Use it when:\n- tests fail\n\"quoted\"");
    let single = ok("a.md", "---\nname: 'a'\ndescription: 'it''s # not a comment'\n---\nx");
    assert_eq!(single.description, "it's # not a comment");
    let folded = ok("a.md", "---\nname: a\ndescription: >\n  one\n  two\n\n  three\n---\nx");
    assert_eq!(folded.description, "one two\nthree");
    let literal = ok("a.md", "---\nname: a\ndescription: |\n  one\n  two\n---\nx");
    assert_eq!(literal.description, "one\ntwo");
    let plain = ok("a.md", "---\nname: a # the name\ndescription: one\n  continued\n---\nx");
    assert_eq!((plain.name.as_str(), plain.description.as_str()), ("a", "one continued"));
}

#[test]
fn unknown_tools_are_left_out_with_a_warning() {
    let parsed = ok(
        "writer.md",
        "---\nname: writer\ndescription: Writes docs\ntools: Read, WebSearch, write, Task, \
         NotebookRead, TodoWrite, mcp__github__create_issue, Read\n---\nWrite.\n",
    );
    assert_eq!(parsed.tools, tools(&["Read", "Write"]), "known names kept once, canonical case");
    let dropped: Vec<&str> = ["WebSearch", "Task", "NotebookRead", "TodoWrite", "mcp__github"]
        .into_iter()
        .filter(|t| !parsed.warnings.iter().any(|w| w.contains(t)))
        .collect();
    assert!(dropped.is_empty(), "no warning for {dropped:?}: {:?}", parsed.warnings);
    assert_eq!(parsed.warnings.len(), 5, "{:?}", parsed.warnings);
    assert!(parsed.warnings[0].contains("available: Bash"), "{}", parsed.warnings[0]);
}

#[test]
fn a_tools_list_with_nothing_usable_is_a_problem() {
    let msg =
        problem("web.md", "---\nname: web\ndescription: x\ntools: WebSearch, NotebookRead\n---\nx");
    assert!(msg.contains("line 4") && msg.contains("WebSearch, NotebookRead"), "{msg}");
    assert!(msg.contains("leave `tools` out"), "{msg}");
    let msg = problem("web.md", "---\nname: web\ndescription: x\ntools: []\n---\nx");
    assert!(msg.contains("none of its tools (none)"), "{msg}");
}

#[test]
fn name_must_be_given_and_equal_the_file_stem() {
    let msg = problem("reviewer.md", "---\ndescription: Reviews\n---\nx");
    assert!(msg.contains("no `name`") && msg.contains("name: reviewer"), "{msg}");
    let msg = problem("reviewer.md", "---\nname: critic\ndescription: Reviews\n---\nx");
    assert!(msg.contains("\"critic\"") && msg.contains("reviewer.md"), "{msg}");
    let msg = problem("Reviewer.md", "---\nname: Reviewer\ndescription: Reviews\n---\nx");
    assert!(msg.contains("lowercase letters"), "{msg}");
    let msg = problem("notes.txt", "---\nname: notes\ndescription: x\n---\nx");
    assert!(msg.contains("/agents/NAME.md"), "{msg}");
    let msg = problem("team/reviewer.md", "---\nname: reviewer\ndescription: x\n---\nx");
    assert!(msg.contains("no subdirectories"), "{msg}");
    let msg = problem("reviewer.md", "---\nname: reviewer\n---\nx");
    assert!(msg.contains("no `description`"), "{msg}");
}

#[test]
fn general_purpose_is_built_in() {
    let msg =
        problem("general-purpose.md", "---\nname: general-purpose\ndescription: Mine\n---\nx");
    assert!(msg.contains("general-purpose is built in"), "{msg}");
}

#[test]
fn bad_front_matter_names_the_line() {
    let msg = problem("a.md", "no front matter\n");
    assert!(msg.starts_with("line 1:"), "{msg}");
    let msg = problem("a.md", "---\nname: a\ndescription: x\n");
    assert!(msg.contains("no closing `---`"), "{msg}");
    let msg = problem("a.md", "---\nname: a\nthis is not yaml\ndescription: x\n---\nx");
    assert!(msg.starts_with("line 3:") && msg.contains("this is not yaml"), "{msg}");
    let msg = problem("a.md", "---\nname: a\ndescription: \"open\n---\nx");
    assert!(msg.starts_with("line 3:") && msg.contains("unclosed quote"), "{msg}");
    let msg = problem("a.md", "---\nname: a\nname: a\ndescription: x\n---\nx");
    assert!(msg.starts_with("line 3:") && msg.contains("duplicate mapping key: name"), "{msg}");
    let msg = problem("a.md", "---\nname: a\ndescription: x\ntools:\n  read: yes\n---\nx");
    assert!(msg.starts_with("line 5:") && msg.contains("is a mapping"), "{msg}");
    let msg = problem("a.md", "---\nname: a\ndescription: x\nmodel: [a, b]\n---\nx");
    assert!(msg.starts_with("line 4:") && msg.contains("single value"), "{msg}");
    let msg = problem("a.md", "---\nname: a\ndescription: x\nmodel: claude sonnet\n---\nx");
    assert!(msg.contains("not a model name"), "{msg}");
    assert!(problem("a.md", "").contains("empty"));
}

#[test]
fn a_long_body_is_cut_with_a_note() {
    let body = "é".repeat(MAX_AGENT_PROMPT_BYTES); // two bytes each: twice the limit
    let parsed = ok("long.md", &format!("---\nname: long\ndescription: x\n---\n{body}"));
    let (kept, note) = parsed.prompt.split_once("\n\n[").unwrap();
    assert_eq!(kept.len(), MAX_AGENT_PROMPT_BYTES, "cut on a character boundary at the limit");
    assert!(note.contains("Read /agents/long.md for the rest"), "{note}");
    assert!(parsed.warnings.iter().any(|w| w.contains("cut")), "{:?}", parsed.warnings);
    let exact = "a".repeat(MAX_AGENT_PROMPT_BYTES);
    let parsed = ok("long.md", &format!("---\nname: long\ndescription: x\n---\n{exact}"));
    assert_eq!(parsed.prompt, exact, "a body of exactly the limit is whole");
    let empty = ok("quiet.md", "---\nname: quiet\ndescription: x\n---\n");
    assert!(empty.warnings.iter().any(|w| w.contains("body is empty")), "{:?}", empty.warnings);
}

struct Fixture {
    _dir: tempfile::TempDir,
    fs: OrgFs,
    org: OrgId,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let fs = OrgFs::new(store, dir.path().join("orgs"));
    Fixture { _dir: dir, fs, org: alice.org_id }
}

async fn write(f: &Fixture, path: &str, text: &str) {
    let author = Author { user: "alice".into(), session: None };
    let path = OrgPath::parse(path).unwrap();
    f.fs.write(&f.org, &path, text.into(), &author, FileOp::Write, Precondition::Any)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_org_listing_and_the_usable_types() {
    let f = fixture().await;
    write(&f, "/agents/reviewer.md", "---\nname: reviewer\ndescription: Reviews\ntools: Read, WebSearch\nmodel: haiku\n---\nReview.\n").await;
    write(&f, "/agents/explorer.md", "---\nname: explorer\ndescription: Explores\n---\nExplore.\n")
        .await;
    write(&f, "/agents/broken.md", "---\nname: other\ndescription: x\n---\n").await;
    write(&f, "/agents/notes/readme.txt", "not an agent").await;
    write(&f, "/skills/s/SKILL.md", "---\nname: s\ndescription: a skill\n---\n").await;
    write(
        &f,
        "/agents/explorer.md",
        "---\nname: explorer\ndescription: Explores more\n---\nExplore.\n",
    )
    .await;

    let mut types = agent_types(&f.fs, &f.org).await.unwrap();
    for t in &mut types {
        assert!(t.at.ends_with('Z'), "each type says when its version was written: {t:?}");
        t.at.clear();
    }
    assert_eq!(
        types,
        vec![
            AgentType {
                name: "explorer".into(),
                description: "Explores more".into(),
                tools: None,
                model: None,
                prompt: "Explore.".into(),
                path: "/agents/explorer.md".into(),
                version: 2,
                author: "alice".into(),
                at: String::new(),
            },
            AgentType {
                name: "reviewer".into(),
                description: "Reviews".into(),
                tools: tools(&["Read"]),
                model: Some("haiku".into()),
                prompt: "Review.".into(),
                path: "/agents/reviewer.md".into(),
                version: 1,
                author: "alice".into(),
                at: String::new(),
            },
        ]
    );
    let list = agents(&f.fs, &f.org).await.unwrap();
    let names: Vec<&str> = list.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["broken", "explorer", "notes/readme.txt", "reviewer"]);
    assert!(list.agents[0].problem.as_ref().unwrap().contains("\"other\""));
    assert!(list.agents[2].problem.as_ref().unwrap().contains("/agents/NAME.md"));
    assert_eq!(list.agents[3].warnings.len(), 1, "{:?}", list.agents[3].warnings);
    assert_eq!((list.agents[3].author.as_str(), list.omitted), ("alice", 0));
}

#[tokio::test]
async fn a_listing_reads_at_most_max_agents_files() {
    let f = fixture().await;
    for i in 0..=MAX_AGENTS {
        write(
            &f,
            &format!("/agents/a{i:03}.md"),
            &format!("---\nname: a{i:03}\ndescription: n{i}\n---\nx"),
        )
        .await;
    }
    let list = agents(&f.fs, &f.org).await.unwrap();
    assert_eq!((list.agents.len(), list.omitted), (MAX_AGENTS, 1));
    assert_eq!(list.agents.last().map(|a| a.name.as_str()), Some("a199"));
    assert_eq!(agent_types(&f.fs, &f.org).await.unwrap().len(), MAX_AGENTS);
}

#[tokio::test]
async fn a_huge_file_is_read_only_as_far_as_its_prompt() {
    let f = fixture().await;
    let body = "b".repeat(outboard_org::orgfs::MAX_ORG_FILE_BYTES - 100);
    write(&f, "/agents/big.md", &format!("---\nname: big\ndescription: x\n---\n{body}")).await;
    let types = agent_types(&f.fs, &f.org).await.unwrap();
    let prompt = &types[0].prompt;
    assert!(prompt.starts_with(&"b".repeat(MAX_AGENT_PROMPT_BYTES)), "the prompt's first bytes");
    assert!(prompt.len() < MAX_AGENT_PROMPT_BYTES + 200, "{}", prompt.len());
    assert!(
        prompt.ends_with("Read /agents/big.md for the rest]"),
        "{}",
        &prompt[prompt.len() - 80..]
    );

    // A long front matter leaves less of the prompt in what is read: still cut with the note,
    // never passed off as whole.
    let description = "d".repeat(30 * 1024);
    let body = "p".repeat(30 * 1024);
    write(
        &f,
        "/agents/wordy.md",
        &format!("---\nname: wordy\ndescription: {description}\n---\n{body}"),
    )
    .await;
    let wordy =
        agent_types(&f.fs, &f.org).await.unwrap().into_iter().find(|a| a.name == "wordy").unwrap();
    assert_eq!(wordy.description.len(), 30 * 1024);
    assert!(wordy.prompt.len() < body.len(), "only what was read: {}", wordy.prompt.len());
    assert!(wordy.prompt.ends_with("Read /agents/wordy.md for the rest]"), "a cut prompt says so");
}
