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
//! - **the workspace holds symbolic links** (an agent writes its workspace, and a hostile one
//!   may leave `.claude` pointing at a host directory for the next execution): every folder
//!   on the way, from the workspace down, is opened without following a link, and a link
//!   where a folder is expected fails the start `configuration`, naming it. Writing, replacing
//!   and removing go through those directory handles, so neither the install nor the cleanup
//!   ever reaches outside the workspace, whatever the agent did to it in between.
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

use harness_core::error::{ErrorCategory, HarnessError};
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
pub(crate) struct Installed {
    /// The workspace, the skills folder under it, and the folders installed there.
    root: Option<(PathBuf, PathBuf)>,
    dirs: Vec<PathBuf>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        for dir in self.dirs.drain(..) {
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
            if let (true, Some((cwd, sub)), Some(name)) = (last, &self.root, dir.file_name()) {
                // Through handles that follow no link: a workspace changed since the install
                // cannot turn the removal toward the host.
                if let Ok(parent) = walk(cwd, sub, false) {
                    let _ = remove_tree_at(&parent, Path::new(name));
                }
            }
        }
    }
}

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Opens `name` under `parent` as a directory, refusing a symbolic link.
fn open_dir_at(parent: impl AsFd, name: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The directory `name` under `parent`, made if missing; a link or a file there is an error.
fn dir_at(parent: impl AsFd, name: &Path, create: bool) -> std::io::Result<OwnedFd> {
    if create {
        match rustix::fs::mkdirat(parent.as_fd(), name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    open_dir_at(parent, name)
}

/// `cwd/sub`, each of `sub`'s components opened (and made, with `create`) without following
/// a link; `cwd` itself is the operator's and is opened as configured.
fn walk(cwd: &Path, sub: &Path, create: bool) -> std::io::Result<OwnedFd> {
    let mut dir = rustix::fs::open(
        cwd,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for part in sub.components() {
        match part {
            std::path::Component::Normal(name) => dir = dir_at(&dir, Path::new(name), create)?,
            std::path::Component::CurDir => {}
            _ => {
                return Err(std::io::Error::other(
                    "the skills folder must be a relative path without `..`",
                ));
            }
        }
    }
    Ok(dir)
}

/// Removes `name` under `parent` and everything in it, following no link (a link inside is
/// removed, never what it points to).
fn remove_tree_at(parent: &OwnedFd, name: &Path) -> std::io::Result<()> {
    let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?);
    }
    let dir = open_dir_at(parent, name)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let bytes = entry.file_name().to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes).to_os_string(),
            );
        }
    }
    for child in names {
        remove_tree_at(&dir, Path::new(&child))?;
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// Writes `bytes` as a new file `name` under `parent` (never through a link).
fn write_at(parent: impl AsFd, name: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    std::fs::File::from(fd).write_all(bytes)
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
    installed.root = Some((agent.cwd.clone(), sub.clone()));
    let _one_at_a_time = INSTALLING.lock().await;
    let parent = walk(&agent.cwd, sub, true).map_err(|e| {
        failed(
            &root,
            format!("{e} (each folder on the way must be a real folder, not a link)"),
        )
    })?;
    for skill in skills.iter() {
        let dir = root.join(skill.name());
        let name = Path::new(skill.name());
        // Counted before the write: a concurrent execution granted it too waits for nothing
        // and finds it written by the first (both writes are the same bytes).
        let first = held(|map| {
            let n = map.entry(dir.clone()).or_insert(0);
            *n += 1;
            *n == 1
        });
        installed.dirs.push(dir.clone());
        if !first {
            continue;
        }
        if rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
            let ours = open_dir_at(&parent, name).is_ok_and(|d| {
                rustix::fs::statat(&d, Path::new(MARKER), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|m| FileType::from_raw_mode(m.st_mode) == FileType::RegularFile)
            });
            if !ours {
                // Not ours: leave it, and do not remove it on release either.
                installed.dirs.pop();
                held(|map| map.remove(&dir));
                return Err(failed(
                    &dir,
                    "something of that name is there and this adapter did not write it: the \
                     operator's own skill folders are never overwritten",
                ));
            }
            remove_tree_at(&parent, name).map_err(|e| failed(&dir, e))?;
        }
        let folder = dir_at(&parent, name, true).map_err(|e| failed(&dir, e))?;
        write_at(&folder, Path::new(MARKER), b"").map_err(|e| failed(&dir, e))?;
        let md = skill.skill_md().read().await?;
        write_at(&folder, Path::new(SKILL_FILE), &md).map_err(|e| failed(&dir, e))?;
        for file in skill.files() {
            // The catalog's paths are clean and relative ([`harness_core::skill`]).
            let path = Path::new(file.path());
            let mut at = folder.try_clone().map_err(|e| failed(&dir, e))?;
            if let Some(parents) = path.parent() {
                for part in parents.components() {
                    at = dir_at(&at, Path::new(part.as_os_str()), true)
                        .map_err(|e| failed(&dir, e))?;
                }
            }
            let Some(file_name) = path.file_name() else {
                continue;
            };
            let bytes = file.handle().read().await?;
            write_at(&at, Path::new(file_name), &bytes).map_err(|e| failed(&dir, e))?;
        }
    }
    Ok(installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace changed after the install: `.claude` now links to a host folder holding
    /// a folder of the skill's name. The cleanup follows no link, so the host's folder stays.
    #[test]
    fn a_cleanup_never_follows_a_link_put_in_the_workspace_after_the_install() {
        let base =
            std::env::temp_dir().join(format!("harness-acp-skills-unit-{}", std::process::id()));
        let (cwd, outside) = (base.join("cwd"), base.join("outside"));
        std::fs::create_dir_all(outside.join("skills/pdf-forms")).unwrap();
        std::fs::write(outside.join("skills/pdf-forms/keep.txt"), b"the host's").unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        std::os::unix::fs::symlink(&outside, cwd.join(".claude")).unwrap();
        drop(Installed {
            root: Some((cwd.clone(), PathBuf::from(CLAUDE_SKILLS_DIR))),
            dirs: vec![cwd.join(CLAUDE_SKILLS_DIR).join("pdf-forms")],
        });
        assert!(outside.join("skills/pdf-forms/keep.txt").exists());

        // Without the link, the folder is removed, with a link inside it removed as a link.
        std::fs::remove_file(cwd.join(".claude")).unwrap();
        let dir = cwd.join(CLAUDE_SKILLS_DIR).join("pdf-forms");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("scripts/out")).unwrap();
        drop(Installed {
            root: Some((cwd, PathBuf::from(CLAUDE_SKILLS_DIR))),
            dirs: vec![dir.clone()],
        });
        assert!(!dir.exists());
        assert!(outside.join("skills/pdf-forms/keep.txt").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
