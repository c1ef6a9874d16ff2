//! Stage 2: the parsed item.
//!
//! [`AdapterInput`] is the type `#[derive(Adapter)]` sits on with its `#[adapter(...)]`
//! attributes read; [`OptionsInput`] is the type `#[derive(AdapterOptions)]` sits on, with the
//! shape and attributes that decide whether its JSON Schema can accept unknown fields.

use syn::{Data, DeriveInput, Fields, Generics, Ident, Type};

use crate::attr::{self, Errors};

/// The type deriving `Adapter`.
pub(crate) struct AdapterInput<'a> {
    /// The type's name.
    pub(crate) ident: &'a Ident,
    /// What its `#[adapter(...)]` attributes say.
    pub(crate) attrs: attr::Adapter,
}

impl<'a> AdapterInput<'a> {
    /// Reads `input`, collecting attribute errors into `errors`.
    pub(crate) fn from_syn(input: &'a DeriveInput, errors: &mut Errors) -> Self {
        let attrs = attr::Adapter::from_attrs(&input.attrs, errors);
        for field_attrs in fields_of(&input.data).flat_map(|f| &f.attrs) {
            if field_attrs.path().is_ident(attr::ADAPTER) {
                errors.at(
                    syn::spanned::Spanned::span(field_attrs),
                    "`#[adapter(...)]` belongs on the adapter type itself, not on a field",
                );
            }
        }
        Self {
            ident: &input.ident,
            attrs,
        }
    }
}

/// The type deriving `AdapterOptions`.
pub(crate) struct OptionsInput<'a> {
    /// The type's name.
    pub(crate) ident: &'a Ident,
    /// Its generics (refused: the schema is generated once per type).
    pub(crate) generics: &'a Generics,
    /// What its container attributes say.
    pub(crate) attrs: attr::Container,
    /// Its shape.
    pub(crate) shape: Shape<'a>,
}

/// The shape of an options type.
pub(crate) enum Shape<'a> {
    /// `struct S { a: A }`.
    Named(Vec<Field<'a>>),
    /// `struct S(A, B);`.
    Tuple(Vec<Field<'a>>),
    /// `struct S;`.
    Unit,
    /// `enum E { ... }`.
    Enum(Vec<Variant<'a>>),
    /// `union U { ... }`: refused.
    Union,
}

/// One field of an options type or variant.
pub(crate) struct Field<'a> {
    /// The field's type, or the `#[schemars(with = "...")]` type that gives its schema.
    pub(crate) ty: Type,
    /// The field's own type, for spans.
    pub(crate) original: &'a Type,
    /// What its attributes say.
    pub(crate) attrs: attr::FieldAttrs,
}

/// One variant of an options enum.
pub(crate) struct Variant<'a> {
    /// The variant's name.
    pub(crate) ident: &'a Ident,
    /// Whether it has named fields (a struct variant).
    pub(crate) named: bool,
    /// Its fields.
    pub(crate) fields: Vec<Field<'a>>,
    /// What its attributes say (`#[serde(skip)]`).
    pub(crate) attrs: attr::FieldAttrs,
}

impl<'a> OptionsInput<'a> {
    /// Reads `input`, collecting attribute errors into `errors`.
    pub(crate) fn from_syn(input: &'a DeriveInput, errors: &mut Errors) -> Self {
        let attrs = attr::Container::from_attrs(&input.attrs, errors);
        let shape = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(_) => Shape::Named(fields(&data.fields, errors)),
                Fields::Unnamed(_) => Shape::Tuple(fields(&data.fields, errors)),
                Fields::Unit => Shape::Unit,
            },
            Data::Enum(data) => Shape::Enum(
                data.variants
                    .iter()
                    .map(|v| Variant {
                        ident: &v.ident,
                        named: matches!(v.fields, Fields::Named(_)),
                        fields: fields(&v.fields, errors),
                        attrs: attr::FieldAttrs::from_attrs(&v.attrs, errors),
                    })
                    .collect(),
            ),
            Data::Union(_) => Shape::Union,
        };
        Self {
            ident: &input.ident,
            generics: &input.generics,
            attrs,
            shape,
        }
    }

    /// Every field, of the struct or of every variant.
    pub(crate) fn fields(&self) -> Box<dyn Iterator<Item = &Field<'a>> + '_> {
        match &self.shape {
            Shape::Named(fields) | Shape::Tuple(fields) => Box::new(fields.iter()),
            Shape::Enum(variants) => Box::new(
                variants
                    .iter()
                    .filter(|v| !v.attrs.skipped)
                    .flat_map(|v| &v.fields),
            ),
            Shape::Unit | Shape::Union => Box::new(std::iter::empty()),
        }
    }
}

fn fields<'a>(fields: &'a Fields, errors: &mut Errors) -> Vec<Field<'a>> {
    fields
        .iter()
        .map(|f| {
            let attrs = attr::FieldAttrs::from_attrs(&f.attrs, errors);
            Field {
                ty: attrs.schema_with.clone().unwrap_or_else(|| f.ty.clone()),
                original: &f.ty,
                attrs,
            }
        })
        .collect()
}

fn fields_of(data: &Data) -> Box<dyn Iterator<Item = &syn::Field> + '_> {
    match data {
        Data::Struct(s) => Box::new(s.fields.iter()),
        Data::Enum(e) => Box::new(e.variants.iter().flat_map(|v| &v.fields)),
        Data::Union(u) => Box::new(u.fields.named.iter()),
    }
}
