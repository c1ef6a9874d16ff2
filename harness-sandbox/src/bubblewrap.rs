//! The bubblewrap backend: the command line that makes the sandbox, and the steps that finish
//! it while `bwrap` waits (cgroups, rlimits, network forwards) before the program runs.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::io::{FdFlags, fcntl_setfd};
use rustix::pipe::{PipeFlags, pipe_with};
use rustix::process::{Pid, PidfdFlags, Resource, Rlimit, pidfd_open};
use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, Command};

use crate::cgroup::Cgroups;
use crate::guard::{Guard, SandboxGuard, Sandboxed};
use crate::net;
use crate::profile::{SandboxProfile, unavailable};

/// The user and group id a sandboxed program runs as, inside the sandbox (outside, it is the
/// control plane's own id, without any capability).
pub const SANDBOX_UID: u32 = 1000;

/// The most the sandbox may take to be made before its program runs.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Directories of the host's system, read-only: a symlink (a merged `/usr`) is made a link.
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The files of `/etc` an ordinary program needs, read-only where the host has them.
const ETC: [&str; 9] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
];

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Serializes the window in which a sandbox's pipe ends are inheritable, so that one
/// sandbox's `bwrap` never holds another's.
static SPAWNING: Mutex<()> = Mutex::new(());

/// What to run in a sandbox.
///
/// ```
/// use harness_sandbox::Launch;
/// let launch = Launch::new("/usr/bin/env", "/srv/workspace").arg("true").env("LANG", "C.UTF-8");
/// assert_eq!(launch.args, ["true"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Launch {
    /// The program: an absolute path (resolved by the caller); made visible read-only if no
    /// other bind shows it.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The workspace: bound read-write at its own path and the program's working directory.
    pub workspace: PathBuf,
    /// Its whole environment (nothing is inherited): every name must be allowed by the
    /// profile.
    pub env: Vec<(String, OsString)>,
    /// Other programs it starts (a worker's agent): absolute paths, each made visible
    /// read-only like the program.
    pub also: Vec<PathBuf>,
    /// Loopback endpoints of the control plane relayed into this sandbox only, at the same
    /// address, besides the profile's (`network.allow`): an endpoint that exists for this
    /// launch alone, such as the one that serves an agent its operator's credentialed MCP
    /// servers. The profile is not widened: no other sandbox reaches them.
    pub relays: Vec<crate::Endpoint>,
}

impl Launch {
    /// A program to run in a workspace, with no arguments and an empty environment.
    #[must_use]
    pub fn new(program: impl Into<PathBuf>, workspace: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            workspace: workspace.into(),
            env: Vec::new(),
            also: Vec::new(),
            relays: Vec::new(),
        }
    }

    /// Relays the control plane's loopback endpoint `endpoint` into this sandbox (see
    /// [`relays`](Self::relays)).
    ///
    /// ```
    /// use harness_sandbox::Launch;
    /// let launch = Launch::new("/usr/bin/agent", "/srv/ws").relay("127.0.0.1:40123".parse().unwrap());
    /// assert_eq!(launch.relays[0].port, 40123);
    /// ```
    #[must_use]
    pub fn relay(mut self, endpoint: crate::Endpoint) -> Self {
        self.relays.push(endpoint);
        self
    }

    /// Makes another program it starts visible, read-only (a worker's agent).
    #[must_use]
    pub fn also(mut self, program: impl Into<PathBuf>) -> Self {
        self.also.push(program.into());
        self
    }

    /// Adds an argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds a variable.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
}

/// A sandbox backend with its profile: makes a sandbox per [`spawn`](Self::spawn).
///
/// Cheap to clone (the profile is shared). Equal when the profiles are.
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    profile: SandboxProfile,
    bwrap: PathBuf,
}

impl PartialEq for Sandbox {
    fn eq(&self, other: &Self) -> bool {
        self.inner.profile == other.inner.profile && self.inner.bwrap == other.inner.bwrap
    }
}

impl Eq for Sandbox {}

