//! Credentials injected outside the sandbox: for a `CONNECT` to a host that an org secret is
//! bound to ([`crate::contract::Decide::injections`]), the proxy terminates the sandbox's TLS itself with a
//! leaf certificate for that host signed by the org's sandbox CA ([`crate::ca::OrgCa`]), serves
//! HTTP/1.1 on the decrypted stream, sets the secret's header and replaces its placeholders in
//! each request, asks for an identity encoding, re-originates TLS to the vetted address with
//! full certificate verification (system roots plus the secret's `--upstream-ca`), and sends the
//! response back with every occurrence of the secret's value replaced by `[secret NAME]`
//! ([`outboard_base::scrub`]). The sandbox only ever holds placeholders.
//!
//! What it owns: the leaf cache ([`Leaves`], [`MAX_LEAVES`]), the upstream trust store, the
//! request and response rewriting, the CA bundle the sandbox trusts ([`ca_bundle_pem`],
//! [`ca_env`]) and the refusals of injected hosts (cleartext, no CA, an upstream that fails
//! verification).
//!
//! Design choices:
//! - The leaf is for the host the client named in `CONNECT` (what the policy vetted), not the
//!   SNI: a client asking for another name inside fails its own verification.
//! - The credential follows the request, not the tunnel ([`misdirected`]): a request is sent
//!   with it only when the TLS SNI (absent for an IP literal) and the request's `Host` (and an
//!   absolute-form target's authority) all name the bound host and port. A client that skips
//!   verification could otherwise ask, inside a tunnel to the bound host, for another virtual
//!   host of a shared front end, which would receive the org's credential. Such a request is
//!   answered `421 Misdirected Request`, audited as a refusal and logged; nothing is sent.
//!   Only HTTP/1.1 is offered, so there is no `:authority` to check.
//! - One upstream connection per client connection, reused while it stays open (requests on
//!   one client connection are serial in HTTP/1.1); a closed one is reopened to the same vetted
//!   addresses. Its bytes count on the connection's one [`crate::contract::AuditEntry`].
//! - ALPN offers `http/1.1` only, both ways: one framing to rewrite, and hyper's HTTP/1
//!   server and client already bound the head ([`crate::contract::MAX_HEAD`]).
//! - `content-length` of a scrubbed response is dropped (hyper then sends it chunked) whenever a
//!   replacement can differ in length from its value, except for `HEAD` (no body follows);
//!   when every replacement is as long as its value it is kept. Simple, and always correct.
use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue, ACCEPT_ENCODING, CONTENT_LENGTH, HOST};
use hyper::http::uri::Authority;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use outboard_base::scrub::{Scrubber, StreamScrub};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::conn::{connect, refused, unreachable, Conn, Record};
use crate::contract::{Injection, MAX_HEAD};
use crate::leaves::{provider, SANDBOX_CA_BUNDLE, SYSTEM_BUNDLES};
use crate::meter::{Counters, Metered, BUDGET_SPENT};
use crate::target::{port_of, strip_hop_by_hop, Refusal, Target};

/// The system's roots, read once.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        for path in SYSTEM_BUNDLES {
            let Ok(certs) = CertificateDer::pem_file_iter(path) else { continue };
            let (added, _) = roots.add_parsable_certificates(certs.flatten());
            if added > 0 {
                return roots;
            }
        }
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        roots
    })
}

/// How the proxy checks the upstream: the system's roots plus the secrets' `--upstream-ca`.
fn client_config(injections: &[Arc<Injection>]) -> Result<Arc<ClientConfig>, String> {
    static PLAIN: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    let build = |roots: RootCertStore| -> Result<Arc<ClientConfig>, String> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("could not set up TLS to the upstream: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    };
    let extra: Vec<&Injection> =
        injections.iter().map(|i| &**i).filter(|i| i.upstream_ca.is_some()).collect();
    if extra.is_empty() {
        return PLAIN.get_or_init(|| build(system_roots().clone())).clone();
    }
    let mut roots = system_roots().clone();
    for injection in extra {
        let pem = injection.upstream_ca.as_deref().unwrap_or_default();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pem.as_bytes()).flatten().collect();
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!(
                "the org secret {}'s --upstream-ca holds no usable certificate; an admin can \
                 set it again with a PEM file of the upstream's CA",
                injection.name
            ));
        }
    }
    build(roots)
}

