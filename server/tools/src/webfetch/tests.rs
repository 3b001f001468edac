#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::sync::{Arc, Mutex};

use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::get;

use super::*;
use outboard_egress::{Audit, Decide, Injection, NetLimits, SessionNet, Verdict};
use outboard_org::netpolicy::{Decision, Policy};

#[test]
fn the_first_url_is_checked() {
    assert_eq!(
        start_url(" https://example.com/a?b=1 ").unwrap().as_str(),
        "https://example.com/a?b=1"
    );
    assert_eq!(start_url("http://127.0.0.1:8080").unwrap().as_str(), "http://127.0.0.1:8080/");
    let refused = |url: &str, says: &str| {
        let why = start_url(url).unwrap_err();
        assert!(why.contains(says), "{url}: {why}");
    };
    refused("example.com/page", "Invalid URL");
    refused("ftp://example.com/file", "http:// and https:// URLs only");
    refused("file:///etc/passwd", "http:// and https:// URLs only");
    refused("https://user:pw@example.com/", "never sends credentials");
    refused("https://token@example.com/", "never sends credentials");
    refused(&format!("https://example.com/{}", "a".repeat(MAX_URL_LEN)), "at most 2000");
}

#[test]
fn redirects_resolve_against_the_page_and_are_checked_again() {
    let base = Url::parse("https://docs.example.com/guide/intro?x=1").unwrap();
    let to = |location: &str| redirect_target(&base, location).map(|u| u.to_string());
    assert_eq!(to("/other").unwrap(), "https://docs.example.com/other");
    assert_eq!(to("next").unwrap(), "https://docs.example.com/guide/next");
    assert_eq!(to("?y=2").unwrap(), "https://docs.example.com/guide/intro?y=2");
    assert_eq!(to("//cdn.example.net/a").unwrap(), "https://cdn.example.net/a");
    assert_eq!(to("http://169.254.169.254/latest").unwrap(), "http://169.254.169.254/latest");
    assert!(to("file:///etc/passwd").unwrap_err().contains("http:// and https://"));
    assert!(to("https://me:secret@example.com/").unwrap_err().contains("credentials"));
    assert!(to("http://[::1").unwrap_err().contains("not a valid URL"));
}

#[test]
fn destinations_name_host_and_port() {
    let at = |u: &str| destination(&Url::parse(u).unwrap());
    assert_eq!(at("https://Example.COM/x"), ("example.com".into(), 443));
    assert_eq!(at("http://example.com/x"), ("example.com".into(), 80));
    assert_eq!(at("http://127.0.0.1:9000/"), ("127.0.0.1".into(), 9000));
    assert_eq!(at("http://[::1]:81/"), ("::1".into(), 81));
    assert_eq!(shown("::1", 81), "[::1]:81");
    assert!(is_redirect(StatusCode::FOUND) && is_redirect(StatusCode::PERMANENT_REDIRECT));
    assert!(!is_redirect(StatusCode::NOT_MODIFIED) && !is_redirect(StatusCode::OK));
}

#[test]
fn refusals_say_who_refused() {
    assert_eq!(refuser("session none"), "this session's narrowing of the network");
    assert!(refuser("no way back in (built into the proxy, every mode)").contains("forbidden"));
    assert_eq!(refuser("org acme: allow"), "the org's network policy");
}

/// A real org policy behind the proxy's trait, and the audit records kept.
struct Org(Policy);

impl Decide for Org {
    fn decide(&self, host: &str, port: u16) -> Verdict {
        match self.0.decide("acme", host, port) {
            Decision::Allow => Verdict::Allow,
            Decision::Refuse { policy, reason, hint } => Verdict::Refuse { policy, reason, hint },
        }
    }
    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.0.allows_literal(ip, port)
    }
    fn injections(&self, _: &str, _: u16) -> Vec<Arc<Injection>> {
        panic!("WebFetch must never ask for the sandbox's injected credentials")
    }
}

#[derive(Default)]
struct Kept(Mutex<Vec<AuditEntry>>);

impl Audit for Kept {
    fn record(&self, entry: AuditEntry) {
        self.0.lock().unwrap().push(entry);
    }
}

