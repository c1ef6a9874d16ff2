//! What the adapter declared it does not do, held against each item it yields: the
//! driver refuses an event or a pause of a kind the descriptor declares unusable.

use crate::action::{ActionKind, ActionRequest};
use crate::capability::{CapabilityKey, CapabilityReport, SupportLevel};
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::Content;
use crate::id::AdapterId;

/// The levels of the capabilities an item can break, copied out of the report once per
/// execution, so the check per item is a `match` and a comparison.
#[derive(Debug, Clone, Copy)]
pub(super) struct Declared {
    reasoning: SupportLevel,
    usage: SupportLevel,
    form_input: SupportLevel,
    tool_approval: SupportLevel,
    multi_tool: SupportLevel,
}

impl Declared {
    pub(super) fn of(report: &CapabilityReport) -> Self {
        Self {
            reasoning: report.level(CapabilityKey::StreamReasoning),
            usage: report.level(CapabilityKey::StreamUsage),
            form_input: report.level(CapabilityKey::InterruptFormInput),
            tool_approval: report.level(CapabilityKey::InterruptToolApproval),
            multi_tool: report.level(CapabilityKey::InterruptMultiTool),
        }
    }

    /// `Err` when `content` is of a kind the adapter declared unusable.
    #[inline]
    pub(super) fn content(
        &self,
        content: &Content,
        adapter: &AdapterId,
    ) -> Result<(), HarnessError> {
        match content {
            Content::ReasoningDelta(_) if !self.reasoning.is_usable() => Err(violated(
                adapter,
                "`reasoning.delta`",
                CapabilityKey::StreamReasoning,
                self.reasoning,
            )),
            Content::Usage(_) if !self.usage.is_usable() => Err(violated(
                adapter,
                "`usage`",
                CapabilityKey::StreamUsage,
                self.usage,
            )),
            _ => Ok(()),
        }
    }

    /// `Err` when the pause `request` is of a kind the adapter declared unusable.
    pub(super) fn action(
        &self,
        request: &ActionRequest,
        adapter: &AdapterId,
    ) -> Result<(), HarnessError> {
        match &request.kind {
            ActionKind::FormInput(_) if !self.form_input.is_usable() => Err(violated(
                adapter,
                "a pause for form input",
                CapabilityKey::InterruptFormInput,
                self.form_input,
            )),
            ActionKind::ToolApproval(_) if !self.tool_approval.is_usable() => Err(violated(
                adapter,
                "a pause for tool approval",
                CapabilityKey::InterruptToolApproval,
                self.tool_approval,
            )),
            ActionKind::ToolApproval(approval)
                if approval.calls().len() > 1 && !self.multi_tool.is_usable() =>
            {
                Err(violated(
                    adapter,
                    "one approval of several tool calls",
                    CapabilityKey::InterruptMultiTool,
                    self.multi_tool,
                ))
            }
            _ => Ok(()),
        }
    }
}

fn violated(
    adapter: &AdapterId,
    what: &str,
    key: CapabilityKey,
    level: SupportLevel,
) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Protocol,
        format!(
            "adapter `{adapter}` produced {what}, but its descriptor declares `{key}` {level}: \
             an adapter is held to its declaration",
            key = key.as_str(),
            level = level.as_str(),
        ),
    )
    .with_code(ErrorCode::CAPABILITY_VIOLATED)
}
