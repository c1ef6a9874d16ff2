//! Serve the Prometheus exposition of the harness metrics.
//!
//! ```no_run
//! use harness_observe::prometheus::PrometheusExporter;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), harness_observe::prometheus::ExportError> {
//! // Inside a Tokio runtime, once, at start-up (it installs the global `metrics` recorder):
//! let endpoint = PrometheusExporter::new() // 127.0.0.1:9464 unless told otherwise
//!     .install()?;
//! println!("serving /metrics on http://{}/metrics", endpoint.address().unwrap());
//! // ... run executions through a HarnessStack: they are counted ...
//! let text = endpoint.render(); // the same exposition, as text
//! # Ok(())
//! # }
//! ```
//!
//! [`PrometheusExporter::install`] is the only place in this crate that installs a recorder:
//! libraries emit through the `metrics` macros and never install one; the application
//! calls this once. It
//!
//! 1. builds a `metrics-exporter-prometheus` recorder whose two histograms use the catalog's
//!    buckets ([`EXECUTION_DURATION_BUCKETS`](names::EXECUTION_DURATION_BUCKETS), from 5 ms to
//!    an hour, and [`TIME_TO_FIRST_EVENT_BUCKETS`](names::TIME_TO_FIRST_EVENT_BUCKETS), from
//!    1 ms to five minutes), set per metric, so they are real Prometheus histograms (`_bucket`,
//!    `_sum`, `_count`) rather than summaries;
//! 2. binds the HTTP listener (loopback, [`DEFAULT_ADDRESS`], unless
//!    [`listen_on`](PrometheusExporter::listen_on) says otherwise; binding fails here, not
//!    later) and spawns it on the current Tokio runtime; it answers `GET` on any path with the
//!    exposition;
//! 3. installs the recorder globally and describes every metric of
//!    [`harness_layers::metrics::names::CATALOG`] and [`crate::names::CATALOG`] (help and
//!    unit), so the exposition carries `# HELP` and `# TYPE` lines.
//!
//! Listening on a non-loopback address exposes execution counts to whoever can reach it; put
//! it behind the network policy you use for other internal endpoints.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use harness_layers::metrics::names;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// The default listener address: `127.0.0.1:9464` (loopback; 9464 is the port commonly used
/// for an application's Prometheus exporter).
pub const DEFAULT_ADDRESS: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

/// How often the recorder's upkeep runs (the exporter's own default).
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Why [`PrometheusExporter::install`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// `install` was called with a listener outside a Tokio runtime (the listener runs on
    /// it).
    #[error("the Prometheus exporter must be installed from within a Tokio runtime")]
    NoRuntime,
    /// The exporter could not be built: the listener could not bind, invalid buckets, or a
    /// global recorder was already installed.
    #[error("the Prometheus exporter could not be installed: {0}")]
    Build(#[from] BuildError),
}

/// Builds and installs the Prometheus exporter; see the [module docs](self).
#[derive(Debug, Clone)]
#[must_use]
pub struct PrometheusExporter {
    address: Option<SocketAddr>,
}

impl Default for PrometheusExporter {
    fn default() -> Self {
        Self::new()
    }
}

impl PrometheusExporter {
    /// An exporter listening on [`DEFAULT_ADDRESS`].
    pub const fn new() -> Self {
        Self {
            address: Some(DEFAULT_ADDRESS),
        }
    }

    /// Listens on `address` instead (port 0 is not supported: the listener does not report
    /// the port it got).
    pub const fn listen_on(mut self, address: SocketAddr) -> Self {
        self.address = Some(address);
        self
    }

    /// Serves nothing: the application renders the exposition itself with
    /// [`PrometheusEndpoint::render`] (behind its own HTTP server, for instance).
    pub const fn without_listener(mut self) -> Self {
        self.address = None;
        self
    }

    /// The `metrics-exporter-prometheus` builder this exporter configures: the catalog's
    /// histogram buckets and the listener. For applications that install the recorder their
    /// own way (a fan-out of recorders, say).
    ///
    /// # Errors
    /// When the exporter refuses the buckets (never for the catalog's).
    pub fn builder(&self) -> Result<PrometheusBuilder, BuildError> {
        let mut builder = PrometheusBuilder::new();
        for def in names::CATALOG {
            if let Some(buckets) = def.buckets {
                builder =
                    builder.set_buckets_for_metric(Matcher::Full(def.name.into()), buckets)?;
            }
        }
        if let Some(address) = self.address {
            builder = builder.with_http_listener(address);
        }
        Ok(builder)
    }

    /// Installs the exporter: the global recorder and, unless
    /// [`without_listener`](Self::without_listener), the HTTP listener on the current Tokio
    /// runtime. Call it once, early. Within a Tokio runtime, a task runs the recorder's
    /// upkeep (draining histogram samples) every five seconds; without one (only possible
    /// without a listener), rendering drains them.
    ///
    /// # Errors
    /// With a listener, outside a Tokio runtime; when the listener cannot bind; when a global
    /// recorder is already installed.
    pub fn install(self) -> Result<PrometheusEndpoint, ExportError> {
        let runtime = tokio::runtime::Handle::try_current();
        let builder = self.builder()?;
        let handle = match self.address {
            Some(_) => {
                let runtime = runtime.map_err(|_| ExportError::NoRuntime)?;
                // `build` binds the listener and spawns the recorder's upkeep task.
                let (recorder, exporter) = {
                    let _entered = runtime.enter();
                    builder.build()?
                };
                let handle = recorder.handle();
                metrics::set_global_recorder(recorder).map_err(BuildError::from)?;
                runtime.spawn(exporter);
                handle
            }
            None => {
                let handle = builder.install_recorder()?;
                if let Ok(runtime) = runtime {
                    let upkeep = handle.clone();
                    runtime.spawn(async move {
                        loop {
                            tokio::time::sleep(UPKEEP_INTERVAL).await;
                            upkeep.run_upkeep();
                        }
                    });
                }
                handle
            }
        };
        names::describe();
        crate::names::describe();
        Ok(PrometheusEndpoint {
            handle,
            address: self.address,
        })
    }
}

/// The installed exporter: where it listens, and the exposition as text.
#[derive(Debug, Clone)]
pub struct PrometheusEndpoint {
    handle: PrometheusHandle,
    address: Option<SocketAddr>,
}

impl PrometheusEndpoint {
    /// The address the listener is bound to, if any.
    #[must_use]
    pub const fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// The exposition, exactly as the listener serves it (text format 0.0.4).
    #[must_use]
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// The underlying `metrics-exporter-prometheus` handle.
    #[must_use]
    pub const fn handle(&self) -> &PrometheusHandle {
        &self.handle
    }
}
