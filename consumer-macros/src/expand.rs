//! Code generation. The expansion stays small: a unit struct named after
//! the function, the function itself as `Struct::call`, and a `Handler`
//! impl whose `handle` calls into `consumer::__private` and `Invocation`.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ItemFn;
use syn::spanned::Spanned;

use crate::attr::Args;
use crate::valid::{Model, Param, validate};

pub fn handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                "`#[handler]` goes on an `async fn`: `#[handler] async fn charge(order: OrderPlaced) -> Result<(), MyError>`",
            );
            let err = e.to_compile_error();
            return quote!(#err #item);
        }
    };
    let model = syn::parse2::<Args>(attr).and_then(|args| validate(args, &func));
    match model {
        Ok(model) => expand(&model, &func),
        Err(e) => {
            // Emit the function unchanged too, so one mistake in the
            // attribute does not cascade into errors at every call site.
            let err = e.to_compile_error();
            quote!(#err #func)
        }
    }
}

/// What both expansions share: the struct, the function as `call`, the
/// assertions on the types, and the store the impl is for.
pub(crate) struct Common {
    /// The unit struct, its `call` and the type assertions.
    pub(crate) items: TokenStream,
    /// `<__ConsumerStore: DedupStore>` when the store is generic.
    pub(crate) impl_generics: TokenStream,
    /// The store type the impl is for.
    pub(crate) db: TokenStream,
    pub(crate) where_clause: TokenStream,
    /// `fn name`, `fn retry_policy`, `fn circuit_policy` (when the handler has
    /// its own), `fn event_types`, `fn payload_type`.
    pub(crate) describe: TokenStream,
}

fn common(m: &Model, func: &ItemFn) -> Common {
    let (impl_generics, db, where_clause) = store(m);
    Common {
        items: items(m, func),
        impl_generics,
        db,
        where_clause,
        describe: describe(m),
    }
}

