//! Stage 1: reading the attributes.
//!
//! `#[adapter(...)]` is read into [`Adapter`], `#[adapter_options(...)]` and the `serde` /
//! `schemars` attributes that decide whether options reject unknown fields into [`Container`]
//! and [`FieldAttrs`]. This stage knows the attribute grammar only: whether an id matches its
//! pattern or a capability key exists is for `valid`. Unknown keys and malformed values are
//! collected into [`Errors`] and parsing goes on, so one derive reports every mistake.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitBool, LitFloat, LitInt, LitStr, Token};

use crate::contract::did_you_mean;

/// The helper attribute of `#[derive(Adapter)]`.
pub(crate) const ADAPTER: &str = "adapter";
/// The helper attribute of `#[derive(AdapterOptions)]`.
pub(crate) const ADAPTER_OPTIONS: &str = "adapter_options";
/// serde's attribute, read to find `deny_unknown_fields`, `flatten` and `skip`.
const SERDE: &str = "serde";
/// schemars' attribute, read to find `with = "Type"`.
const SCHEMARS: &str = "schemars";

/// `crate = "path"`: where `harness-core` (or a crate re-exporting its `__private`) lives.
pub(crate) const CRATE: &str = "crate";
/// `id = "..."`.
pub(crate) const ID: &str = "id";
/// `name = "..."`.
pub(crate) const NAME: &str = "name";
/// `implementation_version = "..."`.
pub(crate) const IMPLEMENTATION_VERSION: &str = "implementation_version";
/// `contract_versions = [..]`.
pub(crate) const CONTRACT_VERSIONS: &str = "contract_versions";
/// `execution_mode = ...`.
pub(crate) const EXECUTION_MODE: &str = "execution_mode";
/// `trust_boundary = ...`.
pub(crate) const TRUST_BOUNDARY: &str = "trust_boundary";
/// `dependency(...)`.
pub(crate) const DEPENDENCY: &str = "dependency";
/// `options = Type`.
pub(crate) const OPTIONS: &str = "options";
/// `capability("key", level, ...)`.
pub(crate) const CAPABILITY: &str = "capability";
/// `certification_evidence_version = "..."`.
pub(crate) const CERTIFICATION_EVIDENCE_VERSION: &str = "certification_evidence_version";

/// Every key `#[adapter(...)]` accepts.
const ADAPTER_KEYS: [&str; 11] = [
    ID,
    NAME,
    IMPLEMENTATION_VERSION,
    CONTRACT_VERSIONS,
    EXECUTION_MODE,
    TRUST_BOUNDARY,
    DEPENDENCY,
    OPTIONS,
    CAPABILITY,
    CERTIFICATION_EVIDENCE_VERSION,
    CRATE,
];

/// `unchecked` (field): skip the compile-time check of the field's type.
pub(crate) const UNCHECKED: &str = "unchecked";

/// Collected errors: every problem is pushed, the derive reports them all at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds one error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds an error pointing at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// `Err` with every error, if there was one.
    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        self.0.map_or(Ok(()), Err)
    }
}

// ---------------------------------------------------------------------------------------------
// #[adapter(...)]
// ---------------------------------------------------------------------------------------------

/// What the `#[adapter(...)]` attributes of one type say, before validation.
#[derive(Default)]
pub(crate) struct Adapter {
    /// Whether at least one `#[adapter(...)]` attribute was present.
    pub(crate) present: bool,
    /// The keys suggested for unknown keys (`exectuion_mode` -> `execution_mode`): a missing
    /// key that was suggested is not reported again.
    pub(crate) suggested: Vec<&'static str>,
    /// `crate = "..."`.
    pub(crate) krate: Option<syn::Path>,
    /// `id = "..."`.
    pub(crate) id: Option<LitStr>,
    /// `name = "..."`.
    pub(crate) name: Option<LitStr>,
    /// `implementation_version = "..."`.
    pub(crate) implementation_version: Option<LitStr>,
    /// `contract_versions = [..]`.
    pub(crate) contract_versions: Option<ContractVersions>,
    /// `execution_mode = ...`.
    pub(crate) execution_mode: Option<ExecutionMode>,
    /// `trust_boundary = ...`.
    pub(crate) trust_boundary: Option<Ident>,
    /// `options = Type`.
    pub(crate) options: Option<syn::Type>,
    /// Every `dependency(...)`.
    pub(crate) dependencies: Vec<Dependency>,
    /// Every `capability(...)`.
    pub(crate) capabilities: Vec<Capability>,
    /// `certification_evidence_version = "..."`.
    pub(crate) certification_evidence_version: Option<LitStr>,
}

