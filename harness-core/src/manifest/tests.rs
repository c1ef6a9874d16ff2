use super::*;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::capability::SupportLevel;
use crate::capability::{Capability, CapabilityKey};
use crate::id::AdapterId;
use rstest::rstest;
use serde_json::json;
use std::collections::BTreeMap;

// ----- options types whose schemas schemars generates -----

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClosedOptions {
    model: String,
    max_turns: Option<u32>,
    retry: Option<ClosedRetry>,
    tools: Vec<ClosedRetry>,
    env: BTreeMap<String, String>,
    backend: ClosedBackend,
    free_form: Value,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClosedRetry {
    max: u32,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind", deny_unknown_fields)]
enum ClosedBackend {
    Local { path: String },
    Off,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct OpenOptions {
    model: String,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClosedOuterOpenInner {
    model: String,
    retry: OpenRetry,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct OpenRetry {
    max: u32,
}

fn schema_of<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

fn id(s: &str) -> AdapterId {
    s.parse().unwrap()
}

fn v(n: u32) -> ContractVersion {
    ContractVersion::new(n).unwrap()
}

fn valid_builder() -> HarnessDescriptorBuilder {
    HarnessDescriptor::builder(id("scripted"), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
}

fn valid_json() -> Value {
    json!({
        "id": "scripted",
        "name": "Scripted",
        "contractVersions": [1],
        "implementationVersion": "0.1.0",
        "executionMode": {"mode": "in_process", "compatibilityOnly": true},
        "trustBoundary": "host_process",
        "optionsSchema": {"type": "object", "additionalProperties": false},
        "capabilities": {}
    })
}

// ----- contract version -----

#[test]
fn contract_version_wire_and_errors() {
    assert_eq!(serde_json::to_string(&[v(1), v(7)]).unwrap(), "[1,7]");
    assert_eq!(
        serde_json::from_str::<Vec<ContractVersion>>("[1,7]").unwrap(),
        [v(1), v(7)]
    );
    for (input, message) in [
        ("0", "invalid contract version 0: expected an integer >= 1"),
        (
            "-1",
            "invalid contract version -1: expected an integer >= 1",
        ),
        ("4294967296", "invalid contract version 4294967296"),
        ("\"1\"", "expected a contract version: an integer >= 1"),
        ("1.5", "expected a contract version: an integer >= 1"),
    ] {
        let err = serde_json::from_str::<ContractVersion>(input).unwrap_err();
        assert!(err.to_string().contains(message), "{input}: {err}");
    }
    assert_eq!(ContractVersion::new(0), None);
    assert_eq!(ContractVersion::V1.to_string(), "1");
}

#[test]
fn highest_common_version() {
    assert_eq!(
        ContractVersion::highest_common(&[v(3), v(1), v(2)], &[v(1), v(2)]),
        Some(v(2))
    );
    assert_eq!(
        ContractVersion::highest_common(&[v(2), v(3)], &[v(1)]),
        None
    );
    assert_eq!(ContractVersion::highest_common(&[], &[v(1)]), None);
}

// ----- operator profile id -----

#[rstest]
#[case("gvisor-small", true)]
#[case("kata.gpu_a100", true)]
#[case("ab", true)]
#[case("a", false)]
#[case("Gvisor", false)]
#[case("1profile", false)]
#[case("-profile", false)]
#[case("with space", false)]
#[case("with/slash", false)]
fn operator_profile_id_validation(#[case] input: &str, #[case] ok: bool) {
    assert_eq!(input.parse::<OperatorProfileId>().is_ok(), ok, "{input}");
}

#[test]
fn operator_profile_id_length_and_message() {
    assert!(OperatorProfileId::is_valid(&format!("a{}", "b".repeat(63))));
    assert!(!OperatorProfileId::is_valid(&format!(
        "a{}",
        "b".repeat(64)
    )));
    let err = "Bad".parse::<OperatorProfileId>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid operator profile id `Bad`: expected a lowercase id matching ^[a-z][a-z0-9._-]{1,63}$"
    );
}

// ----- execution mode -----

#[rstest]
#[case(
    ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap()),
    json!({"mode": "sandbox_pod", "profileId": "gvisor-small"})
)]
#[case(ExecutionMode::ProviderManaged, json!({"mode": "provider_managed"}))]
#[case(ExecutionMode::in_process(), json!({"mode": "in_process", "compatibilityOnly": true}))]
fn execution_mode_round_trips(#[case] mode: ExecutionMode, #[case] wire: Value) {
    assert_eq!(serde_json::to_value(&mode).unwrap(), wire);
    assert_eq!(serde_json::from_value::<ExecutionMode>(wire).unwrap(), mode);
}

#[rstest]
#[case("image")]
#[case("command")]
#[case("args")]
#[case("serviceAccount")]
#[case("service_account")]
#[case("serviceAccountName")]
#[case("volumes")]
#[case("runtimeClass")]
#[case("runtimeClassName")]
#[case("networkPolicy")]
#[case("podSpec")]
#[case("pod_spec")]
fn sandbox_pod_refuses_pod_fields(#[case] field: &str) {
    let mut wire = json!({"mode": "sandbox_pod", "profileId": "gvisor-small"});
    wire[field] = json!("anything");
    let err = serde_json::from_value::<ExecutionMode>(wire).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "sandbox_pod references an operator-owned profile id; it cannot supply `{field}`: \
             the operator's profile defines the pod"
        )
    );
}