impl Sandbox {
    /// A sandbox of a profile, made with the `bwrap` found on this process's `PATH` (or
    /// `/usr/bin/bwrap`). Nothing is started: see [`probe`](Self::probe).
    ///
    /// # Errors
    ///
    /// `SANDBOX_UNAVAILABLE` when no `bwrap` is found.
    pub fn new(profile: SandboxProfile) -> Result<Self, harness_core::error::HarnessError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let bwrap = std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/bin")])
            .map(|dir| dir.join("bwrap"))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| {
                unavailable(
                    "no sandbox backend is available on this host",
                    format!(
                        "`bwrap` (Debian's package bubblewrap) was not found on PATH ({}) or \
                         in /usr/bin",
                        path.to_string_lossy()
                    ),
                )
            })?;
        Ok(Self::with_bwrap(profile, bwrap))
    }

    /// A sandbox of a profile, made with the given `bwrap`.
    #[must_use]
    pub fn with_bwrap(profile: SandboxProfile, bwrap: impl Into<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Inner {
                profile,
                bwrap: bwrap.into(),
            }),
        }
    }

    /// The profile.
    #[must_use]
    pub fn profile(&self) -> &SandboxProfile {
        &self.inner.profile
    }

    /// Runs `/usr/bin/true` (or `/bin/true`) in the profile's sandbox around `workspace`, to
    /// learn whether sandboxes can be made here: the namespaces, the cgroups the limits need.
    ///
    /// # Errors
    ///
    /// `SANDBOX_UNAVAILABLE`, with what went wrong in the diagnostic.
    pub async fn probe(&self, workspace: &Path) -> Result<(), harness_core::error::HarnessError> {
        let program = ["/usr/bin/true", "/bin/true"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                unavailable(
                    "no sandbox could be made on this host",
                    "no /usr/bin/true to probe with".to_owned(),
                )
            })?;
        let mut sandboxed = self.spawn(Launch::new(program, workspace)).await?;
        let status = sandboxed
            .child
            .wait()
            .await
            .map_err(|e| unavailable("no sandbox could be made on this host", e.to_string()))?;
        if status.success() {
            Ok(())
        } else {
            let mut err = Vec::new();
            if let Some(mut stderr) = sandboxed.child.stderr.take() {
                let _ = (&mut stderr).take(4096).read_to_end(&mut err).await;
            }
            Err(unavailable(
                "no sandbox could be made on this host",
                format!(
                    "the probe exited with {status}: {}",
                    String::from_utf8_lossy(&err).trim()
                ),
            ))
        }
    }

    /// Starts `launch` in a new sandbox: `bwrap` runs as the returned child (its own process
    /// group, stdin, stdout and stderr piped, killed on drop, and the sandbox with it); the
    /// program runs once the sandbox is complete (its cgroups, limits and network forwards
    /// in place). Call it from a task on a Tokio runtime's worker (not from
    /// `spawn_blocking`): the sandbox dies with the thread that started it.
    ///
    /// # Errors
    ///
    /// `configuration` for a launch the profile refuses (a variable it does not allow, a
    /// workspace or path it cannot bind); `SANDBOX_UNAVAILABLE` when the sandbox cannot be
    /// made (no cgroup for its limits, `bwrap` failed), with the reason in the diagnostic.
    pub async fn spawn(
        &self,
        launch: Launch,
    ) -> Result<Sandboxed, harness_core::error::HarnessError> {
        let profile = &self.inner.profile;
        profile.check(&launch.workspace)?;
        profile.check_env(launch.env.iter().map(|(name, _)| name.as_str()))?;
        if let Some(relative) = launch.also.iter().find(|p| !p.is_absolute()) {
            return Err(crate::profile::invalid(format!(
                "a program the sandboxed one starts, `{}`, must be an absolute path",
                relative.display()
            )));
        }
        if !launch.program.is_absolute() {
            return Err(crate::profile::invalid(format!(
                "the sandboxed program `{}` must be an absolute path",
                launch.program.display()
            )));
        }
        let fail = |diagnostic: String| unavailable("the sandbox could not be made", diagnostic);
        let cgroups = Cgroups::create(&profile.limits).map_err(fail)?;
        let etc =
            EtcFiles::write().map_err(|e| fail(format!("writing the sandbox's /etc: {e}")))?;

        let (info_read, info_write) =
            pipe_with(PipeFlags::CLOEXEC).map_err(|e| fail(format!("pipe: {e}")))?;
        let (block_read, block_write) =
            pipe_with(PipeFlags::CLOEXEC).map_err(|e| fail(format!("pipe: {e}")))?;
        // The filter is written whole before bwrap starts (it is far smaller than a pipe's
        // buffer), and the write end closed: bwrap reads it to its end.
        let seccomp = match crate::seccomp::program() {
            Some(program) => {
                let (read, write) =
                    pipe_with(PipeFlags::CLOEXEC).map_err(|e| fail(format!("pipe: {e}")))?;
                std::fs::File::from(write)
                    .write_all(&program)
                    .map_err(|e| fail(format!("writing the seccomp filter: {e}")))?;
                Some(read)
            }
            None => None,
        };
        let args = arguments(
            profile,
            &launch,
            &etc,
            Fds {
                info: info_write.as_raw_fd(),
                block: block_read.as_raw_fd(),
                seccomp: seccomp.as_ref().map(AsRawFd::as_raw_fd),
            },
        );
        let mut command = Command::new(&self.inner.bwrap);
        command
            .args(&args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .envs(proxy_env(profile))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = {
            let _window = SPAWNING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // bwrap reads its instructions from these two ends: inheritable only for the
            // spawn.
            let inheritable = fcntl_setfd(&info_write, FdFlags::empty())
                .and_then(|()| fcntl_setfd(&block_read, FdFlags::empty()))
                .and_then(|()| match &seccomp {
                    Some(fd) => fcntl_setfd(fd, FdFlags::empty()),
                    None => Ok(()),
                });
            let spawned = inheritable
                .map_err(std::io::Error::from)
                .and_then(|()| command.spawn());
            drop(info_write);
            drop(block_read);
            drop(seccomp);
            spawned.map_err(|e| fail(format!("spawning {}: {e}", self.inner.bwrap.display())))?
        };
        let mut child = child;
        match tokio::time::timeout(
            SETUP_TIMEOUT,
            self.finish(&launch, &cgroups, info_read, block_write),
        )
        .await
        {
            Ok(Ok((init, pidfd, forwards))) => {
                let guard = SandboxGuard::new(Guard::new(
                    profile.limits,
                    init,
                    pidfd,
                    cgroups,
                    forwards,
                    etc,
                ));
                Ok(Sandboxed { child, guard })
            }
            Ok(Err(why)) => Err(fail(failed(&mut child, why).await)),
            Err(_) => Err(fail(
                failed(&mut child, format!("not made within {SETUP_TIMEOUT:?}")).await,
            )),
        }
    }

    /// While `bwrap` waits on its block pipe: reads the sandbox's init pid, moves it into the
    /// cgroups, sets its rlimits, opens its network forwards, then lets the program run.
    async fn finish(
        &self,
        launch: &Launch,
        cgroups: &Cgroups,
        info: OwnedFd,
        block: OwnedFd,
    ) -> Result<(u32, OwnedFd, Vec<tokio::task::JoinHandle<()>>), String> {
        let init = read_child_pid(info).await?;
        let pid =
            Pid::from_raw(i32::try_from(init).map_err(|_| "pid out of range")?).ok_or("pid 0")?;
        // A handle on the init that a reused pid cannot alias: the sandbox is killed through it.
        let pidfd = pidfd_open(pid, PidfdFlags::empty()).map_err(|e| format!("pidfd_open: {e}"))?;
        cgroups.enter(init)?;
        let limits = &self.inner.profile.limits;
        if limits.open_files > 0 {
            limit(pid, Resource::Nofile, limits.open_files)?;
        }
        limit(pid, Resource::Core, 0)?;
        let forwards = net::forward(init, &self.inner.profile.network, &launch.relays)
            .map_err(|e| format!("opening the sandbox's network forwards: {e}"))?;
        let mut block = std::fs::File::from(block);
        block
            .write_all(b"1")
            .map_err(|e| format!("releasing the sandbox: {e}"))?;
        Ok((init, pidfd, forwards))
    }
}

