//! The service's skills: the operator's catalog, and the grant made at start (see
//! [`crate::skill`]).

use std::sync::Arc;

use super::{AdapterService, AdapterServiceBuilder, ExecutionRequest};
use crate::adapter::HarnessAdapter;
use crate::capability::{CapabilityKey, Requirement};
use crate::error::HarnessError;
use crate::id::CallerId;
use crate::skill::{SkillCatalog, SkillManifest};

impl<A: HarnessAdapter, L> AdapterServiceBuilder<A, L> {
    /// The skills this service offers, to whom, and what it blocks. Without a catalog a
    /// request that asks for a skill is refused `SKILL_NOT_FOUND` (or
    /// `CAPABILITY_UNSUPPORTED` first, for an adapter whose `skills` is not usable).
    pub fn skills(mut self, catalog: Arc<SkillCatalog>) -> Self {
        self.skills = Some(catalog);
        self
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// The request's required capabilities, with `skills` when it asks for skills.
    pub(super) fn required_with_skills(&self, request: &ExecutionRequest) -> Vec<Requirement> {
        let mut required = request.required_capabilities.clone();
        if !request.skills.is_empty()
            && !required
                .iter()
                .any(|r| r.capability() == CapabilityKey::Skills)
        {
            required.push(Requirement::new(CapabilityKey::Skills));
        }
        required
    }

    /// The skills the request asks for, granted for its caller by the operator's catalog.
    pub(super) fn granted_skills(
        &self,
        request: &ExecutionRequest,
    ) -> Result<SkillManifest, HarnessError> {
        if request.skills.is_empty() {
            return Ok(SkillManifest::default());
        }
        let none = SkillCatalog::new();
        self.inner
            .skills
            .as_deref()
            .unwrap_or(&none)
            .grant(&CallerId::of(request), &request.skills)
    }
}
