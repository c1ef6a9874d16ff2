//! The Kubernetes backend: an operator's profile made into the Pod and NetworkPolicy of one
//! sandbox, for operators who outgrow one machine (the contract's `sandbox_pod` mode).
//!
//! A `sandbox_pod` descriptor names an operator-owned profile and nothing else: it cannot
//! supply a Pod spec, image, command, service account, volume, RuntimeClass or NetworkPolicy
//! (`harness-core` refuses those fields). Here the profile (backend `kubernetes`, with its
//! [`KubernetesProfile`] table) becomes them: [`manifests`] builds, from the profile and a
//! [`PodLaunch`] (the sandbox's name, its execution, its workspace, the worker's command and
//! environment, all the control plane's), a [`Manifests`] made of the API's own types
//! (`k8s-openapi`, Kubernetes 1.37; the tests check them against the JSON schemas of 1.33
//! and 1.37).
//!
//! **What is not done yet**: this backend only builds and checks manifests. Nothing applies
//! them to a cluster, watches the pod or tears it down, and the Sandbox Worker Protocol is not
//! carried over the pod's attach stream yet. [`Sandbox::spawn`](crate::Sandbox::spawn) with a
//! Kubernetes profile is refused (`SANDBOX_UNAVAILABLE`, "local sandboxes need backend
//! `bubblewrap`"): never a silent run on the control plane's host.
//!
//! ```toml
//! [sandbox.profiles.cluster]
//! backend = "kubernetes"
//! env = ["GEMINI_API_KEY"]
//! [sandbox.profiles.cluster.limits]
//! wallTimeMs = 600000
//! memoryBytes = 2147483648
//! [sandbox.profiles.cluster.kubernetes]
//! namespace = "harness-sandboxes"
//! image = "registry.example/harness-worker@sha256:…"
//! runtimeClassName = "gvisor"
//! cpuMillis = 2000
//! nodeSelector = { "sandbox.example/runtime" = "gvisor" }
//! tolerations = [{ key = "sandbox", operator = "Exists", effect = "NoSchedule" }]
//! egress = [
//!   { namespace = "models", pods = { app = "model-server" }, port = 4010 },
//!   { cidr = "10.20.0.0/16", port = 443 },
//! ]
//! ```
//!
//! # What each field of the Pod enforces
//!
//! | field | value | why |
//! |---|---|---|
//! | `spec.securityContext.runAsNonRoot`, `runAsUser`, `runAsGroup` (and the container's) | `true`, [`SANDBOX_UID`], [`SANDBOX_UID`] | the agent is not root in its container, whatever the image says |
//! | `spec.securityContext.fsGroup` | [`SANDBOX_UID`] | the workspace volume is writable by that user |
//! | `…seccompProfile.type` (pod and container) | `RuntimeDefault` | the runtime's filter of the obvious escapes (`unshare`, `mount`, `ptrace`, keyrings, …) |
//! | container `allowPrivilegeEscalation`, `privileged` | `false`, `false` | no setuid gain (`no_new_privs`), no device or capability grant |
//! | container `capabilities.drop` | `["ALL"]` | not even the runtime's default set (`CHOWN`, `NET_RAW`, …) |
//! | container `readOnlyRootFilesystem` | `true` | only the workspace and `/tmp` take writes: the image stays as the operator built it |
//! | `hostNetwork`, `hostPID`, `hostIPC` | `false` | the pod has its own network, process table and IPC |
//! | `shareProcessNamespace` | `false` | (one container; said anyway) |
//! | `automountServiceAccountToken` | `false` | no credential for the cluster's API inside, whichever service account the profile names |
//! | `enableServiceLinks` | `false` | the namespace's Services are not listed in the agent's environment |
//! | `runtimeClassName` | the profile's | gVisor or Kata: a kernel between the agent and the node's |
//! | container `resources.limits` and `requests` | memory: `limits.memoryBytes`; cpu: `kubernetes.cpuMillis` | the memory cgroup kills a hog (`OOMKilled`); requests equal limits, so the pod is `Guaranteed`, the last to be evicted |
//! | `activeDeadlineSeconds` | `limits.wallTimeMs`, rounded up to a second | the kubelet kills the pod at its wall time (`DeadlineExceeded`) |
//! | `restartPolicy` | `Never` | a dead worker is a finished sandbox, never a second run |
//! | `terminationGracePeriodSeconds` | `0` | as bubblewrap: terminating kills |
//! | volume `workspace` | the execution's PersistentVolumeClaim, or an `emptyDir` | mounted read-write at the workspace path, the working directory; nothing else of any node or volume |
//! | volume `tmp` | `emptyDir`, `medium: Memory`, `sizeLimit` the memory limit | a fresh `/tmp`, counted against the memory limit (as bubblewrap's tmpfs) |
//! | container `stdin`, `stdinOnce`, `tty` | `true`, `true`, `false` | the worker protocol's stream is the pod's attach stream: one client, then closed; no terminal |
//! | `env` | the launch's, each name allowed by the profile's `env` | nothing else: no credential of the control plane's |
//! | `imagePullPolicy` | `IfNotPresent` for an image pinned by digest, else `Always` | a mutable tag is resolved again, not taken from a node's cache |
//! | labels | `app.kubernetes.io/name: harness-sandbox`, `app.kubernetes.io/managed-by: harness`, [`LABEL_SANDBOX`], [`LABEL_EXECUTION`] | the NetworkPolicy selects the pod by its sandbox; an operator finds an execution's pod |
//!
//! The NetworkPolicy of the same name selects the pod (its [`LABEL_SANDBOX`]), denies all
//! ingress (the worker's stream comes through the API server and the kubelet, not the pod's
//! network) and allows egress only to the profile's [`Egress`] list, over TCP, plus DNS (UDP
//! and TCP 53 to `k8s-app: kube-dns` in `kube-system`) only when an egress names pods, which
//! the worker reaches by a Service's name. A policy is only kept where the cluster's network
//! plugin enforces NetworkPolicy (Calico, Cilium, …; not kindnet or flannel alone).
//!
//! # Limits the Pod cannot carry
//!
//! - `processes`: the Pod API has no pids limit; the kubelet's `podPidsLimit` (node-wide,
//!   the operator's) is what stops a fork bomb.
//! - `openFiles`: no API either; the container runtime's default `RLIMIT_NOFILE` applies.
//! - `outputBytes`: counted by the control plane on the attach stream, once it carries one.
//!
//! # Decisions where the spec is silent
//!
//! - The profile's `network.allow` (loopback endpoints relayed by the control plane),
//!   `network.proxy` (the local sandbox's HTTP proxy) and `readOnly` (host paths) mean
//!   nothing on a cluster: a Kubernetes profile with any of them is refused, naming it. Its network is `kubernetes.egress`, by cluster address or pod labels
//!   (never a host name: a NetworkPolicy cannot match one); what it reads is in its image.
//! - The sandbox's name is a DNS-1123 label (it is also a label value) and names both the Pod
//!   and the NetworkPolicy; the execution id must be a label value.
//! - Naming a service account gives the pod that identity (image pull secrets, a node-side
//!   workload identity), never its token.
//! - User namespaces (`hostUsers: false`) are not set: they need node support that a
//!   RuntimeClass such as gVisor already supersedes.

mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use harness_core::error::HarnessError;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, SecurityContext,
    Toleration as ApiToleration, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy as ApiNetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use settings::{Cidr, Egress, EgressTo, KubernetesProfile, Toleration};

use crate::SANDBOX_UID;
use crate::profile::{Backend, SandboxProfile, invalid};

/// The label naming a pod's sandbox (its name): what the NetworkPolicy selects.
pub const LABEL_SANDBOX: &str = "harness.dev/sandbox";
/// The label naming the execution a sandbox runs.
pub const LABEL_EXECUTION: &str = "harness.dev/execution";

/// The name of the worker's container.
pub const CONTAINER: &str = "worker";

/// The sandbox's workspace volume.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Workspace {
    /// A PersistentVolumeClaim of the sandbox's namespace (the execution's, made by the
    /// control plane), mounted read-write.
    Claim(String),
    /// A fresh empty directory on the node, at most this many bytes if given, gone with the
    /// pod.
    EmptyDir(Option<u64>),
}

/// What one Kubernetes sandbox runs: the control plane's, never a caller's.
///
/// ```
/// use harness_sandbox::kubernetes::{PodLaunch, Workspace};
/// let launch = PodLaunch::new("sbx-0001", "exec-0001", Workspace::Claim("ws-0001".into()), "/workspace")
///     .command(["/usr/local/bin/harness-worker", "--stdio"])
///     .env("LANG", "C.UTF-8");
/// assert_eq!(launch.command.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PodLaunch {
    /// The sandbox's name: the Pod's and the NetworkPolicy's (a DNS-1123 label).
    pub name: String,
    /// The execution it runs (a label value).
    pub execution_id: String,
    /// Its workspace.
    pub workspace: Workspace,
    /// Where the workspace is mounted, the working directory: absolute, not `/` nor `/tmp`.
    pub workspace_path: PathBuf,
    /// The worker's command: its program (absolute, in the image) and arguments.
    pub command: Vec<String>,
    /// Its whole environment: every name allowed by the profile.
    pub env: Vec<(String, String)>,
}

