//! `#[derive(Persistent)]`: implements `cairn::codec::Persistent` and
//! `cairn::codec::Field` for a struct with named fields.
//!
//! Depends on no other Cairn crate: the generated code names everything by an
//! absolute `::cairn::...` path, so it works in any crate that depends on
//! `cairn` (and in `cairn`'s own integration tests, which are separate crates).
//!
//! What is generated, for `struct Part { #[cairn(index)] id: u32, #[cairn(default)] note: String }`:
//!
//! - `Persistent::NAME = "Part"`; `fields()` lists each field's name,
//!   `<T as Field>::type_desc()` and whether it has `#[cairn(default)]`.
//! - `encode_fields` / `decode_fields`: each field's `Field` encoding, in
//!   declaration order. A decoding error is renamed `Part.id` (offset kept).
//! - `from_values`: each field by name through `Field::from_value`; a missing
//!   field takes `Default::default()` if it has `#[cairn(default)]`, else is a
//!   `DecodeError` naming the type and field. Unknown names are ignored (the
//!   catalog, not the derive, reports removed fields); a name given twice is
//!   an error.
//! - `INDEXED_FIELDS`: the names of the `#[cairn(index)]` fields; `index_keys`:
//!   `(name, IndexKey bytes)` for each of them.
//! - `Field` for the struct itself (`TypeDesc::Struct(name, fields)`, encoded
//!   as its fields), so it can be nested by value in another persistent struct.
//!
//! Field types are never special-cased by name: any type implementing
//! `Field` (`Ref<T>`, `List<T>`, another derived struct, …) works.
//!
//! Refused with a compile error: enums, unions, tuple and unit structs,
//! field-less structs (every encoding must be at least one byte long, which
//! bounds counts when decoding), generic structs (not supported yet), and
//! unknown `#[cairn(...)]` options.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

/// Derives `cairn::codec::Persistent` and `cairn::codec::Field` for a struct
/// with named fields.
///
/// Field options: `#[cairn(default)]` (records written before the field
/// existed read it as `Default::default()`) and `#[cairn(index)]` (the field's
/// `IndexKey` bytes are returned by `index_keys`); they combine as
/// `#[cairn(default, index)]`.
#[proc_macro_derive(Persistent, attributes(cairn))]
pub fn derive_persistent(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// One field of the struct, with its options.
struct FieldSpec {
    ident: syn::Ident,
    vis: syn::Visibility,
    /// The name stored in the catalog (the identifier without `r#`).
    name: String,
    ty: syn::Type,
    has_default: bool,
    index: bool,
}

/// Combines `e` into `errors`, so that every problem is reported at once.
fn push_error(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

/// Checks the input and collects its fields, or reports every problem found.
///
/// Every check runs even after one fails, and the errors are combined in
/// this order: the shape of the type, its generics, struct-level attributes,
/// then the fields (an empty field list, then each field's options).
fn parse(input: &DeriveInput) -> syn::Result<Vec<FieldSpec>> {
    let mut errors = None;
    let named = named_fields(input, &mut errors);
    check_no_generics(input, &mut errors);
    check_no_struct_attrs(input, &mut errors);

    let mut specs = Vec::new();
    if let Some(named) = named {
        if named.named.is_empty() {
            push_error(
                &mut errors,
                syn::Error::new(
                    input.ident.span(),
                    "#[derive(Persistent)] needs at least one field: every encoded value must be at least one byte",
                ),
            );
        }
        for f in &named.named {
            specs.push(parse_field(f, &mut errors));
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(specs),
    }
}

/// The named fields of `input`, or `None` (with an error pushed) if it is
/// not a struct with named fields.
fn named_fields<'a>(input: &'a DeriveInput, errors: &mut Option<syn::Error>) -> Option<&'a syn::FieldsNamed> {
    let refused = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => return Some(named),
            Fields::Unnamed(_) => syn::Error::new(
                input.ident.span(),
                "#[derive(Persistent)] does not support tuple structs: use a struct with named fields",
            ),
            Fields::Unit => syn::Error::new(
                input.ident.span(),
                "#[derive(Persistent)] does not support unit structs: use a struct with named fields",
            ),
        },
        Data::Enum(e) => syn::Error::new(
            e.enum_token.span,
            "#[derive(Persistent)] does not support enums: only structs with named fields",
        ),
        Data::Union(u) => syn::Error::new(
            u.union_token.span,
            "#[derive(Persistent)] does not support unions: only structs with named fields",
        ),
    };
    push_error(errors, refused);
    None
}