#[test]
fn sandbox_pod_refuses_a_pod_field_even_when_null_or_first() {
    let err = serde_json::from_str::<ExecutionMode>(
        r#"{"podSpec": null, "mode": "sandbox_pod", "profileId": "p1"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot supply `podSpec`"), "{err}");
}

#[rstest]
#[case(json!({"mode": "sandbox_pod", "profileId": "p1", "replicas": 2}), "unknown field `replicas`, expected `profileId`")]
#[case(json!({"mode": "sandbox_pod"}), "missing field `profileId`")]
#[case(json!({"mode": "sandbox_pod", "profileId": "Bad Id"}), "invalid operator profile id `Bad Id`")]
#[case(json!({"mode": "sandbox_pod", "profile_id": "p1"}), "unknown field `profile_id`, expected `profileId`")]
#[case(json!({"mode": "in_process"}), "in_process execution is compatibility-only and must say so: expected `\"compatibilityOnly\": true`")]
#[case(json!({"mode": "in_process", "compatibilityOnly": false}), "in_process execution is compatibility-only and must say so")]
#[case(json!({"mode": "in_process", "compatibilityOnly": "yes"}), "expected `true` (in_process execution is compatibility-only)")]
#[case(json!({"mode": "in_process", "compatibilityOnly": true, "x": 1}), "unknown field `x`, expected `compatibilityOnly`")]
#[case(json!({"mode": "provider_managed", "endpoint": "https://x"}), "unknown field `endpoint`")]
#[case(json!({"mode": "pod"}), "unknown variant `pod`, expected one of `sandbox_pod`, `provider_managed`, `in_process`")]
#[case(json!({"profileId": "p1"}), "missing field `mode`")]
fn execution_mode_errors(#[case] wire: Value, #[case] message: &str) {
    let err = serde_json::from_value::<ExecutionMode>(wire).unwrap_err();
    assert!(err.to_string().contains(message), "{err}");
}

#[test]
fn compatibility_only_is_true_on_the_wire() {
    assert_eq!(serde_json::to_string(&CompatibilityOnly).unwrap(), "true");
    assert!(serde_json::from_str::<CompatibilityOnly>("true").is_ok());
    assert!(serde_json::from_str::<CompatibilityOnly>("false").is_err());
}

#[test]
fn execution_mode_schema_accepts_only_the_three_shapes() {
    let schema = schema_of::<ExecutionMode>();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&json!({"mode": "sandbox_pod", "profileId": "p1"})));
    assert!(validator.is_valid(&json!({"mode": "in_process", "compatibilityOnly": true})));
    assert!(!validator.is_valid(&json!({"mode": "in_process", "compatibilityOnly": false})));
    assert!(!validator.is_valid(&json!({"mode": "sandbox_pod", "profileId": "p1", "image": "x"})));
}

// ----- implementation version -----

