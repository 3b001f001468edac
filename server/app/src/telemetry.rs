//! `serve --otlp-endpoint`: the spans of turns, model calls, tool calls, approval waits and
//! compactions (target [`outboard_base::spans::TARGET`]) exported over OTLP/HTTP with protobuf,
//! through `tracing`'s OpenTelemetry layer and the SDK's batch span processor. Nothing here is
//! built unless an endpoint is configured: without one, `main` installs the log subscriber alone,
//! whose filter turns the spans' target off, and every span is a disabled callsite.
//!
//! The endpoint is `--otlp-endpoint` (a collector's base URL, to which `/v1/traces` is added,
//! as the SDK does with `OTEL_EXPORTER_OTLP_ENDPOINT`), or else the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, which the SDK reads
//! itself, as it reads `OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT` and `_COMPRESSION` (none is
//! compiled in: an endpoint asking for one fails the start) and `OTEL_SERVICE_NAME` /
//! `OTEL_RESOURCE_ATTRIBUTES`. The protocol is always `http/protobuf`.
//!
//! The batch processor runs on a thread of its own and holds at most [`SPAN_QUEUE_CAPACITY`]
//! finished spans; when the collector is slower than the server, a span that finds the queue
//! full is dropped (the SDK warns at the first drop and counts them all at shutdown) — a turn
//! never waits for the collector. [`Telemetry::shutdown`] exports what is queued before the
//! process exits.
//!
//! The HTTP client is the reqwest 0.13 that the MCP client already builds, on rustls with the
//! ring provider and the webpki roots (no third TLS stack, no blocking client with a runtime of
//! its own). The processor's thread drives the export future without a runtime, so each request
//! is spawned on the server's runtime ([`OnRuntime`]).

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Finished spans waiting for export, at most. A turn makes a few spans per step (the model
/// call, each tool call), so 2,048 (the SDK's default) holds minutes of a busy server's turns
/// between two exports (every 5 s) while the collector is slow or away; past it, spans are
/// dropped rather than held in memory or waited for.
pub const SPAN_QUEUE_CAPACITY: usize = 2048;

/// How long one export request may take (the OTLP default), so a collector that accepts the
/// connection and never answers does not hold the processor's thread.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variables that turn the export on without `--otlp-endpoint`.
const ENDPOINT_VARIABLES: [&str; 2] =
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The TLS configuration of the exporter's HTTP client.
    #[error("cannot set up TLS for the OTLP exporter: {0}")]
    Tls(#[from] rustls::Error),
    /// The HTTP client.
    #[error("cannot build the OTLP exporter's HTTP client: {0}")]
    Client(#[from] reqwest013::Error),
    /// `--otlp-endpoint` is not an HTTP URL (not echoed: a URL may carry a password).
    #[error("--otlp-endpoint must be a collector's http:// or https:// base URL")]
    Endpoint,
    /// The collector is clear-text `http://` off loopback and `--insecure` was not given (the
    /// URL is not echoed: it may carry a password).
    #[error(
        "refusing to export traces over clear-text http:// to a collector that is not on \
         loopback: the spans and the collector's key (OTEL_EXPORTER_OTLP_HEADERS) would cross the \
         network readable. Give the collector's https:// URL, run it on this host (127.0.0.1), or \
         pass --insecure"
    )]
    Cleartext,
    /// The exporter refused its configuration (a bad URL, an unknown compression…).
    #[error(
        "cannot set up the OTLP exporter: {0}; check --otlp-endpoint and the OTEL_EXPORTER_OTLP_* \
         variables"
    )]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Whether spans are exported: `--otlp-endpoint` was given, or one of the standard endpoint
