//! The `kubernetes` table of a profile: where the operator's sandbox pods run and what they may
//! reach, each field checked when the profile is read.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The Kubernetes settings of a profile (`[sandbox.profiles.<name>.kubernetes]`), the
/// operator's alone: a caller or an adapter descriptor never supplies any of it.
///
/// ```
/// use harness_sandbox::KubernetesProfile;
/// let k8s: KubernetesProfile = serde_json::from_value(serde_json::json!({
///     "namespace": "agents",
///     "image": "registry.example/harness-worker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
///     "runtimeClassName": "gvisor",
///     "egress": [{"cidr": "10.20.0.0/16", "port": 443}]
/// })).unwrap();
/// assert_eq!(k8s.runtime_class_name.as_deref(), Some("gvisor"));
///
/// let err = serde_json::from_value::<KubernetesProfile>(serde_json::json!({
///     "namespace": "agents", "image": "worker:1", "privileged": true
/// })).unwrap_err();
/// assert!(err.to_string().contains("unknown field `privileged`"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    try_from = "RawProfile",
    into = "RawProfile"
)]
#[non_exhaustive]
pub struct KubernetesProfile {
    /// The namespace the sandbox pods run in (a DNS-1123 label). A namespace of their own is
    /// best: the NetworkPolicy selects only the sandbox's pod, but quotas and admission
    /// (Pod Security `restricted`) are set per namespace.
    pub namespace: String,
    /// The operator's worker image, which holds the worker and the agents it runs: pin it by
    /// digest (`…@sha256:…`), so that a node always runs the image the operator vetted.
    pub image: String,
    /// The RuntimeClass that runs the pods (`gvisor`, `kata`, …: a sandboxing runtime the
    /// cluster's operator installed); none: the cluster's default runtime.
    pub runtime_class_name: Option<String>,
    /// The pod's service account; none: the namespace's `default`. Its API token is never
    /// mounted (`automountServiceAccountToken: false`) whichever is named.
    pub service_account_name: Option<String>,
    /// Node labels the pods must be scheduled on (the nodes that have the runtime class's
    /// handler, say).
    pub node_selector: BTreeMap<String, String>,
    /// Taints of those nodes the pods tolerate.
    pub tolerations: Vec<Toleration>,
    /// CPU the sandbox may use, in thousandths of a core (the container's limit and request);
    /// `0`: no limit. Default `1000`, one core.
    pub cpu_millis: u32,
    /// What the sandbox may connect to: nothing unless listed. See [`Egress`].
    pub egress: Vec<Egress>,
}

impl KubernetesProfile {
    /// Settings with a namespace and an image and nothing else: the cluster's default runtime,
    /// the namespace's `default` service account (no token), one core, no egress.
    ///
    /// # Errors
    ///
    /// The field that is invalid, and why.
    pub fn new(namespace: impl Into<String>, image: impl Into<String>) -> Result<Self, String> {
        let profile = Self {
            namespace: namespace.into(),
            image: image.into(),
            runtime_class_name: None,
            service_account_name: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            cpu_millis: DEFAULT_CPU_MILLIS,
            egress: Vec::new(),
        };
        profile.check()?;
        Ok(profile)
    }

    /// Names the RuntimeClass.
    #[must_use]
    pub fn runtime_class(mut self, name: impl Into<String>) -> Self {
        self.runtime_class_name = Some(name.into());
        self
    }

    /// Allows an egress.
    #[must_use]
    pub fn allow(mut self, egress: Egress) -> Self {
        self.egress.push(egress);
        self
    }

    /// Whether the sandbox reaches something by a Service's name, and so needs DNS.
    #[must_use]
    pub fn needs_dns(&self) -> bool {
        self.egress
            .iter()
            .any(|e| matches!(e.to, EgressTo::Pods { .. }))
    }

