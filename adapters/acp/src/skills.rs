//! Skills for ACP agents: an execution's granted skills are written where its agent reads
//! skill folders, inside its workspace ([`AcpAgent::skills_dir`] under its `cwd`), before the
//! agent starts, and removed when the execution's runtime is cleaned up.
//!
//! # What happens when...
//!
//! - **an execution is granted skills** and its agent has a `skillsDir`: each skill's
//!   `SKILL.md` and files are written to `<cwd>/<skillsDir>/<name>/` (a file named
//!   [`MARKER`] beside them says the adapter wrote the folder), then the agent starts and finds
//!   them as it finds any skill of its workspace. Nothing is written outside the workspace,
//!   and the host's home is never touched. A sandboxed agent sees them because its workspace is
//!   what its sandbox binds (for an agent hosted by a worker too: the control plane writes
//!   them before the worker starts).
//! - **the execution ends**: cleanup removes the folders it wrote (a folder shared with
//!   another live execution of this process stays until the last one ends).
//! - **a folder of that name is already there** and the adapter did not write it (no
//!   [`MARKER`]): the start fails `configuration` naming it; the operator's own files are
//!   never overwritten. One the adapter wrote and a crash left behind is replaced.
//!
//! Decisions where the spec is silent:
//! - Executions of one agent share its workspace, so while two run at once each may see the
//!   other's granted skills: the capability report says so in its constraints
//!   (`sharedWorkspace`). An operator who must keep callers' skills apart gives their agents
//!   separate workspaces.
//! - A folder granted to two live executions at once is written once and counted (the
//!   service's catalog gives both the same content).
//! - Where an agent looks is the operator's setting, not guessed: Claude Code reads
//!   [`CLAUDE_SKILLS_DIR`] (`.claude/skills`), Codex reads repository skills in
//!   [`CODEX_SKILLS_DIR`] (`.agents/skills`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use harness_core::action::ActionRequest;
use harness_core::adapter::{
    BoxFuture, BoxStream, CancelResult, EventResult, HarnessRuntime, Restored, ResumeDecision,
    RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::CancelReason;
use harness_core::skill::{SKILL_FILE, SkillManifest};

use crate::AcpAgent;

/// Where Claude Code (`@agentclientprotocol/claude-agent-acp`) reads project skills, under
/// its working directory.
pub const CLAUDE_SKILLS_DIR: &str = ".claude/skills";
/// Where Codex (`codex-acp`) reads repository skills, under its working directory.
pub const CODEX_SKILLS_DIR: &str = ".agents/skills";
/// The file the adapter writes in each skill folder it installs.
pub const MARKER: &str = ".harness-installed";

/// Folders this process installed, and how many live executions hold each.
static HELD: Mutex<Option<HashMap<PathBuf, usize>>> = Mutex::new(None);
/// Installs run one at a time: an execution granted a folder another is still writing starts
/// its agent only once it is whole.
static INSTALLING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn held<T>(f: impl FnOnce(&mut HashMap<PathBuf, usize>) -> T) -> T {
    let mut guard = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(HashMap::new))
}

/// The skill folders one execution holds; released (and removed when last) on drop.
#[derive(Debug, Default)]
pub(crate) struct Installed(Vec<PathBuf>);

impl Drop for Installed {
    fn drop(&mut self) {
        for dir in self.0.drain(..) {
            let last = held(|map| match map.get_mut(&dir) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    map.remove(&dir);
                    true
                }
            });
            if last {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
}

fn failed(dir: &Path, why: impl std::fmt::Display) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "the granted skill folder `{}` could not be written in the agent's workspace: {why}",
            dir.display()
        ),
    )
}

/// Writes `skills` in `agent`'s skills folder; nothing when the manifest is empty.
pub(crate) async fn install(
    agent: &AcpAgent,
    skills: &SkillManifest,
) -> Result<Installed, HarnessError> {
    let mut installed = Installed::default();
    let Some(sub) = agent.skills_dir.as_ref().filter(|_| !skills.is_empty()) else {
        return Ok(installed);
    };
    let root = agent.cwd.join(sub);
    let _one_at_a_time = INSTALLING.lock().await;
    for skill in skills.iter() {
        let dir = root.join(skill.name());
        // Counted before the write: a concurrent execution granted it too waits for nothing
        // and finds it written by the first (both writes are the same bytes).
        let first = held(|map| {
            let n = map.entry(dir.clone()).or_insert(0);
            *n += 1;
            *n == 1
        });
        installed.0.push(dir.clone());
        if !first {
            continue;
        }
        if std::fs::symlink_metadata(&dir).is_ok() {
            if !dir.join(MARKER).is_file() {
                // Not ours: leave it, and do not remove it on release either.
                installed.0.pop();
                held(|map| map.remove(&dir));
                return Err(failed(
                    &dir,
                    "a folder of that name is there and this adapter did not write it: the \
                     operator's own skill folders are never overwritten",
                ));
            }
            std::fs::remove_dir_all(&dir).map_err(|e| failed(&dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| failed(&dir, e))?;
        std::fs::write(dir.join(MARKER), b"").map_err(|e| failed(&dir, e))?;
        let md = skill.skill_md().read().await?;
        std::fs::write(dir.join(SKILL_FILE), &*md).map_err(|e| failed(&dir, e))?;
        for file in skill.files() {
            let path = dir.join(file.path());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| failed(&dir, e))?;
            }
            let bytes = file.handle().read().await?;
            std::fs::write(&path, &*bytes).map_err(|e| failed(&dir, e))?;
        }
    }
    Ok(installed)
}

/// A runtime whose execution's skills are installed: cleanup removes them.
pub(crate) struct WithSkills {
    pub(crate) inner: Box<dyn HarnessRuntime>,
    pub(crate) installed: Mutex<Option<Installed>>,
}

impl HarnessRuntime for WithSkills {
    fn identity(&self) -> RuntimeIdentity {
        self.inner.identity()
    }
    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        self.inner.initialize()
    }
    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.inner.stream(turn)
    }
    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        self.inner.resume(decision)
    }
    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        self.inner.pending_action()
    }
    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.inner.cancel(reason)
    }
    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restart()
    }
    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.cleanup().await;
            drop(
                self.installed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
        })
    }
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restore(restored)
    }
    fn restorable(&self) -> bool {
        self.inner.restorable()
    }
    fn lost(&self) -> BoxFuture<'_, ()> {
        self.inner.lost()
    }
}
