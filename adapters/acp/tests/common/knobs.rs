//! The conformance suite's knobs for the ACP adapter, driven by our own scriptable agent (the
//! `acp-test-agent` binary of this package): shared by `tests/conformance.rs` (agents as
//! plain child processes) and `tests/conformance_sandbox.rs` (every agent in a sandbox).

use std::time::Duration;

use harness_acp::{AcpAdapter, AcpAgent, AcpOptions};
use harness_conformance::{Behaviour, Bounds, Knobs};
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;
use harness_sandbox::{Sandbox, SandboxLimits, SandboxProfile};

/// The knobs. The operator's side of the adapter registers one agent per behaviour (the test
/// agent in that mode); a request picks it by name, as any caller would. Every turn of the
/// suite's conversations runs the `conversations` agent (`echo`) in one workspace (it keeps
/// each session's history there, and `session/load` reads it back), so that a recall depends
/// only on the conversation the suite sets. `crash`, `auth` and `emit` repeat the prompt
/// text: a request for a diagnostic or a secret carries it as its message.
pub struct AcpKnobs {
    conversations: std::path::PathBuf,
    workspace: std::path::PathBuf,
    /// Every agent runs in this sandbox, when set; `escape` is offered then only.
    sandbox: Option<Sandbox>,
    /// With its ACP client hosted by `acp-sandbox-worker` in the sandbox.
    hosted: bool,
}

/// The test agent's modes the knobs offer, by agent name (the same).
const MODES: [&str; 19] = [
    "text",
    "panic",
    "slow-session",
    "reasoning",
    "tool",
    "tool-error",
    "approval",
    "elicit",
    "hang",
    "crash",
    "auth",
    "slow-init",
    "approval-hang",
    "sequential",
    "trace",
    "emit",
    "escape",
    "malformed",
    "skills",
];

impl AcpKnobs {
    /// Agents as plain child processes.
    pub fn new() -> Self {
        Self {
            conversations: super::workspace(&super::marker("conformance-conversations")),
            workspace: super::workspace(&super::marker("conformance")),
            sandbox: None,
            hosted: false,
        }
    }

    /// Every agent in a bubblewrap sandbox of the strict profile, with a process limit a fork
    /// bomb reaches fast.
    pub fn sandboxed() -> Self {
        let mut limits = SandboxLimits::default();
        limits.processes = 64;
        let profile = SandboxProfile::default().limits(limits);
        Self {
            sandbox: Some(Sandbox::new(profile).expect("bwrap is installed")),
            ..Self::new()
        }
    }

    /// As [`sandboxed`](Self::sandboxed), each agent's ACP client hosted by a worker in the
    /// sandbox with it (the Sandbox Worker Protocol v1).
    pub fn hosted() -> Self {
        Self {
            hosted: true,
            ..Self::sandboxed()
        }
    }

    fn agent(&self, mode: &str, workspace: &std::path::Path) -> AcpAgent {
        let agent = agent(mode, workspace);
        match &self.sandbox {
            Some(sandbox) if self.hosted => agent
                .in_sandbox(sandbox.clone())
                .hosted_by_worker(env!("CARGO_BIN_EXE_acp-sandbox-worker")),
            Some(sandbox) => agent.in_sandbox(sandbox.clone()),
            None => agent,
        }
    }
}

/// The test agent asks for forms and echoes the trace context it is sent: the operator
/// vouches for both.
pub fn agent(mode: &str, workspace: &std::path::Path) -> AcpAgent {
    AcpAgent::new([env!("CARGO_BIN_EXE_acp-test-agent"), mode], workspace)
        .with_cancel_grace(Duration::from_millis(500))
        .with_elicitation()
        .with_trace_context()
        .with_skills_dir(harness_acp::CLAUDE_SKILLS_DIR)
}

pub fn request(agent: &str, message: &str) -> ExecutionRequest {
    ExecutionRequest::new(message).with_options(AcpOptions::named(agent).to_value())
}

impl Knobs for AcpKnobs {
    type Adapter = AcpAdapter;

    /// The default agent is `echo`, which advertises `loadSession`: the configuration the
    /// capability gate evaluates (the plain request's) then offers `session.multi_turn`.
    fn adapter(&self) -> AcpAdapter {
        let adapter = AcpAdapter::new(self.agent("echo", &self.workspace))
            .and_then(|adapter| {
                adapter.with_agent("conversations", self.agent("echo", &self.conversations))
            })
            .expect("valid agents");
        MODES
            .iter()
            .try_fold(adapter, |adapter, mode| {
                adapter.with_agent(*mode, self.agent(mode, &self.workspace))
            })
            .expect("valid agents")
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        Some(match behaviour {
            // `echo` answers `turn <n>: <prompt>`, and a prompt starting with `recall` with the
            // session's earlier prompts; the conversation's later turns reopen its session.
            Behaviour::Remember { marker } => {
                request("conversations", &format!("remember {marker}"))
            }
            Behaviour::Recall => request("conversations", "recall"),
            Behaviour::Fail {
                category: ErrorCategory::Unavailable,
                diagnostic,
            } => request("crash", diagnostic),
            Behaviour::Fail {
                category: ErrorCategory::Authentication,
                diagnostic,
            } => request("auth", diagnostic),
            Behaviour::EmitSecret { secret } => request("emit", secret),
            // The agent process panics mid-turn, the message in its panic on stderr.
            Behaviour::Panic { message } => request("panic", message),
            // Hostile work runs only where a sandbox holds it.
            Behaviour::Escape { .. } | Behaviour::ForkBomb if self.sandbox.is_none() => {
                return None;
            }
            escape @ Behaviour::Escape { .. } => {
                request("escape", &escape.escape_probes().join(" "))
            }
            Behaviour::ForkBomb => request("escape", "bomb"),
            // The agent lists the skill folders where it reads them, SKILL.md whole.
            Behaviour::UseSkill { .. } => request("skills", harness_acp::CLAUDE_SKILLS_DIR),
            other => request(Self::mode_for(other)?, "conformance"),
        })
    }

    /// The agent's saved sessions (its native state) are files in the conversations'
    /// workspace: deleting them is a provider's retention expiring them.
    fn expire_native_state(&self) -> bool {
        let dir = self.conversations.join(".acp-test-agent");
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => panic!(
                "cannot expire the agent's sessions in {}: {e}",
                dir.display()
            ),
        }
    }

    /// This test binary holds one test, so child processes and descriptors are the suite's.
    fn process_isolated(&self) -> bool {
        true
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            run: Duration::from_secs(30),
            grace: Duration::from_secs(5),
        }
    }
}

impl AcpKnobs {
    /// The test agent's mode for a behaviour of one turn.
    fn mode_for(behaviour: &Behaviour) -> Option<&'static str> {
        Some(match behaviour {
            Behaviour::StreamText => "text",
            Behaviour::StreamReasoning => "reasoning",
            Behaviour::ToolSuccess => "tool",
            Behaviour::ToolError => "tool-error",
            Behaviour::ToolApproval {
                calls: 1,
                editable: false,
            } => "approval",
            Behaviour::FormInput => "elicit",
            Behaviour::Hang => "hang",
            // Slow after the handshake (`session/new` unanswered): the capability probe that
            // the service's `evaluate` runs for every request still gets its answer.
            Behaviour::SlowInitialize => "slow-session",
            Behaviour::ApprovalThenHang => "approval-hang",
            Behaviour::SequentialApprovals => "sequential",
            Behaviour::EchoTraceContext => "trace",
            // A line that is not JSON-RPC, mid-turn.
            Behaviour::MalformedOrder => "malformed",
            _ => return None,
        })
    }
}