#[rstest]
#[case("0.1.0", None)]
#[case("1.4.0", None)]
#[case("10.20.30", None)]
#[case("2.0.0-rc.1", None)]
#[case("1.0.0-alpha-beta.0.x-y", None)]
#[case("1.0.0+build.5", None)]
#[case("1.0.0-rc.1+build.5.sha-abc", None)]
#[case("1.0", Some("expected exactly three numeric components"))]
#[case("1.0.0.0", Some("expected exactly three numeric components"))]
#[case("", Some("expected exactly three numeric components"))]
#[case("1..0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
#[case("v1.0.0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
#[case("1.x.0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
#[case("01.0.0", Some("numeric components must not have leading zeros"))]
#[case(
    "1.0.0-",
    Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
)]
#[case(
    "1.0.0-rc..1",
    Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
)]
#[case(
    "1.0.0-01",
    Some("numeric pre-release identifiers must not have leading zeros")
)]
#[case("1.0.0+", Some("build identifiers must be non-empty [0-9A-Za-z-]"))]
#[case("1.0.0+a+b", Some("build identifiers must be non-empty [0-9A-Za-z-]"))]
#[case(
    "1.0.0-é",
    Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
)]
fn implementation_version_format(#[case] input: &str, #[case] problem: Option<&str>) {
    assert_eq!(
        check_implementation_version(input).err(),
        problem,
        "{input}"
    );
}

#[test]
fn schema_pattern_agrees_with_the_check() {
    let schema = serde_json::to_value(schemars::schema_for!(HarnessDescriptor)).unwrap();
    let pattern = schema["properties"]["implementationVersion"]["pattern"].clone();
    let validator =
        jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    for input in [
        "0.1.0",
        "2.0.0-rc.1+b.5",
        "1.0",
        "01.0.0",
        "1.0.0-01",
        "1.0.0+",
    ] {
        assert_eq!(
            validator.is_valid(&json!(input)),
            check_implementation_version(input).is_ok(),
            "{input}"
        );
    }
}

// ----- options schema closedness -----