/// `contract_versions = [1, 2]`.
pub(crate) struct ContractVersions {
    /// The span of the whole list, for "is empty".
    pub(crate) span: Span,
    /// The listed versions.
    pub(crate) versions: Vec<LitInt>,
}

/// `execution_mode = name` or `execution_mode = name(args)`.
pub(crate) struct ExecutionMode {
    /// `sandbox_pod`, `provider_managed`, `in_process` (or a mistake).
    pub(crate) name: Ident,
    /// The parenthesized arguments, if any.
    pub(crate) args: Option<ModeArgs>,
}

/// The parenthesized arguments of an execution mode.
pub(crate) struct ModeArgs {
    /// The span of the parentheses.
    pub(crate) span: Span,
    /// Each `name` or `name = value`.
    pub(crate) items: Vec<ModeArg>,
}

/// One argument of an execution mode: `profile = "gvisor-small"`, `compatibility_only`, or a
/// mistake such as `image = "..."`.
pub(crate) struct ModeArg {
    /// The argument's name.
    pub(crate) name: Ident,
    /// The tokens after `=`, if any.
    pub(crate) value: Option<TokenStream>,
}

/// `dependency(kind = binary, name = "claude", version = ">=2", optional)`.
pub(crate) struct Dependency {
    /// The span of the whole `dependency(...)`.
    pub(crate) span: Span,
    /// `kind = ...`.
    pub(crate) kind: Option<Ident>,
    /// `name = "..."`.
    pub(crate) name: Option<LitStr>,
    /// `version = "..."`.
    pub(crate) version: Option<LitStr>,
    /// `optional`.
    pub(crate) optional: bool,
}

/// `capability("stream.usage", degraded, explanation = "...", constraints(...), evidence = "...")`.
pub(crate) struct Capability {
    /// The key, such as `"stream.text"`.
    pub(crate) key: LitStr,
    /// The support level, such as `native`.
    pub(crate) level: Option<Ident>,
    /// `explanation = "..."`.
    pub(crate) explanation: Option<LitStr>,
    /// `evidence = "..."`.
    pub(crate) evidence: Option<LitStr>,
    /// `constraints(name = value, ...)`.
    pub(crate) constraints: Vec<Constraint>,
}

/// One machine-readable constraint: `max_pixels = 1024`, `"granularity" = "turn"`.
pub(crate) struct Constraint {
    /// The constraint's name.
    pub(crate) name: String,
    /// Where the name was written.
    pub(crate) span: Span,
    /// Its JSON value.
    pub(crate) value: ConstraintValue,
}

/// The JSON value of a constraint: a literal or a list of them.
#[derive(Clone)]
pub(crate) enum ConstraintValue {
    /// A string.
    Str(String),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A finite float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A list.
    Array(Vec<ConstraintValue>),
}

impl Adapter {
    /// Reads every `#[adapter(...)]` among `attrs`.
    pub(crate) fn from_attrs(attrs: &[Attribute], errors: &mut Errors) -> Self {
        let mut out = Self::default();
        for attr in attrs.iter().filter(|a| a.path().is_ident(ADAPTER)) {
            out.present = true;
            if let Err(e) = attr.parse_nested_meta(|meta| out.read(&meta, errors)) {
                errors.push(e);
            }
        }
        out
    }

