//! Operator-owned sandboxes for the agents a harness runtime drives.
//!
//! A coding agent run for a caller is someone else's program acting on a model's output: it
//! must not see the host's files, the control plane's database or other callers' workspaces,
//! reach the network beyond what the operator allows, or exhaust the machine. An operator
//! names a [`SandboxProfile`] for an agent (in `harness.toml`, `[sandbox.profiles.<name>]` and
//! `sandbox = "<name>"` on the agent); a caller never chooses or changes one.
//!
//! [`Sandbox::spawn`] starts a program in a fresh sandbox made by Debian's bubblewrap:
//!
//! - **Namespaces**: user, mount, PID, network, IPC, UTS and cgroup, all new; the program runs
//!   as uid/gid [`SANDBOX_UID`] with no capability, in a new session (no terminal to inject
//!   into), unable to make user namespaces of its own, and dies with the control plane.
//! - **System calls**: a seccomp filter denies (`EPERM`) tracing other processes, the kernel
//!   keyrings, modules, `kexec`, BPF, perf events, `userfaultfd`, handle-based opens, mounts,
//!   namespaces, io_uring, the host's clock and the like; on x86_64 every x32 call.
//! - **Filesystem**: the system's read-only directories (`/usr`, the `/bin` and `/lib` links or
//!   directories, the few files of `/etc` a program needs, and a `/etc/passwd`, `/etc/group`
//!   and `/etc/hosts` that name only the sandbox user and loopback), the profile's read-only
//!   paths, the workspace read-write at its own path (the working directory), the program
//!   read-only, a fresh `/tmp`, `/dev` and `/proc`. Nothing else of the host exists: no
//!   `HOME`, no `/root`, no other workspace, no database.
//! - **Network**: none, but for each allowed loopback endpoint a relay to the host's, and for
//!   the profile's proxy targets an HTTP proxy (see [`NetworkPolicy`]).
//! - **Environment**: exactly the launch's variables, each allowed by the profile.
//! - **Limits** ([`SandboxLimits`]): wall time, memory and processes (cgroups), open files
//!   (`RLIMIT_NOFILE`), output bytes; a breach tears the sandbox down with a classified error
//!   ([`Breach::error`]).
//!
//! The sandbox is complete before the program runs: `bwrap` waits (`--block-fd`) while the
//! control plane moves the sandbox into its cgroups, sets its limits and opens its network
//! forwards.
//!
//! ```no_run
//! # async fn run() -> Result<(), harness_core::error::HarnessError> {
//! use harness_sandbox::{Launch, Sandbox, SandboxProfile};
//! let sandbox = Sandbox::new(SandboxProfile::default())?;
//! let mut sandboxed = sandbox.spawn(Launch::new("/usr/bin/ls", "/srv/workspace").arg("-la")).await?;
//! let status = sandboxed.child.wait().await.expect("bwrap ran");
//! assert!(status.success());
//! # Ok(()) }
//! ```
//!
//! A profile with backend `kubernetes` is for a cluster instead: [`kubernetes::manifests`]
//! makes it the Pod and NetworkPolicy of a sandbox. Only the manifests exist yet: nothing
//! applies them, and [`Sandbox::spawn`] refuses such a profile (`SANDBOX_UNAVAILABLE`).
//!
//! # Decisions where the spec is silent
//!
//! - Two ways out, both served by the control plane from the host's side: relays of loopback
//!   endpoints at the same address (a model server on the host), and an HTTP proxy for named
//!   targets (a model provider's API), which most agents honour through `HTTPS_PROXY`. A
//!   program that ignores the proxy variables reaches nothing: there is no route.
//! - A profile's memory and process limits are kept by cgroup v1 controllers; where the
//!   control plane cannot create those cgroups, the sandbox is refused
//!   (`SANDBOX_UNAVAILABLE`), never run without its limits.
//! - Terminating a sandbox kills it: bubblewrap does not pass `SIGTERM` on, and a sandbox
//!   whose `bwrap` dies is killed by the kernel with it.
#![warn(missing_docs)]

mod bubblewrap;
mod cgroup;
mod guard;
pub mod kubernetes;
mod net;
mod profile;
mod proxy;
mod seccomp;
pub mod worker;

pub use bubblewrap::{Launch, SANDBOX_UID, Sandbox};
pub use guard::{Breach, SandboxGuard, Sandboxed};
pub use kubernetes::{Egress, KubernetesProfile};
pub use profile::{
    Backend, Endpoint, NetworkPolicy, PROXY_PORT, ProxyTarget, SandboxLimits, SandboxProfile,
};
