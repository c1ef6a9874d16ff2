//! [`SandboxProfile`]: what an operator lets a sandboxed agent see, reach and use.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The backend that makes the sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Backend {
    /// Debian's `bwrap`: every namespace unshared (user, mount, PID, network, IPC, UTS,
    /// cgroup), no capabilities, a new session, nested user namespaces disabled, torn down with
    /// its parent.
    #[default]
    Bubblewrap,
    /// A Pod and NetworkPolicy per sandbox on the operator's cluster, from the profile's
    /// [`kubernetes`](SandboxProfile::kubernetes) table: see [`crate::kubernetes`]. Its
    /// manifests are built and checked; a local [`Sandbox::spawn`](crate::Sandbox::spawn) is
    /// refused (`SANDBOX_UNAVAILABLE`).
    Kubernetes,
}

/// An operator's sandbox profile: owned by the operator (in `harness.toml`'s
/// `[sandbox.profiles.<name>]`), never by a caller.
///
/// A profile that names only its backend is the strictest that still runs an ordinary
/// program: the system's read-only directories (`/usr` and the `/bin`, `/lib` links or
/// directories, and the few files of `/etc` a program needs), the workspace (the agent's
/// working directory) read-write at its own path, the agent's program read-only, a fresh
/// `/tmp` and `/dev`, its own `/proc`, no network, no host environment, and the default
/// [`SandboxLimits`].
///
/// ```
/// use harness_sandbox::SandboxProfile;
/// let strict: SandboxProfile = serde_json::from_value(serde_json::json!({"backend": "bubblewrap"})).unwrap();
/// assert!(strict.network.allow.is_empty());
/// assert_eq!(strict.limits.processes, 256);
///
/// let err = serde_json::from_value::<SandboxProfile>(serde_json::json!({
///     "backend": "bubblewrap", "image": "evil:latest"
/// })).unwrap_err();
/// assert!(err.to_string().contains("unknown field `image`"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxProfile {
    /// The backend.
    #[serde(default)]
    pub backend: Backend,
    /// More host paths the agent may read (its runtime, say `/opt/node`), bound read-only at
    /// the same path: absolute, existing, and never `/` or a parent of the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<PathBuf>,
    /// What the agent may reach over the network.
    #[serde(default)]
    pub network: NetworkPolicy,
    /// Names of the environment variables an agent run in this profile may be given (by its
    /// own configuration: copied from the host or set by the operator). Anything else the
    /// agent's configuration names is refused when the agent is configured; nothing of the
    /// control plane's environment is inherited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The limits.
    #[serde(default)]
    pub limits: SandboxLimits,
    /// The cluster's settings, with backend `kubernetes` (and only then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<crate::kubernetes::KubernetesProfile>,
}

/// What a sandbox may reach: nothing unless listed. The sandbox has a network namespace of its
/// own with only a loopback interface: there is no route out of it, and no name resolves
/// there but `localhost`.
///
/// - Each endpoint of `allow`, on the host's loopback interface (`127.0.0.1:4010`,
///   `localhost:4010`, `[::1]:4010`), is reachable inside the sandbox at the same address:
///   the control plane listens there, inside the sandbox's namespace, and relays each
///   connection to the host's endpoint.
/// - Each target of `proxy` (`api.example.com:443`, any host by name or address) is reachable
///   through the control plane's HTTP proxy, which listens inside the sandbox at
///   `127.0.0.1:3128` ([`PROXY_PORT`]) and is named to the program by `HTTP_PROXY`,
///   `HTTPS_PROXY` (and their lower-case forms; `NO_PROXY` keeps loopback direct). It takes
///   `CONNECT host:port` (HTTPS, any TLS: the proxy never sees inside) and plain HTTP requests
///   in absolute form, resolves and connects on the host's side, and answers anything else
///   `403 Forbidden`, logging each refusal (`harness_sandbox::proxy`, warn).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct NetworkPolicy {
    /// Loopback endpoints relayed at the same address; empty (the default): none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Endpoint>,
    /// Targets reached through the HTTP proxy; empty (the default): no proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy: Vec<ProxyTarget>,
}

/// The port the HTTP proxy listens on inside a sandbox whose profile has `proxy` targets.
pub const PROXY_PORT: u16 = 3128;

/// A `host:port` the sandbox's HTTP proxy lets through: a DNS name or an IP address, and a
/// port. Names compare without regard to case.
///
/// ```
/// use harness_sandbox::ProxyTarget;
/// let target: ProxyTarget = "API.example.com:443".parse().unwrap();
/// assert_eq!(target.to_string(), "api.example.com:443");
/// assert!(target.admits("api.EXAMPLE.com", 443));
/// assert!(!target.admits("api.example.com", 80));
/// assert!("api.example.com".parse::<ProxyTarget>().is_err());
/// assert!("evil.com/x:443".parse::<ProxyTarget>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyTarget {
    host: String,
    port: u16,
}