    /// Checks every field; the error names the field (`kubernetes.<field>`) and what would be
    /// right.
    ///
    /// # Errors
    ///
    /// The first invalid field.
    pub fn check(&self) -> Result<(), String> {
        dns_label("kubernetes.namespace", &self.namespace)?;
        if self.image.is_empty()
            || self.image.len() > 1024
            || self
                .image
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "kubernetes.image `{}` must be an image reference (registry/name:tag or \
                 registry/name@sha256:digest) without spaces",
                self.image.escape_debug()
            ));
        }
        if let Some(name) = &self.runtime_class_name {
            dns_subdomain("kubernetes.runtimeClassName", name)?;
        }
        if let Some(name) = &self.service_account_name {
            dns_subdomain("kubernetes.serviceAccountName", name)?;
        }
        for (key, value) in &self.node_selector {
            label_key("kubernetes.nodeSelector", key)?;
            label_value(&format!("kubernetes.nodeSelector.{key}"), value)?;
        }
        for (i, toleration) in self.tolerations.iter().enumerate() {
            toleration.check(&format!("kubernetes.tolerations[{i}]"))?;
        }
        for (i, egress) in self.egress.iter().enumerate() {
            egress.check(&format!("kubernetes.egress[{i}]"))?;
        }
        Ok(())
    }
}

const DEFAULT_CPU_MILLIS: u32 = 1000;

/// The table as written, before it is checked.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProfile {
    namespace: String,
    image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tolerations: Vec<Toleration>,
    #[serde(default = "default_cpu")]
    cpu_millis: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    egress: Vec<Egress>,
}

const fn default_cpu() -> u32 {
    DEFAULT_CPU_MILLIS
}

impl TryFrom<RawProfile> for KubernetesProfile {
    type Error = String;

    fn try_from(raw: RawProfile) -> Result<Self, String> {
        let profile = Self {
            namespace: raw.namespace,
            image: raw.image,
            runtime_class_name: raw.runtime_class_name,
            service_account_name: raw.service_account_name,
            node_selector: raw.node_selector,
            tolerations: raw.tolerations,
            cpu_millis: raw.cpu_millis,
            egress: raw.egress,
        };
        profile.check()?;
        Ok(profile)
    }
}

impl From<KubernetesProfile> for RawProfile {
    fn from(p: KubernetesProfile) -> Self {
        Self {
            namespace: p.namespace,
            image: p.image,
            runtime_class_name: p.runtime_class_name,
            service_account_name: p.service_account_name,
            node_selector: p.node_selector,
            tolerations: p.tolerations,
            cpu_millis: p.cpu_millis,
            egress: p.egress,
        }
    }
}

/// A taint of the sandbox nodes that the pods tolerate (the API's `Toleration`, without
/// `tolerationSeconds`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Toleration {
    /// The taint's key; none with `operator = "Exists"`: every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The taint's value, with `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; none: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
}

impl Toleration {
    fn check(&self, at: &str) -> Result<(), String> {
        if let Some(key) = &self.key {
            label_key(&format!("{at}.key"), key)?;
        }
        match self.operator.as_deref() {
            None | Some("Equal") => {
                if self.key.is_none() {
                    return Err(format!(
                        "{at}: a toleration without a `key` must have operator = \"Exists\""
                    ));
                }
                if let Some(value) = &self.value {
                    label_value(&format!("{at}.value"), value)?;
                }
            }
            Some("Exists") => {
                if self.value.is_some() {
                    return Err(format!("{at}: operator = \"Exists\" takes no `value`"));
                }
            }
            Some(other) => {
                return Err(format!(
                    "{at}.operator `{other}` must be \"Equal\" or \"Exists\""
                ));
            }
        }
        match self.effect.as_deref() {
            None | Some("NoSchedule" | "PreferNoSchedule" | "NoExecute") => Ok(()),
            Some(other) => Err(format!(
                "{at}.effect `{other}` must be \"NoSchedule\", \"PreferNoSchedule\" or \
                 \"NoExecute\""
            )),
        }
    }
}