    fn read(&mut self, meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let path = &meta.path;
        let key = path
            .get_ident()
            .map(|i| i.unraw().to_string())
            .unwrap_or_default();
        match key.as_str() {
            ID => set(&mut self.id, meta, errors, |m| m.value()?.parse()),
            NAME => set(&mut self.name, meta, errors, |m| m.value()?.parse()),
            IMPLEMENTATION_VERSION => set(&mut self.implementation_version, meta, errors, |m| {
                m.value()?.parse()
            }),
            CERTIFICATION_EVIDENCE_VERSION => set(
                &mut self.certification_evidence_version,
                meta,
                errors,
                |m| m.value()?.parse(),
            ),
            CRATE => set(&mut self.krate, meta, errors, |m| {
                let lit: LitStr = m.value()?.parse()?;
                lit.parse::<syn::Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "`crate = {:?}` is not a path: expected the path to harness-core, \
                             such as `crate = \"::harness_core\"` or `crate = \"::harness\"`",
                            lit.value()
                        ),
                    )
                })
            }),
            CONTRACT_VERSIONS => set(&mut self.contract_versions, meta, errors, |m| {
                let input = m.value()?;
                if !input.peek(syn::token::Bracket) {
                    return Err(input.error(
                        "expected a list of contract versions, such as `contract_versions = [1]`",
                    ));
                }
                let content;
                let bracket = syn::bracketed!(content in input);
                let versions = Punctuated::<LitInt, Token![,]>::parse_terminated(&content)?;
                Ok(ContractVersions {
                    span: bracket.span.join(),
                    versions: versions.into_iter().collect(),
                })
            }),
            EXECUTION_MODE => set(&mut self.execution_mode, meta, errors, |m| {
                m.value()?.parse()
            }),
            TRUST_BOUNDARY => set(&mut self.trust_boundary, meta, errors, |m| {
                m.value()?.call(Ident::parse_any)
            }),
            OPTIONS => set(&mut self.options, meta, errors, |m| {
                let input = m.value()?;
                if input.peek(LitStr) {
                    return Err(input.error(
                        "expected the options type itself, not a string: `options = MyOptions`",
                    ));
                }
                input.parse()
            }),
            DEPENDENCY => {
                let dependency = Dependency::parse(meta, errors)?;
                self.dependencies.push(dependency);
                Ok(())
            }
            CAPABILITY => {
                let capability = Capability::parse(meta, errors)?;
                self.capabilities.push(capability);
                Ok(())
            }
            _ => {
                let shown = path_to_string(path);
                let message = match did_you_mean(&shown, ADAPTER_KEYS) {
                    Some(near) => {
                        self.suggested.push(near);
                        format!("unknown `#[adapter]` key `{shown}`; did you mean `{near}`?")
                    }
                    None => format!(
                        "unknown `#[adapter]` key `{shown}`: expected one of {}",
                        list(&ADAPTER_KEYS)
                    ),
                };
                errors.at(path.span(), message);
                skip_value(meta)
            }
        }
    }
}

/// Reads a single-valued key, reporting a repetition (and keeping the first value).
fn set<T>(
    slot: &mut Option<T>,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
    parse: impl FnOnce(&ParseNestedMeta<'_>) -> syn::Result<T>,
) -> syn::Result<()> {
    let value = parse(meta)?;
    if slot.is_some() {
        errors.at(
            meta.path.span(),
            format!(
                "`{}` is given more than once: give it once",
                path_to_string(&meta.path)
            ),
        );
    } else {
        *slot = Some(value);
    }
    Ok(())
}

/// Consumes the value of a key we do not know (`= tokens` up to the next comma, or a
/// parenthesized group), so that parsing can go on to report the keys after it.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.input.parse::<Token![=]>()?;
        rest_of_item(meta.input)?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}

/// The tokens up to the next top-level comma (not consumed).
fn rest_of_item(input: ParseStream<'_>) -> syn::Result<TokenStream> {
    let mut tokens = TokenStream::new();
    while !input.is_empty() && !input.peek(Token![,]) {
        tokens.extend([input.parse::<TokenTree>()?]);
    }
    Ok(tokens)
}

fn path_to_string(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.unraw().to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// `` `a`, `b` or `c` ``.
pub(crate) fn list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => format!("`{one}`"),
        [init @ .., last] => format!(
            "{} or `{last}`",
            init.iter()
                .map(|i| format!("`{i}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Parse for ExecutionMode {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name = input.call(Ident::parse_any)?;
        let args = if input.peek(syn::token::Paren) {
            let content;
            let parens = syn::parenthesized!(content in input);
            let items = Punctuated::<ModeArg, Token![,]>::parse_terminated(&content)?;
            Some(ModeArgs {
                span: parens.span.join(),
                items: items.into_iter().collect(),
            })
        } else {
            None
        };
        Ok(Self { name, args })
    }
}

impl Parse for ModeArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name = input.call(Ident::parse_any)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(rest_of_item(input)?)
        } else {
            None
        };
        Ok(Self { name, value })
    }
}

