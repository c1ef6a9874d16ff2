//! The adapter's health: every agent's command resolvable and executable, its working
//! directory there, checked without starting anything.
//!
//! Decisions where the spec is silent: the command is looked up on the `PATH` the agent
//! would be started with (its own, when the operator copies or sets one, else the
//! server's), as spawning it does; the reason a caller may see is a short category naming
//! the agent, the details (program, path, error) go to the operator's log.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use harness_core::adapter::HarnessHealth;

use crate::options::AcpAgent;

/// Why an agent cannot be started, as a caller may read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    CommandNotFound,
    NotExecutable,
    NoWorkingDirectory,
}

impl NotReady {
    const fn category(self) -> &'static str {
        match self {
            Self::CommandNotFound => "its command is not found",
            Self::NotExecutable => "its command is not an executable file",
            Self::NoWorkingDirectory => "its working directory is not a directory",
        }
    }
}

/// The `PATH` `agent` is started with.
fn search_path(agent: &AcpAgent) -> Option<OsString> {
    // One the operator sets wins; copied or left out, it is the server's own.
    agent
        .set_env
        .get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where `agent`'s program is, or why it cannot be started. Reads the file system only.
pub(crate) fn resolve(agent: &AcpAgent) -> Result<PathBuf, NotReady> {
    if !agent.cwd.is_dir() {
        return Err(NotReady::NoWorkingDirectory);
    }
    let program = agent
        .command
        .first()
        .map(Path::new)
        .ok_or(NotReady::CommandNotFound)?;
    if program.components().count() > 1 {
        // A path (`./agent`, `/usr/bin/agent`): not searched, relative to the agent's cwd.
        let path = agent.cwd.join(program);
        return match std::fs::metadata(&path) {
            Err(_) => Err(NotReady::CommandNotFound),
            Ok(_) if executable(&path) => Ok(path),
            Ok(_) => Err(NotReady::NotExecutable),
        };
    }
    let mut found_unusable = false;
    for dir in std::env::split_paths(&search_path(agent).unwrap_or_default()) {
        let path = dir.join(program);
        if executable(&path) {
            return Ok(path);
        }
        found_unusable |= path.exists();
    }
    Err(if found_unusable {
        NotReady::NotExecutable
    } else {
        NotReady::CommandNotFound
    })
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
    fn a_program_on_the_path_resolves_and_a_missing_one_does_not() {
        assert!(resolve(&agent("sh")).is_ok());
        assert!(resolve(&agent("/bin/sh")).is_ok());
        assert_eq!(
            resolve(&agent("no-such-agent-3f9c1d")),
            Err(NotReady::CommandNotFound)
        );
        assert_eq!(
            resolve(&agent("/no/such/agent")),
            Err(NotReady::CommandNotFound)
        );
        // A directory is there, but cannot be run.
        assert_eq!(resolve(&agent("/tmp")), Err(NotReady::NotExecutable));
    }

    #[test]
    fn the_agents_path_is_the_one_searched() {
        let mut hidden = agent("sh");
        hidden.set_env.insert("PATH".into(), "/no/such/dir".into());
        assert_eq!(resolve(&hidden), Err(NotReady::CommandNotFound));
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