/// Refuses type parameters, lifetimes and where clauses.
fn check_no_generics(input: &DeriveInput, errors: &mut Option<syn::Error>) {
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        push_error(
            errors,
            syn::Error::new(
                input.generics.span(),
                "#[derive(Persistent)] does not support generic structs yet: \
                 the catalog needs one schema per type name",
            ),
        );
    }
}

/// Refuses every `#[cairn(...)]` on the struct itself: all options are per
/// field.
fn check_no_struct_attrs(input: &DeriveInput, errors: &mut Option<syn::Error>) {
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("cairn")) {
        push_error(
            errors,
            syn::Error::new_spanned(
                attr,
                "unknown cairn attribute: there are no struct-level options; \
                 field options are `default` and `index`",
            ),
        );
    }
}

/// One named field with its `#[cairn(...)]` options; unknown or repeated
/// options are pushed to `errors` (the field is still returned, so the rest
/// of the struct is checked too).
fn parse_field(f: &syn::Field, errors: &mut Option<syn::Error>) -> FieldSpec {
    let ident = f.ident.clone().expect("named fields have identifiers");
    let mut spec = FieldSpec {
        name: ident.unraw().to_string(),
        vis: f.vis.clone(),
        ident,
        ty: f.ty.clone(),
        has_default: false,
        index: false,
    };
    for attr in f.attrs.iter().filter(|a| a.path().is_ident("cairn")) {
        let parsed = attr.parse_nested_meta(|meta| {
            let flag = if meta.path.is_ident("default") {
                &mut spec.has_default
            } else if meta.path.is_ident("index") {
                &mut spec.index
            } else {
                return Err(meta.error("unknown cairn attribute: expected `default` or `index`"));
            };
            if *flag {
                return Err(meta.error("duplicate cairn attribute"));
            }
            *flag = true;
            Ok(())
        });
        if let Err(e) = parsed {
            push_error(errors, e);
        }
    }
    spec
}

/// The implementation of the derive, on `proc_macro2` tokens so that it can
/// be unit-tested.
fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let fields = parse(input)?;
    let expansion = Expansion::new(input, &fields);
    let persistent_impl = expansion.persistent_impl();
    let view_struct = expansion.view_struct();
    let field_impl = expansion.field_impl();
    Ok(quote! {
        #persistent_impl

        #view_struct

        #field_impl
    })
}

/// What every generated part needs: the checked input and the names derived
/// from it once. Each method generates one impl (or one part of one).
struct Expansion<'a> {
    input: &'a DeriveInput,
    fields: &'a [FieldSpec],
    /// The name stored in the catalog (the identifier without `r#`).
    type_name: String,
    /// The path of `cairn`'s helpers for derived code.
    support: TokenStream2,
    /// One local per field, `__cairn_f{i}`. Locals are numbered, not named
    /// after the fields, so that a field called like a parameter (`r`, `w`)
    /// cannot shadow it.
    locals: Vec<syn::Ident>,
    /// `{Name}View`, the type read in place.
    view_ident: syn::Ident,
}

impl<'a> Expansion<'a> {
    fn new(input: &'a DeriveInput, fields: &'a [FieldSpec]) -> Self {
        Expansion {
            input,
            fields,
            type_name: input.ident.unraw().to_string(),
            support: quote!(::cairn::fields::derive_support),
            locals: (0..fields.len()).map(|i| format_ident!("__cairn_f{}", i)).collect(),
            view_ident: format_ident!("{}View", input.ident.unraw()),
        }
    }

