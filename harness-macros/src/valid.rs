//! Stage 3: checks.
//!
//! Everything the adapter contract says about a descriptor that can be known at compile time is
//! checked here, against the rules duplicated in [`crate::contract`]: the id pattern, contract
//! versions, the execution mode (a `sandbox_pod` names an operator profile and nothing else; an
//! `in_process` mode says it is compatibility-only), the trust boundary, dependencies,
//! capability keys and levels, and the identifiers they carry. Every problem is reported at the
//! token that caused it, with what would be right; the checks go on after a problem so that
//! one build lists them all.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{LitStr, Type};

use crate::ast::{AdapterInput, OptionsInput, Shape};
use crate::attr::{self, ConstraintValue, Errors, list};
use crate::contract::{
    CAPABILITY_KEYS, DEPENDENCY_KINDS, EXECUTION_MODES, LEVELS_NEEDING_EXPLANATION, SUPPORT_LEVELS,
    TRUST_BOUNDARIES, dependency_problem, did_you_mean, implementation_version_problem,
    is_adapter_id, is_certification_evidence_version, is_display_name, is_evidence_id,
    is_pod_field, is_profile_id, nearest_capability,
};

/// The example attribute quoted when the whole attribute is missing.
const EXAMPLE: &str = "#[adapter(id = \"my_adapter\", contract_versions = [1], \
                       execution_mode = in_process(compatibility_only), options = MyOptions)]";

/// A descriptor whose every part passed the checks, ready to expand.
pub(crate) struct Manifest {
    /// The path to harness-core (or a crate re-exporting its `__private`).
    pub(crate) krate: syn::Path,
    /// The adapter id.
    pub(crate) id: LitStr,
    /// The display name, if given.
    pub(crate) name: Option<LitStr>,
    /// The implementation version, if given (otherwise the crate's version).
    pub(crate) implementation_version: Option<LitStr>,
    /// The supported contract versions.
    pub(crate) contract_versions: Vec<u32>,
    /// The execution mode.
    pub(crate) execution_mode: Mode,
    /// The `TrustBoundary` variant, if given.
    pub(crate) trust_boundary: Option<&'static str>,
    /// The dependencies.
    pub(crate) dependencies: Vec<Dependency>,
    /// The options type.
    pub(crate) options: Type,
    /// The declared capabilities.
    pub(crate) capabilities: Vec<Capability>,
    /// The certification evidence version, if given.
    pub(crate) certification_evidence_version: Option<LitStr>,
}

/// A checked execution mode.
pub(crate) enum Mode {
    /// `sandbox_pod(profile = "...")`.
    SandboxPod(LitStr),
    /// `provider_managed`.
    ProviderManaged,
    /// `in_process(compatibility_only)`.
    InProcess,
}

/// A checked dependency.
pub(crate) struct Dependency {
    /// The `DependencyKind` variant.
    pub(crate) kind: &'static str,
    /// The name.
    pub(crate) name: LitStr,
    /// The version requirement.
    pub(crate) version: LitStr,
    /// Whether it is optional.
    pub(crate) optional: bool,
}

/// A checked capability declaration.
pub(crate) struct Capability {
    /// The `CapabilityKey` variant.
    pub(crate) key: &'static str,
    /// The `SupportLevel` variant.
    pub(crate) level: &'static str,
    /// The explanation.
    pub(crate) explanation: Option<LitStr>,
    /// The evidence id.
    pub(crate) evidence: Option<LitStr>,
    /// The constraints.
    pub(crate) constraints: Vec<(String, ConstraintValue)>,
}

