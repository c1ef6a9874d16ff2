//! Stage 4: code generation.
//!
//! Generated code sits in `const _: () = { ... };`, is `#[automatically_derived]`, names the
//! standard library as `::core::...` and reaches the runtime only through
//! `<crate>::__private` (by default `::harness_core::__private`; `crate = "..."` changes it).
//!
//! When the attributes have errors, the errors are emitted together with *fallback* impls of
//! the same traits whose bodies are unreachable, so that code using the type (an
//! `impl HarnessAdapter` calling `Self::static_descriptor()`, an `options = MyOptions` naming it) still
//! type-checks and one mistake gives one error.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::DeriveInput;

use crate::ast::{AdapterInput, OptionsInput};
use crate::attr::{ConstraintValue, Errors};
use crate::valid::{self, Manifest, Mode};

/// The alias of `<crate>::__private` inside the generated `const` block.
fn private() -> TokenStream {
    quote!(__harness)
}

/// `#[derive(Adapter)]`.
pub(crate) fn adapter(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let ast = AdapterInput::from_syn(input, &mut errors);
    let options = ast.attrs.options.clone();
    let krate = ast.attrs.krate.clone();
    let manifest = valid::adapter(ast, &mut errors);
    match (errors.finish(), manifest) {
        (Ok(()), Some(manifest)) => adapter_impl(input, &manifest),
        (result, _) => {
            let error = result.err().unwrap_or_else(|| {
                syn::Error::new(Span::call_site(), "`#[adapter(...)]` could not be read")
            });
            let mut out = error.into_compile_error();
            out.extend(adapter_fallback(input, krate, options));
            out
        }
    }
}