/// One thing a Kubernetes sandbox may connect to, over TCP: a network by address, or the pods
/// behind a Service, by their labels.
///
/// On a single host the profile's [`NetworkPolicy`](crate::NetworkPolicy) allows loopback
/// endpoints that the control plane relays into the sandbox; a pod has no such relay, and a
/// NetworkPolicy matches addresses and pod labels, never host names. So a Kubernetes profile
/// lists its egress here, as cluster addresses:
///
/// - `{ cidr = "10.20.0.0/16", port = 443 }`: a network (or one address, `10.20.0.7`), for
///   endpoints outside the cluster's pod network. A Service's ClusterIP is not one: most
///   network plugins apply policies after the ClusterIP is translated to a pod's address.
/// - `{ namespace = "models", pods = { app = "model-server" }, port = 4010 }`: the pods with
///   those labels in that namespace (the sandbox's own if none): what a Service in front of
///   them sends to. The worker reaches it by the Service's name, so a profile with one of
///   these also allows DNS, to the cluster's DNS pods (`k8s-app: kube-dns` in `kube-system`).
///
/// ```
/// use harness_sandbox::Egress;
/// let network: Egress = serde_json::from_value(serde_json::json!({"cidr": "10.20.0.7", "port": 443})).unwrap();
/// assert_eq!(serde_json::to_value(&network).unwrap()["cidr"], "10.20.0.7/32");
/// let err = serde_json::from_value::<Egress>(serde_json::json!({"namespace": "models", "port": 4010})).unwrap_err();
/// assert!(err.to_string().contains("`pods`"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawEgress", into = "RawEgress")]
#[non_exhaustive]
pub struct Egress {
    /// Where.
    pub to: EgressTo,
    /// The TCP port.
    pub port: u16,
}

/// Where an [`Egress`] goes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EgressTo {
    /// A network, by address.
    Network(Cidr),
    /// The pods with these labels, in this namespace (the sandbox's own if none).
    Pods {
        /// The namespace.
        namespace: Option<String>,
        /// Their labels: at least one.
        labels: BTreeMap<String, String>,
    },
}

impl Egress {
    /// To a network.
    #[must_use]
    pub fn network(cidr: Cidr, port: u16) -> Self {
        Self {
            to: EgressTo::Network(cidr),
            port,
        }
    }

    /// To the pods with these labels.
    #[must_use]
    pub fn pods(
        namespace: Option<String>,
        labels: impl IntoIterator<Item = (String, String)>,
        port: u16,
    ) -> Self {
        Self {
            to: EgressTo::Pods {
                namespace,
                labels: labels.into_iter().collect(),
            },
            port,
        }
    }

