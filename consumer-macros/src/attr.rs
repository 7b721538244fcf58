//! Parsing of `#[handler(...)]` arguments. Syntax only: meaning is checked
//! in `valid.rs`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, LitInt, LitStr, Pat, Path, Token};

mod kw {
    syn::custom_keyword!(idempotency_key);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(terminal);
    syn::custom_keyword!(name);
    syn::custom_keyword!(event_type);
    syn::custom_keyword!(exponential);
    syn::custom_keyword!(none);
    syn::custom_keyword!(base);
    syn::custom_keyword!(max_delay);
    syn::custom_keyword!(attempts);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(in_place);
    syn::custom_keyword!(redeliver);
    syn::custom_keyword!(batch);
    syn::custom_keyword!(on_dead_letter);
    syn::custom_keyword!(circuit);
    syn::custom_keyword!(codec);
}

const ARGS: &str = "expected one of: `batch`, `idempotency_key`, `retry`, `terminal`, `on_dead_letter`, `circuit`, `codec`, `event_type`, `name`, `crate`";
const RETRY_ARGS: &str = "expected one of: `base`, `max_delay`, `attempts`, `mode`";

/// Everything written between the parentheses.
#[derive(Default)]
pub struct Args {
    pub idempotency_key: Option<Expr>,
    pub retry: Option<Retry>,
    pub terminal: Option<Pat>,
    pub name: Option<LitStr>,
    pub event_type: Option<Vec<LitStr>>,
    pub krate: Option<Path>,
    /// `batch`: the function handles a `&mut Batch<M>` (a `BatchHandler`).
    pub batch: Option<Span>,
    /// `on_dead_letter = hold_key` (or `move_on`).
    pub on_dead_letter: Option<Ident>,
    /// `circuit = off | breaker(..) | <expr>`.
    pub circuit: Option<crate::circuit::Circuit>,
    /// `codec = json | avro | protobuf | json_schema | <type>`.
    pub codec: Option<crate::codec::Codec>,
    /// Errors that did not stop parsing (duplicates), reported together.
    pub errors: Option<syn::Error>,
}

pub enum Retry {
    /// `retry = none`
    None(Span),
    /// `retry = exponential(...)`
    Exponential(Exponential),
    /// `retry = <expr>` evaluating to a `RetryPolicy`.
    Expr(Expr),
}

#[derive(Default)]
pub struct Exponential {
    pub span: Option<Span>,
    pub base: Option<LitStr>,
    pub max_delay: Option<LitStr>,
    pub attempts: Option<LitInt>,
    pub mode: Option<Ident>,
}