#[test]
fn schemars_schema_of_a_deny_unknown_fields_struct_is_closed() {
    let schema = schema_of::<ClosedOptions>();
    assert_eq!(open_object_schemas(&schema), Vec::<String>::new());
    assert!(
        HarnessDescriptor::builder(id("scripted"), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .options_schema_for::<ClosedOptions>()
            .build()
            .is_ok()
    );
}

#[test]
fn schemars_schema_of_a_plain_struct_is_open_at_the_root() {
    let schema = schema_of::<OpenOptions>();
    assert_eq!(open_object_schemas(&schema), vec![String::new()]);
    let err = valid_builder()
        .options_schema_for::<OpenOptions>()
        .build()
        .unwrap_err();
    assert_eq!(
        err.errors,
        vec![ManifestError::OpenOptionsSchema {
            pointers: vec![String::new()]
        }]
    );
    assert!(
        err.to_string().contains(
            "`optionsSchema` accepts unknown fields at the root: add \
             `#[serde(deny_unknown_fields)]` to the options types"
        ),
        "{err}"
    );
}

#[test]
fn schemars_schema_with_an_open_nested_type_names_its_definition() {
    let schema = schema_of::<ClosedOuterOpenInner>();
    assert_eq!(
        open_object_schemas(&schema),
        vec!["/$defs/OpenRetry".to_owned()]
    );
}

#[rstest]
#[case::closed(json!({"type": "object", "additionalProperties": false}), &[])]
#[case::unevaluated(json!({"type": "object", "unevaluatedProperties": false}), &[])]
#[case::open_root(json!({"type": "object", "properties": {"a": {"type": "string"}}}), &[""])]
#[case::true_root(json!(true), &[""])]
#[case::empty_root(json!({}), &[""])]
#[case::annotations_only(json!({"title": "Options", "$schema": "https://json-schema.org/draft/2020-12/schema"}), &[""])]
#[case::additional_true(json!({"type": "object", "additionalProperties": true}), &[""])]
#[case::additional_empty(json!({"type": "object", "additionalProperties": {}}), &[""])]
#[case::typed_map(json!({"type": "object", "additionalProperties": {"type": "string"}}), &[])]
#[case::properties_without_type(json!({"properties": {}}), &[""])]
#[case::nested_property(
    json!({"type": "object", "additionalProperties": false,
           "properties": {"a/b~c": {"type": "object"}}}),
    &["/properties/a~1b~0c"]
)]
#[case::array_items(
    json!({"type": "object", "additionalProperties": false,
           "properties": {"list": {"type": "array", "items": {"type": "object"}}}}),
    &["/properties/list/items"]
)]
#[case::prefix_items(
    json!({"type": "object", "additionalProperties": false,
           "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "object"}]}}}),
    &["/properties/pair/prefixItems/1"]
)]
#[case::map_values(
    json!({"type": "object", "additionalProperties": false,
           "properties": {"env": {"type": "object", "additionalProperties": {"type": "object", "properties": {}}}}}),
    &["/properties/env/additionalProperties"]
)]
#[case::definitions(
    json!({"type": "object", "additionalProperties": false,
           "definitions": {"A": {"type": "object"}}, "$defs": {"B": {"type": "object", "additionalProperties": false}}}),
    &["/definitions/A"]
)]
#[case::all_of_covered_by_unevaluated(
    json!({"type": "object", "unevaluatedProperties": false,
           "allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "string"}}}]}),
    &[]
)]
#[case::all_of_open(
    json!({"type": "object",
           "allOf": [{"properties": {"a": {"type": "string"}}}]}),
    &["", "/allOf/0"]
)]
#[case::one_of_closed_branches(
    json!({"type": "object",
           "oneOf": [{"type": "object", "additionalProperties": false},
                     {"$ref": "#/$defs/B"}],
           "$defs": {"B": {"type": "object", "additionalProperties": false}}}),
    &[]
)]
#[case::one_of_one_open_branch(
    json!({"oneOf": [{"type": "object", "additionalProperties": false},
                     {"type": "object", "properties": {"x": {"type": "string"}}}]}),
    &["/oneOf/1"]
)]
#[case::any_of_with_null(
    json!({"type": "object", "additionalProperties": false,
           "properties": {"retry": {"anyOf": [{"$ref": "#/$defs/R"}, {"type": "null"}]}},
           "$defs": {"R": {"type": "object"}}}),
    &["/$defs/R"]
)]
#[case::free_form_property_is_not_an_object_schema(
    json!({"type": "object", "additionalProperties": false, "properties": {"extra": {}, "also": true}}),
    &[]
)]
#[case::type_array_with_object(json!({"type": ["object", "null"]}), &[""])]
fn open_object_schema_cases(#[case] schema: Value, #[case] expected: &[&str]) {
    assert_eq!(open_object_schemas(&schema), expected);
}

#[test]
fn absurdly_deep_schemas_are_reported_not_overflowed() {
    let mut schema = json!({"type": "object", "additionalProperties": false});
    for _ in 0..200 {
        schema =
            json!({"type": "object", "additionalProperties": false, "properties": {"n": schema}});
    }
    let open = open_object_schemas(&schema);
    assert_eq!(open.len(), 1);
    assert!(open[0].starts_with("/properties/n/properties/n"));
}

#[test]
fn self_referencing_refs_terminate() {
    let schema = json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}});
    assert!(!describes_objects(&schema, &schema, 0));
    let schema = json!({"type": "object", "allOf": [{"$ref": "#"}]});
    assert_eq!(open_object_schemas(&schema), vec![String::new()]);
}

// ----- descriptor: builder -----

#[test]
fn builder_defaults_and_accessors() {
    let d = valid_builder()
        .capability(CapabilityKey::StreamText, Capability::native())
        .build()
        .unwrap();
    assert_eq!(d.id().as_str(), "scripted");
    assert_eq!(d.name(), "scripted");
    assert_eq!(d.contract_versions(), [ContractVersion::V1]);
    assert_eq!(d.implementation_version(), "0.1.0");
    assert_eq!(d.execution_mode(), &ExecutionMode::in_process());
    assert_eq!(d.trust_boundary(), TrustBoundary::HostProcess);
    assert!(d.dependencies().is_empty());
    assert_eq!(
        d.options_schema(),
        &json!({"type": "object", "additionalProperties": false})
    );
    assert_eq!(
        d.capabilities().level(CapabilityKey::StreamText),
        SupportLevel::Native
    );
    assert_eq!(d.certification_evidence_version(), None);
    assert_eq!(d.highest_common_version(&[v(1), v(2)]), Some(v(1)));
    assert_eq!(d.validate(), Ok(()));
}