/// The store the impl is for: the transaction type's store, or any
/// `DedupStore` when the handler takes no transaction; with the impl's
/// generics and where clause.
fn store(m: &Model) -> (TokenStream, TokenStream, TokenStream) {
    let krate = &m.krate;
    let (impl_generics, db) = match &m.tx_ty {
        Some(t) => (quote!(), quote!(<#t as #krate::__private::TxStore>::Store)),
        None => (
            quote!(<__ConsumerStore: #krate::DedupStore>),
            quote!(__ConsumerStore),
        ),
    };
    // The transaction type's assertion is a bound on the impl rather than an
    // `assert_tx` call: with the bound in the impl's environment, the store
    // it names has the argument's type as its `Tx` wherever the expansion
    // uses it, so a wrong type is reported once, by `TxStore`, instead of
    // also as a mismatch with the runtime's `DedupStore::Tx`. The bound is
    // respanned onto the type so rustc points at the type, not the
    // attribute. (The message type gets no such bound: a supertrait in the
    // impl's environment would be reported as serde's own bound. It is
    // checked where it is used, by `DecodableMessage`.)
    let where_clause = match &m.tx_ty {
        Some(t) => {
            let bound = spanned_bound(t, quote!(: #krate::__private::TxStore));
            quote!(where #bound)
        }
        None => quote!(),
    };
    (impl_generics, db, where_clause)
}

/// The unit struct (with the function's docs), the function unchanged as
/// its `call`, and the assertion that the error type is an error.
fn items(m: &Model, func: &ItemFn) -> TokenStream {
    let krate = &m.krate;
    let vis = &func.vis;
    let ident = &func.sig.ident;
    let attrs = &func.attrs;
    let docs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    let mut sig = func.sig.clone();
    sig.ident = format_ident!("call", span = ident.span());
    let block = &func.block;

    let mut asserts = Vec::new();
    if let Some(e) = &m.error_ty {
        asserts.push(quote_spanned!(e.span()=> #krate::__private::assert_error::<#e>();));
    }

    quote! {
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, Default)]
        #vis struct #ident;

        impl #ident {
            /// The handler's function, unchanged: call it directly in unit tests.
            #(#attrs)*
            #vis #sig #block
        }

        const _: () = {
            #(#asserts)*
        };
    }
}

/// `fn name`, `fn retry_policy`, `fn circuit_policy` and `fn codec` (when
/// the handler has its own), `fn event_types`, `fn payload_type`.
fn describe(m: &Model) -> TokenStream {
    let krate = &m.krate;
    let name = &m.name;
    let retry = &m.retry;
    let circuit = &m.circuit;
    let codec = crate::codec::need(m.codec.as_ref(), krate);
    let event_types = &m.event_types;
    let msg_ty = &m.message_ty;
    quote! {
        fn name(&self) -> &'static str {
            #name
        }

        fn retry_policy(&self) -> #krate::RetryPolicy {
            #retry
        }

        #circuit
        #codec

        fn event_types(&self) -> &'static [&'static str] {
            &[#(#event_types),*]
        }

        fn payload_type(&self) -> ::core::option::Option<#krate::__private::probe::PayloadType> {
            // Autoref specialisation: the schema when the type has one.
            #[allow(unused_imports)]
            use #krate::__private::probe::*;
            ::core::option::Option::Some(
                (&&#krate::__private::probe::Probe::<#msg_ty>::NEW).payload_type()
            )
        }
    }
}

fn expand(m: &Model, func: &ItemFn) -> TokenStream {
    if m.batch {
        return crate::expand_batch::expand(m, func, common(m, func));
    }
    let Common {
        items,
        impl_generics,
        db,
        where_clause,
        describe,
    } = common(m, func);
    let krate = &m.krate;
    let ident = &func.sig.ident;
    let msg_ty = &m.message_ty;
    let begin = begin(m);
    let args = call_args(
        m,
        quote!(__consumer_msg),
        quote!(&mut __consumer_tx),
        quote!(__consumer_inv.context()),
    );
    let unused_tx = if m.tx_ty.is_none() {
        quote!(#[allow(unused_mut)])
    } else {
        quote!()
    };
    let fail = fail(m);

    // Spanned on the message type: a type that is not `Deserialize` is
    // reported there, once, by `DecodableMessage` (or a type the codec
    // cannot produce, by `Decode`).
    let decode = crate::codec::decode(m.codec.as_ref(), msg_ty, krate);

    let classify = match &m.terminal {
        Some(pat) => quote!(::core::matches!(&__consumer_err, #pat)),
        None => quote!(false),
    };

    let on_dead_letter = if m.holds_key {
        quote! {
            fn on_dead_letter(&self) -> #krate::handler::OnDeadLetter {
                #krate::handler::OnDeadLetter::HoldKey
            }
        }
    } else {
        quote!()
    };

    quote! {
        #items

        impl #impl_generics #krate::Handler<#db> for #ident #where_clause {
            #describe
            #on_dead_letter

            async fn handle(
                &self,
                __consumer_inv: &mut #krate::__private::Invocation<'_, #db>,
            ) -> #krate::__private::Outcome {
                let __consumer_msg: #msg_ty = match #decode {
                    ::std::result::Result::Ok(m) => m,
                    ::std::result::Result::Err(outcome) => return outcome,
                };
                #unused_tx
                let mut __consumer_tx = match { #begin } {
                    ::std::result::Result::Ok(tx) => tx,
                    ::std::result::Result::Err(outcome) => return outcome,
                };
                match #ident::call(#(#args),*).await {
                    ::std::result::Result::Ok(_) => __consumer_inv.commit(__consumer_tx).await,
                    ::std::result::Result::Err(__consumer_err) => {
                        let __consumer_terminal: bool = #classify;
                        #fail
                    }
                }
            }
        }
    }
}

/// The claim: on the key expression's value, or, without one, on the
/// message id, borrowed from the envelope rather than copied.
fn begin(m: &Model) -> TokenStream {
    let krate = &m.krate;
    let binding = &m.message_binding;
    let Some(expr) = &m.key else {
        return quote!(__consumer_inv.begin_on_message_id().await);
    };
    let span = expr.span();
    let key = quote_spanned! {span=>
        {
            #[allow(unused_variables)]
            let #binding = &__consumer_msg;
            #krate::__private::IdempotencyKey::to_key(&(#expr))
        }
    };
    quote! {
        let __consumer_key: ::std::string::String = #key;
        __consumer_inv.begin(__consumer_key).await
    }
}

/// The function's arguments, in its parameters' order: `message`, `tx`
/// (spanned on the transaction's type, so a mismatch is reported there)
/// and `context`.
pub(crate) fn call_args(
    m: &Model,
    message: TokenStream,
    tx: TokenStream,
    context: TokenStream,
) -> Vec<TokenStream> {
    m.params
        .iter()
        .map(|p| match p {
            Param::Message => message.clone(),
            Param::Tx => match &m.tx_ty {
                Some(t) => respan_located(tx.clone(), t.span()),
                None => tx.clone(),
            },
            Param::Context => context.clone(),
        })
        .collect()
}

/// What an error does: the invocation's `fail`, spanned on the error type,
/// so a type that is not an error is reported there rather than on the
/// attribute.
fn fail(m: &Model) -> TokenStream {
    let fail = quote!(
        __consumer_inv
            .fail(__consumer_tx, __consumer_terminal, __consumer_err)
            .await
    );
    match &m.error_ty {
        Some(e) => respan(fail, e.span()),
        None => fail,
    }
}

/// `ty` followed by `bound`, the bound spanned on the type's last token.
fn spanned_bound(ty: &syn::Type, bound: TokenStream) -> TokenStream {
    let end = ty
        .to_token_stream()
        .into_iter()
        .last()
        .map_or_else(|| ty.span(), |tt| tt.span());
    let bound = respan(bound, end);
    quote!(#ty #bound)
}

/// Gives every token of `tokens` the span `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    respan_names(tokens, span, span)
}

/// [`respan`], but the expansion's own names (`__consumer_*`) only located
/// at `span`, resolved where the attribute is: `span` may come from
/// another hygiene context (a type that is a `macro_rules!` fragment),
/// where the names the expansion binds are not visible.
fn respan_located(tokens: TokenStream, span: Span) -> TokenStream {
    respan_names(tokens, span, Span::call_site().located_at(span))
}

fn respan_names(tokens: TokenStream, span: Span, names: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan_names(g.stream(), span, names));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else if matches!(&tt, TokenTree::Ident(i) if i.to_string().starts_with("__consumer_"))
            {
                tt.set_span(names);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