/// A `CONNECT` (or plain request) to a host that secrets are injected into, admitted by the
/// policy and the ranges at `addrs`: refused unless it can be intercepted, else answered
/// `200 Connection established` and served in a task.
pub(crate) async fn handle(
    conn: Arc<Conn>,
    mut req: Request<Incoming>,
    target: Target,
    addrs: Vec<SocketAddr>,
    injections: Vec<Arc<Injection>>,
) -> Response<Body> {
    let shared = &conn.shared;
    let refuse = |refusal: Refusal| {
        let why = format!("{}: {}", refusal.policy, refusal.reason);
        Record::refused(shared, &target.host, target.port, why).finish();
        refused(&target.host, target.port, &refusal)
    };
    if req.method() != Method::CONNECT {
        return refuse(cleartext_refusal(&target));
    }
    let Some(leaves) = shared.leaves.as_ref() else { return refuse(no_ca_refusal(&target)) };
    let fail = |why: String| {
        Record::refused(shared, &target.host, target.port, why.clone()).finish();
        unreachable(&target, &why)
    };
    let server_config = match leaves.config(&target.host) {
        Ok(config) => config,
        Err(why) => return fail(why),
    };
    let client_config = match client_config(&injections) {
        Ok(config) => config,
        Err(why) => return fail(why),
    };
    let upstream = match connect(&addrs).await {
        Ok(upstream) => upstream,
        Err(why) => return fail(why),
    };
    let counters = Arc::new(Counters::default());
    let mut record = Record::allowed(&conn, &target, counters.clone());
    record.intercepted = true;
    let pairs = injections.iter().map(|i| (i.value.clone(), format!("[secret {}]", i.name)));
    let session = Arc::new(Intercepted {
        conn: conn.clone(),
        scrubber: Arc::new(Scrubber::new(pairs.collect())),
        target,
        addrs,
        injections,
        client_config,
        counters,
        sender: Mutex::new(None),
        failed: Mutex::new(None),
        record: Mutex::new(record),
    });
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let conn = session.conn.clone();
        let idle = conn.shared.ctx.limits.idle_timeout;
        tokio::select! {
            () = serve(session, TokioIo::new(upgraded), server_config, upstream) => {}
            () = conn.activity.idle(idle) => conn.end(conn.idle_message()),
            () = conn.shared.cancel.cancelled() => conn.end("the sandbox's proxy stopped".into()),
        }
    });
    let mut answer = Response::new(Body::empty());
    answer
        .extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(b"Connection established"));
    answer
}

fn cleartext_refusal(target: &Target) -> Refusal {
    Refusal {
        status: StatusCode::FORBIDDEN,
        policy: "credentials are only sent over https (built into the proxy)".into(),
        reason: format!(
            "an org secret is bound to {}, and the proxy never adds it to (or lets through) a \
             cleartext request to that host",
            target.host
        ),
        hint: format!("use https://{}/ : the proxy adds the credential there", target.host),
    }
}

fn no_ca_refusal(target: &Target) -> Refusal {
    Refusal {
        status: StatusCode::FORBIDDEN,
        policy: "credentials injected outside (built into the proxy)".into(),
        reason: format!(
            "an org secret is bound to {}, but this session has no sandbox CA to intercept its \
             TLS with, and the proxy never sends a credential without checking the upstream \
             itself",
            target.host
        ),
        hint: "restart the session once the org's sandbox CA exists (the server makes it with \
               the org's first injected secret), or remove the secret's --inject-header binding \
               to tunnel the host untouched"
            .into(),
    }
}