/// The default path to the runtime crate: `harness-core` if the deriving crate depends on
/// it (under whatever name), else the facade `harness` (under whatever name), else
/// `::harness`, so that a crate depending on the facade alone needs no `crate = "..."`.
pub(crate) fn default_crate() -> syn::Path {
    use proc_macro_crate::{FoundCrate, crate_name};
    let found = crate_name("harness-core").or_else(|_| crate_name("harness"));
    match found {
        Ok(FoundCrate::Itself) => syn::parse_quote!(crate),
        Ok(FoundCrate::Name(name)) => {
            let ident = syn::Ident::new(&name, proc_macro2::Span::call_site());
            syn::parse_quote!(::#ident)
        }
        Err(_) => syn::parse_quote!(::harness),
    }
}

/// Checks what `#[adapter(...)]` says. `None` when something is missing or wrong (and then
/// `errors` says what).
pub(crate) fn adapter(input: AdapterInput<'_>, errors: &mut Errors) -> Option<Manifest> {
    let at_type = input.ident.span();
    let mut attrs = input.attrs;
    if !attrs.present {
        errors.at(
            at_type,
            format!(
                "`#[derive(Adapter)]` needs an `#[adapter(...)]` attribute describing the \
                 adapter, such as `{EXAMPLE}`"
            ),
        );
        return None;
    }
    let mut ok = true;
    // A key that an unknown key was taken for (a typo) is not reported missing as well.
    let suggested = std::mem::take(&mut attrs.suggested);
    let missing = |key: &str, what: &str, errors: &mut Errors| {
        if !suggested.contains(&key) {
            errors.at(at_type, format!("`#[adapter(...)]` is missing {what}"));
        }
        false
    };

    let id = match attrs.id {
        Some(id) => {
            ok &= check_id(&id, errors);
            Some(id)
        }
        None => {
            ok = missing(
                attr::ID,
                "`id = \"...\"`: every adapter has a stable id matching \
                 ^[a-z][a-z0-9_]{1,63}$, such as `id = \"my_adapter\"`",
                errors,
            );
            None
        }
    };

    if let Some(name) = &attrs.name
        && !is_display_name(&name.value())
    {
        errors.at(
            name.span(),
            "invalid `name`: expected 1 to 128 characters without control characters \
             (omit `name` to use the id)",
        );
        ok = false;
    }

    if let Some(version) = &attrs.implementation_version
        && let Some(reason) = implementation_version_problem(&version.value())
    {
        errors.at(
            version.span(),
            format!(
                "invalid `implementation_version` `{}` ({reason}): expected \
                 MAJOR.MINOR.PATCH[-pre][+build], such as `1.4.0`; omit it to use the crate's \
                 version",
                version.value()
            ),
        );
        ok = false;
    }

    let contract_versions = match attrs.contract_versions {
        Some(list) => check_contract_versions(&list, errors),
        None => {
            ok = missing(
                attr::CONTRACT_VERSIONS,
                "`contract_versions = [...]`: declare every supported contract version, such \
                 as `contract_versions = [1]`",
                errors,
            );
            None
        }
    };
    ok &= contract_versions.is_some();

    let execution_mode = match &attrs.execution_mode {
        Some(mode) => check_mode(mode, errors),
        None => {
            ok = missing(
                attr::EXECUTION_MODE,
                "`execution_mode = ...`: one of `sandbox_pod(profile = \"...\")`, \
                 `provider_managed` or `in_process(compatibility_only)`",
                errors,
            );
            None
        }
    };
    ok &= execution_mode.is_some();

    let trust_boundary = match &attrs.trust_boundary {
        Some(boundary) => {
            let checked = check_trust_boundary(
                boundary,
                attrs.execution_mode.as_ref().map(|m| m.name.to_string()),
                execution_mode.is_some(),
                errors,
            );
            ok &= checked.is_some();
            checked
        }
        None => None,
    };

    let mut dependencies = Vec::new();
    for (i, dep) in attrs.dependencies.iter().enumerate() {
        match check_dependency(dep, &attrs.dependencies[..i], errors) {
            Some(dep) => dependencies.push(dep),
            None => ok = false,
        }
    }

    let options = attrs.options;
    if options.is_none() {
        ok = missing(
            attr::OPTIONS,
            "`options = ...`: name the adapter's options type, a struct deriving \
             `serde::Deserialize`, `schemars::JsonSchema` and `AdapterOptions` with \
             `#[serde(deny_unknown_fields)]` (an adapter without options names an empty one)",
            errors,
        );
    }

    let mut capabilities = Vec::new();
    for (i, cap) in attrs.capabilities.iter().enumerate() {
        match check_capability(cap, &attrs.capabilities[..i], errors) {
            Some(cap) => capabilities.push(cap),
            None => ok = false,
        }
    }

    if let Some(version) = &attrs.certification_evidence_version
        && !is_certification_evidence_version(&version.value())
    {
        errors.at(
            version.span(),
            format!(
                "invalid `certification_evidence_version` `{}`: expected 1 to 128 characters \
                 from [A-Za-z0-9._:+-], such as `conformance-1.0.0+2026-09-02`",
                version.value()
            ),
        );
        ok = false;
    }

    if !ok {
        return None;
    }
    Some(Manifest {
        krate: attrs.krate.unwrap_or_else(default_crate),
        id: id?,
        name: attrs.name,
        implementation_version: attrs.implementation_version,
        contract_versions: contract_versions?,
        execution_mode: execution_mode?,
        trust_boundary,
        dependencies,
        options: options?,
        capabilities,
        certification_evidence_version: attrs.certification_evidence_version,
    })
}

/// A corrected id to suggest: lower-cased, other characters replaced by `_`.
fn suggest_id(s: &str) -> Option<String> {
    let fixed: String = s
        .trim()
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect();
    (fixed != s && is_adapter_id(&fixed)).then_some(fixed)
}

fn check_id(id: &LitStr, errors: &mut Errors) -> bool {
    let value = id.value();
    if is_adapter_id(&value) {
        return true;
    }
    let why = if value.len() < 2 {
        "it is shorter than 2 characters"
    } else if value.len() > 64 {
        "it is longer than 64 characters"
    } else if !value.as_bytes()[0].is_ascii_lowercase() {
        "it must start with a lowercase letter"
    } else {
        "only lowercase letters, digits and `_` are allowed"
    };
    let hint = suggest_id(&value).map_or_else(
        || ", such as `my_adapter`".to_owned(),
        |s| format!("; did you mean `{s}`?"),
    );
    errors.at(
        id.span(),
        format!(
            "invalid adapter id `{value}` ({why}): expected a lowercase id matching \
             ^[a-z][a-z0-9_]{{1,63}}${hint}"
        ),
    );
    false
}

fn check_contract_versions(list: &attr::ContractVersions, errors: &mut Errors) -> Option<Vec<u32>> {
    if list.versions.is_empty() {
        errors.at(
            list.span,
            "`contract_versions` is empty: declare every supported contract version, such as \
             `contract_versions = [1]`",
        );
        return None;
    }
    let mut ok = true;
    let mut versions: Vec<u32> = Vec::new();
    for lit in &list.versions {
        match lit.base10_parse::<u32>() {
            Ok(0) | Err(_) => {
                errors.at(
                    lit.span(),
                    format!(
                        "invalid contract version `{lit}`: expected an integer from 1 to \
                         4294967295, such as `1`"
                    ),
                );
                ok = false;
            }
            Ok(v) if versions.contains(&v) => {
                errors.at(
                    lit.span(),
                    format!(
                        "contract version {v} is listed more than once in `contract_versions`: \
                         list each version once"
                    ),
                );
                ok = false;
            }
            Ok(v) => versions.push(v),
        }
    }
    ok.then_some(versions)
}

const SANDBOX_POD_HINT: &str = "write `execution_mode = sandbox_pod(profile = \"gvisor-small\")` \
                                with the id of an operator-owned sandbox profile";

fn check_mode(mode: &attr::ExecutionMode, errors: &mut Errors) -> Option<Mode> {
    let name = mode.name.to_string();
    match name.as_str() {
        "sandbox_pod" => check_sandbox_pod(mode, errors),
        "provider_managed" => match &mode.args {
            None => Some(Mode::ProviderManaged),
            Some(args) => {
                errors.at(
                    args.span,
                    "`provider_managed` takes no arguments: write `execution_mode = \
                     provider_managed`",
                );
                None
            }
        },
        "in_process" => {
            let said = mode.args.as_ref().is_some_and(|args| {
                matches!(args.items.as_slice(), [arg] if arg.name == "compatibility_only" && arg.value.is_none())
            });
            if said {
                Some(Mode::InProcess)
            } else {
                let span = mode.args.as_ref().map_or(mode.name.span(), |a| a.span);
                errors.at(
                    span,
                    "in_process execution is compatibility-only and must say so: write \
                     `execution_mode = in_process(compatibility_only)`",
                );
                None
            }
        }
        other => {
            let names: Vec<&str> = EXECUTION_MODES.iter().map(|(m, _)| *m).collect();
            let hint = did_you_mean(other, names.iter().copied())
                .map_or_else(String::new, |m| format!("did you mean `{m}`? "));
            errors.at(
                mode.name.span(),
                format!(
                    "unknown execution mode `{other}`; {hint}expected \
                     `sandbox_pod(profile = \"...\")`, `provider_managed` or \
                     `in_process(compatibility_only)`"
                ),
            );
            None
        }
    }
}

fn check_sandbox_pod(mode: &attr::ExecutionMode, errors: &mut Errors) -> Option<Mode> {
    let Some(args) = &mode.args else {
        errors.at(
            mode.name.span(),
            format!("sandbox_pod must name an operator-owned profile: {SANDBOX_POD_HINT}"),
        );
        return None;
    };
    let mut ok = true;
    let mut profile: Option<LitStr> = None;
    for arg in &args.items {
        let arg_name = arg.name.to_string();
        if arg_name == "profile" {
            let lit = arg
                .value
                .as_ref()
                .and_then(|v| syn::parse2::<LitStr>(v.clone()).ok());
            match lit {
                Some(_) if profile.is_some() => {
                    errors.at(
                        arg.name.span(),
                        "`profile` is given more than once: give it once",
                    );
                    ok = false;
                }
                Some(lit) if is_profile_id(&lit.value()) => profile = Some(lit),
                Some(lit) => {
                    errors.at(
                        lit.span(),
                        format!(
                            "invalid operator profile id `{}`: expected a lowercase id matching \
                             ^[a-z][a-z0-9._-]{{1,63}}$, such as `gvisor-small`",
                            lit.value()
                        ),
                    );
                    ok = false;
                }
                None => {
                    errors.at(
                        arg.name.span(),
                        format!("expected `profile = \"...\"`: {SANDBOX_POD_HINT}"),
                    );
                    ok = false;
                }
            }
        } else if is_pod_field(&arg_name) {
            errors.at(
                arg.name.span(),
                format!(
                    "sandbox_pod references an operator-owned profile id; it cannot supply \
                     `{arg_name}`: the operator's profile defines the pod (image, command, \
                     service account, volumes, RuntimeClass, NetworkPolicy); keep only \
                     `profile = \"...\"`"
                ),
            );
            ok = false;
        } else {
            errors.at(
                arg.name.span(),
                format!(
                    "unknown sandbox_pod argument `{arg_name}`: a sandbox_pod only names an \
                     operator-owned profile, `sandbox_pod(profile = \"...\")`"
                ),
            );
            ok = false;
        }
    }
    if profile.is_none() && ok {
        errors.at(
            args.span,
            format!("sandbox_pod must name an operator-owned profile: {SANDBOX_POD_HINT}"),
        );
    }
    match profile {
        Some(profile) if ok => Some(Mode::SandboxPod(profile)),
        _ => None,
    }
}

fn check_trust_boundary(
    boundary: &syn::Ident,
    mode: Option<String>,
    mode_ok: bool,
    errors: &mut Errors,
) -> Option<&'static str> {
    let name = boundary.to_string();
    let Some((wire, variant)) = TRUST_BOUNDARIES.iter().find(|(w, _)| *w == name) else {
        let names: Vec<&str> = TRUST_BOUNDARIES.iter().map(|(w, _)| *w).collect();
        let hint = did_you_mean(&name, names.iter().copied())
            .map_or_else(String::new, |b| format!("did you mean `{b}`? "));
        errors.at(
            boundary.span(),
            format!(
                "unknown trust boundary `{name}`; {hint}expected {}",
                list(&names)
            ),
        );
        return None;
    };
    if mode_ok
        && let Some(mode) = mode
        && let Some((_, permitted)) = EXECUTION_MODES.iter().find(|(m, _)| *m == mode)
        && !permitted.contains(wire)
    {
        errors.at(
            boundary.span(),
            format!(
                "trust boundary `{wire}` does not fit execution mode `{mode}`: expected {} \
                 (or omit `trust_boundary` for `{}`)",
                list(permitted),
                permitted[0]
            ),
        );
        return None;
    }
    Some(variant)
}