fn adapter_impl(input: &DeriveInput, m: &Manifest) -> TokenStream {
    let h = private();
    let krate = &m.krate;
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let id = &m.id;
    let options = &m.options;

    let version = match &m.implementation_version {
        Some(v) => quote!(#v),
        None => quote!(::core::env!("CARGO_PKG_VERSION")),
    };
    let name = m.name.as_ref().map(|n| quote!(.name(#n)));
    let versions = &m.contract_versions;
    let (mode, profile_check) = match &m.execution_mode {
        Mode::SandboxPod(profile) => (
            quote!(#h::ExecutionMode::sandbox_pod(#h::profile_id(#profile))),
            Some(quote! {
                const _: () = ::core::assert!(
                    #h::OperatorProfileId::is_valid(#profile),
                    "harness-macros accepted an operator profile id that harness-core refuses"
                );
            }),
        ),
        Mode::ProviderManaged => (quote!(#h::ExecutionMode::ProviderManaged), None),
        Mode::InProcess => (quote!(#h::ExecutionMode::in_process()), None),
    };
    let trust_boundary = m.trust_boundary.map(|b| {
        let b = format_ident!("{}", b);
        quote!(.trust_boundary(#h::TrustBoundary::#b))
    });
    let dependencies = m.dependencies.iter().map(|d| {
        let kind = format_ident!("{}", d.kind);
        let (name, version) = (&d.name, &d.version);
        let optional = d.optional.then(|| quote!(.optional()));
        quote!(.dependency(#h::Dependency::new(#h::DependencyKind::#kind, #name, #version) #optional))
    });
    let capabilities = m.capabilities.iter().map(|c| {
        let key = format_ident!("{}", c.key);
        let level = format_ident!("{}", c.level);
        let explanation = c
            .explanation
            .as_ref()
            .map(|e| quote!(.with_explanation(#e)));
        let constraints = c.constraints.iter().map(|(name, value)| {
            let value = json(value);
            quote!(.with_constraint(#name, #value))
        });
        let evidence = c
            .evidence
            .as_ref()
            .map(|e| quote!(.with_evidence(#h::evidence_id(#e))));
        quote! {
            .capability(
                #h::CapabilityKey::#key,
                #h::Capability::new(#h::SupportLevel::#level)
                    #explanation
                    #(#constraints)*
                    #evidence
            )
        }
    });
    let certification = m
        .certification_evidence_version
        .as_ref()
        .map(|v| quote!(.certification_evidence_version(#v)));

    quote! {
        #[doc(hidden)]
        #[allow(non_upper_case_globals, unused_attributes, unused_qualifications)]
        const _: () = {
            #[allow(unused_imports)]
            use #krate::__private as #h;

            const _: () = ::core::assert!(
                #h::AdapterId::is_valid(#id),
                "harness-macros accepted an adapter id that harness-core refuses"
            );
            #profile_check

            #[automatically_derived]
            impl #impl_generics #h::Describe for #ident #ty_generics #where_clause {
                fn descriptor(&self) -> &#h::HarnessDescriptor {
                    <Self as #h::Adapter>::static_descriptor()
                }
            }

            #[automatically_derived]
            impl #impl_generics #h::Adapter for #ident #ty_generics #where_clause {
                type Options = #options;

                fn static_descriptor() -> &'static #h::HarnessDescriptor {
                    static DESCRIPTOR: #h::OnceLock<#h::HarnessDescriptor> = #h::OnceLock::new();
                    DESCRIPTOR.get_or_init(|| {
                        #h::build_manifest(
                            ::core::stringify!(#ident),
                            #h::HarnessDescriptor::builder(#h::adapter_id(#id), #version)
                                #name
                                .contract_versions([#(#h::contract_version(#versions)),*])
                                .execution_mode(#mode)
                                #trust_boundary
                                #(#dependencies)*
                                .options_schema(#h::options_schema_of::<Self>())
                                #(#capabilities)*
                                #certification,
                        )
                    })
                }
            }
        };
    }
}

/// A JSON value built from a constraint literal.
fn json(value: &ConstraintValue) -> TokenStream {
    let h = private();
    match value {
        ConstraintValue::Str(s) => quote!(#h::Value::from(#s)),
        ConstraintValue::Int(n) => quote!(#h::Value::from(#n)),
        ConstraintValue::UInt(n) => quote!(#h::Value::from(#n)),
        ConstraintValue::Float(n) => quote!(#h::Value::from(#n)),
        ConstraintValue::Bool(b) => quote!(#h::Value::from(#b)),
        ConstraintValue::Array(items) => {
            let items = items.iter().map(json);
            quote! {
                <#h::Value as ::core::iter::FromIterator<#h::Value>>::from_iter([#(#items),*])
            }
        }
    }
}

/// The impl emitted next to the errors: same trait, unreachable body.
fn adapter_fallback(
    input: &DeriveInput,
    krate: Option<syn::Path>,
    options: Option<syn::Type>,
) -> TokenStream {
    let h = private();
    let krate = krate.unwrap_or_else(valid::default_crate);
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let options = options.map_or_else(|| quote!(#h::NoOptions), |o| quote!(#o));
    quote! {
        #[doc(hidden)]
        #[allow(unused_qualifications)]
        const _: () = {
            #[allow(unused_imports)]
            use #krate::__private as #h;

            #[automatically_derived]
            impl #impl_generics #h::Describe for #ident #ty_generics #where_clause {
                fn descriptor(&self) -> &#h::HarnessDescriptor {
                    ::core::unreachable!("`#[adapter(...)]` has errors")
                }
            }

            #[automatically_derived]
            impl #impl_generics #h::Adapter for #ident #ty_generics #where_clause {
                type Options = #options;

                fn static_descriptor() -> &'static #h::HarnessDescriptor {
                    ::core::unreachable!("`#[adapter(...)]` has errors")
                }
            }
        };
    }
}

/// `#[derive(AdapterOptions)]`.
pub(crate) fn options(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let ast = OptionsInput::from_syn(input, &mut errors);
    let checked = valid::options(&ast, &mut errors);
    match (errors.finish(), checked) {
        (Ok(()), Some(checked)) => options_impl(input, &checked),
        (result, _) => {
            let error = result.err().unwrap_or_else(|| {
                syn::Error::new(Span::call_site(), "the options type could not be read")
            });
            let mut out = error.into_compile_error();
            out.extend(options_fallback(input, ast.attrs.krate.clone()));
            out
        }
    }
}

fn options_impl(input: &DeriveInput, checked: &valid::Options<'_>) -> TokenStream {
    let h = private();
    let krate = &checked.krate;
    let ident = &input.ident;
    let adapter_options = checked.root.then(|| {
        quote! {
            #[automatically_derived]
            impl #h::AdapterOptions for #ident {
                fn options_schema() -> #h::Value {
                    static SCHEMA: #h::OnceLock<#h::Value> = #h::OnceLock::new();
                    ::core::clone::Clone::clone(SCHEMA.get_or_init(#h::options_schema_for::<Self>))
                }

                fn validate_options(
                    options: &#h::Value,
                ) -> ::core::result::Result<(), #h::InvalidOptions> {
                    static VALIDATOR: #h::ValidatorCell = #h::ValidatorCell::new();
                    VALIDATOR.validate::<Self>(options)
                }
            }
        }
    });
    let assertions = checked
        .nested
        .iter()
        .map(|(ty, span)| quote_spanned!(*span=> #h::assert_closed::<#ty>();));
    quote! {
        #[doc(hidden)]
        #[allow(non_upper_case_globals, unused_attributes, unused_qualifications)]
        const _: () = {
            #[allow(unused_imports)]
            use #krate::__private as #h;

            #[automatically_derived]
            impl #h::ClosedSchema for #ident {}

            #adapter_options

            // Every field's schema must reject unknown fields too: the compiler checks it here,
            // pointing at the field's type when it does not.
            const _: fn() = || {
                #(#assertions)*
            };
        };
    }
}

fn options_fallback(input: &DeriveInput, krate: Option<syn::Path>) -> TokenStream {
    let h = private();
    let krate = krate.unwrap_or_else(valid::default_crate);
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let plain = input.generics.params.is_empty() && !matches!(input.data, syn::Data::Union(_));
    let adapter_options = plain.then(|| {
        quote! {
            #[automatically_derived]
            impl #h::AdapterOptions for #ident {
                fn options_schema() -> #h::Value {
                    ::core::unreachable!("the options type has errors")
                }

                fn validate_options(
                    _: &#h::Value,
                ) -> ::core::result::Result<(), #h::InvalidOptions> {
                    ::core::unreachable!("the options type has errors")
                }
            }
        }
    });
    quote! {
        #[doc(hidden)]
        #[allow(unused_qualifications)]
        const _: () = {
            #[allow(unused_imports)]
            use #krate::__private as #h;

            #[automatically_derived]
            impl #impl_generics #h::ClosedSchema for #ident #ty_generics #where_clause {}

            #adapter_options
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_adapter(input: &DeriveInput) -> String {
        adapter(input).to_string()
    }

    #[test]
    fn generated_code_is_contained_and_reaches_the_runtime_through_private() {
        let out = expand_adapter(&syn::parse_quote! {
            #[adapter(
                id = "echo",
                contract_versions = [1],
                execution_mode = in_process(compatibility_only),
                options = EchoOptions,
                capability("stream.text", native),
            )]
            struct Echo;
        });
        assert!(out.starts_with("# [doc (hidden)]"), "{out}");
        assert!(out.contains("const _ : () = {"), "{out}");
        assert!(out.contains("# [automatically_derived]"), "{out}");
        // This crate depends on the facade (for its doc examples) and not on harness-core:
        // the default path is found in its Cargo.toml.
        assert!(
            out.contains("use :: harness :: __private as __harness ;"),
            "{out}"
        );
        assert!(
            out.contains(":: core :: env ! (\"CARGO_PKG_VERSION\")"),
            "{out}"
        );
        assert!(
            out.contains("__harness :: CapabilityKey :: StreamText"),
            "{out}"
        );
        assert!(out.contains("__harness :: OnceLock"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains(":: std ::"), "{out}");
    }

    #[test]
    fn the_crate_path_can_be_overridden() {
        let out = expand_adapter(&syn::parse_quote! {
            #[adapter(
                crate = "::harness",
                id = "echo",
                contract_versions = [1],
                execution_mode = provider_managed,
                options = EchoOptions,
            )]
            struct Echo;
        });
        assert!(
            out.contains("use :: harness :: __private as __harness ;"),
            "{out}"
        );
        assert!(!out.contains("harness_core"), "{out}");
    }

    #[test]
    fn errors_come_with_a_fallback_impl() {
        let out = expand_adapter(&syn::parse_quote! {
            #[adapter(id = "Bad", contract_versions = [], execution_mode = sandbox_pod)]
            struct Echo;
        });
        // Every error, then the same trait with an unreachable body.
        assert_eq!(out.matches("compile_error").count(), 4, "{out}");
        assert!(out.contains("impl __harness :: Adapter for Echo"), "{out}");
        assert!(
            out.contains("type Options = __harness :: NoOptions ;"),
            "{out}"
        );
        assert!(out.contains(":: core :: unreachable !"), "{out}");
    }

    #[test]
    fn options_assert_every_checked_field_type() {
        let input: DeriveInput = syn::parse_quote! {
            #[serde(deny_unknown_fields)]
            struct Options {
                model: String,
                retry: Option<Retry>,
                #[adapter_options(unchecked)]
                extra: serde_json::Value,
                #[serde(skip)]
                cache: Cache,
            }
        };
        let out = options(&input).to_string();
        assert!(
            out.contains("impl __harness :: ClosedSchema for Options"),
            "{out}"
        );
        assert!(
            out.contains("impl __harness :: AdapterOptions for Options"),
            "{out}"
        );
        assert!(out.contains("assert_closed :: < String >"), "{out}");
        assert!(
            out.contains("assert_closed :: < Option < Retry > >"),
            "{out}"
        );
        assert!(!out.contains("serde_json :: Value >"), "{out}");
        assert!(!out.contains("Cache >"), "{out}");
    }

    #[test]
    fn unit_enums_are_fields_not_options() {
        let input: DeriveInput = syn::parse_quote! {
            enum Mode { Fast, Careful }
        };
        let out = options(&input).to_string();
        assert!(
            out.contains("impl __harness :: ClosedSchema for Mode"),
            "{out}"
        );
        assert!(!out.contains("AdapterOptions for Mode"), "{out}");
    }
}
