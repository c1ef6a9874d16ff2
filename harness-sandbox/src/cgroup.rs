//! The cgroups that hold a sandbox's memory and process limits (cgroup v1's `memory` and
//! `pids` hierarchies), and what they report of a breach.
//!
//! Decisions where the spec is silent: each sandbox gets a cgroup of its own in each
//! hierarchy, `harness-sandbox/<id>` under the hierarchy's root, made before the sandbox runs
//! its program and removed once everything in it is gone. cgroup v2 (the unified hierarchy,
//! where controllers must be delegated to the control plane's subtree) is not supported yet:
//! a host with only v2 controllers refuses profiles with memory or process limits by name.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::profile::SandboxLimits;

/// The root of the cgroup v1 hierarchies.
const ROOT: &str = "/sys/fs/cgroup";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A breach the cgroups report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CgroupBreach {
    Memory,
    Processes,
}

/// One sandbox's cgroups; removed on drop (once empty).
#[derive(Debug)]
pub(crate) struct Cgroups {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
}

impl Cgroups {
    /// Makes the cgroups the limits need (none when neither memory nor processes is limited).
    pub(crate) fn create(limits: &SandboxLimits) -> Result<Self, String> {
        let mut groups = Self {
            memory: None,
            pids: None,
        };
        if !limits.need_cgroup() {
            return Ok(groups);
        }
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        if limits.memory_bytes > 0 {
            let dir = make(&Path::new(ROOT).join("memory"), &id)?;
            groups.memory = Some(dir.clone());
            write(&dir, "memory.limit_in_bytes", limits.memory_bytes)?;
            // Swap, where the host has it, counts too: a hog is not moved to disk instead.
            let _ = write(&dir, "memory.memsw.limit_in_bytes", limits.memory_bytes);
        }
        if limits.processes > 0 {
            let dir = make(&Path::new(ROOT).join("pids"), &id)?;
            groups.pids = Some(dir.clone());
            write(&dir, "pids.max", limits.processes)?;
        }
        Ok(groups)
    }

    /// Moves a process (and so whatever it starts) into the cgroups.
    pub(crate) fn enter(&self, pid: u32) -> Result<(), String> {
        for dir in self.dirs() {
            write(dir, "cgroup.procs", pid)?;
        }
        Ok(())
    }

    /// The first breach the cgroups report: an OOM kill, or a fork refused at the limit.
    pub(crate) fn breach(&self) -> Option<CgroupBreach> {
        if let Some(dir) = &self.memory
            && counter(dir, "memory.oom_control", "oom_kill") > 0
        {
            return Some(CgroupBreach::Memory);
        }
        if let Some(dir) = &self.pids
            && counter(dir, "pids.events", "max") > 0
        {
            return Some(CgroupBreach::Processes);
        }
        None
    }

    /// The processes in the sandbox's cgroups.
    pub(crate) fn procs(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for dir in self.dirs() {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        self.memory.iter().chain(self.pids.iter())
    }
}

impl Drop for Cgroups {
    /// Removes the cgroups: the caller killed everything in them first. A cgroup whose last
    /// process is still exiting cannot be removed yet; a background thread retries for a
    /// few seconds.
    fn drop(&mut self) {
        let dirs: Vec<PathBuf> = self.dirs().cloned().collect();
        if dirs.is_empty() {
            return;
        }
        let remove = move || {
            for _ in 0..100 {
                if dirs
                    .iter()
                    .all(|d| fs::remove_dir(d).is_ok() || !d.exists())
                {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            tracing::warn!(?dirs, "a sandbox's cgroups could not be removed");
        };
        if dirs_empty(&self.memory) && dirs_empty(&self.pids) {
            remove();
        } else {
            std::thread::spawn(remove);
        }
    }
}

fn dirs_empty(dir: &Option<PathBuf>) -> bool {
    dir.as_ref().is_none_or(|d| {
        fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|t| t.trim().is_empty())
    })
}

/// `<hierarchy>/harness-sandbox/<id>`, made.
fn make(hierarchy: &Path, id: &str) -> Result<PathBuf, String> {
    if !hierarchy.join("cgroup.procs").exists() {
        return Err(format!(
            "no cgroup v1 hierarchy at {} (memory and process limits need cgroup v1's \
             `memory` and `pids` controllers, writable by the control plane; set the \
             profile's memoryBytes and processes to 0 to run without them)",
            hierarchy.display()
        ));
    }
    let parent = hierarchy.join("harness-sandbox");
    sweep(&parent);
    let dir = parent.join(id);
    fs::create_dir_all(&dir).map_err(|e| why(&dir, &e))?;
    Ok(dir)
}

/// Removes the empty cgroups of control planes that are gone (`<pid>-<n>` with no process
/// `pid`): one that exited before its last sandbox's cgroups could be removed leaves them.
fn sweep(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            // Fails (and is left) while a process is still in it.
            let _ = fs::remove_dir(entry.path());
        }
    }
}

fn write(dir: &Path, file: &str, value: impl std::fmt::Display) -> Result<(), String> {
    let path = dir.join(file);
    fs::write(&path, value.to_string()).map_err(|e| why(&path, &e))
}

fn why(path: &Path, err: &io::Error) -> String {
    format!("writing the cgroup {}: {err}", path.display())
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn counter(dir: &Path, file: &str, key: &str) -> u64 {
    fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let (k, v) = line.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok())?
            })
        })
        .unwrap_or(0)
}