#[rstest]
#[case(ExecutionMode::sandbox_pod("p1".parse().unwrap()), TrustBoundary::Sandbox)]
#[case(ExecutionMode::ProviderManaged, TrustBoundary::RemoteProvider)]
#[case(ExecutionMode::in_process(), TrustBoundary::HostProcess)]
fn builder_derives_the_trust_boundary_from_the_mode(
    #[case] mode: ExecutionMode,
    #[case] boundary: TrustBoundary,
) {
    let d = valid_builder().execution_mode(mode).build().unwrap();
    assert_eq!(d.trust_boundary(), boundary);
}

#[test]
fn full_descriptor_round_trips_through_json() {
    let d = HarnessDescriptor::builder(id("claude_code"), "2.0.0-rc.1+build.7")
        .name("Claude Code")
        .contract_versions([v(1), v(2)])
        .execution_mode(ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap()))
        .trust_boundary(TrustBoundary::Sandbox)
        .dependency(Dependency::new(DependencyKind::Binary, "claude", ">=2.0"))
        .dependency(Dependency::new(DependencyKind::Service, "api.anthropic.com", "*").optional())
        .options_schema_for::<ClosedOptions>()
        .capability(CapabilityKey::StreamText, Capability::native())
        .capability(
            CapabilityKey::ToolMcp,
            Capability::degraded("stdio servers only"),
        )
        .certification_evidence_version("conformance-1.0.0+2026-09-02")
        .build()
        .unwrap();
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["id"], "claude_code");
    assert_eq!(json["contractVersions"], json!([1, 2]));
    assert_eq!(
        json["executionMode"],
        json!({"mode": "sandbox_pod", "profileId": "gvisor-small"})
    );
    assert_eq!(json["trustBoundary"], "sandbox");
    assert_eq!(
        json["dependencies"][1],
        json!({"name": "api.anthropic.com", "kind": "service", "version": "*", "optional": true})
    );
    assert_eq!(
        json["certificationEvidenceVersion"],
        "conformance-1.0.0+2026-09-02"
    );
    let back: HarnessDescriptor = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, d);
    // The generated schema of the descriptor accepts its own serialization.
    let schema = schema_of::<HarnessDescriptor>();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        validator.is_valid(&json),
        "{:?}",
        validator
            .iter_errors(&json)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
    // Open to a newer writer's fields, except in the execution mode (what the adapter can
    // reach).
    let mut extra = json;
    extra["image"] = json!("x");
    assert!(validator.is_valid(&extra));
    extra["executionMode"]["image"] = json!("x");
    assert!(!validator.is_valid(&extra));
}

#[test]
fn build_collects_every_problem() {
    let err = HarnessDescriptor::builder(id("scripted"), "1.0")
        .name("")
        .contract_versions([v(1), v(1), v(2), v(1)])
        .trust_boundary(TrustBoundary::Sandbox)
        .dependency(Dependency::new(DependencyKind::Binary, "", "1"))
        .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "1"))
        .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "2"))
        .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "3"))
        .dependency(Dependency::new(DependencyKind::Crate, "x", " "))
        .options_schema(json!({"type": "string"}))
        .certification_evidence_version("has space")
        .build()
        .unwrap_err();
    assert_eq!(err.id.as_str(), "scripted");
    assert_eq!(
        err.errors,
        vec![
            ManifestError::Missing {
                field: "executionMode",
                method: "execution_mode"
            },
            ManifestError::InvalidName {
                value: String::new()
            },
            ManifestError::DuplicateContractVersion { version: v(1) },
            ManifestError::InvalidImplementationVersion {
                value: "1.0".into(),
                reason: "expected exactly three numeric components"
            },
            ManifestError::InvalidDependency {
                name: String::new(),
                kind: DependencyKind::Binary,
                problem: "the name must be 1 to 214 characters"
            },
            ManifestError::DuplicateDependency {
                name: "x".into(),
                kind: DependencyKind::NpmPackage
            },
            ManifestError::InvalidDependency {
                name: "x".into(),
                kind: DependencyKind::Crate,
                problem: "the version requirement must be 1 to 128 characters, such as `>=1.2` or `*`"
            },
            ManifestError::OptionsSchemaNotObject,
            ManifestError::InvalidCertificationEvidenceVersion {
                value: "has space".into()
            },
        ]
    );
}