impl PodLaunch {
    /// A sandbox with no command yet (see [`command`](Self::command)) and no environment.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        execution_id: impl Into<String>,
        workspace: Workspace,
        workspace_path: impl Into<PathBuf>,
    ) -> Self {
        Self {
            name: name.into(),
            execution_id: execution_id.into(),
            workspace,
            workspace_path: workspace_path.into(),
            command: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Sets the command.
    #[must_use]
    pub fn command<S: Into<String>>(mut self, command: impl IntoIterator<Item = S>) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a variable.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
}

/// The objects of one sandbox, to be applied together (the NetworkPolicy first, so that the
/// pod never runs unpoliced).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Manifests {
    /// The worker's Pod.
    pub pod: Pod,
    /// Its NetworkPolicy.
    pub network_policy: ApiNetworkPolicy,
}

/// The Pod and NetworkPolicy of a sandbox: the profile's settings and hardening, the launch's
/// name, workspace, command and environment. The same input gives the same manifests.
///
/// ```
/// use harness_sandbox::kubernetes::{self, KubernetesProfile, PodLaunch, Workspace};
/// use harness_sandbox::SandboxProfile;
/// let profile = SandboxProfile::kubernetes(KubernetesProfile::new("agents", "worker:1").unwrap());
/// let launch = PodLaunch::new("sbx-1", "exec-1", Workspace::EmptyDir(None), "/workspace")
///     .command(["/usr/local/bin/harness-worker"]);
/// let manifests = kubernetes::manifests(&profile, &launch).unwrap();
/// let pod = serde_json::to_value(&manifests.pod).unwrap();
/// assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
/// assert_eq!(pod["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"][0], "ALL");
/// ```
///
/// # Errors
///
/// A `configuration` error naming what is wrong: a profile that is not a Kubernetes one, has
/// no `kubernetes` table, or names host paths (`readOnly`) or loopback endpoints
/// (`network.allow`); a launch whose name, execution id, workspace path or command is not
/// valid, or whose environment names a variable the profile does not allow.
pub fn manifests(profile: &SandboxProfile, launch: &PodLaunch) -> Result<Manifests, HarnessError> {
    let k8s = check(profile, launch)?;
    let labels = labels(launch);
    let metadata = ObjectMeta {
        name: Some(launch.name.clone()),
        namespace: Some(k8s.namespace.clone()),
        labels: Some(labels),
        ..ObjectMeta::default()
    };
    Ok(Manifests {
        pod: pod(profile, k8s, launch, metadata.clone()),
        network_policy: network_policy(k8s, launch, metadata),
    })
}

