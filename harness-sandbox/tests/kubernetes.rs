//! The Kubernetes backend's manifests: valid for the API (checked against its JSON schemas,
//! no cluster needed), each hardening promise kept, bad profiles refused by name, the same
//! manifests for the same input.

use std::path::Path;

use harness_core::error::ErrorCode;
use harness_sandbox::kubernetes::{self, Cidr, Manifests, PodLaunch, Workspace};
use harness_sandbox::{Egress, KubernetesProfile, Launch, Sandbox, SandboxLimits, SandboxProfile};
use serde_json::{Value, json};

const VERSIONS: [&str; 2] = ["v1.33.0", "v1.37.0"];
const IMAGE: &str = "registry.example/harness-worker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn schema(version: &str, file: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/kubernetes-schemas")
        .join(version)
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The schema's complaints about an object, one line each.
fn violations(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn assert_valid(manifests: &Manifests) {
    let pod = serde_json::to_value(&manifests.pod).unwrap();
    let policy = serde_json::to_value(&manifests.network_policy).unwrap();
    for version in VERSIONS {
        let bad = violations(&schema(version, "pod-v1.json"), &pod);
        assert!(
            bad.is_empty(),
            "Pod invalid for {version}: {bad:#?}\n{pod:#}"
        );
        let bad = violations(
            &schema(version, "networkpolicy-networking-v1.json"),
            &policy,
        );
        assert!(
            bad.is_empty(),
            "NetworkPolicy invalid for {version}: {bad:#?}\n{policy:#}"
        );
    }
}

/// A profile with every setting the operator can give.
fn full() -> SandboxProfile {
    serde_json::from_value(json!({
        "backend": "kubernetes",
        "env": ["GEMINI_API_KEY"],
        "limits": {"wallTimeMs": 600_500, "memoryBytes": 2_147_483_648_u64},
        "kubernetes": {
            "namespace": "harness-sandboxes",
            "image": IMAGE,
            "runtimeClassName": "gvisor",
            "serviceAccountName": "sandbox-worker",
            "cpuMillis": 2000,
            "nodeSelector": {"sandbox.example/runtime": "gvisor"},
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            "egress": [
                {"namespace": "models", "pods": {"app": "model-server"}, "port": 4010},
                {"cidr": "10.20.0.0/16", "port": 443}
            ]
        }
    }))
    .unwrap()
}

fn minimal() -> SandboxProfile {
    SandboxProfile::kubernetes(KubernetesProfile::new("agents", "worker:1").unwrap())
}

fn launch() -> PodLaunch {
    PodLaunch::new(
        "sbx-0001",
        "exec_01J9Z3",
        Workspace::Claim("ws-0001".to_owned()),
        "/workspace",
    )
    .command(["/usr/local/bin/harness-worker", "--stdio"])
    .env("GEMINI_API_KEY", "test-key")
    .env("LANG", "C.UTF-8")
}

fn pod_of(profile: &SandboxProfile, launch: &PodLaunch) -> Value {
    serde_json::to_value(kubernetes::manifests(profile, launch).unwrap().pod).unwrap()
}

fn policy_of(profile: &SandboxProfile) -> Value {
    serde_json::to_value(
        kubernetes::manifests(profile, &launch_minimal())
            .unwrap()
            .network_policy,
    )
    .unwrap()
}

fn container(pod: &Value) -> &Value {
    let containers = pod["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container: {containers:#?}");
    &containers[0]
}

// Valid for the API.

#[test]
fn manifests_are_valid_for_kubernetes_1_33_and_1_37() {
    assert_valid(&kubernetes::manifests(&full(), &launch()).unwrap());
    let bare = PodLaunch::new("s", "e", Workspace::EmptyDir(None), "/w").command(["/w/run"]);
    assert_valid(&kubernetes::manifests(&minimal(), &bare).unwrap());
    let sized = PodLaunch::new("s", "e", Workspace::EmptyDir(Some(1 << 30)), "/srv/work")
        .command(["/bin/worker"]);
    let mut limits = SandboxLimits::default();
    limits.wall_time_ms = 0;
    limits.memory_bytes = 0;
    let unlimited = minimal().limits(limits);
    assert_valid(&kubernetes::manifests(&unlimited, &sized).unwrap());
}

#[test]
fn the_schemas_catch_what_the_api_would_refuse() {
    // The check is only worth something if the schemas refuse: a misspelt field (strict: every
    // object closed), a wrong type, a missing required field.
    let mut pod = pod_of(&full(), &launch());
    pod["spec"]["containers"][0]["securityContext"]["privileged_"] = json!(true);
    pod["spec"]["activeDeadlineSeconds"] = json!("600");
    pod["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let mut policy = policy_of(&full());
    policy["spec"]["egress"][0]["ports"][0]["protocol"] = json!(6);
    for version in VERSIONS {
        let bad = violations(&schema(version, "pod-v1.json"), &pod).join("\n");
        assert!(bad.contains("privileged_"), "{version}: {bad}");
        assert!(bad.contains("activeDeadlineSeconds"), "{version}: {bad}");
        assert!(
            bad.contains("\"name\" is a required property"),
            "{version}: {bad}"
        );
        let bad = violations(
            &schema(version, "networkpolicy-networking-v1.json"),
            &policy,
        );
        assert!(!bad.is_empty(), "{version}: a numeric protocol passed");
    }
}

// Each hardening promise, one test each: a dropped field fails its test.

#[test]
fn runs_as_the_sandbox_user_never_root() {
    let pod = pod_of(&full(), &launch());
    for context in [
        &pod["spec"]["securityContext"],
        &container(&pod)["securityContext"],
    ] {
        assert_eq!(context["runAsNonRoot"], true, "{context:#}");
        assert_eq!(context["runAsUser"], 1000, "{context:#}");
        assert_eq!(context["runAsGroup"], 1000, "{context:#}");
    }
    assert_eq!(pod["spec"]["securityContext"]["fsGroup"], 1000);
}

#[test]
fn root_filesystem_is_read_only() {
    let pod = pod_of(&full(), &launch());
    assert_eq!(
        container(&pod)["securityContext"]["readOnlyRootFilesystem"],
        true
    );
}

#[test]
fn no_privilege_escalation_no_privileged() {
    let pod = pod_of(&full(), &launch());
    let context = &container(&pod)["securityContext"];
    assert_eq!(context["allowPrivilegeEscalation"], false);
    assert_eq!(context["privileged"], false);
}

#[test]
fn every_capability_is_dropped_none_added() {
    let pod = pod_of(&full(), &launch());
    let caps = &container(&pod)["securityContext"]["capabilities"];
    assert_eq!(caps["drop"], json!(["ALL"]));
    assert!(caps.get("add").is_none(), "{caps:#}");
}

#[test]
fn seccomp_is_the_runtime_default() {
    let pod = pod_of(&full(), &launch());
    for context in [
        &pod["spec"]["securityContext"],
        &container(&pod)["securityContext"],
    ] {
        assert_eq!(
            context["seccompProfile"],
            json!({"type": "RuntimeDefault"}),
            "{context:#}"
        );
    }
}

#[test]
fn no_host_namespace_is_shared() {
    let spec = pod_of(&full(), &launch())["spec"].clone();
    for field in ["hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"] {
        assert_eq!(spec[field], false, "{field}");
    }
    let volumes = spec["volumes"].as_array().unwrap();
    assert!(
        volumes.iter().all(|v| v.get("hostPath").is_none()),
        "{volumes:#?}"
    );
}

#[test]
fn no_service_account_token_is_mounted() {
    let spec = pod_of(&full(), &launch())["spec"].clone();
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["serviceAccountName"], "sandbox-worker");
    assert_eq!(spec["enableServiceLinks"], false);
    // Without one named: the namespace's default account, still without a token.
    let spec = pod_of(&minimal(), &launch_minimal())["spec"].clone();
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert!(spec.get("serviceAccountName").is_none(), "{spec:#}");
}

fn launch_minimal() -> PodLaunch {
    PodLaunch::new(
        "sbx-0001",
        "exec-2",
        Workspace::EmptyDir(None),
        "/workspace",
    )
    .command(["/usr/local/bin/harness-worker"])
}

#[test]
fn memory_and_cpu_are_limited_and_requested_alike() {
    let pod = pod_of(&full(), &launch());
    let resources = &container(&pod)["resources"];
    let expected = json!({"cpu": "2000m", "memory": "2147483648"});
    assert_eq!(resources["limits"], expected);
    assert_eq!(resources["requests"], expected);
    // The defaults: 4 GiB, one core.
    let pod = pod_of(&minimal(), &launch_minimal());
    assert_eq!(
        container(&pod)["resources"]["limits"],
        json!({"cpu": "1000m", "memory": "4294967296"})
    );
}

#[test]
fn wall_time_is_the_active_deadline_rounded_up() {
    assert_eq!(
        pod_of(&full(), &launch())["spec"]["activeDeadlineSeconds"],
        601
    );
    let mut limits = SandboxLimits::default();
    limits.wall_time_ms = 0;
    let unlimited = minimal().limits(limits);
    let spec = pod_of(&unlimited, &launch_minimal())["spec"].clone();
    assert!(spec.get("activeDeadlineSeconds").is_none(), "{spec:#}");
}

#[test]
fn never_restarts_and_dies_at_once() {
    let spec = pod_of(&full(), &launch())["spec"].clone();
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["terminationGracePeriodSeconds"], 0);
}

