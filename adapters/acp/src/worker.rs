//! An agent hosted with its ACP client in the sandbox, over the Sandbox Worker Protocol v1
//! (`AcpAgent::hosted_by_worker`).

use std::path::Path;

use harness_core::adapter::{HarnessRuntime, RuntimeContext};
use harness_core::error::HarnessError;
use harness_sandbox::worker::{WorkerLink, WorkerOptions, WorkerRuntime};
use harness_sandbox::{Launch, Sandbox};
use serde_json::{Value, json};

use crate::AcpAgent;
use crate::mcp::McpRelay;

/// Starts `worker` in `sandbox` for the agent `name`, and drives the runtime it hosts.
pub(crate) async fn start(
    name: &str,
    agent: &AcpAgent,
    sandbox: &Sandbox,
    worker: &Path,
    context: RuntimeContext,
) -> Result<Box<dyn HarnessRuntime>, HarnessError> {
    let program = agent
        .command
        .first()
        .map(String::as_str)
        .unwrap_or_default();
    let resolved = crate::client::resolve_for_sandbox(agent, program)?;
    // The credentialed MCP servers stay here, served by the control plane's relay, which the
    // sandbox reaches through a relay of its address made for this launch only.
    let relay = McpRelay::start(agent).await?;
    // The worker gets the variables the agent inherits (`env`), from this process; it sets
    // `setEnv` for the agent itself. The profile allows each (`AcpAgent::check`).
    let mut launch =
        crate::client::inherited(agent, Launch::new(worker, &agent.cwd).also(resolved));
    launch.relays.extend(relay.as_ref().map(McpRelay::endpoint));
    let link = WorkerLink::sandboxed(sandbox.spawn(launch).await?)?;
    let runtime = WorkerRuntime::start(
        link,
        &context,
        settings(name, agent, relay.as_ref()),
        WorkerOptions::default(),
    )
    .await?;
    match relay {
        None => Ok(Box::new(runtime)),
        // The relay ends (its bridged servers killed) with the runtime's cleanup.
        Some(relay) => Ok(crate::held::Holding::boxed(Box::new(runtime), relay)),
    }
}

/// What the worker builds its adapter from: the agent, to run unsandboxed inside, its
/// credentialed MCP servers replaced by the relay's URLs (no header, no variable).
fn settings(name: &str, agent: &AcpAgent, relay: Option<&McpRelay>) -> Value {
    let mut inside = crate::mcp::for_worker(agent, relay);
    inside.sandbox = None;
    inside.worker = None;
    json!({"name": name, "agent": inside})
}

/// The worker's adapter, from the control plane's settings.
///
/// # Errors
/// `configuration` when the settings are not an agent's.
pub fn adapter_from_settings(settings: &Value) -> Result<crate::AcpAdapter, HarnessError> {
    let name = settings["name"].as_str().unwrap_or(crate::DEFAULT_AGENT);
    let agent = AcpAgent::from_value(&settings["agent"])?;
    let adapter = crate::AcpAdapter::new(agent.clone())?;
    if name == crate::DEFAULT_AGENT {
        Ok(adapter)
    } else {
        adapter.with_agent(name, agent)
    }
}
