//! The adapter registry: the engine's static set of adapters, keyed by [`AdapterId`].
//!
//! [`Registry::register`] admits an adapter only if its id is allowlisted (when an allowlist
//! is set), not already taken, its descriptor is valid, its options schema rejects unknown
//! fields, and it shares a contract version with the engine; the highest common version is
//! the one negotiated. A refused adapter leaves the registry unchanged.
//!
//! The registry holds anything that implements [`Describe`]: a bare [`HarnessDescriptor`](crate::manifest::HarnessDescriptor), a
//! concrete adapter, or a trait object behind `Arc` / `Box`.
//!
//! ```
//! use std::sync::Arc;
//! use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
//! use harness_core::registry::{Describe, RegistrationError, Registry};
//!
//! let scripted = HarnessDescriptor::builder("scripted".parse().unwrap(), "0.1.0")
//!     .contract_version(ContractVersion::V1)
//!     .execution_mode(ExecutionMode::in_process())
//!     .build()
//!     .unwrap();
//!
//! let mut registry: Registry<Arc<dyn Describe + Send + Sync>> =
//!     Registry::new().with_allowlist(["scripted".parse().unwrap()]);
//! registry.register(Arc::new(scripted.clone())).unwrap();
//!
//! let id = "scripted".parse().unwrap();
//! assert_eq!(registry.negotiated_version(&id), Some(ContractVersion::V1));
//! assert_eq!(registry.get(&id).unwrap().descriptor().name(), "scripted");
//!
//! // The same id twice is refused, and the registry is unchanged.
//! let err = registry.register(Arc::new(scripted)).unwrap_err();
//! assert!(matches!(err, RegistrationError::DuplicateId { .. }));
//! assert_eq!(registry.len(), 1);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::id::AdapterId;
use crate::manifest::{ContractVersion, ManifestError, list_pointers};

/// What the [`Registry`] needs of an adapter (defined in [`manifest`](crate::manifest)).
pub use crate::manifest::Describe;

fn list_versions(versions: &[ContractVersion]) -> String {
    let items: Vec<String> = versions.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(", "))
}

fn list_ids(ids: &[AdapterId]) -> String {
    if ids.is_empty() {
        "none (the allowlist is empty)".to_owned()
    } else {
        ids.iter()
            .map(|id| format!("`{id}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why [`Registry::register`] refused an adapter. Each names the adapter, what was wrong and
/// what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistrationError {
    /// The registry has a static allowlist and the id is not on it.
    #[error("adapter `{id}` is not in the registry's static allowlist: allowed ids are {}", list_ids(.allowed))]
    NotAllowlisted {
        /// The refused id.
        id: AdapterId,
        /// The allowlisted ids.
        allowed: Vec<AdapterId>,
    },
    /// An adapter with the same id is already registered.
    #[error("adapter `{id}` is already registered: adapter ids must be unique")]
    DuplicateId {
        /// The repeated id.
        id: AdapterId,
    },
    /// The descriptor failed validation.
    #[error(
        "adapter `{id}` has an invalid descriptor: {}",
        .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    InvalidDescriptor {
        /// The adapter's id.
        id: AdapterId,
        /// Every problem found.
        errors: Vec<ManifestError>,
    },
    /// The options schema accepts unknown fields (and nothing else is wrong).
    #[error(
        "adapter `{id}` has an options schema that accepts unknown fields at {}: add \
         `#[serde(deny_unknown_fields)]` to its options types, or `\"additionalProperties\": false` \
         to each listed object schema",
        list_pointers(.pointers)
    )]
    OpenOptionsSchema {
        /// The adapter's id.
        id: AdapterId,
        /// JSON pointers (RFC 6901; `""` is the root) of the open object schemas.
        pointers: Vec<String>,
    },
    /// The adapter and the engine share no contract version.
    #[error(
        "adapter `{id}` supports contract versions {} but this engine supports {}: no common \
         version; build the adapter against a contract version the engine supports",
        list_versions(.adapter),
        list_versions(.engine)
    )]
    NoCommonContractVersion {
        /// The adapter's id.
        id: AdapterId,
        /// The versions the adapter declares.
        adapter: Vec<ContractVersion>,
        /// The versions the engine supports.
        engine: Vec<ContractVersion>,
    },
}

struct Entry<A> {
    adapter: A,
    version: ContractVersion,
}

/// The engine's set of adapters, keyed by [`AdapterId`], iterated in id order.
///
/// See the [module documentation](self) for an example.
pub struct Registry<A> {
    supported: Vec<ContractVersion>,
    allowlist: Option<BTreeSet<AdapterId>>,
    entries: BTreeMap<AdapterId, Entry<A>>,
}