#[test]
fn workspace_is_read_write_at_its_path_and_tmp_is_fresh() {
    let pod = pod_of(&full(), &launch());
    let c = container(&pod);
    assert_eq!(c["workingDir"], "/workspace");
    assert_eq!(
        c["volumeMounts"],
        json!([
            {"name": "workspace", "mountPath": "/workspace", "readOnly": false},
            {"name": "tmp", "mountPath": "/tmp"}
        ])
    );
    assert_eq!(
        pod["spec"]["volumes"],
        json!([
            {"name": "workspace", "persistentVolumeClaim": {"claimName": "ws-0001", "readOnly": false}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "2147483648"}}
        ])
    );
    let pod = pod_of(&minimal(), &launch_minimal());
    assert_eq!(
        pod["spec"]["volumes"][0],
        json!({"name": "workspace", "emptyDir": {}})
    );
}

#[test]
fn stdin_is_open_once_without_a_terminal() {
    let pod = pod_of(&full(), &launch());
    let c = container(&pod);
    assert_eq!(
        (&c["stdin"], &c["stdinOnce"], &c["tty"]),
        (&json!(true), &json!(true), &json!(false))
    );
}

#[test]
fn labels_name_the_execution_and_the_sandbox() {
    let manifests = kubernetes::manifests(&full(), &launch()).unwrap();
    for metadata in [&manifests.pod.metadata, &manifests.network_policy.metadata] {
        let metadata = serde_json::to_value(metadata).unwrap();
        assert_eq!(metadata["name"], "sbx-0001");
        assert_eq!(metadata["namespace"], "harness-sandboxes");
        assert_eq!(metadata["labels"][kubernetes::LABEL_SANDBOX], "sbx-0001");
        assert_eq!(
            metadata["labels"][kubernetes::LABEL_EXECUTION],
            "exec_01J9Z3"
        );
    }
}