#[rstest]
#[case(
    HarnessDescriptor::builder(id("scripted"), "0.1.0").execution_mode(ExecutionMode::in_process()),
    "`contractVersions` is empty: declare every supported contract version, such as [1]"
)]
#[case(
    valid_builder().contract_versions([v(2), v(2)]),
    "contract version 2 is listed more than once in `contractVersions`: list each version once"
)]
#[case(
    valid_builder().trust_boundary(TrustBoundary::Sandbox),
    "`trustBoundary` `sandbox` does not fit execution mode `in_process`: expected `host_process` or `local_subprocess`"
)]
#[case(
    valid_builder().execution_mode(ExecutionMode::ProviderManaged).trust_boundary(TrustBoundary::HostProcess),
    "`trustBoundary` `host_process` does not fit execution mode `provider_managed`: expected `remote_provider`"
)]
#[case(
    valid_builder().execution_mode(ExecutionMode::sandbox_pod("p1".parse().unwrap())).trust_boundary(TrustBoundary::LocalSubprocess),
    "`trustBoundary` `local_subprocess` does not fit execution mode `sandbox_pod`: expected `sandbox`"
)]
#[case(
    HarnessDescriptor::builder(id("scripted"), "01.0.0").contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()),
    "`implementationVersion` `01.0.0` is invalid (numeric components must not have leading zeros): expected MAJOR.MINOR.PATCH[-pre][+build]"
)]
#[case(
    valid_builder().name("bad\nname"),
    "`name` `bad\nname` is invalid: expected 1 to 128 characters without control characters"
)]
#[case(
    valid_builder().dependency(Dependency::new(DependencyKind::Binary, "my tool", "1")),
    "dependency `my tool` (binary) is invalid: the name must not contain whitespace or control characters"
)]
#[case(
    valid_builder().options_schema(json!({"type": 12})),
    "`optionsSchema` is not a valid JSON Schema: "
)]
#[case(
    valid_builder().options_schema(json!({"$ref": "https://example.com/options.json"})),
    "`optionsSchema` is not a valid JSON Schema: "
)]
#[case(
    valid_builder().options_schema(json!({"type": "array"})),
    "`optionsSchema` must describe a JSON object"
)]
#[case(
    valid_builder().options_schema(json!({"type": "object", "additionalProperties": false, "properties": {"retry": {"type": "object"}}})),
    "`optionsSchema` accepts unknown fields at `/properties/retry`: add `#[serde(deny_unknown_fields)]`"
)]
#[case(
    valid_builder().certification_evidence_version(""),
    "`certificationEvidenceVersion` `` is invalid: expected 1 to 128 characters from [A-Za-z0-9._:+-]"
)]
fn build_refusals_name_the_field_and_the_fix(
    #[case] builder: HarnessDescriptorBuilder,
    #[case] message: &str,
) {
    let err = builder.build().unwrap_err();
    assert!(err.to_string().contains(message), "{err}");
}

#[test]
fn options_schema_root_may_be_a_ref_or_a_union_of_objects() {
    let by_ref = json!({"$ref": "#/$defs/O", "$defs": {"O": {"type": "object", "additionalProperties": false}}});
    assert!(valid_builder().options_schema(by_ref).build().is_ok());
    let union = json!({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}}, "additionalProperties": false},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "additionalProperties": false}
    ]});
    assert!(valid_builder().options_schema(union).build().is_ok());
    let enum_options = schema_of::<ClosedBackend>();
    assert!(valid_builder().options_schema(enum_options).build().is_ok());
}

// ----- descriptor: deserialization -----

#[test]
fn deserialization_accepts_the_minimal_manifest_and_defaults_optional_fields() {
    let d: HarnessDescriptor = serde_json::from_value(valid_json()).unwrap();
    assert!(d.dependencies().is_empty());
    assert!(d.capabilities().is_empty());
    assert_eq!(d.certification_evidence_version(), None);
    assert_eq!(serde_json::to_value(&d).unwrap(), valid_json());
}