/// The profile's Kubernetes settings, once profile and launch are checked.
fn check<'a>(
    profile: &'a SandboxProfile,
    launch: &PodLaunch,
) -> Result<&'a KubernetesProfile, HarnessError> {
    if profile.backend != Backend::Kubernetes {
        return Err(invalid(format!(
            "the sandbox profile's backend is `{}`: Kubernetes manifests are made of a \
             profile with backend = \"kubernetes\"",
            serde_json::to_value(profile.backend)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        )));
    }
    let k8s = profile.kubernetes.as_ref().ok_or_else(|| {
        invalid(
            "a profile with backend = \"kubernetes\" needs its `kubernetes` table (namespace \
             and image at least)"
                .to_owned(),
        )
    })?;
    k8s.check().map_err(invalid)?;
    if let Some(path) = profile.read_only.first() {
        return Err(invalid(format!(
            "readOnly path `{}`: a Kubernetes sandbox sees no host path; put what the agent \
             needs in the worker image (kubernetes.image)",
            path.display()
        )));
    }
    if let Some(endpoint) = profile.network.allow.first() {
        return Err(invalid(format!(
            "network.allow `{endpoint}`: loopback endpoints are relayed only into a local \
             sandbox; a Kubernetes profile lists what it may reach in kubernetes.egress, by \
             cluster address or pod labels"
        )));
    }
    if let Some(target) = profile.network.proxy.first() {
        return Err(invalid(format!(
            "network.proxy `{target}`: the HTTP proxy serves only a local sandbox; a \
             Kubernetes profile lists what it may reach in kubernetes.egress"
        )));
    }
    settings::dns_label("the sandbox's name", &launch.name).map_err(invalid)?;
    if launch.execution_id.is_empty() {
        return Err(invalid("the execution id is empty".to_owned()));
    }
    settings::label_value("the execution id", &launch.execution_id).map_err(invalid)?;
    check_workspace_path(&launch.workspace_path)?;
    if let Workspace::Claim(claim) = &launch.workspace {
        settings::dns_label("the workspace claim", claim).map_err(invalid)?;
    }
    match launch.command.first() {
        Some(program) if program.starts_with('/') => {}
        Some(program) => {
            return Err(invalid(format!(
                "the worker's program `{program}` must be an absolute path in the image"
            )));
        }
        None => return Err(invalid("the worker's command is empty".to_owned())),
    }
    if let Some(arg) = launch.command.iter().find(|arg| arg.contains('\0')) {
        return Err(invalid(format!(
            "the worker's argument `{}` holds a NUL",
            arg.escape_debug()
        )));
    }
    profile.check_env(launch.env.iter().map(|(name, _)| name.as_str()))?;
    for (name, value) in &launch.env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(invalid(format!(
                "environment variable `{}` must have a name without `=` and no NUL",
                name.escape_debug()
            )));
        }
    }
    Ok(k8s)
}

fn check_workspace_path(path: &Path) -> Result<(), HarnessError> {
    let text = path.to_str().unwrap_or_default();
    let ok = path.is_absolute()
        && !text.is_empty()
        && path.components().count() > 1
        && !path.starts_with("/tmp")
        && !text.contains(['\0', ':'])
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "the workspace path `{}` must be an absolute, normal path other than `/` and \
             outside `/tmp` (say `/workspace`)",
            path.display()
        )))
    }
}

fn labels(launch: &PodLaunch) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "harness-sandbox".to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "harness".to_owned(),
        ),
        (LABEL_SANDBOX.to_owned(), launch.name.clone()),
        (LABEL_EXECUTION.to_owned(), launch.execution_id.clone()),
    ])
}

fn seccomp() -> Option<SeccompProfile> {
    Some(SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    })
}