#[test]
fn the_operators_image_runtime_class_and_nodes() {
    let pod = pod_of(&full(), &launch());
    let spec = &pod["spec"];
    assert_eq!(container(&pod)["image"], IMAGE);
    // Pinned by digest: a node's copy is the one.
    assert_eq!(container(&pod)["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        container(&pod)["command"],
        json!(["/usr/local/bin/harness-worker", "--stdio"])
    );
    assert_eq!(spec["runtimeClassName"], "gvisor");
    assert_eq!(
        spec["nodeSelector"],
        json!({"sandbox.example/runtime": "gvisor"})
    );
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // A tag may move: pulled again.
    let pod = pod_of(&minimal(), &launch_minimal());
    assert_eq!(container(&pod)["imagePullPolicy"], "Always");
    assert!(pod["spec"].get("runtimeClassName").is_none());
}

// The NetworkPolicy.

#[test]
fn network_policy_denies_all_ingress_and_selects_only_its_pod() {
    let policy = policy_of(&full());
    let spec = &policy["spec"];
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(spec["ingress"], json!([]));
    assert_eq!(
        spec["podSelector"],
        json!({"matchLabels": {kubernetes::LABEL_SANDBOX: "sbx-0001"}})
    );
}

#[test]
fn no_egress_without_an_allowlist_not_even_dns() {
    let policy = policy_of(&minimal());
    assert_eq!(policy["spec"]["egress"], json!([]));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
}

#[test]
fn egress_only_to_the_allowed_endpoints() {
    let network = minimal();
    let mut network = network;
    network.kubernetes = Some(
        KubernetesProfile::new("agents", "worker:1")
            .unwrap()
            .allow(Egress::network("10.20.0.7".parse().unwrap(), 443)),
    );
    // By address: no DNS.
    assert_eq!(
        policy_of(&network)["spec"]["egress"],
        json!([{"to": [{"ipBlock": {"cidr": "10.20.0.7/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}])
    );
    // By pods behind a Service's name: those pods, and DNS.
    assert_eq!(
        policy_of(&full())["spec"]["egress"],
        json!([
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
                    "podSelector": {"matchLabels": {"app": "model-server"}}
                }],
                "ports": [{"port": 4010, "protocol": "TCP"}]
            },
            {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 443, "protocol": "TCP"}]},
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}
                }],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
            }
        ])
    );
}

