#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::results::{self, Filters, Hit};
use super::service::{self, ServiceError};
use super::*;

fn params(query: &str) -> WebSearchParams {
    WebSearchParams { query: query.into(), allowed_domains: None, blocked_domains: None }
}

fn hit(url: &str) -> Hit {
    Hit { title: format!("title of {url}"), url: url.into(), snippet: "some text".into() }
}

#[test]
fn a_query_too_short_or_too_long_and_both_lists_are_refused() {
    let long = "x".repeat(10_000);
    let why = checked(&params(&long)).unwrap_err();
    assert!(why.contains("10000 characters long; WebSearch takes at most 1000"), "{why}");
    assert!(checked(&params(" a ")).unwrap_err().contains("at least 2"));
    let both = WebSearchParams {
        query: "rust".into(),
        allowed_domains: Some(vec!["docs.rs".into()]),
        blocked_domains: Some(vec!["evil.example".into()]),
    };
    assert_eq!(checked(&both).unwrap_err(), "Give allowed_domains or blocked_domains, not both.");
    let bad = WebSearchParams {
        query: "rust".into(),
        allowed_domains: Some(vec!["not a domain!".into()]),
        blocked_domains: None,
    };
    assert!(checked(&bad).unwrap_err().contains("is not a domain"));
    let fine = WebSearchParams {
        query: "rust".into(),
        allowed_domains: Some(vec!["https://Docs.rs/".into(), "*.example.com".into()]),
        blocked_domains: None,
    };
    assert_eq!(
        checked(&fine).unwrap(),
        Filters { allowed: vec!["docs.rs".into(), "example.com".into()], blocked: vec![] }
    );
}

#[test]
fn results_are_held_to_the_policy_the_filters_and_the_caps() {
    let mut hits = vec![
        hit("https://docs.rs/tokio"),
        hit("https://blocked.example/a"),
        hit("https://sub.docs.rs/x"),
        hit("ftp://docs.rs/file"),
        hit("https://denied.example/page"),
        hit("https://docs.rs/tokio"),
    ];
    hits.extend((0..20).map(|i| hit(&format!("https://docs.rs/{i}"))));
    let reachable = |host: &str, _: u16| host != "blocked.example";
    let denied = |url: &str| url.contains("denied.example");
    let kept = results::filter(hits.clone(), &Filters::default(), &reachable, &denied);
    assert_eq!(kept.hits.len(), results::MAX_RESULTS);
    assert_eq!(kept.by_policy, 2);
    assert_eq!(kept.invalid, 1);
    assert_eq!(kept.beyond, 23 - results::MAX_RESULTS);
    assert!(kept.hits.iter().all(|h| !h.url.contains("example")));

    let only = Filters { allowed: vec!["sub.docs.rs".into()], blocked: vec![] };
    let kept = results::filter(hits.clone(), &only, &reachable, &denied);
    assert_eq!(
        kept.hits.iter().map(|h| h.url.as_str()).collect::<Vec<_>>(),
        ["https://sub.docs.rs/x"]
    );
    let not = Filters { allowed: vec![], blocked: vec!["docs.rs".into()] };
    let kept = results::filter(hits, &not, &|_, _| true, &|_| false);
    assert_eq!(
        kept.hits.iter().map(|h| h.url.as_str()).collect::<Vec<_>>(),
        ["https://blocked.example/a", "https://denied.example/page"]
    );
    let text = results::render("q", "SearXNG", &kept);
    assert!(text.contains("1. title of https://blocked.example/a\n   https://blocked.example/a\n"));
    assert!(text.contains("left out by allowed_domains/blocked_domains"), "{text}");
}