fn push(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

fn set<T>(slot: &mut Option<T>, value: T, span: Span, name: &str, errors: &mut Option<syn::Error>) {
    if slot.is_some() {
        push(
            errors,
            syn::Error::new(span, format!("duplicate argument `{name}`: give it once")),
        );
    } else {
        *slot = Some(value);
    }
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = None;
        while !input.is_empty() {
            args.parse_one(input, &mut errors)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        args.errors = errors;
        Ok(args)
    }
}

impl Args {
    /// One argument, into its slot. A duplicate goes to `errors` and
    /// parsing goes on, so every duplicate is reported at once; anything
    /// else wrong stops parsing.
    fn parse_one(
        &mut self,
        input: ParseStream<'_>,
        errors: &mut Option<syn::Error>,
    ) -> syn::Result<()> {
        // Peeked in this order: `lookahead.error()` lists them so.
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::idempotency_key) {
            let k = input.parse::<kw::idempotency_key>()?;
            let e = value(input, Expr::parse)?;
            set(
                &mut self.idempotency_key,
                e,
                k.span,
                "idempotency_key",
                errors,
            );
        } else if lookahead.peek(kw::retry) {
            let k = input.parse::<kw::retry>()?;
            let r = value(input, parse_retry)?;
            set(&mut self.retry, r, k.span, "retry", errors);
        } else if lookahead.peek(kw::terminal) {
            let k = input.parse::<kw::terminal>()?;
            let p = value(input, parse_terminal)?;
            set(&mut self.terminal, p, k.span, "terminal", errors);
        } else if lookahead.peek(kw::on_dead_letter) {
            let k = input.parse::<kw::on_dead_letter>()?;
            let what = value(input, Ident::parse)?;
            set(
                &mut self.on_dead_letter,
                what,
                k.span,
                "on_dead_letter",
                errors,
            );
        } else if lookahead.peek(kw::circuit) {
            let k = input.parse::<kw::circuit>()?;
            let c = value(input, crate::circuit::Circuit::parse)?;
            set(&mut self.circuit, c, k.span, "circuit", errors);
        } else if lookahead.peek(kw::codec) {
            let k = input.parse::<kw::codec>()?;
            let c = value(input, crate::codec::Codec::parse)?;
            set(&mut self.codec, c, k.span, "codec", errors);
        } else if lookahead.peek(kw::name) {
            let k = input.parse::<kw::name>()?;
            let lit = value(input, parse_name)?;
            set(&mut self.name, lit, k.span, "name", errors);
        } else if lookahead.peek(kw::event_type) {
            let k = input.parse::<kw::event_type>()?;
            let types = value(input, parse_event_types)?;
            set(&mut self.event_type, types, k.span, "event_type", errors);
        } else if lookahead.peek(kw::batch) {
            let k = input.parse::<kw::batch>()?;
            if input.peek(Token![=]) || input.peek(syn::token::Paren) {
                return Err(syn::Error::new(
                    k.span,
                    "`batch` takes no value: write `batch`, and set the batch size on \
                     `Batched::new(handler).with_max_batch(n)`",
                ));
            }
            set(&mut self.batch, k.span, k.span, "batch", errors);
        } else if lookahead.peek(Token![crate]) {
            let k = input.parse::<Token![crate]>()?;
            let p = value(input, Path::parse)?;
            set(&mut self.krate, p, k.span, "crate", errors);
        } else if input.peek(Ident) {
            let unknown: Ident = input.parse()?;
            return Err(syn::Error::new(
                unknown.span(),
                format!("unknown argument `{unknown}`; {ARGS}"),
            ));
        } else {
            return Err(lookahead.error());
        }
        Ok(())
    }
}

/// `= value`, the value read by `parse`.
fn value<T>(
    input: ParseStream<'_>,
    parse: fn(ParseStream<'_>) -> syn::Result<T>,
) -> syn::Result<T> {
    input.parse::<Token![=]>()?;
    parse(input)
}

/// The pattern of `terminal = ...`, a leading `|` and alternatives allowed.
fn parse_terminal(input: ParseStream<'_>) -> syn::Result<Pat> {
    if input.is_empty() || input.peek(Token![,]) {
        return Err(input.error(
            "expected a pattern after `terminal =`, e.g. `terminal = MyError::Declined | MyError::Invalid(_)`",
        ));
    }
    Pat::parse_multi_with_leading_vert(input)
}

/// The string literal of `name = "..."`.
fn parse_name(input: ParseStream<'_>) -> syn::Result<LitStr> {
    input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `name = \"charge\"`"))
}

const EVENT_TYPE: &str = "expected a string literal or a list of them: `event_type = \"OrderPlaced\"` or `event_type = [\"OrderPlaced\", \"OrderPaid\"]`";

fn parse_event_types(input: ParseStream<'_>) -> syn::Result<Vec<LitStr>> {
    if input.peek(syn::token::Bracket) {
        let content;
        let bracket = syn::bracketed!(content in input);
        let list = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)
            .map_err(|e| syn::Error::new(e.span(), EVENT_TYPE))?;
        if list.is_empty() {
            return Err(syn::Error::new(
                bracket.span.join(),
                "`event_type = []` names no type: list at least one, or leave `event_type` out to take the message type's name",
            ));
        }
        return Ok(list.into_iter().collect());
    }
    let lit: LitStr = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), EVENT_TYPE))?;
    Ok(vec![lit])
}