// Refusals, each naming what was wrong.

fn refused(profile: Value) -> String {
    serde_json::from_value::<SandboxProfile>(profile)
        .map(|p| format!("accepted: {p:?}"))
        .unwrap_or_else(|e| e.to_string())
}

fn k8s_with(extra: Value) -> Value {
    let mut table = json!({"namespace": "agents", "image": "worker:1"});
    let Value::Object(extra) = extra else {
        panic!("fields of the kubernetes table: {extra}")
    };
    table.as_object_mut().unwrap().extend(extra);
    json!({"backend": "kubernetes", "kubernetes": table})
}

#[test]
fn a_privileged_flag_or_pod_field_in_the_profile_is_refused_by_name() {
    for field in [
        "privileged",
        "hostNetwork",
        "hostPID",
        "hostPath",
        "volumes",
        "command",
        "securityContext",
        "networkPolicy",
    ] {
        let err = refused(k8s_with(json!({field: true})));
        assert!(
            err.contains(&format!("unknown field `{field}`")),
            "{field}: {err}"
        );
    }
    let err = refused(json!({"backend": "kubernetes", "privileged": true}));
    assert!(err.contains("unknown field `privileged`"), "{err}");
    let err = refused(k8s_with(
        json!({"egress": [{"cidr": "10.0.0.0/8", "port": 1, "hostPort": 2}]}),
    ));
    assert!(err.contains("unknown field `hostPort`"), "{err}");
    let err = refused(k8s_with(
        json!({"tolerations": [{"key": "a", "tolerationSeconds": 1}]}),
    ));
    assert!(err.contains("unknown field `tolerationSeconds`"), "{err}");
}

#[test]
fn a_host_path_in_a_kubernetes_profile_is_refused_by_name() {
    let profile: SandboxProfile = serde_json::from_value(json!({
        "backend": "kubernetes",
        "readOnly": ["/opt/node"],
        "kubernetes": {"namespace": "agents", "image": "worker:1"}
    }))
    .unwrap();
    let err = kubernetes::manifests(&profile, &launch_minimal()).unwrap_err();
    assert!(
        err.message().contains("readOnly path `/opt/node`"),
        "{}",
        err.message()
    );
}

#[test]
fn loopback_endpoints_are_refused_pointing_at_egress() {
    let profile = minimal().allow("127.0.0.1:4010".parse().unwrap());
    let err = kubernetes::manifests(&profile, &launch_minimal()).unwrap_err();
    assert!(
        err.message().contains("network.allow `127.0.0.1:4010`")
            && err.message().contains("kubernetes.egress"),
        "{}",
        err.message()
    );
}

#[test]
fn proxy_targets_are_refused_pointing_at_egress() {
    let profile = minimal().proxy("api.example.com:443".parse().unwrap());
    let err = kubernetes::manifests(&profile, &launch_minimal()).unwrap_err();
    assert!(
        err.message()
            .contains("network.proxy `api.example.com:443`")
            && err.message().contains("kubernetes.egress"),
        "{}",
        err.message()
    );
}