/// One intercepted client connection.
struct Intercepted {
    conn: Arc<Conn>,
    target: Target,
    /// The vetted addresses (never resolved again).
    addrs: Vec<SocketAddr>,
    injections: Vec<Arc<Injection>>,
    scrubber: Arc<Scrubber>,
    client_config: Arc<ClientConfig>,
    counters: Arc<Counters>,
    /// The upstream connection between requests.
    sender: Mutex<Option<SendRequest<Incoming>>>,
    /// Why the upstream cannot be used (its certificate failed): every request gets `502`.
    failed: Mutex<Option<String>>,
    /// Written when the client connection ends (the last reference goes).
    record: Mutex<Record>,
}

impl Intercepted {
    fn note(&self, why: &str) {
        if let Ok(mut record) = self.record.lock() {
            record.reason.get_or_insert_with(|| why.to_string());
        }
    }

    /// TLS to the upstream over `tcp` (verified), and an HTTP/1.1 connection on it.
    async fn open(&self, tcp: TcpStream) -> Result<SendRequest<Incoming>, String> {
        let shared = &self.conn.shared;
        let (host, port) = (&self.target.host, self.target.port);
        let io = Metered::upstream(
            tcp,
            self.conn.activity.clone(),
            self.counters.clone(),
            shared.budget.clone(),
        );
        let name = ServerName::try_from(host.clone())
            .map_err(|e| format!("{host} is not a name TLS can verify: {e}"))?;
        let tls = TlsConnector::from(self.client_config.clone()).connect(name, io).await.map_err(
            |e| {
                if shared.budget.spent() {
                    return BUDGET_SPENT.to_string();
                }
                format!(
                    "TLS to {host}:{port} failed ({e}): its certificate must verify against the \
                     system's roots (or the secret's --upstream-ca) before the credential is \
                     sent, and it was not sent"
                )
            },
        )?;
        let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("the upstream connection failed: {e}"))?;
        let cancel = shared.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = driver => {}
                () = cancel.cancelled() => {}
            }
        });
        Ok(sender)
    }

    /// The upstream connection for the next request: the open one, or a new one.
    async fn sender(&self) -> Result<SendRequest<Incoming>, String> {
        let kept = self.sender.lock().ok().and_then(|mut s| s.take());
        if let Some(mut sender) = kept {
            if sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        let tcp = connect(&self.addrs).await?;
        self.open(tcp).await
    }

    /// One request from the sandbox, with the credential, and its scrubbed response; `sni` is
    /// the name the client's TLS asked for.
    async fn relay(&self, mut req: Request<Incoming>, sni: Option<&str>) -> Response<Body> {
        if let Some(why) = misdirected(&self.target, sni, &req) {
            return self.refuse_misdirected(why);
        }
        if let Some(why) = self.failed.lock().ok().and_then(|f| f.clone()) {
            return unreachable(&self.target, &why);
        }
        if let Err(why) = rewrite_request(&mut req, &self.target, &self.injections) {
            self.note(&why);
            return unreachable(&self.target, &why);
        }
        let head = req.method() == Method::HEAD;
        let mut sender = match self.sender().await {
            Ok(sender) => sender,
            Err(why) => {
                self.note(&why);
                return unreachable(&self.target, &why);
            }
        };
        let response = match sender.send_request(req).await {
            Ok(response) => response,
            Err(e) => {
                let why = if self.conn.shared.budget.spent() {
                    self.conn.end(BUDGET_SPENT.into());
                    BUDGET_SPENT.to_string()
                } else {
                    format!("the upstream broke off: {e}")
                };
                self.note(&why);
                return unreachable(&self.target, &why);
            }
        };
        if let Ok(mut slot) = self.sender.lock() {
            *slot = Some(sender);
        }
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        scrub_headers(&mut parts.headers, &self.scrubber);
        if self.scrubber.changes_length() && !head {
            parts.headers.remove(CONTENT_LENGTH);
        }
        let body = ScrubBody { inner: body, scrub: StreamScrub::new(self.scrubber.clone()) };
        Response::from_parts(parts, Body::new(body))
    }
}