/// The variables that name the sandbox's HTTP proxy to the program, when its profile has
/// proxy targets; loopback stays direct (its relays).
fn proxy_env(profile: &SandboxProfile) -> Vec<(&'static str, String)> {
    if profile.network.proxy.is_empty() {
        return Vec::new();
    }
    let url = format!("http://127.0.0.1:{}", crate::profile::PROXY_PORT);
    let direct = "localhost,127.0.0.1,::1".to_owned();
    vec![
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url),
        ("NO_PROXY", direct.clone()),
        ("no_proxy", direct),
    ]
}

fn limit(pid: Pid, resource: Resource, value: u64) -> Result<(), String> {
    let limit = Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    rustix::process::prlimit(Some(pid), resource, limit)
        .map(drop)
        .map_err(|e| format!("prlimit {resource:?}: {e}"))
}

/// What made the sandbox fail, with `bwrap`'s own words when it exited.
async fn failed(child: &mut Child, why: String) -> String {
    let _ = child.start_kill();
    let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    let mut err = Vec::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            (&mut stderr).take(4096).read_to_end(&mut err),
        )
        .await;
    }
    let said = String::from_utf8_lossy(&err);
    match status {
        Ok(Ok(status)) => format!("{why} (bwrap: {status}; {})", said.trim()),
        _ => format!("{why} ({})", said.trim()),
    }
}