fn check_dependency(
    dep: &attr::Dependency,
    earlier: &[attr::Dependency],
    errors: &mut Errors,
) -> Option<Dependency> {
    let kinds: Vec<&str> = DEPENDENCY_KINDS.iter().map(|(k, _)| *k).collect();
    let mut ok = true;
    let kind = match &dep.kind {
        Some(kind) => {
            let name = kind.to_string();
            let found = DEPENDENCY_KINDS.iter().find(|(k, _)| *k == name);
            if found.is_none() {
                let hint = did_you_mean(&name, kinds.iter().copied())
                    .map_or_else(String::new, |k| format!("did you mean `{k}`? "));
                errors.at(
                    kind.span(),
                    format!(
                        "unknown dependency kind `{name}`; {hint}expected {}",
                        list(&kinds)
                    ),
                );
            }
            found.map(|(_, v)| *v)
        }
        None => {
            errors.at(
                dep.span,
                format!(
                    "`dependency(...)` needs `kind = ...`: one of {}",
                    list(&kinds)
                ),
            );
            None
        }
    };
    ok &= kind.is_some();
    let (Some(name), Some(version)) = (&dep.name, &dep.version) else {
        errors.at(
            dep.span,
            "`dependency(...)` needs `name = \"...\"` and `version = \"...\"`, such as \
             `dependency(kind = binary, name = \"claude\", version = \">=2.0\")`",
        );
        return None;
    };
    if let Some(problem) = dependency_problem(&name.value(), &version.value()) {
        let at = if problem.starts_with("the name") {
            name.span()
        } else {
            version.span()
        };
        errors.at(
            at,
            format!("invalid dependency `{}`: {problem}", name.value()),
        );
        ok = false;
    }
    let repeated = earlier.iter().any(|e| {
        e.name.as_ref().map(LitStr::value) == Some(name.value())
            && e.kind.as_ref().map(ToString::to_string)
                == dep.kind.as_ref().map(ToString::to_string)
    });
    if repeated {
        errors.at(
            name.span(),
            format!(
                "dependency `{}` is listed more than once: list each dependency once",
                name.value()
            ),
        );
        ok = false;
    }
    ok.then(|| Dependency {
        kind: kind.unwrap_or_default(),
        name: name.clone(),
        version: version.clone(),
        optional: dep.optional,
    })
}