    fn idents(&self) -> Vec<&'a syn::Ident> {
        self.fields.iter().map(|f| &f.ident).collect()
    }

    fn tys(&self) -> Vec<&'a syn::Type> {
        self.fields.iter().map(|f| &f.ty).collect()
    }

    /// `impl Persistent`: the schema, the field-by-field codec, `from_values`
    /// and the index keys.
    fn persistent_impl(&self) -> TokenStream2 {
        let ident = &self.input.ident;
        let type_name = &self.type_name;
        let field_descs = self.fields.iter().map(|f| {
            let (name, ty, has_default) = (&f.name, &f.ty, f.has_default);
            quote_spanned! {ty.span()=>
                ::cairn::codec::FieldDesc {
                    name: ::std::string::String::from(#name),
                    ty: <#ty as ::cairn::codec::Field>::type_desc(),
                    has_default: #has_default,
                }
            }
        });
        let encodes = self.fields.iter().map(|f| {
            let (id, ty) = (&f.ident, &f.ty);
            quote_spanned! {ty.span()=> <#ty as ::cairn::codec::Field>::encode(&self.#id, __cairn_w); }
        });
        let decode_fields = self.gen_decode_fields();
        let from_values = self.gen_from_values();
        let indexed_fields = self.indexed_fields();
        let index_keys = self.index_keys();
        quote! {
            #[automatically_derived]
            impl ::cairn::codec::Persistent for #ident {
                const NAME: &'static str = #type_name;
                #indexed_fields

                fn fields() -> ::std::vec::Vec<::cairn::codec::FieldDesc> {
                    ::std::vec![#(#field_descs),*]
                }

                fn encode_fields(&self, __cairn_w: &mut ::cairn::codec::Writer) {
                    #(#encodes)*
                }

                #decode_fields

                #from_values

                #index_keys
            }
        }
    }

    /// `decode_fields`: each field in declaration order, a field's error
    /// renamed `Type.field`.
    fn gen_decode_fields(&self) -> TokenStream2 {
        let (support, type_name, locals) = (&self.support, &self.type_name, &self.locals);
        let decodes = self.fields.iter().zip(locals).map(|(f, local)| {
            let (name, ty) = (&f.name, &f.ty);
            quote_spanned! {ty.span()=>
                let #local = <#ty as ::cairn::codec::Field>::decode(__cairn_r)
                    .map_err(|e| #support::in_field(e, #type_name, #name))?;
            }
        });
        let idents = self.idents();
        quote! {
            fn decode_fields(
                __cairn_r: &mut ::cairn::codec::Reader<'_>,
            ) -> ::core::result::Result<Self, ::cairn::codec::DecodeError> {
                #(#decodes)*
                ::core::result::Result::Ok(Self { #(#idents: #locals),* })
            }
        }
    }

    /// `from_values`: each field by name, once; a missing one defaulted if it
    /// has `#[cairn(default)]`, else an error.
    fn gen_from_values(&self) -> TokenStream2 {
        let (support, type_name, locals) = (&self.support, &self.type_name, &self.locals);
        let slots = self.fields.iter().zip(locals).map(|(f, local)| {
            let ty = &f.ty;
            quote! { let mut #local: ::core::option::Option<#ty> = ::core::option::Option::None; }
        });
        let arms = self.fields.iter().zip(locals).map(|(f, local)| {
            let (name, ty) = (&f.name, &f.ty);
            quote_spanned! {ty.span()=>
                #name => {
                    if #local.is_some() {
                        return ::core::result::Result::Err(#support::duplicate_field(#type_name, #name));
                    }
                    #local = ::core::option::Option::Some(
                        <#ty as ::cairn::codec::Field>::from_value(__cairn_value)
                            .map_err(|e| #support::in_field(e, #type_name, #name))?,
                    );
                }
            }
        });
        let takes = self.fields.iter().zip(locals).map(|(f, local)| {
            let (name, ty) = (&f.name, &f.ty);
            let missing = if f.has_default {
                quote_spanned! {ty.span()=> <#ty as ::core::default::Default>::default() }
            } else {
                quote! { return ::core::result::Result::Err(#support::missing_field(#type_name, #name)) }
            };
            quote! {
                let #local = match #local {
                    ::core::option::Option::Some(v) => v,
                    ::core::option::Option::None => #missing,
                };
            }
        });
        let idents = self.idents();
        quote! {
            fn from_values(
                __cairn_values: ::std::vec::Vec<(::std::string::String, ::cairn::codec::Value)>,
            ) -> ::core::result::Result<Self, ::cairn::codec::DecodeError> {
                #(#slots)*
                for (__cairn_name, __cairn_value) in __cairn_values {
                    match __cairn_name.as_str() {
                        #(#arms)*
                        // Removed fields are the catalog's to report.
                        _ => {}
                    }
                }
                #(#takes)*
                ::core::result::Result::Ok(Self { #(#idents: #locals),* })
            }
        }
    }

    /// `INDEXED_FIELDS`: the names of the `#[cairn(index)]` fields.
    fn indexed_fields(&self) -> TokenStream2 {
        let indexed_names = self.fields.iter().filter(|f| f.index).map(|f| &f.name);
        quote! {
            const INDEXED_FIELDS: &'static [&'static str] = &[#(#indexed_names),*];
        }
    }

    /// `index_keys`, only if some field is indexed (else the trait's default).
    fn index_keys(&self) -> TokenStream2 {
        if !self.fields.iter().any(|f| f.index) {
            return quote!();
        }
        let keys = self.fields.iter().filter(|f| f.index).map(|f| {
            let (id, name, ty) = (&f.ident, &f.name, &f.ty);
            quote_spanned! {ty.span()=>
                (#name, <#ty as ::cairn::fields::IndexKey>::to_key(&self.#id))
            }
        });
        quote! {
            fn index_keys(&self) -> ::std::vec::Vec<(&'static str, ::std::vec::Vec<u8>)> {
                ::std::vec![#(#keys),*]
            }
        }
    }

    /// `{Name}View`: the struct read in place, one accessor per field, and
    /// its `Debug`.
    fn view_struct(&self) -> TokenStream2 {
        let (type_name, view_ident) = (&self.type_name, &self.view_ident);
        let vis = &self.input.vis;
        let accessors = self.view_accessors();
        let debug_bounds = self.tys().into_iter().map(|ty| {
            quote! { <#ty as ::cairn::codec::Field>::View<'__cairn_a>: ::core::fmt::Debug }
        });
        let debug_fields = self.fields.iter().map(|f| {
            let (id, name) = (&f.ident, &f.name);
            quote! { .field(#name, &self.#id()) }
        });
        let view_doc = format!(
            "A `{type_name}` read in place from its encoded bytes (see `cairn::view`): one method per field, \
             named like the field. Made by `#[derive(Persistent)]`."
        );
        let view_name = view_ident.to_string();
        quote! {
            #[doc = #view_doc]
            #[derive(Clone, Copy)]
            #vis struct #view_ident<'__cairn_a> {
                __cairn_b: &'__cairn_a [u8],
            }

            #[automatically_derived]
            #[allow(dead_code)]
            impl<'__cairn_a> #view_ident<'__cairn_a> {
                #(#accessors)*
            }

            #[automatically_derived]
            impl<'__cairn_a> ::core::fmt::Debug for #view_ident<'__cairn_a>
            where
                #(#debug_bounds),*
            {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#view_name) #(#debug_fields)* .finish()
                }
            }
        }
    }

    /// The view's accessors, one per field, named like it.
    fn view_accessors(&self) -> Vec<TokenStream2> {
        let tys = self.tys();
        // A field's offset is found when it is read, by stepping over the
        // fields before it: fixed-size ones fold into a constant, and a
        // traversal that reads a few fields does not pay for the rest.
        self.fields
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let (id, ty, fvis, name) = (&f.ident, &f.ty, &f.vis, &f.name);
                let before = &tys[..k];
                let doc = format!("The `{name}` field, read in place.");
                quote_spanned! {ty.span()=>
                    #[doc = #doc]
                    #[inline]
                    #fvis fn #id(&self) -> <#ty as ::cairn::codec::Field>::View<'__cairn_a> {
                        #[allow(unused_mut)]
                        let mut __cairn_at = 0usize;
                        #(
                            __cairn_at += <#before as ::cairn::codec::Field>::skip(::cairn::view::rest(self.__cairn_b, __cairn_at));
                        )*
                        <#ty as ::cairn::codec::Field>::view(::cairn::view::rest(self.__cairn_b, __cairn_at))
                    }
                }
            })
            .collect()
    }

    /// `impl Field` for the struct itself, so that it nests by value in
    /// another persistent struct: encoded as its fields.
    fn field_impl(&self) -> TokenStream2 {
        let ident = &self.input.ident;
        let (support, type_name, view_ident) = (&self.support, &self.type_name, &self.view_ident);
        let tys = self.tys();
        let struct_descs = self.fields.iter().map(|f| {
            let (name, ty) = (&f.name, &f.ty);
            quote_spanned! {ty.span()=>
                (::std::string::String::from(#name), <#ty as ::cairn::codec::Field>::type_desc())
            }
        });
        let checks = self.fields.iter().map(|f| {
            let (name, ty) = (&f.name, &f.ty);
            quote_spanned! {ty.span()=>
                <#ty as ::cairn::codec::Field>::check(__cairn_r)
                    .map_err(|e| #support::in_field(e, #type_name, #name))?;
            }
        });
        quote! {
            #[automatically_derived]
            impl ::cairn::codec::Field for #ident {
                type View<'__cairn_a> = #view_ident<'__cairn_a>;
                const FIXED_SIZE: ::core::option::Option<usize> =
                    ::cairn::view::sum_fixed(&[#(<#tys as ::cairn::codec::Field>::FIXED_SIZE),*]);
                const MIN_SIZE: usize =
                    ::cairn::view::sum_min(&[#(<#tys as ::cairn::codec::Field>::MIN_SIZE),*]);

                fn check(__cairn_r: &mut ::cairn::codec::Reader<'_>) -> ::core::result::Result<(), ::cairn::codec::DecodeError> {
                    #(#checks)*
                    ::core::result::Result::Ok(())
                }

                #[inline]
                fn skip(__cairn_b: &[u8]) -> usize {
                    let mut __cairn_at = 0usize;
                    #(
                        __cairn_at += <#tys as ::cairn::codec::Field>::skip(::cairn::view::rest(__cairn_b, __cairn_at));
                    )*
                    __cairn_at.min(__cairn_b.len())
                }

                #[inline]
                fn view(__cairn_b: &[u8]) -> #view_ident<'_> {
                    #view_ident { __cairn_b }
                }

                fn type_desc() -> ::cairn::codec::TypeDesc {
                    ::cairn::codec::TypeDesc::Struct(
                        ::std::string::String::from(#type_name),
                        ::std::vec![#(#struct_descs),*],
                    )
                }

                fn encode(&self, w: &mut ::cairn::codec::Writer) {
                    <Self as ::cairn::codec::Persistent>::encode_fields(self, w)
                }

                fn decode(r: &mut ::cairn::codec::Reader<'_>) -> ::core::result::Result<Self, ::cairn::codec::DecodeError> {
                    <Self as ::cairn::codec::Persistent>::decode_fields(r)
                }

                fn from_value(v: ::cairn::codec::Value) -> ::core::result::Result<Self, ::cairn::codec::DecodeError> {
                    match v {
                        ::cairn::codec::Value::Struct(fields) => <Self as ::cairn::codec::Persistent>::from_values(fields),
                        _ => ::core::result::Result::Err(#support::not_a_struct(#type_name)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compile error `expand` reports for `input`, as text.
    fn error_of(input: DeriveInput) -> String {
        match expand(&input) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" | "),
        }
    }

    #[test]
    fn refuses_enums_unions_tuples_and_units() {
        assert!(error_of(syn::parse_quote!(
            enum E {
                A,
            }
        ))
        .contains("does not support enums"));
        assert!(error_of(syn::parse_quote!(
            union U {
                a: u32,
            }
        ))
        .contains("does not support unions"));
        assert!(error_of(syn::parse_quote!(
            struct T(u32);
        ))
        .contains("does not support tuple structs"));
        assert!(error_of(syn::parse_quote!(
            struct U;
        ))
        .contains("does not support unit structs"));
        assert!(error_of(syn::parse_quote!(
            struct Empty {}
        ))
        .contains("at least one field"));
    }

    #[test]
    fn refuses_generics() {
        let e = error_of(syn::parse_quote!(
            struct G<T> {
                t: T,
            }
        ));
        assert!(e.contains("does not support generic structs yet"), "{e}");
        let e = error_of(syn::parse_quote!(
            struct L<'a> {
                s: &'a str,
            }
        ));
        assert!(e.contains("generic"), "{e}");
    }

    #[test]
    fn refuses_unknown_and_duplicate_attributes_all_at_once() {
        let e = error_of(syn::parse_quote!(
            #[cairn(table = "x")]
            struct S {
                #[cairn(defualt)]
                a: u32,
                #[cairn(index, index)]
                b: u32,
            }
        ));
        assert!(e.contains("no struct-level options"), "{e}");
        assert!(e.contains("expected `default` or `index`"), "{e}");
        assert!(e.contains("duplicate cairn attribute"), "{e}");
    }

    #[test]
    fn accepts_options_and_raw_identifiers() {
        let input: DeriveInput = syn::parse_quote!(
            struct S {
                #[cairn(default, index)]
                r#type: u32,
                #[doc = "other attributes are left alone"]
                r: String,
            }
        );
        let specs = parse(&input).unwrap();
        assert_eq!(specs[0].name, "type");
        assert!(specs[0].has_default && specs[0].index);
        assert!(!specs[1].has_default && !specs[1].index);
        let out = expand(&input).unwrap().to_string();
        assert!(out.contains("index_keys"), "{out}");
        assert!(out.contains("INDEXED_FIELDS"), "{out}");
        assert!(out.contains("\"type\""), "{out}");
    }

    #[test]
    fn no_index_keys_without_index_fields() {
        let out = expand(&syn::parse_quote!(
            struct S {
                a: u32,
            }
        ))
        .unwrap()
        .to_string();
        assert!(!out.contains("index_keys"), "{out}");
    }
}