/// Reads `"child-pid": N` from bwrap's `--info-fd` (a JSON object it writes once the sandbox's
/// namespaces exist); reads until the object closes, not to the end of the pipe.
async fn read_child_pid(info: OwnedFd) -> Result<u32, String> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(info)
        .map_err(|e| format!("bwrap's info pipe: {e}"))?;
    let mut text = Vec::new();
    let mut chunk = [0_u8; 512];
    loop {
        let n = pipe
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading bwrap's info: {e}"))?;
        if n == 0 {
            return Err("bwrap exited before the sandbox was made".to_owned());
        }
        text.extend_from_slice(&chunk[..n]);
        if text.len() > 8192 {
            return Err("bwrap's info is too long".to_owned());
        }
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) {
            return value
                .get("child-pid")
                .and_then(serde_json::Value::as_u64)
                .and_then(|pid| u32::try_from(pid).ok())
                .ok_or_else(|| format!("bwrap's info has no child-pid: {value}"));
        }
    }
}

/// The files a sandbox gets as its `/etc/passwd`, `/etc/group` and `/etc/hosts`: the sandbox
/// user and loopback only, nothing of the host's. Removed on drop.
#[derive(Debug)]
pub(crate) struct EtcFiles {
    dir: PathBuf,
}

impl EtcFiles {
    fn write() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "harness-sandbox-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let files = Self { dir };
        let uid = SANDBOX_UID;
        std::fs::write(
            files.dir.join("passwd"),
            format!(
                "sandbox:x:{uid}:{uid}:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n"
            ),
        )?;
        std::fs::write(
            files.dir.join("group"),
            format!("sandbox:x:{uid}:\nnogroup:x:65534:\n"),
        )?;
        std::fs::write(
            files.dir.join("hosts"),
            "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
        )?;
        Ok(files)
    }
}

impl Drop for EtcFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The descriptors bwrap reads its instructions from.
#[derive(Clone, Copy)]
struct Fds {
    info: i32,
    block: i32,
    seccomp: Option<i32>,
}

/// bwrap's arguments for a launch, up to and including the program's own.
fn arguments(profile: &SandboxProfile, launch: &Launch, etc: &EtcFiles, fds: Fds) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
        args.extend(items.iter().map(|item| item.as_ref().to_owned()));
    };
    let uid = SANDBOX_UID.to_string();
    push(&[
        &"--unshare-all",
        &"--unshare-user",
        &"--disable-userns",
        &"--uid",
        &uid,
        &"--gid",
        &uid,
        &"--hostname",
        &"sandbox",
        &"--die-with-parent",
        &"--new-session",
        &"--cap-drop",
        &"ALL",
    ]);
    let mut visible: Vec<PathBuf> = Vec::new();
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    push(&[&"--symlink", &target, &path]);
                }
            }
            Ok(meta) if meta.is_dir() => {
                push(&[&"--ro-bind", &path, &path]);
                visible.push(path.to_owned());
            }
            _ => {}
        }
    }
    for file in ETC {
        push(&[&"--ro-bind-try", &file, &file]);
    }
    for (name, target) in [
        ("passwd", "/etc/passwd"),
        ("group", "/etc/group"),
        ("hosts", "/etc/hosts"),
    ] {
        push(&[&"--ro-bind", &etc.dir.join(name), &target]);
    }
    push(&[&"--proc", &"/proc", &"--dev", &"/dev", &"--tmpfs", &"/tmp"]);
    for path in &profile.read_only {
        push(&[&"--ro-bind", path, path]);
        visible.push(path.clone());
    }
    push(&[&"--bind", &launch.workspace, &launch.workspace]);
    visible.push(launch.workspace.clone());
    for program in std::iter::once(&launch.program).chain(&launch.also) {
        if !visible.iter().any(|dir| program.starts_with(dir)) {
            push(&[&"--ro-bind", program, program]);
            visible.push(program.clone());
        }
    }
    let (info, block) = (fds.info.to_string(), fds.block.to_string());
    if let Some(seccomp) = fds.seccomp {
        push(&[&"--seccomp", &seccomp.to_string()]);
    }
    // The root bwrap builds on is a tmpfs: read-only, so only `/tmp` and the workspace take
    // writes.
    push(&[&"--remount-ro", &"/"]);
    push(&[
        &"--chdir",
        &launch.workspace,
        &"--info-fd",
        &info,
        &"--block-fd",
        &block,
        &"--",
        &launch.program,
    ]);
    args.extend(launch.args.iter().cloned());
    args
}