fn egress(hosts: &[String], audit: Arc<Kept>) -> Egress {
    Egress {
        net: SessionNet {
            org: outboard_shared::OrgId("org".into()),
            org_name: "acme".into(),
            session: outboard_shared::SessionId("s".into()),
            user: "bob".into(),
            decide: Arc::new(Org(Policy::parse("allow", hosts).unwrap())),
            audit,
            limits: NetLimits::DEFAULT,
            ca: None,
            env: Vec::new(),
        },
        server_ports: Vec::new(),
    }
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn fetch_url(egress: &Egress, url: &str) -> ToolOutcome {
    let params = WebFetchParams { url: url.into(), prompt: "What does it say?".into() };
    run(params, Some(egress), &CancellationToken::new()).await
}

#[tokio::test]
async fn pages_redirects_caps_and_types_under_a_policy() {
    let elsewhere = serve(axum::Router::new().route("/", get(|| async { "elsewhere" }))).await;
    let big = "x".repeat(MAX_BODY_BYTES + 1000);
    let app = axum::Router::new()
        .route("/", get(|| async { Html("<h1>Hi</h1><script>x()</script><p>text</p>") }))
        .route("/moved", get(|| async { Redirect::temporary("/") }))
        .route(
            "/away",
            get(move || async move { Redirect::temporary(&format!("http://{elsewhere}/")) }),
        )
        .route("/loop", get(|| async { Redirect::temporary("/loop") }))
        .route("/big", get(move || async move { big }))
        .route(
            "/png",
            get(|| async { ([(CONTENT_TYPE, "image/png")], vec![0x89u8, b'P']).into_response() }),
        )
        .route("/gone", get(|| async { (StatusCode::NOT_FOUND, "no such page") }));
    let here = serve(app).await;
    let kept = Arc::new(Kept::default());
    let egress = egress(&[here.to_string()], kept.clone());

    let page = fetch_url(&egress, &format!("http://{here}/")).await;
    assert!(!page.is_error, "{}", page.output);
    assert!(
        page.output.starts_with(&format!("URL: http://{here}/\nStatus: 200 OK\n")),
        "{}",
        page.output
    );
    assert!(page.output.contains("Answer from this page: What does it say?"), "{}", page.output);
    assert!(page.output.contains("# Hi") && !page.output.contains("x()"), "{}", page.output);

    let moved = fetch_url(&egress, &format!("http://{here}/moved")).await;
    assert!(!moved.is_error, "{}", moved.output);
    assert!(moved.output.contains(&format!("Redirects: http://{here}/moved -> http://{here}/")));

    // The redirect leads to a port nobody allowed: refused there, saying which hop.
    let away = fetch_url(&egress, &format!("http://{here}/away")).await;
    assert!(away.is_error, "{}", away.output);
    assert!(away.output.contains("could not follow redirect 1"), "{}", away.output);
    assert!(away.output.contains(&format!("refused {elsewhere}")), "{}", away.output);
    assert!(away.output.contains("admin network set --org acme"), "{}", away.output);
    assert!(!away.output.contains("elsewhere\n"), "{}", away.output);

    let looped = fetch_url(&egress, &format!("http://{here}/loop")).await;
    assert!(looped.output.contains("more than 5 redirects"), "{}", looped.output);

    let big = fetch_url(&egress, &format!("http://{here}/big")).await;
    assert!(big.output.contains("the page was cut"), "{}", &big.output[..400]);
    assert!(big.output.contains("text was cut"), "{}", &big.output[..400]);
    assert!(big.output.len() < MAX_MARKDOWN_BYTES + 2000);

    let png = fetch_url(&egress, &format!("http://{here}/png")).await;
    assert!(png.is_error && png.output.contains("image/png"), "{}", png.output);

    let gone = fetch_url(&egress, &format!("http://{here}/gone")).await;
    assert!(gone.is_error && gone.output.contains("404") && gone.output.contains("no such page"));

    // Every hop has its record: the refused one with what refused it.
    let records = kept.0.lock().unwrap().clone();
    let refused: Vec<&AuditEntry> = records.iter().filter(|r| !r.allowed).collect();
    assert_eq!(refused.len(), 1, "{records:#?}");
    assert_eq!(refused[0].port, elsewhere.port());
    assert!(refused[0].refused_by.as_ref().unwrap().policy.starts_with("org acme"));
    // `/`; `/moved` and `/`; `/away`; `/loop` six times; `/big`, `/png`, `/gone`.
    assert_eq!(records.iter().filter(|r| r.allowed).count(), 13, "{records:#?}");
    let big_row = records.iter().find(|r| r.bytes_down as usize == MAX_BODY_BYTES);
    assert!(big_row.is_some(), "the cut body's bytes are recorded: {records:#?}");
}

#[tokio::test]
async fn loopback_by_name_and_no_network_are_refused() {
    let here = serve(axum::Router::new().route("/", get(|| async { "secret admin page" }))).await;
    let kept = Arc::new(Kept::default());
    // `localhost:PORT` is allowed by name, but it resolves to loopback, which only an IP
    // literal entry opens.
    let egress = egress(&[format!("localhost:{}", here.port())], kept.clone());
    let out = fetch_url(&egress, &format!("http://localhost:{}/", here.port())).await;
    assert!(out.is_error, "{}", out.output);
    assert!(out.output.contains("resolves to 127.0.0.1"), "{}", out.output);
    assert!(out.output.contains("forbidden address ranges"), "{}", out.output);
    assert!(!out.output.contains("secret admin page"));

    let none = run(
        WebFetchParams { url: format!("http://{here}/"), prompt: "p".into() },
        None,
        &CancellationToken::new(),
    )
    .await;
    assert!(none.is_error && none.output.contains("not available"), "{}", none.output);
}

#[tokio::test]
async fn a_page_that_never_comes_is_given_up_within_the_budget() {
    // Accepts, reads the request, and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let here = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let kept = Arc::new(Kept::default());
    let egress = egress(&[here.to_string()], kept.clone());
    let url = Url::parse(&format!("http://{here}/slow")).unwrap();
    let out = fetch(&egress, url, "p", Duration::from_millis(300)).await;
    assert!(out.is_error, "{}", out.output);
    assert!(out.output.contains("the fetch took more than 0.3 s"), "{}", out.output);
    let records = kept.0.lock().unwrap().clone();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert!(records[0].reason.as_deref().unwrap().contains("took more than"), "{records:#?}");
}

#[test]
fn the_tool_is_offered_to_subagents_and_runs_with_other_reads() {
    let spec = crate::specs().into_iter().find(|s| s.name == "WebFetch").unwrap();
    assert_eq!(spec.input_schema["required"], json!(["url", "prompt"]));
    assert!(spec.description.contains("Answer from this page"), "{}", spec.description);
    assert!(crate::SUBAGENT_TOOLS.contains(&"WebFetch"));
    assert!(crate::runs_concurrently("WebFetch"));
}
