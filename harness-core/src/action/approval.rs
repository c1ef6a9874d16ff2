use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::violation::violations;
use crate::id::ToolCallId;
use crate::json_schema::CompiledSchema;

use super::violation::SchemaViolation;

// ---------------------------------------------------------------------------------------------
// Tool approval definitions
// ---------------------------------------------------------------------------------------------

/// A decision a caller may take on one tool call.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Run the call as proposed.
    Approve,
    /// Do not run the call.
    Reject,
    /// Run the call with caller-supplied arguments, revalidated against the tool's schema.
    Edit,
}

impl DecisionKind {
    /// Every decision kind.
    pub const ALL: [Self; 3] = [Self::Approve, Self::Reject, Self::Edit];

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Edit => "edit",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call awaiting a decision: the tool, its proposed arguments, its input schema and
/// the decisions allowed.
///
/// The input schema is compiled when the value is built (or deserialized); a schema that is
/// not valid JSON Schema, or that refers to an external document, is refused then, so edited
/// arguments can always be revalidated. By default a call allows `approve` and `reject`;
/// [`allow_edit`](Self::allow_edit) or [`with_allowed`](Self::with_allowed) opt in to more or
/// fewer, because an adapter must only offer what it can honestly resume with.
///
/// ```
/// use harness_core::action::{DecisionKind, ToolCallApproval};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let call = ToolCallApproval::new(
///     "call_1".parse()?, "shell", json!({"cmd": "ls"}),
///     json!({"type": "object", "properties": {"cmd": {"type": "string"}}}),
/// )?;
/// assert!(call.allows(DecisionKind::Approve) && !call.allows(DecisionKind::Edit));
/// assert!(call.validate_arguments(&json!({"cmd": "pwd"})).is_ok());
/// let violations = call.validate_arguments(&json!({"cmd": ["rm"]})).unwrap_err();
/// assert_eq!(violations[0].pointer, "/cmd");
///
/// let err = ToolCallApproval::new("call_2".parse()?, "shell", json!({}), json!({"type": 12}))
///     .unwrap_err();
/// assert!(err.to_string().contains("not a valid JSON Schema"), "{err}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallApproval {
    /// The tool call this decision is about; unique within the approval.
    pub(super) call_id: ToolCallId,
    /// The tool's stable name.
    pub(super) tool: String,
    /// The arguments the agent proposed.
    arguments: Value,
    /// The tool's input JSON Schema; edited arguments must satisfy it.
    input_schema: Value,
    /// The decisions the caller may take on this call: at least one.
    #[schemars(length(min = 1))]
    pub(super) allowed: BTreeSet<DecisionKind>,
    #[serde(skip)]
    compiled: CompiledSchema,
}

impl ToolCallApproval {
    /// A call allowing `approve` and `reject`.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::EmptyToolName`] for a blank tool name and
    /// [`ApprovalDefinitionError::InvalidInputSchema`] for a schema that does not compile.
    pub fn new(
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        input_schema: Value,
    ) -> Result<Self, ApprovalDefinitionError> {
        let tool = tool.into();
        if tool.trim().is_empty() {
            return Err(ApprovalDefinitionError::EmptyToolName { call_id });
        }
        let compiled = match CompiledSchema::compile(&input_schema) {
            Ok(compiled) => compiled,
            Err(reason) => {
                return Err(ApprovalDefinitionError::InvalidInputSchema {
                    call_id,
                    tool,
                    reason,
                });
            }
        };
        Ok(Self {
            call_id,
            tool,
            arguments,
            input_schema,
            allowed: BTreeSet::from([DecisionKind::Approve, DecisionKind::Reject]),
            compiled,
        })
    }

    /// Also allows editing the arguments.
    #[must_use]
    pub fn allow_edit(mut self) -> Self {
        self.allowed.insert(DecisionKind::Edit);
        self
    }

    /// Replaces the allowed decisions.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::NoAllowedDecisions`] when `allowed` is empty.
    pub fn with_allowed(
        mut self,
        allowed: impl IntoIterator<Item = DecisionKind>,
    ) -> Result<Self, ApprovalDefinitionError> {
        let allowed: BTreeSet<_> = allowed.into_iter().collect();
        if allowed.is_empty() {
            return Err(ApprovalDefinitionError::NoAllowedDecisions {
                call_id: self.call_id,
            });
        }
        self.allowed = allowed;
        Ok(self)
    }

    /// The tool call id.
    #[must_use]
    pub fn call_id(&self) -> &ToolCallId {
        &self.call_id
    }

    /// The tool name.
    #[must_use]
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The proposed arguments.
    #[must_use]
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The tool's input schema.
    #[must_use]
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The allowed decisions.
    #[must_use]
    pub fn allowed(&self) -> &BTreeSet<DecisionKind> {
        &self.allowed
    }

    /// Whether `decision` is allowed.
    #[must_use]
    pub fn allows(&self, decision: DecisionKind) -> bool {
        self.allowed.contains(&decision)
    }