fn parse_retry(input: ParseStream<'_>) -> syn::Result<Retry> {
    if input.is_empty() || input.peek(Token![,]) {
        return Err(input.error(
            "expected a retry policy after `retry =`: `exponential(base = \"100ms\", max_delay = \"30s\", attempts = 5)`, `none`, or an expression of type `RetryPolicy`",
        ));
    }
    if input.peek(kw::none) && (input.peek2(Token![,]) || is_last_token(input)) {
        let k = input.parse::<kw::none>()?;
        return Ok(Retry::None(k.span));
    }
    if input.peek(kw::exponential) && input.peek2(syn::token::Paren) {
        let k = input.parse::<kw::exponential>()?;
        let content;
        syn::parenthesized!(content in input);
        let mut exp = Exponential {
            span: Some(k.span),
            ..Exponential::default()
        };
        let mut errors = None;
        let items = Punctuated::<RetryArg, Token![,]>::parse_terminated(&content)?;
        for item in items {
            match item {
                RetryArg::Base(span, v) => set(&mut exp.base, v, span, "base", &mut errors),
                RetryArg::MaxDelay(span, v) => {
                    set(&mut exp.max_delay, v, span, "max_delay", &mut errors)
                }
                RetryArg::Attempts(span, v) => {
                    set(&mut exp.attempts, v, span, "attempts", &mut errors)
                }
                RetryArg::Mode(span, v) => set(&mut exp.mode, v, span, "mode", &mut errors),
            }
        }
        if let Some(e) = errors {
            return Err(e);
        }
        return Ok(Retry::Exponential(exp));
    }
    Ok(Retry::Expr(input.parse()?))
}

fn is_last_token(input: ParseStream<'_>) -> bool {
    let fork = input.fork();
    fork.parse::<proc_macro2::TokenTree>().is_ok() && fork.is_empty()
}

enum RetryArg {
    Base(Span, LitStr),
    MaxDelay(Span, LitStr),
    Attempts(Span, LitInt),
    Mode(Span, Ident),
}

fn duration_lit(input: ParseStream<'_>, name: &str) -> syn::Result<LitStr> {
    input.parse::<LitStr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!(
                "expected a duration string: `{name} = \"200ms\"` (units: ns, us, ms, s, m, h)"
            ),
        )
    })
}

impl Parse for RetryArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::base) {
            let k = input.parse::<kw::base>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::Base(k.span, duration_lit(input, "base")?))
        } else if lookahead.peek(kw::max_delay) {
            let k = input.parse::<kw::max_delay>()?;
            input.parse::<Token![=]>()?;
            Ok(Self::MaxDelay(k.span, duration_lit(input, "max_delay")?))
        } else if lookahead.peek(kw::attempts) {
            let k = input.parse::<kw::attempts>()?;
            input.parse::<Token![=]>()?;
            let lit: LitInt = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected an integer: `attempts = 5` (the first attempt included)",
                )
            })?;
            Ok(Self::Attempts(k.span, lit))
        } else if lookahead.peek(kw::mode) {
            let k = input.parse::<kw::mode>()?;
            input.parse::<Token![=]>()?;
            let ident: Ident = input.parse()?;
            Ok(Self::Mode(k.span, ident))
        } else if input.peek(Ident) {
            let unknown: Ident = input.parse()?;
            Err(syn::Error::new(
                unknown.span(),
                format!("unknown retry argument `{unknown}`; {RETRY_ARGS}"),
            ))
        } else {
            Err(lookahead.error())
        }
    }
}

impl Exponential {
    pub fn span(&self) -> Span {
        self.span.unwrap_or_else(Span::call_site)
    }
}