impl Intercepted {
    /// `421` for a request that names another host than the bound one: audited as a refusal
    /// (a log row and a `network` event) and logged, and never sent upstream.
    fn refuse_misdirected(&self, why: String) -> Response<Body> {
        let (host, port) = (&self.target.host, self.target.port);
        let shared = &self.conn.shared;
        tracing::warn!(
            org = %shared.ctx.org_name,
            session = %shared.ctx.session,
            %host,
            port,
            "refused a request to a host with an injected credential: {why}"
        );
        let refusal = Refusal {
            status: StatusCode::MISDIRECTED_REQUEST,
            policy: "credentials go only to the host they are bound to (built into the proxy)"
                .into(),
            reason: format!(
                "an org secret is bound to {host}:{port}, and this request inside its tunnel \
                 {why}; a shared front end would hand it, with the credential, to another \
                 virtual host. Nothing was sent"
            ),
            hint: format!(
                "name {host} in both the TLS server name and the Host header; reach any other \
                 host through its own connection (CONNECT to it)"
            ),
        };
        Record::refusal(shared, host, port, &refusal).finish();
        refused(host, port, &refusal)
    }
}

/// Why a request inside an intercepted tunnel does not name the bound host, if it does not:
/// the TLS SNI must be the bound name (and absent for an IP literal, which SNI cannot carry);
/// an absolute-form target's authority and the one `Host` header, when present, must name the
/// bound host, and their port, when given, the bound port. A request without `Host` gets the
/// bound host's ([`rewrite_request`]).
fn misdirected(target: &Target, sni: Option<&str>, req: &Request<Incoming>) -> Option<String> {
    let is_ip = target.host.parse::<std::net::IpAddr>().is_ok();
    match sni {
        Some(name) if !name.eq_ignore_ascii_case(&target.host) => {
            return Some(format!("asked TLS for the server name {name:?}"));
        }
        None if !is_ip => return Some("sent no TLS server name (SNI)".into()),
        _ => {}
    }
    if let Some(authority) = req.uri().authority() {
        if let Some(why) = other_authority(target, authority) {
            return Some(format!("names {why} in its request line"));
        }
    }
    let mut hosts = req.headers().get_all(HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Some("carries more than one Host header".into());
    }
    let value = first?;
    let Some(authority) = value.to_str().ok().and_then(|v| v.parse::<Authority>().ok()) else {
        return Some("carries a Host header that is not a host".into());
    };
    other_authority(target, &authority).map(|why| format!("names {why} in its Host header"))
}

/// `Some(the authority as shown)` when `authority` is not the target's host (and port, when it
/// gives one).
fn other_authority(target: &Target, authority: &Authority) -> Option<String> {
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let same_port = match port_of(authority) {
        Ok(Some(port)) => port == target.port,
        Ok(None) => true,
        Err(_) => false,
    };
    let userinfo = authority.as_str().contains('@');
    if host.eq_ignore_ascii_case(&target.host) && same_port && !userinfo {
        return None;
    }
    Some(format!("{:?}", authority.as_str()))
}