impl Dependency {
    fn parse(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Self> {
        let span = meta.path.span();
        let mut out = Self {
            span,
            kind: None,
            name: None,
            version: None,
            optional: false,
        };
        if !meta.input.peek(syn::token::Paren) {
            return Err(meta
                .input
                .error("expected `dependency(kind = binary, name = \"...\", version = \"...\")`"));
        }
        meta.parse_nested_meta(|inner| {
            let key = inner
                .path
                .get_ident()
                .map(|i| i.unraw().to_string())
                .unwrap_or_default();
            match key.as_str() {
                "kind" => set(&mut out.kind, &inner, errors, |m| {
                    m.value()?.call(Ident::parse_any)
                }),
                "name" => set(&mut out.name, &inner, errors, |m| m.value()?.parse()),
                "version" => set(&mut out.version, &inner, errors, |m| m.value()?.parse()),
                "optional" => {
                    if out.optional {
                        errors.at(inner.path.span(), "`optional` is given more than once");
                    }
                    out.optional = true;
                    Ok(())
                }
                _ => {
                    let shown = path_to_string(&inner.path);
                    errors.at(
                        inner.path.span(),
                        format!(
                            "unknown `dependency` key `{shown}`: expected `kind`, `name`, \
                             `version` and optionally `optional`"
                        ),
                    );
                    skip_value(&inner)
                }
            }
        })?;
        Ok(out)
    }
}

impl Capability {
    fn parse(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Self> {
        if !meta.input.peek(syn::token::Paren) {
            return Err(meta.input.error(
                "expected `capability(\"stream.text\", native)`: the key, the level, then \
                 optionally `explanation = \"...\"`, `constraints(...)` and `evidence = \"...\"`",
            ));
        }
        let content;
        syn::parenthesized!(content in meta.input);
        if !content.peek(LitStr) {
            return Err(content.error(
                "expected the capability key as a string first, such as \
                 `capability(\"stream.text\", native)`",
            ));
        }
        let key: LitStr = content.parse()?;
        let mut out = Self {
            key,
            level: None,
            explanation: None,
            evidence: None,
            constraints: Vec::new(),
        };
        if content.is_empty() {
            return Ok(out);
        }
        content.parse::<Token![,]>()?;
        if content.peek(Ident::peek_any)
            && !content.peek2(Token![=])
            && !content.peek2(syn::token::Paren)
        {
            out.level = Some(content.call(Ident::parse_any)?);
            if content.is_empty() {
                return Ok(out);
            }
            content.parse::<Token![,]>()?;
        }
        while !content.is_empty() {
            let name = content.call(Ident::parse_any)?;
            match name.to_string().as_str() {
                "explanation" => {
                    content.parse::<Token![=]>()?;
                    let lit: LitStr = content.parse()?;
                    if out.explanation.replace(lit).is_some() {
                        errors.at(name.span(), "`explanation` is given more than once");
                    }
                }
                "evidence" => {
                    content.parse::<Token![=]>()?;
                    let lit: LitStr = content.parse()?;
                    if out.evidence.replace(lit).is_some() {
                        errors.at(name.span(), "`evidence` is given more than once");
                    }
                }
                "constraints" => {
                    let inner;
                    syn::parenthesized!(inner in content);
                    let items = Punctuated::<Constraint, Token![,]>::parse_terminated(&inner)?;
                    out.constraints.extend(items);
                }
                "level" => {
                    errors.at(
                        name.span(),
                        "the level comes second, without a name: \
                         `capability(\"stream.text\", native)`",
                    );
                    content.parse::<Token![=]>()?;
                    rest_of_item(&content)?;
                }
                other => {
                    errors.at(
                        name.span(),
                        format!(
                            "unknown `capability` key `{other}`: after the key and the level, \
                             expected `explanation = \"...\"`, `constraints(name = value, ...)` \
                             or `evidence = \"...\"`"
                        ),
                    );
                    if content.peek(Token![=]) {
                        content.parse::<Token![=]>()?;
                        rest_of_item(&content)?;
                    } else if content.peek(syn::token::Paren) {
                        content.parse::<proc_macro2::Group>()?;
                    }
                }
            }
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        Ok(out)
    }
}

impl Parse for Constraint {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let (name, span) = if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            (lit.value(), lit.span())
        } else {
            let ident = input.call(Ident::parse_any)?;
            (ident.unraw().to_string(), ident.span())
        };
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(Self { name, span, value })
    }
}

impl Parse for ConstraintValue {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let negative = input.peek(Token![-]);
        if negative {
            input.parse::<Token![-]>()?;
        }
        if !negative && input.peek(syn::token::Bracket) {
            let content;
            syn::bracketed!(content in input);
            let items = Punctuated::<ConstraintValue, Token![,]>::parse_terminated(&content)?;
            return Ok(Self::Array(items.into_iter().collect()));
        }
        if !negative && input.peek(LitStr) {
            return Ok(Self::Str(input.parse::<LitStr>()?.value()));
        }
        if !negative && input.peek(LitBool) {
            return Ok(Self::Bool(input.parse::<LitBool>()?.value));
        }
        if input.peek(LitInt) {
            let lit: LitInt = input.parse()?;
            let out_of_range = || {
                syn::Error::new(
                    lit.span(),
                    "this integer does not fit a JSON constraint: expected -2^63 to 2^64-1",
                )
            };
            return if negative {
                let n: i128 = lit.base10_parse().map_err(|_| out_of_range())?;
                i64::try_from(-n).map(Self::Int).map_err(|_| out_of_range())
            } else {
                lit.base10_parse::<u64>()
                    .map(Self::UInt)
                    .map_err(|_| out_of_range())
            };
        }
        if input.peek(LitFloat) {
            let lit: LitFloat = input.parse()?;
            let v: f64 = lit.base10_parse()?;
            if !v.is_finite() {
                return Err(syn::Error::new(
                    lit.span(),
                    "this float is not finite: JSON numbers must be finite",
                ));
            }
            return Ok(Self::Float(if negative { -v } else { v }));
        }
        Err(input.error(
            "expected a constraint value: a string, a number, `true`, `false` or a list of \
             them, such as `[\"png\", \"jpeg\"]`",
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// #[derive(AdapterOptions)]: #[adapter_options(...)], #[serde(...)], #[schemars(...)]
// ---------------------------------------------------------------------------------------------

/// What the container attributes of an options type say.
#[derive(Default)]
pub(crate) struct Container {
    /// `#[adapter_options(crate = "...")]`.
    pub(crate) krate: Option<syn::Path>,
    /// `#[serde(deny_unknown_fields)]`.
    pub(crate) deny_unknown_fields: bool,
    /// `#[serde(transparent)]`.
    pub(crate) transparent: bool,
    /// `#[serde(tag = "...")]`.
    pub(crate) tagged: bool,
    /// `#[serde(untagged)]`.
    pub(crate) untagged: bool,
}

/// What the attributes of one field (or variant) of an options type say.
#[derive(Default)]
pub(crate) struct FieldAttrs {
    /// `#[adapter_options(unchecked)]`.
    pub(crate) unchecked: bool,
    /// `#[serde(flatten)]`, where it was written.
    pub(crate) flatten: Option<Span>,
    /// `#[serde(skip)]` or `#[serde(skip_deserializing)]`.
    pub(crate) skipped: bool,
    /// `#[schemars(with = "Type")]`: the schema comes from this type instead.
    pub(crate) schema_with: Option<syn::Type>,
}

impl Container {
    /// Reads the container attributes of an options type.
    pub(crate) fn from_attrs(attrs: &[Attribute], errors: &mut Errors) -> Self {
        let mut out = Self::default();
        for attr in attrs {
            if attr.path().is_ident(ADAPTER_OPTIONS) {
                let result = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident(CRATE) {
                        set(&mut out.krate, &meta, errors, |m| {
                            let lit: LitStr = m.value()?.parse()?;
                            lit.parse::<syn::Path>()
                        })
                    } else {
                        errors.at(
                            meta.path.span(),
                            format!(
                                "unknown `#[adapter_options]` key `{}` on the type: expected \
                                 `crate = \"...\"` (and `unchecked` on a field)",
                                path_to_string(&meta.path)
                            ),
                        );
                        skip_value(&meta)
                    }
                });
                if let Err(e) = result {
                    errors.push(e);
                }
            } else if attr.path().is_ident(SERDE) {
                // serde reports malformed serde attributes itself.
                let _ = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("deny_unknown_fields") {
                        out.deny_unknown_fields = true;
                    } else if meta.path.is_ident("transparent") {
                        out.transparent = true;
                    } else if meta.path.is_ident("tag") {
                        out.tagged = true;
                    } else if meta.path.is_ident("untagged") {
                        out.untagged = true;
                    }
                    skip_value(&meta)
                });
            }
        }
        out
    }
}