impl ProxyTarget {
    /// Whether a request for `host:port` is let through.
    #[must_use]
    pub fn admits(&self, host: &str, port: u16) -> bool {
        self.port == port
            && self
                .host
                .eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']'))
    }

    /// The host.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// `host:port` split at its last colon, the port 1 to 65535.
fn host_port(s: &str) -> Result<(&str, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not a `host:port`"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("`{s}`: the port must be 1 to 65535"))?;
    Ok((host, port))
}

impl FromStr for ProxyTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = host_port(s)?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name_ok = !bare.is_empty()
            && bare.len() <= 253
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if bare.parse::<IpAddr>().is_err() && !name_ok {
            return Err(format!(
                "`{s}`: the host must be a DNS name (letters, digits, `-` and `.`) or an IP address"
            ));
        }
        Ok(Self {
            host: bare.to_ascii_lowercase(),
            port,
        })
    }
}

impl fmt::Display for ProxyTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Serialize for ProxyTarget {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProxyTarget {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A `host:port` on the loopback interface an agent may connect to.
///
/// ```
/// use harness_sandbox::Endpoint;
/// let endpoint: Endpoint = "127.0.0.1:4010".parse().unwrap();
/// assert_eq!(endpoint.to_string(), "127.0.0.1:4010");
/// assert!("api.example.com:443".parse::<Endpoint>().unwrap_err().contains("loopback"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// The loopback address.
    pub ip: IpAddr,
    /// The port.
    pub port: u16,
}

impl FromStr for Endpoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = host_port(s)?;
        let ip = match host.trim_start_matches('[').trim_end_matches(']') {
            "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
            other => other.parse::<IpAddr>().map_err(|_| {
                format!(
                    "`{s}`: only loopback endpoints (127.0.0.1, localhost or [::1]) can be \
                     allowed; a host elsewhere is not reachable from a sandbox"
                )
            })?,
        };
        if !ip.is_loopback() {
            return Err(format!(
                "`{s}`: only loopback endpoints (127.0.0.1, localhost or [::1]) can be allowed"
            ));
        }
        Ok(Self { ip, port })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The limits of one sandbox. `0` means no limit for each.
///
/// | limit | default | enforced by | on breach |
/// |---|---|---|---|
/// | `wallTimeMs` | 3,600,000 (an hour) | the control plane's clock | torn down, `timeout` `SANDBOX_WALL_TIME` |
/// | `memoryBytes` | 4 GiB | the sandbox's memory cgroup | the kernel kills the hog; torn down, `capacity` `SANDBOX_LIMIT` |
/// | `processes` | 256 | the sandbox's pids cgroup | forks fail; torn down, `capacity` `SANDBOX_LIMIT` |
/// | `openFiles` | 1,024 | `RLIMIT_NOFILE` | opens fail with `EMFILE` (the agent goes on) |
/// | `outputBytes` | 256 MiB | the control plane counting stdout and stderr | torn down, `capacity` `SANDBOX_LIMIT` |
///
/// Memory and process limits need a cgroup the control plane can create (cgroup v1's
/// `memory` and `pids` hierarchies, writable: the control plane runs as root); where there is
/// none, a profile with either limit is refused when its sandbox would start
/// (`SANDBOX_UNAVAILABLE`), never run without it. Set both to `0` to run without cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxLimits {
    /// Milliseconds the sandbox may live.
    #[serde(default = "default_wall_time")]
    pub wall_time_ms: u64,
    /// Bytes of memory its processes may use together.
    #[serde(default = "default_memory")]
    pub memory_bytes: u64,
    /// Processes (and threads) that may live in it at once.
    #[serde(default = "default_processes")]
    pub processes: u64,
    /// Files each of its processes may hold open.
    #[serde(default = "default_open_files")]
    pub open_files: u64,
    /// Bytes the agent may write on stdout and stderr together.
    #[serde(default = "default_output")]
    pub output_bytes: u64,
}

const fn default_wall_time() -> u64 {
    3_600_000
}
const fn default_memory() -> u64 {
    4 << 30
}
const fn default_processes() -> u64 {
    256
}
const fn default_open_files() -> u64 {
    1024
}
const fn default_output() -> u64 {
    256 << 20
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            wall_time_ms: default_wall_time(),
            memory_bytes: default_memory(),
            processes: default_processes(),
            open_files: default_open_files(),
            output_bytes: default_output(),
        }
    }
}

impl SandboxLimits {
    /// The wall time, if limited.
    #[must_use]
    pub fn wall_time(&self) -> Option<Duration> {
        (self.wall_time_ms > 0).then(|| Duration::from_millis(self.wall_time_ms))
    }

