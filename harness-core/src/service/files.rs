//! The service's input files: where uploaded ones come from, the operator's limits, and the
//! check run at start (see [`crate::file`]).

use std::sync::Arc;

use super::{AdapterService, AdapterServiceBuilder, ExecutionRequest};
use crate::adapter::HarnessAdapter;
use crate::error::HarnessError;
use crate::file::{FileLimits, FileWorkspace, ValidatedInputFile};
use crate::id::CallerId;
use crate::manifest::Describe;

/// What the builder collects about files.
#[derive(Clone, Default)]
pub(super) struct FileSettings {
    workspace: Option<Arc<dyn FileWorkspace>>,
    limits: FileLimits,
}

impl<A: HarnessAdapter, L> AdapterServiceBuilder<A, L> {
    /// Where the service finds uploaded files a request names by id (`{"fileId": ...}`),
    /// in the request's caller's scope. Without one, such a request is refused
    /// `FILE_NOT_FOUND`; inline files need none.
    pub fn files(mut self, workspace: Arc<dyn FileWorkspace>) -> Self {
        self.files.workspace = Some(workspace);
        self
    }

    /// The operator's limits on a request's input files ([`FileLimits::default`] unless
    /// set).
    pub fn file_limits(mut self, limits: FileLimits) -> Self {
        self.files.limits = limits;
        self
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// The request's files, resolved in its caller's scope, validated against the
    /// operator's limits and checked against what the adapter's descriptor takes.
    pub(super) async fn validated_files(
        &self,
        request: &ExecutionRequest,
    ) -> Result<Vec<ValidatedInputFile>, HarnessError> {
        if request.files.is_empty() {
            return Ok(Vec::new());
        }
        let settings = &self.inner.files;
        let files = crate::file::validate(
            &request.files,
            &CallerId::of(request),
            settings.workspace.as_deref(),
            &settings.limits,
        )
        .await?;
        let descriptor = self.inner.adapter.descriptor();
        crate::file::check_modalities(descriptor.id().as_str(), descriptor.capabilities(), &files)?;
        Ok(files)
    }
}