/// A manifest written by a newer version, with optional fields this one does not know at the
/// top level, in a dependency and in a capability: read, kept, and written back unchanged (a
/// registry passing it on strips nothing). This once asserted the opposite: see `crate::wire`.
#[test]
fn a_newer_writers_extra_manifest_fields_are_kept() {
    let mut wire = valid_json();
    wire["extra"] = json!(1);
    wire["provenance"] = json!({"builtBy": "ci", "at": "2026-12-01"});
    wire["dependencies"] =
        json!([{"name": "claude", "kind": "binary", "version": "*", "sha256": "ab"}]);
    wire["capabilities"] = json!({"stream.text": {"level": "native", "verifiedAt": "2026-12-01"}});
    let d: HarnessDescriptor = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(d.unknown_fields().get("extra"), Some(&json!(1)));
    assert_eq!(d.unknown_fields().len(), 2);
    assert_eq!(serde_json::to_value(&d).unwrap(), wire);
    // What this version builds has none.
    assert!(valid_builder().build().unwrap().unknown_fields().is_empty());
}

#[rstest]
#[case("executionMode", json!({"mode": "in_process", "compatibilityOnly": true, "hostNetwork": true}), "unknown field `hostNetwork`, expected `compatibilityOnly`")]
#[case("id", json!("Scripted"), "invalid adapter id `Scripted`: expected a lowercase id matching ^[a-z][a-z0-9_]{1,63}$")]
#[case("id", json!("x"), "invalid adapter id `x`")]
#[case("contractVersions", json!("1"), "invalid type: string \"1\", expected a sequence")]
#[case("contractVersions", json!([0]), "invalid contract version 0")]
#[case("contractVersions", json!([]), "`contractVersions` is empty")]
#[case("implementationVersion", json!("latest"), "`implementationVersion` `latest` is invalid")]
#[case("implementationVersion", json!(1), "invalid type: integer `1`, expected a string")]
#[case("executionMode", json!({"mode": "sandbox_pod", "profileId": "p1", "image": "x"}), "it cannot supply `image`")]
#[case("executionMode", json!({"mode": "in_process", "compatibilityOnly": false}), "compatibility-only")]
#[case("trustBoundary", json!("sandbox"), "`trustBoundary` `sandbox` does not fit execution mode `in_process`")]
#[case("trustBoundary", json!("kernel"), "unknown variant `kernel`")]
#[case("capabilities", json!({"stream.txt": {"level": "native"}}), "did you mean `stream.text`?")]
#[case("optionsSchema", json!({"type": "object"}), "`optionsSchema` accepts unknown fields at the root")]
#[case("dependencies", json!([{"name": "claude", "kind": "binary"}]), "missing field `version`")]
#[case("dependencies", json!([{"name": "claude", "kind": "apt", "version": "1"}]), "unknown variant `apt`")]
fn deserialization_errors_name_the_problem(
    #[case] field: &str,
    #[case] value: Value,
    #[case] message: &str,
) {
    let mut wire = valid_json();
    wire[field] = value;
    let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
    assert!(err.to_string().contains(message), "{err}");
}

#[test]
fn deserialization_reports_every_validation_problem_with_the_id() {
    let mut wire = valid_json();
    wire["contractVersions"] = json!([]);
    wire["implementationVersion"] = json!("1");
    let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("invalid harness descriptor `scripted`: "),
        "{text}"
    );
    assert!(text.contains("`contractVersions` is empty"), "{text}");
    assert!(
        text.contains("`implementationVersion` `1` is invalid"),
        "{text}"
    );
}

#[test]
fn missing_required_fields_are_named() {
    for field in [
        "id",
        "name",
        "contractVersions",
        "implementationVersion",
        "executionMode",
        "trustBoundary",
        "optionsSchema",
        "capabilities",
    ] {
        let mut wire = valid_json();
        wire.as_object_mut().unwrap().remove(field);
        let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
        assert_eq!(err.to_string(), format!("missing field `{field}`"));
    }
}
