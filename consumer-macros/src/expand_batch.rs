//! Code generation for `#[handler(batch, ..)]`: the same unit struct and
//! `call`, and a `BatchHandler` impl whose `handle_batch` calls it. The
//! batching itself (claim, bisecting, outcomes) is the core's `Batched`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ItemFn};

use crate::expand::{Common, respan};
use crate::valid::{Model, Param};

pub fn expand(m: &Model, func: &ItemFn, common: Common) -> TokenStream {
    let Common {
        items,
        impl_generics,
        db,
        where_clause,
        describe,
    } = common;
    let krate = &m.krate;
    let ident = &func.sig.ident;
    let msg_ty = &m.message_ty;

    // `|order| order.order_id`, checked to be a one-argument closure.
    let key = match &m.key {
        Some(Expr::Closure(c)) => {
            let pat = c.inputs.iter().next();
            let body = &c.body;
            let span = body.span();
            quote_spanned! {span=>
                fn idempotency_key(
                    &self,
                    __consumer_msg: &#msg_ty,
                    _: &#krate::MessageContext,
                ) -> ::std::string::String {
                    #[allow(unused_variables)]
                    let #pat = __consumer_msg;
                    #krate::__private::IdempotencyKey::to_key(&(#body))
                }
            }
        }
        _ => quote!(),
    };

    // Matched where the batcher has narrowed a failing batch to one
    // message: the error is the handler's own, boxed.
    let terminal = match (&m.terminal, &m.error_ty) {
        (Some(pat), Some(err)) => quote! {
            fn is_terminal(
                &self,
                __consumer_err: &(dyn ::std::error::Error + ::core::marker::Send + ::core::marker::Sync + 'static),
            ) -> bool {
                __consumer_err
                    .downcast_ref::<#err>()
                    .is_some_and(|__consumer_err| ::core::matches!(__consumer_err, #pat))
            }
        },
        _ => quote!(),
    };

    let args = m.params.iter().map(|p| match p {
        Param::Message => quote!(__consumer_batch),
        Param::Tx => match &m.tx_ty {
            Some(t) => quote_spanned!(t.span()=> __consumer_tx),
            None => quote!(__consumer_tx),
        },
        // Refused by `validate` with `batch`.
        Param::Context => quote!(),
    });

    // Spanned on the error type, so an error that does not box is reported
    // there rather than on the attribute.
    let boxed = quote!(::std::result::Result::Err(::core::convert::Into::<#krate::BoxError>::into(__consumer_err)));
    let boxed = match &m.error_ty {
        Some(e) => respan(boxed, e.span()),
        None => boxed,
    };

    quote! {
        #items

        impl #impl_generics #krate::batch::BatchHandler<#db> for #ident #where_clause {
            type Message = #msg_ty;

            #describe

            #key

            #terminal

            async fn handle_batch(
                &self,
                __consumer_batch: &mut #krate::batch::Batch<#msg_ty>,
                __consumer_tx: &mut <#db as #krate::DedupStore>::Tx,
            ) -> ::std::result::Result<(), #krate::BoxError> {
                match #ident::call(#(#args),*).await {
                    ::std::result::Result::Ok(_) => ::std::result::Result::Ok(()),
                    ::std::result::Result::Err(__consumer_err) => #boxed,
                }
            }
        }
    }
}