impl FieldAttrs {
    /// Reads the attributes of a field or a variant.
    pub(crate) fn from_attrs(attrs: &[Attribute], errors: &mut Errors) -> Self {
        let mut out = Self::default();
        for attr in attrs {
            if attr.path().is_ident(ADAPTER_OPTIONS) {
                let result = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident(UNCHECKED) {
                        out.unchecked = true;
                        Ok(())
                    } else {
                        errors.at(
                            meta.path.span(),
                            format!(
                                "unknown `#[adapter_options]` key `{}` on a field: expected \
                                 `unchecked`",
                                path_to_string(&meta.path)
                            ),
                        );
                        skip_value(&meta)
                    }
                });
                if let Err(e) = result {
                    errors.push(e);
                }
            } else if attr.path().is_ident(SERDE) {
                let _ = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("flatten") {
                        out.flatten = Some(meta.path.span());
                    } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_deserializing")
                    {
                        out.skipped = true;
                    }
                    skip_value(&meta)
                });
            } else if attr.path().is_ident(SCHEMARS) {
                let _ = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("with") {
                        let lit: LitStr = meta.value()?.parse()?;
                        out.schema_with = lit.parse().ok();
                        Ok(())
                    } else {
                        skip_value(&meta)
                    }
                });
            }
        }
        out
    }
}