fn pod(
    profile: &SandboxProfile,
    k8s: &KubernetesProfile,
    launch: &PodLaunch,
    metadata: ObjectMeta,
) -> Pod {
    let uid = i64::from(SANDBOX_UID);
    let memory = profile.limits.memory_bytes;
    let mut resources = BTreeMap::new();
    if memory > 0 {
        resources.insert("memory".to_owned(), Quantity(memory.to_string()));
    }
    if k8s.cpu_millis > 0 {
        resources.insert("cpu".to_owned(), Quantity(format!("{}m", k8s.cpu_millis)));
    }
    let resources = (!resources.is_empty()).then(|| ResourceRequirements {
        limits: Some(resources.clone()),
        requests: Some(resources),
        ..ResourceRequirements::default()
    });
    let workspace_path = launch.workspace_path.to_string_lossy().into_owned();
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(k8s.image.clone()),
        image_pull_policy: Some(
            if k8s.image.contains("@sha256:") {
                "IfNotPresent"
            } else {
                "Always"
            }
            .to_owned(),
        ),
        command: Some(launch.command.clone()),
        env: (!launch.env.is_empty()).then(|| {
            launch
                .env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: Some(value.clone()),
                    ..EnvVar::default()
                })
                .collect()
        }),
        working_dir: Some(workspace_path.clone()),
        stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        resources,
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: Some(uid),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            seccomp_profile: seccomp(),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "workspace".to_owned(),
                mount_path: workspace_path,
                read_only: Some(false),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "tmp".to_owned(),
                mount_path: "/tmp".to_owned(),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    };
    let workspace = match &launch.workspace {
        Workspace::Claim(claim) => Volume {
            name: "workspace".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: Some(false),
            }),
            ..Volume::default()
        },
        Workspace::EmptyDir(size) => Volume {
            name: "workspace".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: size.map(|bytes| Quantity(bytes.to_string())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
    };
    let tmp = Volume {
        name: "tmp".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: (memory > 0).then(|| Quantity(memory.to_string())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    };
    let wall = profile.limits.wall_time_ms;
    Pod {
        metadata,
        spec: Some(PodSpec {
            active_deadline_seconds: (wall > 0)
                .then(|| i64::try_from(wall.div_ceil(1000)).unwrap_or(i64::MAX)),
            automount_service_account_token: Some(false),
            containers: vec![container],
            enable_service_links: Some(false),
            host_ipc: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            node_selector: (!k8s.node_selector.is_empty()).then(|| k8s.node_selector.clone()),
            restart_policy: Some("Never".to_owned()),
            runtime_class_name: k8s.runtime_class_name.clone(),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(uid),
                run_as_group: Some(uid),
                fs_group: Some(uid),
                seccomp_profile: seccomp(),
                ..PodSecurityContext::default()
            }),
            service_account_name: k8s.service_account_name.clone(),
            share_process_namespace: Some(false),
            termination_grace_period_seconds: Some(0),
            tolerations: (!k8s.tolerations.is_empty()).then(|| {
                k8s.tolerations
                    .iter()
                    .map(|t| ApiToleration {
                        key: t.key.clone(),
                        operator: t.operator.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        ..ApiToleration::default()
                    })
                    .collect()
            }),
            volumes: Some(vec![workspace, tmp]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn matching(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.clone()),
        ..LabelSelector::default()
    }
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(port))),
        protocol: Some("TCP".to_owned()),
        ..NetworkPolicyPort::default()
    }
}

fn network_policy(
    k8s: &KubernetesProfile,
    launch: &PodLaunch,
    metadata: ObjectMeta,
) -> ApiNetworkPolicy {
    let mut egress: Vec<NetworkPolicyEgressRule> = k8s
        .egress
        .iter()
        .map(|allowed| {
            let peer = match &allowed.to {
                EgressTo::Network(cidr) => NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: cidr.to_string(),
                        except: None,
                    }),
                    ..NetworkPolicyPeer::default()
                },
                EgressTo::Pods { namespace, labels } => NetworkPolicyPeer {
                    namespace_selector: namespace.as_ref().map(|ns| {
                        matching(&BTreeMap::from([(
                            "kubernetes.io/metadata.name".to_owned(),
                            ns.clone(),
                        )]))
                    }),
                    pod_selector: Some(matching(labels)),
                    ..NetworkPolicyPeer::default()
                },
            };
            NetworkPolicyEgressRule {
                to: Some(vec![peer]),
                ports: Some(vec![tcp(allowed.port)]),
            }
        })
        .collect();
    if k8s.needs_dns() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(matching(&BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    "kube-system".to_owned(),
                )]))),
                pod_selector: Some(matching(&BTreeMap::from([(
                    "k8s-app".to_owned(),
                    "kube-dns".to_owned(),
                )]))),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![
                NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    protocol: Some("UDP".to_owned()),
                    ..NetworkPolicyPort::default()
                },
                tcp(53),
            ]),
        });
    }
    ApiNetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(matching(&BTreeMap::from([(
                LABEL_SANDBOX.to_owned(),
                launch.name.clone(),
            )]))),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(Vec::new()),
            egress: Some(egress),
        }),
    }
}

/// The refusal of a local sandbox for a Kubernetes profile.
pub(crate) fn no_local_sandbox() -> HarnessError {
    crate::profile::unavailable(
        "a sandbox profile with backend = \"kubernetes\" cannot run a program on this host: \
         local sandboxes need backend = \"bubblewrap\"",
        "the kubernetes backend only builds and checks a sandbox's Pod and NetworkPolicy \
         (harness_sandbox::kubernetes::manifests); applying them to a cluster and the worker \
         protocol over the pod's attach stream are not implemented yet"
            .to_owned(),
    )
}
