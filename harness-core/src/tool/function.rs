//! [`FnTool`]: a plain Rust function as a portable tool, its input schema derived from its
//! input type.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{
    BoundedFailure, BoxFuture, InvalidToolSchema, PortableTool, ToolAnnotations, ToolCallContext,
    ToolDescriptor, ToolId, ToolOutcome,
};
use crate::error::ErrorCode;

/// A tool made of an async function `Fn(I, ToolCallContext) -> Result<O, E>`.
///
/// Its input schema is `I`'s JSON Schema (draft 2020-12, derived with `schemars`), so the
/// schema the model, the caller and the validating [`ToolHandle`](super::ToolHandle) see is
/// the type the function receives: derive `Deserialize` and `JsonSchema` on a struct (with
/// `#[serde(deny_unknown_fields)]`, the schema refuses unknown arguments too). `O` is
/// serialized as the call's output; `E`'s `Display` becomes a bounded failure message
/// (`TOOL_FAILED`), so return errors that are safe to show a model.
///
/// ```
/// use std::sync::Arc;
/// use harness_core::id::{ExecutionId, ToolCallId};
/// use harness_core::tool::{FnTool, ToolCallContext, ToolHandle, ToolOutcome};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use serde_json::json;
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct Add {
///     /// The first term.
///     a: i64,
///     /// The second term.
///     b: i64,
/// }
///
/// let add = FnTool::new("math.add".parse()?, "Adds two integers.", |input: Add, _ctx| async move {
///     input.a.checked_add(input.b).ok_or("the sum overflows")
/// })?;
/// assert_eq!(add.descriptor_ref().input_schema()["required"], json!(["a", "b"]));
///
/// let handle = ToolHandle::new(Arc::new(add));
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let ctx = || ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
/// assert_eq!(rt.block_on(handle.invoke(json!({"a": 2, "b": 3}), ctx())), ToolOutcome::Success(json!(5)));
/// let ToolOutcome::Failure(f) = rt.block_on(handle.invoke(json!({"a": i64::MAX, "b": 1}), ctx())) else {
///     panic!()
/// };
/// assert_eq!(f.message(), "the sum overflows");
/// // The schema is the type: an unknown argument never reaches the function.
/// let ToolOutcome::Failure(f) = rt.block_on(handle.invoke(json!({"a": 1, "b": 2, "c": 3}), ctx())) else {
///     panic!()
/// };
/// assert_eq!(f.code().as_str(), "TOOL_ARGUMENTS_INVALID");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FnTool<I, F> {
    descriptor: ToolDescriptor,
    function: F,
    _input: PhantomData<fn(I)>,
}

impl<I, F, Fut, O, E> FnTool<I, F>
where
    I: DeserializeOwned + JsonSchema + 'static,
    F: Fn(I, ToolCallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize,
    E: fmt::Display,
{
    /// The tool `id`, described by `description` (what the model reads to decide to call
    /// it), running `function`.
    ///
    /// # Errors
    /// When `I`'s schema does not describe a JSON object (tool arguments are objects for
    /// every model provider and MCP): derive `JsonSchema` on a struct.
    pub fn new(
        id: ToolId,
        description: impl Into<String>,
        function: F,
    ) -> Result<Self, InvalidToolSchema> {
        let schema = SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<I>();
        let schema = schema.to_value();
        if schema.get("type") != Some(&Value::from("object")) {
            return Err(InvalidToolSchema {
                tool: id,
                reason: "the input type's schema is not a JSON object: tool arguments are \
                         objects, so derive JsonSchema on a struct with named fields"
                    .to_owned(),
            });
        }
        Ok(Self {
            descriptor: ToolDescriptor::new(id, description, schema)?,
            function,
            _input: PhantomData,
        })
    }
}

impl<I, F> FnTool<I, F> {
    /// Sets the tool's annotations (idempotent, side effects), which common policy reads.
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.descriptor = self.descriptor.with_annotations(annotations);
        self
    }

    /// The descriptor (also reachable through [`PortableTool::descriptor`]).
    #[must_use]
    pub fn descriptor_ref(&self) -> &ToolDescriptor {
        &self.descriptor
    }
}

impl<I, F> fmt::Debug for FnTool<I, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("id", &self.descriptor.id().as_str())
            .finish_non_exhaustive()
    }
}

impl<I, F, Fut, O, E> PortableTool for FnTool<I, F>
where
    I: DeserializeOwned + 'static,
    F: Fn(I, ToolCallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize,
    E: fmt::Display,
{
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        // The handle checked the arguments against the schema; serde may still disagree
        // (a schema that says less than the type), which is the caller's input, not a panic.
        let input = match serde_json::from_value::<I>(arguments) {
            Ok(input) => input,
            Err(e) => {
                let failure = BoundedFailure::new(format!(
                    "the arguments of tool `{}` do not fit its input: {e}",
                    self.descriptor.id()
                ))
                .with_code(ErrorCode::TOOL_ARGUMENTS_INVALID);
                return Box::pin(async move { ToolOutcome::Failure(failure) });
            }
        };
        let running = (self.function)(input, ctx);
        let id = self.descriptor.id().clone();
        Box::pin(async move {
            match running.await {
                Ok(output) => match serde_json::to_value(output) {
                    Ok(value) => ToolOutcome::Success(value),
                    Err(e) => ToolOutcome::Failure(BoundedFailure::new(format!(
                        "the output of tool `{id}` could not be encoded as JSON: {e}"
                    ))),
                },
                Err(e) => ToolOutcome::Failure(BoundedFailure::new(e.to_string())),
            }
        })
    }
}