#[test]
fn the_result_stays_under_its_bound_whatever_the_service_sends() {
    let hits: Vec<Hit> = (0..50)
        .map(|i| Hit {
            title: "T".repeat(10_000),
            url: format!("https://example.com/{i}"),
            snippet: "s\n".repeat(50_000),
        })
        .collect();
    let kept = results::filter(hits, &Filters::default(), &|_, _| true, &|_| false);
    let text = results::render(&"q".repeat(1000), "SearXNG", &kept);
    assert!(text.len() <= results::MAX_OUTPUT_BYTES, "{}", text.len());
    assert!(kept.hits.iter().all(|h| h.snippet.chars().count() <= results::MAX_SNIPPET_CHARS + 1));
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn searxng(addr: SocketAddr) -> Backend {
    Backend::Searxng(format!("http://{addr}"))
}

#[tokio::test]
async fn searxng_json_is_read_and_every_failure_is_one_clear_error() {
    let app = axum::Router::new()
        .route(
            "/ok/search",
            get(|q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                assert_eq!(q.get("format").map(String::as_str), Some("json"));
                axum::Json(json!({"query": q.get("q"), "results": [
                    {"url": "https://docs.rs/a", "title": "A", "content": "about a"},
                    {"title": "no url"}
                ]}))
            }),
        )
        .route(
            "/html/search",
            get(|| async { ([(CONTENT_TYPE, "text/html")], "<!doctype html><p>hi</p>") }),
        )
        .route("/status/search", get(|| async { (axum::http::StatusCode::FORBIDDEN, "no") }))
        .route("/shape/search", get(|| async { axum::Json(json!({"answers": []})) }))
        .route(
            "/hang/search",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        )
        .route("/big/search", get(|| async { "x".repeat(service::MAX_BODY_BYTES + 10) }));
    let addr = serve(app).await;
    let at = |path: &str| Backend::Searxng(format!("http://{addr}/{path}"));
    let t = Duration::from_secs(5);
    let hits = service::search(&at("ok"), None, "rust", t).await.unwrap();
    assert_eq!(
        hits,
        vec![Hit { title: "A".into(), url: "https://docs.rs/a".into(), snippet: "about a".into() }]
    );
    let e = service::search(&at("html"), None, "rust", t).await.unwrap_err();
    assert!(matches!(e, ServiceError::NotJson { .. }), "{e}");
    assert!(e.to_string().contains("answered an HTML page, not JSON"), "{e}");
    let e = service::search(&at("status"), None, "rust", t).await.unwrap_err();
    assert!(e.to_string().contains("answered HTTP 403: SearXNG refuses the JSON format"), "{e}");
    let e = service::search(&at("shape"), None, "rust", t).await.unwrap_err();
    assert!(e.to_string().contains("JSON without results"), "{e}");
    let e = service::search(&at("big"), None, "rust", t).await.unwrap_err();
    assert!(matches!(e, ServiceError::TooLarge { .. }), "{e}");
    let e =
        service::search(&at("hang"), None, "rust", Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(e, ServiceError::Timeout { .. }), "{e}");
    // Nothing listens there any more.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e = service::search(&searxng(gone), None, "rust", t).await.unwrap_err();
    assert!(e.to_string().contains("cannot be reached"), "{e}");
}

#[tokio::test]
async fn brave_gets_its_key_in_the_header_and_no_error_names_it() {
    const KEY: &str = "BSA-test-key-0123456789";
    let app = axum::Router::new().route(
        "/res/v1/web/search",
        get(|headers: axum::http::HeaderMap| async move {
            if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(KEY) {
                return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({"error": KEY})));
            }
            (
                axum::http::StatusCode::OK,
                axum::Json(json!({"type": "search", "web": {"results": [
                    {"url": "https://docs.rs/b", "title": "B", "description": "about b"}
                ]}})),
            )
        }),
    );
    let addr = serve(app).await;
    let brave = Backend::Brave(format!("http://{addr}"));
    let key = SecretValue::new(KEY.into());
    let hits = service::search(&brave, Some(&key), "rust", Duration::from_secs(5)).await.unwrap();
    assert_eq!(hits[0].url, "https://docs.rs/b");
    let wrong = SecretValue::new("wrong-key-abcdefgh".into());
    let e =
        service::search(&brave, Some(&wrong), "rust", Duration::from_secs(5)).await.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("HTTP 401: the org's Brave key was refused"), "{text}");
    assert!(!text.contains(KEY) && !text.contains("wrong-key"), "{text}");
}

#[test]
fn the_spec_is_claude_code_s() {
    let spec = spec();
    assert_eq!(spec.name, "WebSearch");
    let props = spec.input_schema["properties"].as_object().unwrap();
    assert_eq!(props.keys().collect::<Vec<_>>(), ["allowed_domains", "blocked_domains", "query"]);
    assert_eq!(spec.input_schema["required"], json!(["query"]));
}
