//! A worker in a task of this process, for certification.

use std::fmt;
use std::sync::Arc;

use harness_core::adapter::{
    AgentConfig, BoxFuture, DeploymentContext, HarnessAdapter, HarnessHealth, HarnessRuntime,
    RuntimeContext,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::HarnessError;
use harness_core::manifest::{Describe, HarnessDescriptor};

use super::{WorkerLink, WorkerOptions, WorkerRuntime, serve};

/// An adapter whose runtimes are each hosted by a worker in a task of this process, over
/// the protocol on an in-memory link: `A`'s descriptor, health and evaluation, and `A`'s
/// runtimes behind a [`WorkerRuntime`].
///
/// For certifying that an adapter's runtime keeps its contract through the protocol (run
/// the conformance suite on `InProcessWorker<A>`), without a sandbox; a deployment hosts
/// its workers in sandboxes.
///
/// ```
/// use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
/// use harness_sandbox::worker::InProcessWorker;
/// use harness_scripted::{Script, ScriptedAdapter};
/// use tower::ServiceExt;
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let script = Script::builder().text("hello from the worker").complete("done").build();
/// let adapter = InProcessWorker::new(ScriptedAdapter::new(script));
/// let execution = AdapterService::new(adapter).oneshot(ExecutionRequest::new("hi")).await.unwrap();
/// let Outcome::Succeeded(done) = execution.outcome().await else { panic!("it failed") };
/// assert_eq!(done.summary.as_deref(), Some("done"));
/// # });
/// ```
pub struct InProcessWorker<A> {
    inner: Arc<A>,
    options: WorkerOptions,
}

impl<A> fmt::Debug for InProcessWorker<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessWorker").finish_non_exhaustive()
    }
}

impl<A> Clone for InProcessWorker<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            options: self.options.clone(),
        }
    }
}

impl<A: HarnessAdapter> InProcessWorker<A> {
    /// `adapter`, its runtimes hosted by in-process workers with the default options.
    pub fn new(adapter: A) -> Self {
        Self {
            inner: Arc::new(adapter),
            options: WorkerOptions::default(),
        }
    }

    /// With these options for the control plane's end.
    #[must_use]
    pub fn with_options(mut self, options: WorkerOptions) -> Self {
        self.options = options;
        self
    }
}

impl<A: HarnessAdapter> Describe for InProcessWorker<A> {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.inner.descriptor()
    }
}

impl<A: HarnessAdapter> HarnessAdapter for InProcessWorker<A> {
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        self.inner.health()
    }

    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.inner.evaluate(config, deployment)
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        Box::pin(async move {
            let (control, worker) = tokio::io::duplex(64 << 10);
            let (worker_reader, worker_writer) = tokio::io::split(worker);
            let inner: Arc<dyn HarnessAdapter> = self.inner.clone();
            let task = tokio::spawn(async move {
                let hosted = serve(worker_reader, worker_writer, Box::new(move |_| Ok(inner)));
                if let Err(e) = hosted.await {
                    tracing::debug!(error = ?e, "in-process worker ended");
                }
            });
            let abort = task.abort_handle();
            let (reader, writer) = tokio::io::split(control);
            let link = WorkerLink::new(reader, writer, move || abort.abort());
            let runtime = WorkerRuntime::start(
                link,
                &context,
                serde_json::Value::Null,
                self.options.clone(),
            )
            .await?;
            Ok(Box::new(runtime) as Box<dyn HarnessRuntime>)
        })
    }
}
