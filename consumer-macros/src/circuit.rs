//! `circuit = ..`: the handler's own circuit policy. Parsed here and
//! checked here (a policy is a few numbers; its meaning needs nothing else
//! of the function).
//!
//! ```text
//! circuit = off
//! circuit = breaker(opens_after = 5, open_for = "5s", max_open_for = "60s")
//! circuit = <an expression of type CircuitPolicy>
//! ```

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, LitInt, LitStr, Token};

use crate::valid::parse_duration;

mod kw {
    syn::custom_keyword!(off);
    syn::custom_keyword!(breaker);
    syn::custom_keyword!(opens_after);
    syn::custom_keyword!(open_for);
    syn::custom_keyword!(max_open_for);
}

const EXPECTED: &str = "expected a circuit after `circuit =`: `breaker(opens_after = 5, open_for = \"5s\", max_open_for = \"60s\")`, `off`, or an expression of type `CircuitPolicy`";
const BREAKER_ARGS: &str = "expected one of: `opens_after`, `open_for`, `max_open_for`";

/// What `circuit = ..` says.
pub enum Circuit {
    /// `circuit = off`: this handler's circuit never opens.
    Off(Span),
    /// `circuit = breaker(..)`, each argument defaulting to
    /// `CircuitPolicy::default()`'s.
    Breaker {
        span: Span,
        opens_after: Option<LitInt>,
        open_for: Option<LitStr>,
        max_open_for: Option<LitStr>,
    },
    /// `circuit = <expr>` evaluating to a `CircuitPolicy`.
    Expr(Expr),
}

enum Arg {
    OpensAfter(Span, LitInt),
    OpenFor(Span, LitStr),
    MaxOpenFor(Span, LitStr),
}

impl Parse for Circuit {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() || input.peek(Token![,]) {
            return Err(input.error(EXPECTED));
        }
        if input.peek(kw::off) && (input.peek2(Token![,]) || is_last_token(input)) {
            let k = input.parse::<kw::off>()?;
            return Ok(Self::Off(k.span));
        }
        if input.peek(kw::breaker) && input.peek2(syn::token::Paren) {
            let k = input.parse::<kw::breaker>()?;
            let content;
            syn::parenthesized!(content in input);
            let (mut opens_after, mut open_for, mut max_open_for) = (None, None, None);
            let mut errors: Option<syn::Error> = None;
            for arg in Punctuated::<Arg, Token![,]>::parse_terminated(&content)? {
                let (span, name, filled) = match arg {
                    Arg::OpensAfter(s, v) => (s, "opens_after", put(&mut opens_after, v)),
                    Arg::OpenFor(s, v) => (s, "open_for", put(&mut open_for, v)),
                    Arg::MaxOpenFor(s, v) => (s, "max_open_for", put(&mut max_open_for, v)),
                };
                if !filled {
                    let e =
                        syn::Error::new(span, format!("duplicate argument `{name}`: give it once"));
                    match &mut errors {
                        Some(all) => all.combine(e),
                        None => errors = Some(e),
                    }
                }
            }
            if let Some(e) = errors {
                return Err(e);
            }
            return Ok(Self::Breaker {
                span: k.span,
                opens_after,
                open_for,
                max_open_for,
            });
        }
        Ok(Self::Expr(input.parse()?))
    }
}

/// Fills an empty slot; `false` when it was filled already.
fn put<T>(slot: &mut Option<T>, value: T) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(value);
    true
}

fn is_last_token(input: ParseStream<'_>) -> bool {
    let fork = input.fork();
    fork.parse::<proc_macro2::TokenTree>().is_ok() && fork.is_empty()
}