/// Terminates the client's TLS, opens the first upstream connection, and serves the requests.
async fn serve(
    session: Arc<Intercepted>,
    client: TokioIo<hyper::upgrade::Upgraded>,
    server_config: Arc<ServerConfig>,
    upstream: TcpStream,
) {
    let client = match TlsAcceptor::from(server_config).accept(client).await {
        Ok(tls) => tls,
        Err(e) => {
            session.note(&format!(
                "the sandbox's client did not complete TLS with the proxy's certificate for {} \
                 ({e}); it must trust the CA bundle at {SANDBOX_CA_BUNDLE}",
                session.target.host
            ));
            return;
        }
    };
    match session.open(upstream).await {
        Ok(sender) => {
            if let Ok(mut slot) = session.sender.lock() {
                *slot = Some(sender);
            }
        }
        Err(why) => {
            session.note(&why);
            if let Ok(mut failed) = session.failed.lock() {
                *failed = Some(why);
            }
        }
    }
    // The name the client's TLS asked for, which every request's credential depends on.
    let sni: Option<Arc<str>> = client.get_ref().1.server_name().map(Arc::from);
    let service = service_fn(move |req| {
        let (session, sni) = (session.clone(), sni.clone());
        async move { Ok::<_, Infallible>(session.relay(req, sni.as_deref()).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(client), service)
        .await;
}

/// The request as the upstream gets it: origin form, hop-by-hop headers gone, placeholders
/// replaced by the values, the secrets' headers set, and an identity encoding asked for (a
/// compressed body could not be scanned). The error names the secret, never its value.
fn rewrite_request(
    req: &mut Request<Incoming>,
    target: &Target,
    injections: &[Arc<Injection>],
) -> Result<(), String> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *req.uri_mut() =
        path.parse::<Uri>().map_err(|e| format!("the path {path} is not valid: {e}"))?;
    *req.version_mut() = hyper::Version::HTTP_11;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    if !headers.contains_key(HOST) {
        let authority = if target.host.contains(':') {
            format!("[{}]:{}", target.host, target.port)
        } else {
            format!("{}:{}", target.host, target.port)
        };
        if let Ok(value) = HeaderValue::from_str(&authority) {
            headers.insert(HOST, value);
        }
    }
    for injection in injections {
        for value in headers.values_mut() {
            let mut bytes = value.as_bytes().to_vec();
            let mut changed = false;
            for placeholder in injection.placeholders.iter().filter(|p| !p.is_empty()) {
                if let Some(replaced) =
                    replace_all(&bytes, placeholder.as_bytes(), &injection.value)
                {
                    bytes = replaced;
                    changed = true;
                }
            }
            if changed {
                let mut new = HeaderValue::from_bytes(&bytes).map_err(|_| {
                    format!(
                        "the org secret {}'s value cannot stand in a header in place of its \
                         placeholder",
                        injection.name
                    )
                })?;
                new.set_sensitive(true);
                *value = new;
            }
        }
    }
    for injection in injections {
        let bad = || {
            format!(
                "the org secret {}'s --inject-header does not make a valid header; an admin can \
                 set it again",
                injection.name
            )
        };
        let name = HeaderName::from_bytes(injection.header.as_bytes()).map_err(|_| bad())?;
        let mut value = HeaderValue::from_str(&injection.header_value).map_err(|_| bad())?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    Ok(())
}

/// `hay` with every `needle` replaced by `with`; `None` when there is none.
fn replace_all(hay: &[u8], needle: &[u8], with: &str) -> Option<Vec<u8>> {
    let first = hay.windows(needle.len()).position(|w| w == needle)?;
    let mut out = Vec::with_capacity(hay.len() + with.len());
    out.extend_from_slice(&hay[..first]);
    let mut at = first;
    while at < hay.len() {
        if hay[at..].starts_with(needle) {
            out.extend_from_slice(with.as_bytes());
            at += needle.len();
        } else {
            out.push(hay[at]);
            at += 1;
        }
    }
    Some(out)
}

fn scrub_headers(headers: &mut hyper::HeaderMap, scrubber: &Scrubber) {
    for value in headers.values_mut() {
        if let std::borrow::Cow::Owned(bytes) = scrubber.scrub_bytes(value.as_bytes()) {
            // A replacement is `[secret NAME]`, valid in a header; should it not be, the
            // header goes empty rather than carrying the value.
            *value =
                HeaderValue::from_bytes(&bytes).unwrap_or_else(|_| HeaderValue::from_static(""));
        }
    }
}

/// A response body with the secrets' values replaced, chunk by chunk.
struct ScrubBody {
    inner: Incoming,
    scrub: StreamScrub,
}

impl hyper::body::Body for ScrubBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers are dropped: the client was not offered them (`te` is removed).
                    let Ok(data) = frame.into_data() else { continue };
                    let out = this.scrub.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Poll::Ready(None) => {
                    let rest = this.scrub.finish();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
            }
        }
    }
}