#[test]
fn invalid_settings_are_refused_naming_the_field() {
    for (extra, named) in [
        (
            json!({"namespace": "Agents_1"}),
            "kubernetes.namespace `Agents_1`",
        ),
        (json!({"image": "worker 1"}), "kubernetes.image"),
        (json!({"image": ""}), "kubernetes.image"),
        (
            json!({"runtimeClassName": "gVisor"}),
            "kubernetes.runtimeClassName `gVisor`",
        ),
        (
            json!({"serviceAccountName": "a/b"}),
            "kubernetes.serviceAccountName `a/b`",
        ),
        (
            json!({"nodeSelector": {"zone": "a b"}}),
            "kubernetes.nodeSelector.zone",
        ),
        (
            json!({"nodeSelector": {"-bad": "x"}}),
            "kubernetes.nodeSelector",
        ),
        (
            json!({"tolerations": [{"key": "a", "operator": "Maybe"}]}),
            "kubernetes.tolerations[0].operator `Maybe`",
        ),
        (
            json!({"tolerations": [{"operator": "Equal"}]}),
            "kubernetes.tolerations[0]",
        ),
        (
            json!({"tolerations": [{"key": "a", "effect": "Evict"}]}),
            "kubernetes.tolerations[0].effect `Evict`",
        ),
        (
            json!({"egress": [{"cidr": "0.0.0.0/0", "port": 443}]}),
            "every address",
        ),
        (
            json!({"egress": [{"cidr": "10.0.0.1/8", "port": 443}]}),
            "bits set past the prefix",
        ),
        (
            json!({"egress": [{"cidr": "127.0.0.1", "port": 443}]}),
            "loopback",
        ),
        (
            json!({"egress": [{"cidr": "api.example.com", "port": 443}]}),
            "`api.example.com` is not an address",
        ),
        (
            json!({"egress": [{"cidr": "10.0.0.0/8", "port": 0}]}),
            "port must be 1 to 65535",
        ),
        (
            json!({"egress": [{"namespace": "models", "pods": {}, "port": 1}]}),
            "`pods` must name at least one label",
        ),
        (
            json!({"egress": [{"cidr": "10.0.0.0/8", "pods": {"a": "b"}, "port": 1}]}),
            "not both",
        ),
    ] {
        let err = refused(k8s_with(extra.clone()));
        assert!(err.contains(named), "{extra}: `{named}` not in: {err}");
    }
    let err = refused(json!({"backend": "kubernetes", "kubernetes": {"image": "worker:1"}}));
    assert!(err.contains("missing field `namespace`"), "{err}");
}

#[test]
fn the_profile_and_the_backend_must_agree() {
    let bare: SandboxProfile = serde_json::from_value(json!({"backend": "kubernetes"})).unwrap();
    let err = kubernetes::manifests(&bare, &launch_minimal()).unwrap_err();
    assert!(
        err.message().contains("`kubernetes` table"),
        "{}",
        err.message()
    );
    let err = kubernetes::manifests(&SandboxProfile::default(), &launch_minimal()).unwrap_err();
    assert!(err.message().contains("`bubblewrap`"), "{}", err.message());
    let mixed: SandboxProfile = serde_json::from_value(json!({
        "backend": "bubblewrap",
        "kubernetes": {"namespace": "agents", "image": "worker:1"}
    }))
    .unwrap();
    let err = mixed.check(Path::new("/tmp")).unwrap_err();
    assert!(
        err.message()
            .contains("only for a profile with backend = \"kubernetes\""),
        "{}",
        err.message()
    );
}

#[test]
fn a_bad_launch_is_refused_naming_it() {
    let base = launch_minimal();
    let with = |change: &dyn Fn(&mut PodLaunch)| {
        let mut launch = base.clone();
        change(&mut launch);
        launch
    };
    let cases: [(PodLaunch, &str); 7] = [
        (
            with(&|l| l.name = "Sbx_1".into()),
            "the sandbox's name `Sbx_1`",
        ),
        (
            with(&|l| l.execution_id = "exec/1".into()),
            "the execution id `exec/1`",
        ),
        (
            with(&|l| l.workspace_path = "/".into()),
            "the workspace path `/`",
        ),
        (
            with(&|l| l.workspace_path = "/tmp/w".into()),
            "the workspace path `/tmp/w`",
        ),
        (
            with(&|l| l.workspace_path = "/w/../etc".into()),
            "the workspace path `/w/../etc`",
        ),
        (
            base.clone().command(["harness-worker"]),
            "`harness-worker` must be an absolute path",
        ),
        (
            base.clone().command(Vec::<String>::new()),
            "command is empty",
        ),
    ];
    for (launch, named) in cases {
        let err = kubernetes::manifests(&minimal(), &launch).unwrap_err();
        assert!(
            err.message().contains(named),
            "`{named}` not in: {}",
            err.message()
        );
    }
}