fn duration(input: ParseStream<'_>, name: &str) -> syn::Result<LitStr> {
    input.parse::<Token![=]>()?;
    input.parse::<LitStr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected a duration string: `{name} = \"5s\"` (units: ns, us, ms, s, m, h)"),
        )
    })
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::opens_after) {
            let k = input.parse::<kw::opens_after>()?;
            input.parse::<Token![=]>()?;
            let lit: LitInt = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected an integer: `opens_after = 5` (different messages in a row that failed transiently)",
                )
            })?;
            Ok(Self::OpensAfter(k.span, lit))
        } else if lookahead.peek(kw::open_for) {
            let k = input.parse::<kw::open_for>()?;
            Ok(Self::OpenFor(k.span, duration(input, "open_for")?))
        } else if lookahead.peek(kw::max_open_for) {
            let k = input.parse::<kw::max_open_for>()?;
            Ok(Self::MaxOpenFor(k.span, duration(input, "max_open_for")?))
        } else if input.peek(Ident) {
            let unknown: Ident = input.parse()?;
            Err(syn::Error::new(
                unknown.span(),
                format!("unknown circuit argument `{unknown}`; {BREAKER_ARGS}"),
            ))
        } else {
            Err(lookahead.error())
        }
    }
}

/// The body of `fn circuit_policy`, or the errors found in what was
/// written. `None` when the attribute has no `circuit`: the handler follows
/// the consumer's.
pub fn tokens(
    circuit: Option<&Circuit>,
    krate: &syn::Path,
) -> Result<Option<TokenStream>, syn::Error> {
    let policy = match circuit {
        None => return Ok(None),
        Some(Circuit::Off(span)) => quote_spanned!(*span=> #krate::runtime::CircuitPolicy::off()),
        Some(Circuit::Expr(e)) => {
            quote!({ let __consumer_circuit: #krate::runtime::CircuitPolicy = #e; __consumer_circuit })
        }
        Some(Circuit::Breaker {
            span,
            opens_after,
            open_for,
            max_open_for,
        }) => breaker(
            *span,
            opens_after.as_ref(),
            open_for.as_ref(),
            max_open_for.as_ref(),
            krate,
        )?,
    };
    Ok(Some(quote! {
        fn circuit_policy(&self) -> ::core::option::Option<#krate::runtime::CircuitPolicy> {
            ::core::option::Option::Some(#policy)
        }
    }))
}

/// `breaker(..)`'s policy: `CircuitPolicy::default()`'s values where an
/// argument is left out (5, 5 s, 60 s); a value the policy would quietly
/// raise (an open time under 10 ms, a longest open time under the first)
/// is refused here instead.
fn breaker(
    span: Span,
    opens_after: Option<&LitInt>,
    open_for: Option<&LitStr>,
    max_open_for: Option<&LitStr>,
    krate: &syn::Path,
) -> Result<TokenStream, syn::Error> {
    let mut errors: Option<syn::Error> = None;
    let mut fail = |span: Span, msg: String| {
        let e = syn::Error::new(span, msg);
        match &mut errors {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        }
    };
    let opens_after: u32 = match opens_after {
        None => 5,
        Some(lit) => match lit.base10_parse::<u32>() {
            Ok(0) | Err(_) => {
                fail(
                    lit.span(),
                    "`opens_after` counts different messages that failed in a row: use 1 or more, \
                     or `circuit = off` for a circuit that never opens"
                        .to_owned(),
                );
                5
            }
            Ok(n) => n,
        },
    };
    let mut nanos = |lit: Option<&LitStr>, default: u64| match lit {
        None => default,
        Some(l) => parse_duration(&l.value()).unwrap_or_else(|msg| {
            fail(l.span(), msg);
            default
        }),
    };
    let first = nanos(open_for, 5_000_000_000);
    let longest = nanos(max_open_for, 60_000_000_000);
    if let Some(l) = open_for
        && first < 10_000_000
    {
        fail(
            l.span(),
            format!(
                "`open_for` is {:?}: a circuit stays open at least \"10ms\"",
                l.value()
            ),
        );
    }
    if first > longest {
        let shown = |lit: Option<&LitStr>, default: &str| match lit {
            Some(l) => format!("{:?}", l.value()),
            None => format!("{default:?}, the default"),
        };
        let msg = format!(
            "`open_for` ({}) exceeds `max_open_for` ({}): lower `open_for` or raise `max_open_for`",
            shown(open_for, "5s"),
            shown(max_open_for, "60s"),
        );
        if let Some(l) = open_for.or(max_open_for) {
            fail(l.span(), msg);
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    Ok(quote_spanned!(span=> #krate::runtime::CircuitPolicy::new(
        #opens_after,
        ::core::time::Duration::from_nanos(#first),
        ::core::time::Duration::from_nanos(#longest),
    )))
}
