//! Code generation for `#[handler(batch, ..)]`: the same unit struct and
//! `call`, and a `BatchHandler` impl whose `handle_batch` calls it. The
//! batching itself (claim, bisecting, outcomes) is the core's `Batched`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ItemFn};

use crate::expand::{Common, call_args, respan};
use crate::valid::Model;

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
    let key = idempotency_key(m);
    let terminal = is_terminal(m);
    // No context: `validate` refuses it with `batch`.
    let args = call_args(m, quote!(__consumer_batch), quote!(__consumer_tx), quote!());
    let boxed = boxed(m);

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

/// `fn idempotency_key` from `|order| order.order_id`, checked to be a
/// one-argument closure; nothing without a key (the trait's default).
fn idempotency_key(m: &Model) -> TokenStream {
    let krate = &m.krate;
    let msg_ty = &m.message_ty;
    let Some(Expr::Closure(c)) = &m.key else {
        return quote!();
    };
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

/// `fn is_terminal`, matched where the batcher has narrowed a failing
/// batch to one message: the error is the handler's own, boxed.
fn is_terminal(m: &Model) -> TokenStream {
    let (Some(pat), Some(err)) = (&m.terminal, &m.error_ty) else {
        return quote!();
    };
    quote! {
        fn is_terminal(
            &self,
            __consumer_err: &(dyn ::std::error::Error + ::core::marker::Send + ::core::marker::Sync + 'static),
        ) -> bool {
            __consumer_err
                .downcast_ref::<#err>()
                .is_some_and(|__consumer_err| ::core::matches!(__consumer_err, #pat))
        }
    }
}

/// The handler's error, boxed; spanned on the error type, so an error that
/// does not box is reported there rather than on the attribute.
fn boxed(m: &Model) -> TokenStream {
    let krate = &m.krate;
    let boxed = quote!(::std::result::Result::Err(::core::convert::Into::<#krate::BoxError>::into(__consumer_err)));
    match &m.error_ty {
        Some(e) => respan(boxed, e.span()),
        None => boxed,
    }
}