impl<A> Registry<A> {
    /// An empty registry for an engine that supports contract version 1 only.
    #[must_use]
    pub fn new() -> Self {
        Self::with_supported_versions([ContractVersion::CURRENT])
    }

    /// An empty registry for an engine that supports `versions` (duplicates are ignored; with
    /// none, every registration is refused).
    #[must_use]
    pub fn with_supported_versions(versions: impl IntoIterator<Item = ContractVersion>) -> Self {
        let mut supported: Vec<ContractVersion> = versions.into_iter().collect();
        supported.sort_unstable();
        supported.dedup();
        Self {
            supported,
            allowlist: None,
            entries: BTreeMap::new(),
        }
    }

    /// Restricts registration to a static allowlist of ids. Calling it again replaces the
    /// list. Adapters already registered stay.
    #[must_use]
    pub fn with_allowlist(mut self, ids: impl IntoIterator<Item = AdapterId>) -> Self {
        self.allowlist = Some(ids.into_iter().collect());
        self
    }

    /// The contract versions the engine supports, ascending.
    #[must_use]
    pub fn supported_versions(&self) -> &[ContractVersion] {
        &self.supported
    }

    /// The static allowlist, if one is set.
    #[must_use]
    pub fn allowlist(&self) -> Option<&BTreeSet<AdapterId>> {
        self.allowlist.as_ref()
    }

    /// The adapter registered as `id`.
    #[must_use]
    pub fn get(&self, id: &AdapterId) -> Option<&A> {
        self.entries.get(id).map(|e| &e.adapter)
    }

    /// Whether an adapter is registered as `id`.
    #[must_use]
    pub fn contains(&self, id: &AdapterId) -> bool {
        self.entries.contains_key(id)
    }

    /// The contract version negotiated with the adapter registered as `id`: the highest
    /// version both support.
    #[must_use]
    pub fn negotiated_version(&self, id: &AdapterId) -> Option<ContractVersion> {
        self.entries.get(id).map(|e| e.version)
    }

    /// The registered adapters, in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&AdapterId, &A)> + '_ {
        self.entries.iter().map(|(id, e)| (id, &e.adapter))
    }

    /// How many adapters are registered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no adapter is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<A: Describe> Registry<A> {
    /// Registers `adapter` under its descriptor's id.
    ///
    /// Checks, in order: the allowlist, that the id is free, that the descriptor is valid,
    /// that its options schema rejects unknown fields, and that it shares a contract version
    /// with the engine. On refusal the registry is unchanged (and `adapter` is dropped).
    ///
    /// # Errors
    ///
    /// The [`RegistrationError`] naming the first check that failed.
    pub fn register(&mut self, adapter: A) -> Result<(), RegistrationError> {
        let descriptor = adapter.descriptor();
        let id = descriptor.id();
        if let Some(allowed) = &self.allowlist
            && !allowed.contains(id)
        {
            return Err(RegistrationError::NotAllowlisted {
                id: id.clone(),
                allowed: allowed.iter().cloned().collect(),
            });
        }
        if self.entries.contains_key(id) {
            return Err(RegistrationError::DuplicateId { id: id.clone() });
        }
        if let Err(errors) = descriptor.validate() {
            return Err(match errors.as_slice() {
                [ManifestError::OpenOptionsSchema { pointers }] => {
                    RegistrationError::OpenOptionsSchema {
                        id: id.clone(),
                        pointers: pointers.clone(),
                    }
                }
                _ => RegistrationError::InvalidDescriptor {
                    id: id.clone(),
                    errors,
                },
            });
        }
        let Some(version) = descriptor.highest_common_version(&self.supported) else {
            let mut adapter_versions = descriptor.contract_versions().to_vec();
            adapter_versions.sort_unstable();
            return Err(RegistrationError::NoCommonContractVersion {
                id: id.clone(),
                adapter: adapter_versions,
                engine: self.supported.clone(),
            });
        };
        let id = id.clone();
        self.entries.insert(id, Entry { adapter, version });
        Ok(())
    }
}

