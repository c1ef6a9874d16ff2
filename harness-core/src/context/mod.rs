//! The parts of an execution's construction context and turn input that the operator
//! configures per instance and the caller picks or fills per request, narrowed by the
//! engine before the adapter sees them:
//!
//! | what | operator (per instance) | caller (per request) | adapter receives |
//! |---|---|---|---|
//! | [`ModelSelection`] | [`ModelPolicy`]: the models a caller may choose, and the default | `model` | [`AgentConfig::model`](crate::adapter::AgentConfig::model) |
//! | [`RenderedPrompt`] | [`PromptTemplate`]: the instance prompt, with named parameters | `promptParameters` | [`RuntimeContext::prompt`](crate::adapter::RuntimeContext::prompt) |
//! | [`InterruptPolicy`] | | `interruptPolicy`: the pauses permitted, an answer deadline | [`RuntimeContext::interrupt_policy`](crate::adapter::RuntimeContext::interrupt_policy) |
//! | [`SafeUserContext`] | [`UserProjection`]: the id key, what passes per principal | (its principal) | [`TurnInput::user`](crate::adapter::TurnInput::user) |
//!
//! The service checks the request's part of each before anything is recorded or runs
//! (`MODEL_NOT_ALLOWED`, `PROMPT_PARAMETER_INVALID`, `configuration`), and its driver
//! enforces the interrupt policy whatever the adapter does (`INTERRUPT_FORBIDDEN`,
//! `ACTION_EXPIRED`). See [`AdapterServiceBuilder::models`](crate::service::AdapterServiceBuilder::models),
//! [`prompt`](crate::service::AdapterServiceBuilder::prompt) and
//! [`users`](crate::service::AdapterServiceBuilder::users).

mod interrupt;
mod model;
mod prompt;
mod user;

pub use self::interrupt::{InterruptPolicy, MAX_ANSWER_WITHIN};
pub use self::model::{ModelPolicy, ModelSelection};
pub use self::prompt::{
    MAX_RENDERED_BYTES, MAX_TEMPLATE_BYTES, MAX_VALUE_BYTES, ParameterSpec, PromptConfig,
    PromptTemplate, RenderedPrompt,
};
pub use self::user::{SafeUserContext, UserIdKey, UserProjection};
