//! The adapter's health: every agent's command resolvable and executable, its working
//! directory there, and its sandbox profile (if any) usable on this host, checked without
//! starting anything.
//!
//! Decisions where the spec is silent: the command is looked up on the `PATH` the agent
//! would be started with (its own, when the operator copies or sets one, else the
//! server's), as spawning it does, by [`harness_core::program::resolve`] (shared with the
//! MCP servers' health); the reason a caller may see is a short category naming
//! the agent, the details (program, path, error) go to the operator's log.

use std::ffi::OsString;
use std::path::PathBuf;

use harness_core::adapter::HarnessHealth;
use harness_core::program::NotRunnable;

use crate::options::AcpAgent;

/// The `PATH` `agent` is started with.
fn search_path(agent: &AcpAgent) -> Option<OsString> {
    // One the operator sets wins; copied or left out, it is the server's own.
    agent
        .set_env
        .get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
}

/// Where `agent`'s program is, or why it cannot be started. Reads the file system only.
pub(crate) fn resolve(agent: &AcpAgent) -> Result<PathBuf, NotRunnable> {
    let program = agent
        .command
        .first()
        .map(String::as_str)
        .unwrap_or_default();
    harness_core::program::resolve(program, &agent.cwd, &search_path(agent).unwrap_or_default())
}

/// The health of the agents `profiles` name: ready when each can be started.
pub(crate) fn agents<'a>(profiles: impl Iterator<Item = (&'a str, &'a AcpAgent)>) -> HarnessHealth {
    for (name, agent) in profiles {
        if let Err(why) = resolve(agent) {
            tracing::warn!(
                agent = name,
                program = ?agent.command.first(),
                cwd = %agent.cwd.display(),
                reason = why.category(),
                "an ACP agent cannot be started"
            );
            return HarnessHealth::not_ready(format!("agent `{name}`: {}", why.category()));
        }
        // A sandbox whose profile no longer fits the host (a read-only path gone, the
        // workspace moved) would refuse every start.
        if let Some(sandbox) = &agent.sandbox
            && let Err(why) = sandbox.profile().check(&agent.cwd)
        {
            tracing::warn!(
                agent = name,
                reason = why.message(),
                "an ACP agent's sandbox cannot be made"
            );
            return HarnessHealth::not_ready(format!(
                "agent `{name}`: its sandbox profile cannot be used"
            ));
        }
    }
    HarnessHealth::ready()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(command: &str) -> AcpAgent {
        AcpAgent::new([command], std::env::temp_dir())
    }

    #[test]
    fn an_agent_resolves_on_the_servers_path_or_by_its_path() {
        assert!(resolve(&agent("sh")).is_ok());
        assert!(resolve(&agent("/bin/sh")).is_ok());
        assert_eq!(
            resolve(&agent("no-such-agent-3f9c1d")),
            Err(NotRunnable::CommandNotFound)
        );
        let mut nowhere = agent("sh");
        nowhere.cwd = "/no/such/dir".into();
        assert_eq!(resolve(&nowhere), Err(NotRunnable::NoWorkingDirectory));
    }

    #[test]
    fn the_agents_path_is_the_one_searched() {
        let mut hidden = agent("sh");
        hidden.set_env.insert("PATH".into(), "/no/such/dir".into());
        assert_eq!(resolve(&hidden), Err(NotRunnable::CommandNotFound));
    }

    #[test]
    fn a_sandbox_that_no_longer_fits_the_host_is_not_ready() {
        let profile = harness_sandbox::SandboxProfile::default();
        let sandbox = harness_sandbox::Sandbox::with_bwrap(profile.clone(), "/usr/bin/bwrap");
        let fits = agent("sh").in_sandbox(sandbox);
        assert!(agents([("coder", &fits)].into_iter()).ready);
        let gone = harness_sandbox::Sandbox::with_bwrap(
            profile.read_only("/no/such/runtime-3f9c1d"),
            "/usr/bin/bwrap",
        );
        let health = agents([("coder", &agent("sh").in_sandbox(gone))].into_iter());
        assert!(!health.ready);
        assert_eq!(
            health.reason.unwrap(),
            "agent `coder`: its sandbox profile cannot be used"
        );
    }

    #[test]
    fn the_reason_names_the_agent_and_no_path() {
        let missing = agent("/opt/secret/place/agent");
        let health = agents([("coder", &missing)].into_iter());
        assert!(!health.ready);
        let reason = health.reason.unwrap();
        assert_eq!(reason, "agent `coder`: its command is not found");
    }
}