impl<A> Default for Registry<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A> fmt::Debug for Registry<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Adapters<'a, A>(&'a BTreeMap<AdapterId, Entry<A>>);
        impl<A> fmt::Debug for Adapters<'_, A> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(id, e)| (id, e.version)))
                    .finish()
            }
        }
        f.debug_struct("Registry")
            .field("supported_versions", &self.supported)
            .field("allowlist", &self.allowlist)
            .field("adapters", &Adapters(&self.entries))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::manifest::{ExecutionMode, HarnessDescriptor};
    use rstest::rstest;
    use serde_json::json;

    fn id(s: &str) -> AdapterId {
        s.parse().unwrap()
    }

    fn v(n: u32) -> ContractVersion {
        ContractVersion::new(n).unwrap()
    }

    fn descriptor(name: &str, versions: &[u32]) -> HarnessDescriptor {
        HarnessDescriptor::builder(id(name), "1.0.0")
            .contract_versions(versions.iter().map(|n| v(*n)))
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap()
    }

    /// A concrete adapter type, as an adapter crate would write one.
    #[derive(Debug)]
    struct FakeAdapter {
        descriptor: HarnessDescriptor,
    }

    impl Describe for FakeAdapter {
        fn descriptor(&self) -> &HarnessDescriptor {
            &self.descriptor
        }
    }

    /// A larger adapter trait with `Describe` as a supertrait, as the runtime traits will be.
    trait Adapter: Describe + Send + Sync {
        fn kind(&self) -> &'static str;
    }

    impl Adapter for FakeAdapter {
        fn kind(&self) -> &'static str {
            "fake"
        }
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn registry_holds_trait_objects_and_plain_descriptors() {
        let mut dyn_registry: Registry<Arc<dyn Describe + Send + Sync>> = Registry::new();
        dyn_registry
            .register(Arc::new(descriptor("plain", &[1])))
            .unwrap();
        dyn_registry
            .register(Arc::new(FakeAdapter {
                descriptor: descriptor("fake", &[1]),
            }))
            .unwrap();
        assert_eq!(dyn_registry.len(), 2);
        assert_send_sync::<Registry<Arc<dyn Describe + Send + Sync>>>();

        let mut boxed: Registry<Box<dyn Describe>> = Registry::default();
        boxed.register(Box::new(descriptor("boxed", &[1]))).unwrap();
        assert!(boxed.contains(&id("boxed")));

        let mut plain: Registry<HarnessDescriptor> = Registry::new();
        plain.register(descriptor("plain", &[1])).unwrap();
        assert_eq!(plain.get(&id("plain")).unwrap().id().as_str(), "plain");

        let d = descriptor("borrowed", &[1]);
        let mut borrowed: Registry<&HarnessDescriptor> = Registry::new();
        borrowed.register(&d).unwrap();
        assert_eq!(borrowed.len(), 1);

        let mut adapters: Registry<Arc<dyn Adapter>> = Registry::new();
        adapters
            .register(Arc::new(FakeAdapter {
                descriptor: descriptor("fake", &[1]),
            }))
            .unwrap();
        assert_eq!(adapters.get(&id("fake")).unwrap().kind(), "fake");
    }

    #[test]
    fn iteration_is_in_id_order_and_get_finds_by_id() {
        let mut registry = Registry::new();
        for name in ["zeta", "alpha", "mid"] {
            registry.register(descriptor(name, &[1])).unwrap();
        }
        let ids: Vec<&str> = registry.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["alpha", "mid", "zeta"]);
        assert_eq!(registry.get(&id("mid")).unwrap().name(), "mid");
        assert!(registry.get(&id("nope")).is_none());
        assert!(!registry.is_empty());
    }

    #[rstest]
    #[case(&[1], &[1], Some(1))]
    #[case(&[1, 2, 3], &[2, 3, 5], Some(3))]
    #[case(&[3, 1, 2], &[1, 2], Some(2))]
    #[case(&[2, 1, 2], &[2], Some(2))]
    #[case(&[1], &[2, 3], None)]
    #[case(&[], &[1], None)]
    fn negotiation_picks_the_highest_common_version(
        #[case] engine: &[u32],
        #[case] adapter: &[u32],
        #[case] negotiated: Option<u32>,
    ) {
        let mut registry = Registry::with_supported_versions(engine.iter().map(|n| v(*n)));
        let result = registry.register(descriptor("scripted", adapter));
        assert_eq!(result.is_ok(), negotiated.is_some(), "{result:?}");
        assert_eq!(
            registry.negotiated_version(&id("scripted")),
            negotiated.map(v)
        );
    }

    #[test]
    fn no_common_version_is_refused_listing_both_sides() {
        let mut registry = Registry::new();
        let err = registry
            .register(descriptor("future", &[3, 2]))
            .unwrap_err();
        assert_eq!(
            err,
            RegistrationError::NoCommonContractVersion {
                id: id("future"),
                adapter: vec![v(2), v(3)],
                engine: vec![v(1)],
            }
        );
        assert_eq!(
            err.to_string(),
            "adapter `future` supports contract versions [2, 3] but this engine supports [1]: no \
             common version; build the adapter against a contract version the engine supports"
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn duplicate_id_is_refused_and_the_first_stays() {
        let mut registry = Registry::new();
        registry.register(descriptor("scripted", &[1])).unwrap();
        let second = HarnessDescriptor::builder(id("scripted"), "2.0.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::ProviderManaged)
            .build()
            .unwrap();
        let err = registry.register(second).unwrap_err();
        assert_eq!(err, RegistrationError::DuplicateId { id: id("scripted") });
        assert_eq!(
            err.to_string(),
            "adapter `scripted` is already registered: adapter ids must be unique"
        );
        assert_eq!(registry.len(), 1);
        assert_eq!(
            registry
                .get(&id("scripted"))
                .unwrap()
                .implementation_version(),
            "1.0.0"
        );
    }

    #[test]
    fn allowlist_refuses_other_ids() {
        let mut registry = Registry::new().with_allowlist([id("scripted"), id("acp")]);
        registry.register(descriptor("acp", &[1])).unwrap();
        let err = registry.register(descriptor("rogue", &[1])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "adapter `rogue` is not in the registry's static allowlist: allowed ids are `acp`, \
             `scripted`"
        );
        assert!(!registry.contains(&id("rogue")));
        assert_eq!(registry.allowlist().unwrap().len(), 2);

        let mut closed: Registry<HarnessDescriptor> = Registry::new().with_allowlist([]);
        let err = closed.register(descriptor("scripted", &[1])).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("allowed ids are none (the allowlist is empty)"),
            "{err}"
        );
    }

    #[test]
    fn allowlist_is_checked_before_duplicates_and_versions() {
        let mut registry = Registry::new().with_allowlist([id("scripted")]);
        let err = registry.register(descriptor("rogue", &[9])).unwrap_err();
        assert!(
            matches!(err, RegistrationError::NotAllowlisted { .. }),
            "{err}"
        );
    }

    #[test]
    fn open_options_schema_is_refused_with_pointers_and_the_fix() {
        let mut d = descriptor("scripted", &[1]);
        d.options_schema = json!({
            "type": "object",
            "properties": {"retry": {"type": "object"}}
        });
        let mut registry = Registry::new();
        let err = registry.register(d).unwrap_err();
        assert_eq!(
            err,
            RegistrationError::OpenOptionsSchema {
                id: id("scripted"),
                pointers: vec![String::new(), "/properties/retry".into()],
            }
        );
        assert_eq!(
            err.to_string(),
            "adapter `scripted` has an options schema that accepts unknown fields at the root, \
             `/properties/retry`: add `#[serde(deny_unknown_fields)]` to its options types, or \
             `\"additionalProperties\": false` to each listed object schema"
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn invalid_descriptor_is_refused_with_every_problem() {
        let mut d = descriptor("scripted", &[1]);
        d.contract_versions.clear();
        d.implementation_version = "1.0".into();
        d.options_schema = json!({"type": "object"});
        let mut registry = Registry::new();
        let err = registry.register(d).unwrap_err();
        let RegistrationError::InvalidDescriptor { id: bad, errors } = &err else {
            panic!("expected InvalidDescriptor, got {err:?}");
        };
        assert_eq!(bad.as_str(), "scripted");
        assert_eq!(errors.len(), 3);
        assert!(matches!(errors[0], ManifestError::NoContractVersions));
        assert!(matches!(errors[2], ManifestError::OpenOptionsSchema { .. }));
        let text = err.to_string();
        assert!(
            text.starts_with(
                "adapter `scripted` has an invalid descriptor: `contractVersions` is empty"
            ),
            "{text}"
        );
        assert!(
            text.contains("`implementationVersion` `1.0` is invalid"),
            "{text}"
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn supported_versions_are_sorted_and_deduplicated() {
        let registry: Registry<HarnessDescriptor> =
            Registry::with_supported_versions([v(2), v(1), v(2)]);
        assert_eq!(registry.supported_versions(), [v(1), v(2)]);
        assert_eq!(
            Registry::<HarnessDescriptor>::new().supported_versions(),
            [v(1)]
        );
    }

    #[test]
    fn debug_lists_ids_and_versions_without_requiring_debug_adapters() {
        struct NotDebug(HarnessDescriptor);
        impl Describe for NotDebug {
            fn descriptor(&self) -> &HarnessDescriptor {
                &self.0
            }
        }
        let mut registry = Registry::new();
        registry
            .register(NotDebug(descriptor("scripted", &[1])))
            .unwrap();
        let text = format!("{registry:?}");
        assert!(text.contains("\"scripted\""), "{text}");
        assert!(text.contains("adapters"), "{text}");
    }
}