fn check_capability(
    cap: &attr::Capability,
    earlier: &[attr::Capability],
    errors: &mut Errors,
) -> Option<Capability> {
    let key_name = cap.key.value();
    let key = CAPABILITY_KEYS.iter().find(|(w, _)| *w == key_name);
    let mut ok = true;
    if key.is_none() {
        errors.at(
            cap.key.span(),
            format!(
                "unknown capability `{key_name}`; did you mean `{}`?",
                nearest_capability(&key_name)
            ),
        );
        ok = false;
    } else if earlier.iter().any(|e| e.key.value() == key_name) {
        errors.at(
            cap.key.span(),
            format!("capability `{key_name}` is declared more than once: declare each key once"),
        );
        ok = false;
    }
    let levels: Vec<&str> = SUPPORT_LEVELS.iter().map(|(l, _)| *l).collect();
    let level = match &cap.level {
        Some(level) => {
            let name = level.to_string();
            let found = SUPPORT_LEVELS.iter().find(|(l, _)| *l == name);
            if found.is_none() {
                let hint = did_you_mean(&name, levels.iter().copied())
                    .map_or_else(String::new, |l| format!("did you mean `{l}`? "));
                errors.at(
                    level.span(),
                    format!(
                        "unknown support level `{name}`; {hint}expected {}",
                        list(&levels)
                    ),
                );
            }
            found
        }
        None => {
            errors.at(
                cap.key.span(),
                format!(
                    "capability `{key_name}` needs a support level after the key, such as \
                     `capability(\"{key_name}\", native)`: one of {}",
                    list(&levels)
                ),
            );
            None
        }
    };
    ok &= level.is_some();
    if let Some((wire, _)) = level
        && LEVELS_NEEDING_EXPLANATION.contains(wire)
        && cap.explanation.is_none()
    {
        let why = if *wire == "degraded" {
            "how the behaviour is reduced"
        } else {
            "why it is not available"
        };
        errors.at(
            cap.level.as_ref().map_or(cap.key.span(), syn::Ident::span),
            format!(
                "capability `{key_name}` is `{wire}`: add `explanation = \"...\"` saying {why}"
            ),
        );
        ok = false;
    }
    if let Some(explanation) = &cap.explanation
        && explanation.value().trim().is_empty()
    {
        errors.at(
            explanation.span(),
            "the explanation is empty: say what a caller should know",
        );
        ok = false;
    }
    if let Some(evidence) = &cap.evidence
        && !is_evidence_id(&evidence.value())
    {
        errors.at(
            evidence.span(),
            format!(
                "invalid evidence id `{}`: expected 1 to 128 characters from [A-Za-z0-9._:-], \
                 such as `conformance:v1:my_adapter`",
                evidence.value()
            ),
        );
        ok = false;
    }
    let mut constraints: Vec<(String, ConstraintValue)> = Vec::new();
    for c in &cap.constraints {
        if c.name.is_empty() {
            errors.at(c.span, "a constraint name must not be empty");
            ok = false;
        } else if constraints.iter().any(|(n, _)| *n == c.name) {
            errors.at(
                c.span,
                format!(
                    "constraint `{}` is given more than once: give it once",
                    c.name
                ),
            );
            ok = false;
        } else {
            constraints.push((c.name.clone(), c.value.clone()));
        }
    }
    let ((_, key), (_, level)) = (key?, level?);
    ok.then(|| Capability {
        key,
        level,
        explanation: cap.explanation.clone(),
        evidence: cap.evidence.clone(),
        constraints,
    })
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/// A checked options type, ready to expand.
pub(crate) struct Options<'a> {
    /// The path to harness-core.
    pub(crate) krate: syn::Path,
    /// Whether the type can be the root of an adapter's options (describes a JSON object):
    /// then it implements `AdapterOptions`, otherwise only `ClosedSchema`.
    pub(crate) root: bool,
    /// The types whose schemas must reject unknown fields too, with where they were written.
    pub(crate) nested: Vec<(&'a Type, Span)>,
}

/// Checks an options type: it must reject unknown fields itself (`deny_unknown_fields` where
/// it has named fields), it must not `flatten` (which defeats `deny_unknown_fields`), and it
/// must not be generic. The field types are checked by the compiler, through the assertions
/// `expand` generates.
pub(crate) fn options<'a>(input: &'a OptionsInput<'a>, errors: &mut Errors) -> Option<Options<'a>> {
    let mut ok = true;
    let ident = input.ident;
    if !input.generics.params.is_empty() {
        errors.at(
            input.generics.span(),
            format!(
                "adapter options cannot be generic: `{ident}`'s JSON Schema is generated once \
                 and shared; use concrete types"
            ),
        );
        ok = false;
    }
    let deny = input.attrs.deny_unknown_fields || input.attrs.transparent;
    let fix = format!(
        "add `#[serde(deny_unknown_fields)]` to `{ident}`, so that options with a misspelled \
         or unknown field are refused instead of silently ignored"
    );
    let root = match &input.shape {
        Shape::Named(_) => {
            if !deny {
                errors.at(
                    ident.span(),
                    format!("`{ident}` would accept unknown fields: {fix}"),
                );
                ok = false;
            }
            true
        }
        Shape::Tuple(fields) => fields.len() == 1,
        Shape::Unit => false,
        Shape::Enum(variants) => {
            let live = || variants.iter().filter(|v| !v.attrs.skipped);
            let has_struct_variant = live().any(|v| v.named);
            if (has_struct_variant || input.attrs.tagged) && !deny {
                let what = if input.attrs.tagged {
                    "its tagged variants"
                } else {
                    "its struct variants"
                };
                errors.at(
                    ident.span(),
                    format!("`{ident}` would accept unknown fields in {what}: {fix}"),
                );
                ok = false;
            }
            input.attrs.tagged || live().any(|v| !v.fields.is_empty())
        }
        Shape::Union => {
            errors.at(
                ident.span(),
                "adapter options cannot be a union: use a struct with named fields",
            );
            ok = false;
            false
        }
    };
    let mut nested = Vec::new();
    for field in input.fields() {
        if let Some(span) = field.attrs.flatten {
            errors.at(
                span,
                "`#[serde(flatten)]` cannot be used in adapter options: serde ignores \
                 `deny_unknown_fields` next to it, so unknown fields would be accepted; make \
                 the flattened type a nested field instead",
            );
            ok = false;
        }
        if field.attrs.skipped || field.attrs.unchecked {
            continue;
        }
        let span = field
            .attrs
            .schema_with
            .as_ref()
            .map_or_else(|| field.original.span(), Spanned::span);
        nested.push((&field.ty, span));
    }
    if let Shape::Enum(variants) = &input.shape {
        for v in variants {
            if v.attrs.unchecked {
                errors.at(
                    v.ident.span(),
                    "`#[adapter_options(unchecked)]` belongs on a field, not on a variant",
                );
                ok = false;
            }
        }
    }
    ok.then(|| Options {
        krate: input.attrs.krate.clone().unwrap_or_else(default_crate),
        root,
        nested,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_suggested_when_a_fix_is_obvious() {
        assert_eq!(suggest_id("My-Adapter").as_deref(), Some("my_adapter"));
        assert_eq!(suggest_id("claude code").as_deref(), Some("claude_code"));
        assert_eq!(suggest_id("9lives"), None);
        assert_eq!(suggest_id("ok"), None);
    }

    #[test]
    fn did_you_mean_only_suggests_plausible_typos() {
        assert_eq!(
            did_you_mean("nativ", ["native", "emulated"]),
            Some("native")
        );
        assert_eq!(
            did_you_mean("Native", ["native", "emulated"]),
            Some("native")
        );
        assert_eq!(did_you_mean("excellent", ["native", "emulated"]), None);
        assert_eq!(
            did_you_mean("exectuion_mode", [attr::EXECUTION_MODE, attr::ID]),
            Some("execution_mode")
        );
    }

    #[test]
    fn nearest_capability_prefers_the_namespace() {
        assert_eq!(nearest_capability("stream.txt"), "stream.text");
        assert_eq!(nearest_capability("runtime.cancellation"), "runtime.cancel");
        assert_eq!(nearest_capability("tool.mpc"), "tool.mcp");
    }

    #[test]
    fn pod_fields_are_recognized_in_any_spelling() {
        for field in [
            "image",
            "command",
            "service_account",
            "serviceAccountName",
            "runtime-class",
        ] {
            assert!(is_pod_field(field), "{field}");
        }
        assert!(!is_pod_field("profile"));
    }

    #[test]
    fn lists_read_naturally() {
        assert_eq!(list(&["a"]), "`a`");
        assert_eq!(list(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
