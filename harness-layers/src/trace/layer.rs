use tower::Layer;

use super::Trace;

/// Wraps a service in [`Trace`]. Configuration only (there is none yet); cheap to clone.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer {
    _priv: (),
}

impl TraceLayer {
    /// A tracing layer.
    #[must_use]
    pub const fn new() -> Self {
        Self { _priv: () }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Trace::new(inner)
    }
}