/// variables is set (and not empty).
pub fn wanted(endpoint: Option<&str>) -> bool {
    endpoint.is_some()
        || ENDPOINT_VARIABLES.iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// The collector's URL the export goes to: `--otlp-endpoint`, else the standard variables in
/// the order the SDK reads them (not empty).
fn effective_endpoint(endpoint: Option<&str>) -> Option<String> {
    endpoint.map(str::to_owned).or_else(|| {
        ENDPOINT_VARIABLES
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
    })
}

/// Whether `url` is clear-text `http://` to a host that is not loopback (`localhost`,
/// `127.0.0.0/8`, `[::1]`): the rule `serve --listen` and the client's tokens follow.
pub fn cleartext_off_loopback(url: &str) -> bool {
    let url = url.trim();
    let Some(rest) = url.get(..7).filter(|s| s.eq_ignore_ascii_case("http://")).map(|_| &url[7..])
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // A password in the URL is not the host.
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    !loopback
}

/// `--otlp-endpoint`'s base URL as the traces URL: `/v1/traces` added, as the SDK adds it to
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The exporting tracer provider; dropped without [`Telemetry::shutdown`], queued spans are lost.
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// The collector is clear-text `http://` off loopback (allowed by `--insecure`).
    cleartext: bool,
}

impl Telemetry {
    /// Sets up the exporter to `endpoint` (a base URL; `None`: the standard variables), its
    /// requests run on `runtime`. A clear-text collector off loopback is refused unless
    /// `insecure` (`serve --insecure`).
    pub fn start(
        endpoint: Option<&str>,
        insecure: bool,
        runtime: tokio::runtime::Handle,
    ) -> Result<Telemetry, TelemetryError> {
        if endpoint.is_some_and(|url| !url.starts_with("http://") && !url.starts_with("https://")) {
            return Err(TelemetryError::Endpoint);
        }
        let cleartext =
            effective_endpoint(endpoint).is_some_and(|url| cleartext_off_loopback(&url));
        if cleartext && !insecure {
            return Err(TelemetryError::Cleartext);
        }
        let client = OnRuntime { client: http_client()?, runtime };
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary);
        if let Some(base) = endpoint {
            exporter = exporter.with_endpoint(traces_url(base));
        }
        let processor = batch_processor(exporter.build()?, SPAN_QUEUE_CAPACITY);
        let resource = opentelemetry_sdk::Resource::builder().with_service_name("outboard-server");
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build();
        Ok(Telemetry { provider, cleartext })
    }

    /// Whether the spans go over clear-text `http://` off loopback (`--insecure` allowed it);
    /// `serve` warns once its log is set up.
    pub fn cleartext(&self) -> bool {
        self.cleartext
    }

    /// The layer that turns the spans of [`outboard_base::spans::TARGET`] into OpenTelemetry
    /// spans, and nothing else the process traces or logs (no log line becomes a span event).
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let tracer = self.provider.tracer("outboard");
        let only_ours = Targets::new().with_target(outboard_base::spans::TARGET, LevelFilter::INFO);
        tracing_opentelemetry::layer().with_tracer(tracer).with_filter(only_ours)
    }

    /// Exports the spans still queued and stops the processor; blocks until it is done (at most
    /// the export's timeout). Must run while the runtime given to [`Telemetry::start`] runs,
    /// outside it (the export's request is spawned there).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("the last spans may not have reached the OTLP collector: {e}");
        }
    }
}

/// The batch processor with a queue of `capacity` spans.
fn batch_processor<E>(exporter: E, capacity: usize) -> BatchSpanProcessor
where
    E: opentelemetry_sdk::trace::SpanExporter + 'static,
{
    let config = BatchConfigBuilder::default().with_max_queue_size(capacity).build();
    BatchSpanProcessor::builder(exporter).with_batch_config(config).build()
}

/// rustls on the ring provider with the webpki roots, no redirects (the exporter's headers may
/// hold a collector's key), each request at most [`REQUEST_TIMEOUT`].
fn http_client() -> Result<reqwest013::Client, TelemetryError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(reqwest013::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest013::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()?)
}

