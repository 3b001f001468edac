#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use super::render;
use crate::config::{
    parse_env, parse_header, parse_template, validate_name, Part, ServerDef, Transport,
};
use crate::names::{server_of, shown, MAX_TOOL_NAME};

fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[test]
fn plain_tool_names_are_kept() {
    assert_eq!(shown("github", "create_issue"), "mcp__github__create_issue");
    assert_eq!(server_of("mcp__github__create_issue"), Some("github"));
    assert_eq!(server_of("mcp__my-db__a__b"), Some("my-db"));
    assert_eq!(server_of("Bash"), None);
}

#[test]
fn odd_or_long_tool_names_are_mapped_to_valid_stable_distinct_names() {
    let dotted = shown("srv", "files.read");
    assert!(dotted.starts_with("mcp__srv__files_read_"), "{dotted}");
    assert!(valid_tool_name(&dotted), "{dotted}");
    // `files.read` and `files/read` sanitize alike; the digest keeps them apart.
    assert_ne!(dotted, shown("srv", "files/read"));
    assert_eq!(dotted, shown("srv", "files.read"));
    let long = "a".repeat(100);
    let mapped = shown("a-server-with-a-long-name-abcdef", &long);
    assert!(valid_tool_name(&mapped), "{mapped}");
    assert_eq!(mapped.len(), MAX_TOOL_NAME);
    assert_ne!(mapped, shown("a-server-with-a-long-name-abcdef", &"a".repeat(101)));
    assert_eq!(server_of(&mapped), Some("a-server-with-a-long-name-abcdef"));
    // Every name the longest server name can take fits.
    assert!(valid_tool_name(&shown(&"s".repeat(32), "é")));
}