    fn check(&self, at: &str) -> Result<(), String> {
        if self.port == 0 {
            return Err(format!("{at}.port must be 1 to 65535"));
        }
        match &self.to {
            EgressTo::Network(_) => Ok(()),
            EgressTo::Pods { namespace, labels } => {
                if let Some(namespace) = namespace {
                    dns_label(&format!("{at}.namespace"), namespace)?;
                }
                if labels.is_empty() {
                    return Err(format!(
                        "{at}: `pods` must name at least one label (no labels would allow \
                         every pod of the namespace)"
                    ));
                }
                for (key, value) in labels {
                    label_key(&format!("{at}.pods"), key)?;
                    label_value(&format!("{at}.pods.{key}"), value)?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cidr: Option<Cidr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pods: Option<BTreeMap<String, String>>,
    port: u16,
}

impl TryFrom<RawEgress> for Egress {
    type Error = String;

    fn try_from(raw: RawEgress) -> Result<Self, String> {
        let egress = match (raw.cidr, raw.namespace, raw.pods) {
            (Some(cidr), None, None) => Self::network(cidr, raw.port),
            (None, namespace, Some(labels)) => Self::pods(namespace, labels, raw.port),
            (Some(_), _, _) => {
                return Err(
                    "an egress names either a `cidr` or `pods` (with an optional `namespace`), \
                     not both"
                        .to_owned(),
                );
            }
            (None, _, None) => {
                return Err(
                    "an egress needs a `cidr` (a network by address) or `pods` (the labels of \
                     the pods behind a Service), and a `port`"
                        .to_owned(),
                );
            }
        };
        egress.check("kubernetes.egress")?;
        Ok(egress)
    }
}

impl From<Egress> for RawEgress {
    fn from(e: Egress) -> Self {
        match e.to {
            EgressTo::Network(cidr) => Self {
                cidr: Some(cidr),
                namespace: None,
                pods: None,
                port: e.port,
            },
            EgressTo::Pods { namespace, labels } => Self {
                cidr: None,
                namespace,
                pods: Some(labels),
                port: e.port,
            },
        }
    }
}

/// A network by address: `10.20.0.0/16`, or one address (`10.20.0.7`, `/32`; `fd00::7`,
/// `/128`). Its host bits must be zero, and it cannot be everything (`/0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    /// The network's address.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, prefix)) => (ip, Some(prefix)),
            None => (s, None),
        };
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("`{s}` is not an address or network (`10.20.0.0/16`)"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?,
        };
        if prefix == 0 {
            return Err(format!(
                "`{s}` would allow every address; list the networks the sandbox needs"
            ));
        }
        let host_bits_zero = match ip {
            IpAddr::V4(v4) => u32::from(v4).checked_shl(u32::from(prefix)).unwrap_or(0) == 0,
            IpAddr::V6(v6) => u128::from(v6).checked_shl(u32::from(prefix)).unwrap_or(0) == 0,
        };
        if !host_bits_zero {
            return Err(format!(
                "`{s}`: the address has bits set past the prefix; write the network's own \
                 address"
            ));
        }
        if ip.is_loopback() || ip.is_unspecified() {
            return Err(format!(
                "`{s}`: loopback is the pod's own; a Kubernetes sandbox reaches endpoints by \
                 their cluster addresses"
            ));
        }
        Ok(Self { ip, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A DNS-1123 label: a namespace, a pod's name.
pub(crate) fn dns_label(field: &str, value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field} `{}` must be a DNS-1123 label: 1 to 63 of a-z, 0-9 and `-`, starting and \
             ending with a letter or digit",
            value.escape_debug()
        ))
    }
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
fn dns_subdomain(field: &str, value: &str) -> Result<(), String> {
    if value.len() <= 253 && value.split('.').all(|part| dns_label(field, part).is_ok()) {
        Ok(())
    } else {
        Err(format!(
            "{field} `{}` must be a DNS-1123 subdomain: labels of a-z, 0-9 and `-` joined by \
             `.`, at most 253 characters",
            value.escape_debug()
        ))
    }
}

/// A label's key: an optional DNS subdomain prefix and `/`, and a name.
fn label_key(field: &str, key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns_subdomain(&format!("{field}: the prefix of label key `{key}`"), prefix)?;
    }
    if name.is_empty() || !label_chars(name) {
        return Err(format!(
            "{field}: label key `{}` must be a name (1 to 63 of a-z, A-Z, 0-9, `-`, `_`, `.`, \
             starting and ending with a letter or digit), optionally after a DNS prefix and `/`",
            key.escape_debug()
        ));
    }
    Ok(())
}

/// A label's value: empty, or what a label key's name may be.
pub(crate) fn label_value(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || label_chars(value) {
        Ok(())
    } else {
        Err(format!(
            "{field} `{}` must be a label value: at most 63 of a-z, A-Z, 0-9, `-`, `_`, `.`, \
             starting and ending with a letter or digit",
            value.escape_debug()
        ))
    }
}

fn label_chars(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}
