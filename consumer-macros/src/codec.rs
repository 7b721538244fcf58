//! `codec = json | avro | protobuf | json_schema | <type>`: the payload
//! format a handler's message is decoded from.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Ident, Type};

/// What was written after `codec =`.
pub enum Codec {
    /// One of the named formats: `json`, `avro`, `protobuf`, `json_schema`.
    Named(Ident),
    /// A codec type of the application's (`consumer::codec::Codec`).
    Type(Box<Type>),
}

impl Parse for Codec {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(Ident) && !input.peek2(syn::Token![::]) && !input.peek2(syn::Token![<]) {
            return Ok(Self::Named(input.parse()?));
        }
        Ok(Self::Type(Box::new(input.parse()?)))
    }
}

/// The codec's type, `None` for JSON (the default, decoded without a
/// codec), or an error naming the formats.
pub fn codec_type(codec: Option<&Codec>, krate: &syn::Path) -> syn::Result<Option<Type>> {
    let Some(codec) = codec else {
        return Ok(None);
    };
    let named = match codec {
        Codec::Type(ty) => return Ok(Some(Type::clone(ty))),
        Codec::Named(ident) => ident,
    };
    let ty = match named.to_string().as_str() {
        "json" => return Ok(None),
        "avro" => quote!(#krate::codec::Avro),
        "protobuf" => quote!(#krate::codec::Protobuf),
        "json_schema" => quote!(#krate::codec::JsonSchema),
        // A type in scope (`codec = MyCodec`), by Rust's naming.
        other if other.starts_with(|c: char| c.is_ascii_uppercase()) => quote!(#named),
        other => {
            return Err(syn::Error::new(
                named.span(),
                format!(
                    "unknown `codec = {other}`: expected `json` (the default), `avro`, \
                     `protobuf`, `json_schema` (the Confluent wire format, with the `registry` \
                     feature), or a path to a type implementing `consumer::codec::Decode`"
                ),
            ));
        }
    };
    let span = named.span();
    syn::parse2(ty)
        .map(Some)
        .map_err(|e| syn::Error::new(span, e))
}

/// `fn codec`, for a handler that names one.
pub fn need(ty: Option<&Type>, krate: &syn::Path) -> TokenStream {
    let Some(ty) = ty else {
        return quote!();
    };
    quote! {
        fn codec(&self) -> ::core::option::Option<#krate::handler::CodecNeed> {
            ::core::option::Option::Some(#krate::handler::CodecNeed::of::<#ty>())
        }
    }
}

/// The decode call, spanned on the message type so a type the codec
/// cannot produce is reported there.
pub fn decode(ty: Option<&Type>, msg_ty: &Type, krate: &syn::Path) -> TokenStream {
    match ty {
        None => quote::quote_spanned!(msg_ty.span()=>
            <#msg_ty as #krate::__private::DecodableMessage>::decode(__consumer_inv)
        ),
        Some(codec) => quote::quote_spanned!(msg_ty.span()=>
            __consumer_inv.decode_with::<#codec, #msg_ty>().await
        ),
    }
}