#[test]
fn server_names_are_checked() {
    for good in ["github", "my-db", "a", "x_1", &"a".repeat(32)] {
        assert!(validate_name(good).is_ok(), "{good}");
    }
    for bad in ["", "GitHub", "a__b", "-a", "_a", "a_", "a.b", "a b", &"a".repeat(33)] {
        assert!(validate_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn templates_split_into_text_and_secrets() {
    assert_eq!(
        parse_template("Bearer {secret:gh-token}").unwrap(),
        vec![Part::Text("Bearer ".into()), Part::Secret("gh-token".into())]
    );
    assert_eq!(
        parse_template("{secret:a}:{secret:b}").unwrap(),
        vec![Part::Secret("a".into()), Part::Text(":".into()), Part::Secret("b".into())]
    );
    assert_eq!(parse_template("{x} plain").unwrap(), vec![Part::Text("{x} plain".into())]);
    assert!(parse_template("Bearer {secret:gh").is_err());
    assert!(parse_template("{secret:bad name}").is_err());
    assert_eq!(
        parse_header("Authorization: Bearer {secret:t}").unwrap(),
        ("authorization".into(), "Bearer {secret:t}".into())
    );
    assert!(parse_header("no colon").is_err());
    assert_eq!(parse_env("K=a=b").unwrap(), ("K".into(), "a=b".into()));
    assert!(parse_env("K").is_err());
}

#[test]
fn definitions_refuse_secrets_where_they_would_show() {
    let http = |url: &str, headers: Vec<(&str, &str)>| ServerDef {
        name: "s".into(),
        transport: Transport::Http {
            url: url.into(),
            headers: headers.into_iter().map(|(a, b)| (a.into(), b.into())).collect(),
        },
    };
    assert!(http("http://127.0.0.1:1/mcp", vec![("authorization", "Bearer {secret:t}")])
        .validate()
        .is_ok());
    assert!(http("ftp://x/", vec![]).validate().is_err());
    assert!(http("https://u:p@x/", vec![]).validate().is_err());
    assert!(http("https://x/?k={secret:t}", vec![]).validate().is_err());
    assert!(http("https://x/", vec![("accept", "x")]).validate().is_err());
    assert!(http("https://x/", vec![("a", "1"), ("a", "2")]).validate().is_err());
    let stdio = |args: Vec<&str>, env: Vec<(&str, &str)>| ServerDef {
        name: "s".into(),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: args.into_iter().map(Into::into).collect(),
            env: env.into_iter().map(|(a, b)| (a.into(), b.into())).collect(),
        },
    };
    assert!(stdio(vec!["server.py"], vec![("TOKEN", "{secret:t}")]).validate().is_ok());
    assert!(stdio(vec!["--token={secret:t}"], vec![]).validate().is_err());
    assert!(stdio(vec![], vec![("1BAD", "x")]).validate().is_err());
    let def = stdio(vec![], vec![("A", "{secret:t}"), ("B", "x{secret:u}{secret:t}")]);
    assert_eq!(def.secret_names(), vec!["t".to_owned(), "u".to_owned()]);
    assert_eq!(
        def.settings(),
        vec!["A={secret:t}".to_owned(), "B=x{secret:u}{secret:t}".to_owned()]
    );
}

#[test]
fn results_become_text_with_images_described_and_big_ones_cut() {
    use rmcp::model::{CallToolResult, ContentBlock};
    let result = CallToolResult::success(vec![
        ContentBlock::text("hello"),
        ContentBlock::image("iVBORw0KGgo=", "image/png"),
        ContentBlock::embedded_text("file:///a.txt", "inside"),
    ]);
    let (text, is_error) = render(&result);
    assert!(!is_error);
    assert_eq!(text, "hello\n[image: image/png, 8 bytes]\n[resource file:///a.txt]\ninside");
    let (text, is_error) = render(&CallToolResult::error(vec![ContentBlock::text("no")]));
    assert!(is_error);
    assert_eq!(text, "no");
    let big = "y".repeat(crate::limits::MAX_RESULT_BYTES + 10);
    let (text, _) = render(&CallToolResult::success(vec![ContentBlock::text(big)]));
    assert!(text.len() < crate::limits::MAX_RESULT_BYTES + 200, "{}", text.len());
    assert!(text.ends_with(&format!(
        "cut at {} of {} bytes]",
        crate::limits::MAX_RESULT_BYTES,
        crate::limits::MAX_RESULT_BYTES + 10
    )));
}

#[test]
fn tool_lists_are_capped_and_oversized_schemas_left_out() {
    use std::sync::Arc;
    let schema = |bytes: usize| {
        let mut o = serde_json::Map::new();
        o.insert("type".into(), "object".into());
        o.insert("description".into(), "d".repeat(bytes).into());
        Arc::new(o)
    };
    let mut listed: Vec<rmcp::model::Tool> = (0..crate::connect::MAX_TOOLS_PER_SERVER + 2)
        .map(|i| rmcp::model::Tool::new(format!("t{i}"), "x".repeat(3000), schema(10)))
        .collect();
    listed.insert(0, rmcp::model::Tool::new("huge", "h", schema(crate::connect::MAX_SCHEMA_BYTES)));
    let (tools, left_out) = crate::connect::shown_tools("s", listed);
    assert_eq!(tools.len(), crate::connect::MAX_TOOLS_PER_SERVER);
    assert_eq!(tools[0].shown, "mcp__s__t0");
    assert!(tools[0].description.len() <= crate::connect::MAX_DESCRIPTION_BYTES + 3);
    assert_eq!(left_out.len(), 3, "{left_out:?}");
    assert!(left_out[0].starts_with("huge (input schema"), "{left_out:?}");
    assert!(left_out[2].contains("over 128 tools"), "{left_out:?}");
}

#[tokio::test]
async fn secrets_resolve_by_name_preferring_the_servers_host() {
    use outboard_org::secrets::{SecretKey, SecretValue, Secrets};
    use outboard_store::org_id_by_name;
    let dir = tempfile::tempdir().unwrap();
    let store = outboard_store::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    store.add_user("acme", "alice").await.unwrap();
    let org = store.call(|c| org_id_by_name(c, "acme")).await.unwrap().unwrap();
    let secrets = Secrets::new(store.clone(), SecretKey::load(dir.path()).unwrap());
    let set = |host: &'static str, name: &'static str, value: &'static str| {
        let (secrets, org) = (secrets.clone(), org.clone());
        async move { secrets.set(&org, host, name, SecretValue::new(value.into())).await.unwrap() }
    };
    set("a.example", "tok", "value-for-a-example").await;
    set("127.0.0.1:8080", "tok", "value-for-loopback").await;
    set("only.example", "single", "the-only-value-1").await;
    let http = |url: &str, header: &str| ServerDef {
        name: "s".into(),
        transport: Transport::Http {
            url: url.into(),
            headers: vec![("authorization".into(), header.into())],
        },
    };
    let resolved = crate::connect::resolve(
        Some(&secrets),
        &org,
        &http("http://127.0.0.1:8080/mcp", "Bearer {secret:tok}"),
    )
    .await
    .unwrap();
    assert_eq!(resolved.pairs[0].1.expose(), "Bearer value-for-loopback");
    assert_eq!(resolved.scrub.scrub_str("x value-for-loopback y"), "x [secret tok] y");
    // Held by several hosts, none the server's: ambiguous, naming the hosts, not the values.
    let e = crate::connect::resolve(
        Some(&secrets),
        &org,
        &http("https://elsewhere.example/", "{secret:tok}"),
    )
    .await
    .err()
    .unwrap();
    let text = e.to_string();
    assert!(text.contains("several hosts (127.0.0.1:8080, a.example)"), "{text}");
    assert!(!text.contains("value-for"), "{text}");
    let one = http("https://elsewhere.example/", "t={secret:single}");
    let resolved = crate::connect::resolve(Some(&secrets), &org, &one).await.unwrap();
    assert_eq!(resolved.pairs[0].1.expose(), "t=the-only-value-1");
    let missing = http("https://x.example/", "{secret:nope}");
    let e = crate::connect::resolve(Some(&secrets), &org, &missing).await.err().unwrap();
    assert!(matches!(e, crate::error::McpError::MissingSecret { .. }), "{e}");
    let e = crate::connect::resolve(None, &org, &one).await.err().unwrap();
    assert!(matches!(e, crate::error::McpError::NoSecrets { .. }), "{e}");
}
