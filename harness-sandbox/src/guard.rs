//! A running sandbox: its child, its limits watched, its breach, its teardown.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use rustix::process::{Pid, Signal, kill_process, pidfd_send_signal};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bubblewrap::EtcFiles;
use crate::cgroup::{CgroupBreach, Cgroups};
use crate::profile::SandboxLimits;

/// How often the watchdog reads the cgroups' events and the clock.
const WATCH: Duration = Duration::from_millis(50);

/// A program started in a sandbox: `bwrap`'s child process (its stdio piped) and the guard
/// that watches the limits and tears the sandbox down.
#[derive(Debug)]
pub struct Sandboxed {
    /// `bwrap`, in a process group of its own; the program runs in the sandbox it made and
    /// exits with the program's status. Killing it kills the sandbox.
    pub child: Child,
    /// The sandbox's guard; dropping it tears the sandbox down.
    pub guard: SandboxGuard,
}

/// Which limit a sandbox reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Breach {
    /// It outlived its wall time (milliseconds).
    WallTime(u64),
    /// Its processes together used more memory than allowed (bytes): the kernel killed one.
    Memory(u64),
    /// It tried to have more processes than allowed.
    Processes(u64),
    /// It wrote more bytes on stdout and stderr than allowed.
    Output(u64),
}

impl Breach {
    /// The classified error: `timeout` `SANDBOX_WALL_TIME` for the wall time, `capacity`
    /// `SANDBOX_LIMIT` (not retryable: the same work would reach it again) for the rest.
    ///
    /// ```
    /// use harness_sandbox::Breach;
    /// let err = Breach::Processes(64).error();
    /// assert_eq!(err.code().as_str(), "SANDBOX_LIMIT");
    /// assert!(err.message().contains("64 processes"));
    /// assert!(!err.retryable());
    /// ```
    #[must_use]
    pub fn error(&self) -> HarnessError {
        let (category, code, message) = match *self {
            Self::WallTime(ms) => (
                ErrorCategory::Timeout,
                ErrorCode::SANDBOX_WALL_TIME,
                format!("the sandboxed agent outlived its sandbox's wall time ({ms} ms)"),
            ),
            Self::Memory(bytes) => (
                ErrorCategory::Capacity,
                ErrorCode::SANDBOX_LIMIT,
                format!("the sandboxed agent reached its sandbox's memory limit ({bytes} bytes)"),
            ),
            Self::Processes(n) => (
                ErrorCategory::Capacity,
                ErrorCode::SANDBOX_LIMIT,
                format!("the sandboxed agent reached its sandbox's limit of {n} processes"),
            ),
            Self::Output(bytes) => (
                ErrorCategory::Capacity,
                ErrorCode::SANDBOX_LIMIT,
                format!(
                    "the sandboxed agent wrote more than its sandbox's {bytes} bytes of output"
                ),
            ),
        };
        HarnessError::new(category, message)
            .with_code(code)
            .with_retryable(false)
    }
}

/// What the guard owns, torn down in order on drop.
#[derive(Debug)]
pub(crate) struct Guard {
    limits: SandboxLimits,
    init: u32,
    pidfd: OwnedFd,
    cgroups: Cgroups,
    forwards: Vec<JoinHandle<()>>,
    _etc: EtcFiles,
    breach: OnceLock<Breach>,
    breached: watch::Sender<bool>,
    output: AtomicU64,
    watchdog: Mutex<Option<JoinHandle<()>>>,
}

impl Guard {
    pub(crate) fn new(
        limits: SandboxLimits,
        init: u32,
        pidfd: OwnedFd,
        cgroups: Cgroups,
        forwards: Vec<JoinHandle<()>>,
        etc: EtcFiles,
    ) -> Self {
        Self {
            limits,
            init,
            pidfd,
            cgroups,
            forwards,
            _etc: etc,
            breach: OnceLock::new(),
            breached: watch::Sender::new(false),
            output: AtomicU64::new(0),
            watchdog: Mutex::new(None),
        }
    }

    fn record(&self, breach: Breach) {
        if self.breach.set(breach).is_ok() {
            tracing::warn!(
                ?breach,
                init = self.init,
                "a sandbox reached a limit: torn down"
            );
            self.kill();
            self.breached.send_replace(true);
        }
    }

    /// What the cgroups report now.
    fn cgroup_breach(&self) -> Option<Breach> {
        match self.cgroups.breach()? {
            CgroupBreach::Memory => Some(Breach::Memory(self.limits.memory_bytes)),
            CgroupBreach::Processes => Some(Breach::Processes(self.limits.processes)),
        }
    }

    /// SIGKILL to the sandbox's init (the whole PID namespace dies with it), then to whatever
    /// its cgroups still hold.
    fn kill(&self) {
        let _ = pidfd_send_signal(&self.pidfd, Signal::KILL);
        for pid in self.cgroups.procs() {
            if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(watchdog) = self
            .watchdog
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            watchdog.abort();
        }
        self.kill();
        for task in self.forwards.drain(..) {
            task.abort();
        }
    }
}

/// Watches a sandbox's limits and tears it down: on a breach (see [`Breach`]) and when
/// dropped.
///
/// Cheap to clone; the sandbox is torn down when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct SandboxGuard {
    inner: Arc<Guard>,
}

impl SandboxGuard {
    pub(crate) fn new(guard: Guard) -> Self {
        let inner = Arc::new(guard);
        let weak = Arc::downgrade(&inner);
        let deadline = inner
            .limits
            .wall_time()
            .map(|wall| tokio::time::Instant::now() + wall);
        let watchdog = tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH).await;
                let Some(guard) = weak.upgrade() else {
                    return;
                };
                let breach = guard.cgroup_breach().or_else(|| {
                    deadline
                        .filter(|d| tokio::time::Instant::now() >= *d)
                        .map(|_| Breach::WallTime(guard.limits.wall_time_ms))
                });
                if let Some(breach) = breach {
                    guard.record(breach);
                    return;
                }
            }
        });
        *inner
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(watchdog);
        Self { inner }
    }

    /// The limit the sandbox reached, if it did (the first one). The cgroups are read again
    /// here, so a breach that ended the sandbox between two of the watchdog's looks (an OOM
    /// kill of its only process) is still reported once it has exited.
    #[must_use]
    pub fn breach(&self) -> Option<Breach> {
        if self.inner.breach.get().is_none()
            && let Some(breach) = self.inner.cgroup_breach()
        {
            self.inner.record(breach);
        }
        self.inner.breach.get().copied()
    }

    /// Waits until the sandbox reaches a limit (for ever if it never does).
    pub async fn breached(&self) -> Breach {
        let mut rx = self.inner.breached.subscribe();
        let _ = rx.wait_for(|b| *b).await;
        match self.breach() {
            Some(breach) => breach,
            None => std::future::pending().await,
        }
    }

    /// Counts `bytes` the program wrote on stdout or stderr; past the output limit, the
    /// sandbox is torn down ([`Breach::Output`]). Returns whether the output is still within
    /// the limit.
    pub fn count_output(&self, bytes: usize) -> bool {
        let limit = self.inner.limits.output_bytes;
        let total = self
            .inner
            .output
            .fetch_add(bytes as u64, Ordering::Relaxed)
            .saturating_add(bytes as u64);
        if limit > 0 && total > limit {
            self.inner.record(Breach::Output(limit));
            return false;
        }
        true
    }

    /// Kills everything in the sandbox now.
    pub fn kill(&self) {
        self.inner.kill();
    }
}