/// The exporter's HTTP client: reqwest's, each request spawned on the server's runtime. The
/// batch processor polls the export on its own thread, where reqwest's connections (tokio
/// sockets, hyper's spawned connection tasks) would find no runtime.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest013::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime.spawn(async move { client.send_bytes(request).await }).await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::Tracer as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Instant;

    #[test]
    fn the_endpoint_is_a_base_url_like_the_standard_variable() {
        assert_eq!(traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("https://otel.example/"), "https://otel.example/v1/traces");
    }

    #[tokio::test]
    async fn an_endpoint_that_is_not_an_http_url_fails_the_start() {
        let runtime = tokio::runtime::Handle::current();
        for bad in ["collector:4318", "grpc://collector:4317", "/v1/traces"] {
            let started = Telemetry::start(Some(bad), false, runtime.clone());
            assert!(matches!(started, Err(TelemetryError::Endpoint)), "{bad}");
        }
        let good = Telemetry::start(Some("http://127.0.0.1:4318"), false, runtime).unwrap();
        good.provider.shutdown().unwrap();
    }

    #[tokio::test]
    async fn a_cleartext_collector_off_loopback_needs_insecure() {
        let runtime = tokio::runtime::Handle::current();
        for off in [
            "http://collector.example:4318",
            "http://10.0.0.5:4318/",
            "http://user:pw@192.0.2.1",
            "http://[2001:db8::1]:4318",
            "http://127.0.0.1.example",
        ] {
            assert!(cleartext_off_loopback(off), "{off}");
            let refused = Telemetry::start(Some(off), false, runtime.clone());
            let Err(e) = refused else { panic!("{off} was accepted without --insecure") };
            assert!(matches!(e, TelemetryError::Cleartext), "{off}: {e}");
            assert!(!e.to_string().contains("pw"), "{e}");
            let allowed = Telemetry::start(Some(off), true, runtime.clone()).unwrap();
            allowed.provider.shutdown().unwrap();
        }
        // The variables are the SDK's, which takes the scheme in any case.
        assert!(cleartext_off_loopback("HTTP://10.0.0.5:4318"));
        for fine in [
            "http://127.0.0.1:4318",
            "http://localhost:4318",
            "http://[::1]:4318",
            "http://x:y@127.0.0.2",
            "https://collector.example",
        ] {
            assert!(!cleartext_off_loopback(fine), "{fine}");
        }
    }

    /// An exporter whose first export waits until the test lets it go (at most `stall`), and
    /// which counts what it is given.
    #[derive(Debug)]
    struct Stalled {
        release: Mutex<mpsc::Receiver<()>>,
        stall: Duration,
        exported: Arc<AtomicUsize>,
    }

    impl SpanExporter for Stalled {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Ok(release) = self.release.lock() {
                let _ = release.recv_timeout(self.stall);
            }
            self.exported.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    /// With the collector stalled, spans past the queue's capacity are dropped and ending a span
    /// never waits: the emitting side finishes long before the export is let go, and after it
    /// only what the queue (and the batch in flight) held is exported.
    #[test]
    fn a_full_queue_drops_spans_and_never_blocks_the_turn() {
        let stall = Duration::from_secs(20);
        let (let_go, release) = mpsc::channel();
        let exported = Arc::new(AtomicUsize::new(0));
        let exporter =
            Stalled { release: Mutex::new(release), stall, exported: Arc::clone(&exported) };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch_processor(exporter, SPAN_QUEUE_CAPACITY))
            .build();
        let tracer = provider.tracer("test");
        let emitted = SPAN_QUEUE_CAPACITY * 4;
        let started = Instant::now();
        for _ in 0..emitted {
            tracer.in_span("turn", |_| {});
        }
        let took = started.elapsed();
        assert!(took < stall / 4, "ending {emitted} spans took {took:?}: it waited for export");
        // Every export from now on returns at once.
        drop(let_go);
        provider.shutdown().unwrap();
        let exported = exported.load(Ordering::SeqCst);
        // The queue's spans, and at most one batch the processor had taken before it stalled.
        let batch = 512;
        assert!(exported >= SPAN_QUEUE_CAPACITY, "only {exported} exported");
        assert!(
            exported <= SPAN_QUEUE_CAPACITY + batch,
            "{exported} of {emitted} exported: the queue held more than {SPAN_QUEUE_CAPACITY}"
        );
    }
}