    /// Whether a cgroup is needed (a memory or process limit).
    #[must_use]
    pub fn need_cgroup(&self) -> bool {
        self.memory_bytes > 0 || self.processes > 0
    }
}

/// Paths a profile may never bind: the host's secrets and the control plane's state are not
/// made visible by listing a parent.
const NEVER: [&str; 4] = ["/", "/root", "/home", "/etc"];

impl SandboxProfile {
    /// The strictest profile of a backend.
    #[must_use]
    pub fn new(backend: Backend) -> Self {
        Self {
            backend,
            ..Self::default()
        }
    }

    /// The strictest Kubernetes profile with these cluster settings.
    #[must_use]
    pub fn kubernetes(settings: crate::kubernetes::KubernetesProfile) -> Self {
        Self {
            backend: Backend::Kubernetes,
            kubernetes: Some(settings),
            ..Self::default()
        }
    }

    /// Adds a read-only path.
    #[must_use]
    pub fn read_only(mut self, path: impl Into<PathBuf>) -> Self {
        self.read_only.push(path.into());
        self
    }

    /// Allows an endpoint.
    #[must_use]
    pub fn allow(mut self, endpoint: Endpoint) -> Self {
        self.network.allow.push(endpoint);
        self
    }

    /// Lets a target through the sandbox's HTTP proxy.
    #[must_use]
    pub fn proxy(mut self, target: ProxyTarget) -> Self {
        self.network.proxy.push(target);
        self
    }

    /// Allows an environment variable's name.
    #[must_use]
    pub fn allow_env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Checks the profile for a workspace: each read-only path absolute, existing, not one of
    /// `/`, `/root`, `/home` or `/etc` and not holding the workspace; the workspace absolute
    /// and existing. The error (`configuration`) names the path and why. A Kubernetes
    /// profile makes no local sandbox: it is refused here (`SANDBOX_UNAVAILABLE`).
    ///
    /// # Errors
    ///
    /// A `configuration` error naming what is wrong; `SANDBOX_UNAVAILABLE` for a Kubernetes
    /// profile.
    pub fn check(&self, workspace: &Path) -> Result<(), HarnessError> {
        match (self.backend, &self.kubernetes) {
            (Backend::Kubernetes, _) => return Err(crate::kubernetes::no_local_sandbox()),
            (_, Some(_)) => {
                return Err(invalid(
                    "the `kubernetes` table is only for a profile with backend = \"kubernetes\""
                        .to_owned(),
                ));
            }
            (_, None) => {}
        }
        if !workspace.is_absolute() || !workspace.is_dir() {
            return Err(invalid(format!(
                "the workspace {} must be an absolute path to an existing directory",
                workspace.display()
            )));
        }
        if !self.network.proxy.is_empty()
            && let Some(clash) = self.network.allow.iter().find(|e| e.port == PROXY_PORT)
        {
            return Err(invalid(format!(
                "network.allow `{clash}` takes port {PROXY_PORT}, where the sandbox's HTTP \
                 proxy listens for the profile's `proxy` targets"
            )));
        }
        for path in &self.read_only {
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "readOnly path `{}` must be absolute",
                    path.display()
                )));
            }
            if NEVER.iter().any(|never| path == Path::new(never)) {
                return Err(invalid(format!(
                    "readOnly path `{}` would show the host's own files; list the \
                     directories the agent needs instead",
                    path.display()
                )));
            }
            if workspace.starts_with(path) {
                return Err(invalid(format!(
                    "readOnly path `{}` holds the workspace {}: it would show other \
                     workspaces beside it",
                    path.display(),
                    workspace.display()
                )));
            }
            if !path.exists() {
                return Err(invalid(format!(
                    "readOnly path `{}` does not exist",
                    path.display()
                )));
            }
        }
        Ok(())
    }

    /// Checks that an agent's environment names only allowed variables.
    ///
    /// # Errors
    ///
    /// A `configuration` error naming the first variable not in [`env`](Self::env).
    pub fn check_env<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), HarnessError> {
        for name in names {
            if !ALWAYS_ENV.contains(&name) && !self.env.iter().any(|allowed| allowed == name) {
                return Err(invalid(format!(
                    "environment variable `{name}` is not allowed in the sandbox profile: add \
                     it to the profile's `env` if the agent may see it"
                )));
            }
        }
        Ok(())
    }
}

/// Variables any sandboxed program may be given: none of them carries a credential.
pub(crate) const ALWAYS_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ"];

pub(crate) fn invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
}

/// A `SANDBOX_UNAVAILABLE` error with the diagnostic.
pub(crate) fn unavailable(message: &'static str, diagnostic: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Unavailable, message)
        .with_code(ErrorCode::SANDBOX_UNAVAILABLE)
        .with_retryable(false)
        .with_diagnostic(diagnostic)
}