// The environment.

#[test]
fn env_is_exactly_the_launchs_allowed_variables() {
    // Nothing of the control plane's own environment (this test's PATH, HOME, …) is added.
    let pod = pod_of(&full(), &launch());
    assert_eq!(
        container(&pod)["env"],
        json!([
            {"name": "GEMINI_API_KEY", "value": "test-key"},
            {"name": "LANG", "value": "C.UTF-8"}
        ])
    );
    let pod = pod_of(&minimal(), &launch_minimal());
    assert!(container(&pod).get("env").is_none(), "{pod:#}");
}

#[test]
fn a_variable_the_profile_does_not_allow_is_refused_by_name() {
    let leaky = launch().env("AWS_SECRET_ACCESS_KEY", "x");
    let err = kubernetes::manifests(&full(), &leaky).unwrap_err();
    assert!(
        err.message()
            .contains("`AWS_SECRET_ACCESS_KEY` is not allowed"),
        "{}",
        err.message()
    );
    // Allowed by `full`, not by `minimal`.
    let err = kubernetes::manifests(&minimal(), &launch()).unwrap_err();
    assert!(
        err.message().contains("`GEMINI_API_KEY`"),
        "{}",
        err.message()
    );
}

// Same input, same manifests.

#[test]
fn manifests_are_deterministic() {
    let json = |profile: &SandboxProfile| {
        let m = kubernetes::manifests(profile, &launch()).unwrap();
        (
            serde_json::to_string(&m.pod).unwrap(),
            serde_json::to_string(&m.network_policy).unwrap(),
        )
    };
    let first = json(&full());
    for _ in 0..20 {
        assert_eq!(json(&full()), first);
    }
    // And from a profile written back and read again.
    let again: SandboxProfile =
        serde_json::from_value(serde_json::to_value(full()).unwrap()).unwrap();
    assert_eq!(again, full());
    assert_eq!(json(&again), first);
}

// The local backend refuses, never runs it unsandboxed.

#[tokio::test]
async fn spawning_a_kubernetes_profile_locally_is_refused() {
    let sandbox = Sandbox::with_bwrap(full(), "/usr/bin/bwrap");
    let err = sandbox
        .spawn(Launch::new("/usr/bin/true", std::env::temp_dir()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::SANDBOX_UNAVAILABLE, "{err:?}");
    assert!(err.message().contains("bubblewrap"), "{}", err.message());
    assert!(
        err.diagnostic()
            .unwrap_or_default()
            .contains("not implemented yet"),
        "{err:?}"
    );
    // What the server checks each sandboxed agent with when it starts: refused the same way.
    let err = full().check(&std::env::temp_dir()).unwrap_err();
    assert_eq!(err.code(), &ErrorCode::SANDBOX_UNAVAILABLE, "{err:?}");
}

// The README's example is a profile that reads and builds.

#[test]
fn the_readme_profile_builds_valid_manifests() {
    let readme = include_str!("../README.md");
    let block = readme
        .split("```toml")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("backend = \"kubernetes\""))
        .expect("a kubernetes profile in the README");
    #[derive(serde::Deserialize)]
    struct Config {
        sandbox: Sandboxes,
    }
    #[derive(serde::Deserialize)]
    struct Sandboxes {
        profiles: std::collections::BTreeMap<String, SandboxProfile>,
    }
    let config: Config = toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
    let profile = config.sandbox.profiles.values().next().unwrap();
    let k8s = profile.kubernetes.as_ref().unwrap();
    assert_eq!(k8s.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(k8s.tolerations.len(), 1);
    assert_eq!(
        k8s.egress,
        [
            Egress::pods(
                Some("models".into()),
                [("app".to_owned(), "model-server".to_owned())],
                4010
            ),
            Egress::network("10.20.0.0/16".parse::<Cidr>().unwrap(), 443),
        ]
    );
    assert_valid(&kubernetes::manifests(profile, &launch()).unwrap());
}