    /// Checks `arguments` against the tool's input schema.
    ///
    /// # Errors
    ///
    /// Every violation, with the JSON pointer of the offending value. Messages mask the
    /// submitted values.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), Vec<SchemaViolation>> {
        let violations = violations(&self.compiled, arguments);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

impl fmt::Debug for ToolCallApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCallApproval")
            .field("call_id", &self.call_id)
            .field("tool", &self.tool)
            .field("arguments", &self.arguments)
            .field("input_schema", &self.input_schema)
            .field("allowed", &self.allowed)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallApprovalWire {
    call_id: ToolCallId,
    tool: String,
    arguments: Value,
    input_schema: Value,
    allowed: BTreeSet<DecisionKind>,
}

impl<'de> Deserialize<'de> for ToolCallApproval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = ToolCallApprovalWire::deserialize(d)?;
        Self::new(wire.call_id, wire.tool, wire.arguments, wire.input_schema)
            .and_then(|call| call.with_allowed(wire.allowed))
            .map_err(serde::de::Error::custom)
    }
}

/// A tool approval: one or more tool calls with distinct ids.
///
/// ```
/// use harness_core::action::{ApprovalRequest, ToolCallApproval};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let call = |id: &str| -> Result<ToolCallApproval, Box<dyn std::error::Error>> {
///     Ok(ToolCallApproval::new(id.parse()?, "t", json!({}), json!(true))?)
/// };
/// let approval = ApprovalRequest::new([call("c1")?, call("c2")?])?;
/// assert_eq!(approval.calls().len(), 2);
/// let err = ApprovalRequest::new([call("c1")?, call("c1")?]).unwrap_err();
/// assert_eq!(err.to_string(),
///            "tool call `c1` appears more than once; call ids must be unique within an approval");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The calls awaiting a decision, in the order they were proposed.
    // Shared by clones: a request is copied into the log, the lifecycle and the runtime, and
    // an idle execution holds every copy.
    #[schemars(length(min = 1))]
    pub(super) calls: Arc<[ToolCallApproval]>,
}

impl ApprovalRequest {
    /// An approval of `calls`.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::NoCalls`] when there is no call and
    /// [`ApprovalDefinitionError::DuplicateCall`] when two calls share an id.
    pub fn new(
        calls: impl IntoIterator<Item = ToolCallApproval>,
    ) -> Result<Self, ApprovalDefinitionError> {
        let calls: Vec<_> = calls.into_iter().collect();
        if calls.is_empty() {
            return Err(ApprovalDefinitionError::NoCalls);
        }
        let mut seen = BTreeSet::new();
        for call in &calls {
            if !seen.insert(call.call_id()) {
                return Err(ApprovalDefinitionError::DuplicateCall {
                    call_id: call.call_id.clone(),
                });
            }
        }
        Ok(Self {
            calls: calls.into(),
        })
    }

    /// An approval of one call allowing `approve` and `reject` (see
    /// [`ApprovalRequest::allow_edit`]).
    ///
    /// # Errors
    ///
    /// As [`ToolCallApproval::new`].
    pub fn single(
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        input_schema: Value,
    ) -> Result<Self, ApprovalDefinitionError> {
        Self::new([ToolCallApproval::new(
            call_id,
            tool,
            arguments,
            input_schema,
        )?])
    }

    /// Allows editing the arguments of every call.
    #[must_use]
    pub fn allow_edit(mut self) -> Self {
        let mut calls = self.calls.to_vec();
        for call in &mut calls {
            call.allowed.insert(DecisionKind::Edit);
        }
        self.calls = calls.into();
        self
    }

    /// The calls, in proposal order.
    #[must_use]
    pub fn calls(&self) -> &[ToolCallApproval] {
        &self.calls
    }

    /// The call with id `call_id`.
    #[must_use]
    pub fn call(&self, call_id: &ToolCallId) -> Option<&ToolCallApproval> {
        self.calls.iter().find(|c| &c.call_id == call_id)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalRequestWire {
    calls: Vec<ToolCallApproval>,
}

impl<'de> Deserialize<'de> for ApprovalRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = ApprovalRequestWire::deserialize(d)?;
        Self::new(wire.calls).map_err(serde::de::Error::custom)
    }
}

/// A tool approval definition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalDefinitionError {
    /// The approval lists no call.
    #[error("a tool approval needs at least one tool call")]
    NoCalls,
    /// Two calls share an id.
    #[error(
        "tool call `{call_id}` appears more than once; call ids must be unique within an approval"
    )]
    DuplicateCall {
        /// The repeated id.
        call_id: ToolCallId,
    },
    /// The tool name is blank.
    #[error("tool call `{call_id}` has a blank tool name; name the tool being called")]
    EmptyToolName {
        /// The call.
        call_id: ToolCallId,
    },
    /// The call allows no decision at all.
    #[error(
        "tool call `{call_id}` allows no decision; allow at least one of approve, reject, edit"
    )]
    NoAllowedDecisions {
        /// The call.
        call_id: ToolCallId,
    },
    /// The tool's input schema does not compile.
    #[error(
        "tool call `{call_id}` (`{tool}`): the input schema is not a valid JSON Schema: {reason}"
    )]
    InvalidInputSchema {
        /// The call.
        call_id: ToolCallId,
        /// The tool.
        tool: String,
        /// Why the schema was refused.
        reason: String,
    },
}
