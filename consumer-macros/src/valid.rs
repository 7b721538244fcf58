//! Meaning: checks the function and the arguments together, collecting
//! every error, and builds the model `expand.rs` turns into code.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::attr::{Args, Retry};

pub enum Param {
    Message,
    Tx,
    Context,
}

pub struct Model {
    pub krate: syn::Path,
    pub name: String,
    pub message_binding: Ident,
    pub message_ty: Type,
    pub params: Vec<Param>,
    pub tx_ty: Option<Type>,
    pub error_ty: Option<Type>,
    pub key: Option<Expr>,
    pub retry: TokenStream,
    pub terminal: Option<Pat>,
    /// The CloudEvents types a router sends this handler.
    pub event_types: Vec<String>,
    /// `batch`: the function takes `&mut Batch<M>`; `message_ty` is `M`.
    pub batch: bool,
    /// `on_dead_letter = hold_key`: its dead letters hold their key.
    pub holds_key: bool,
    /// `circuit = ..`: `fn circuit_policy`, when the handler has its own.
    pub circuit: Option<TokenStream>,
    /// `codec = ..`: the codec's type; `None` decodes JSON.
    pub codec: Option<Type>,
}

struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.push_error(syn::Error::new(span, msg));
    }

    /// Spans every token of `tokens`, not only the first: `&mut SqliteTx`,
    /// `<M: Trait>`.
    fn push_spanned(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.push_error(syn::Error::new_spanned(tokens, msg));
    }

    fn push_error(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

pub fn validate(mut args: Args, func: &ItemFn) -> Result<Model, syn::Error> {
    let mut errors = Errors(args.errors.take());
    let sig = &func.sig;
    check_signature(sig, &mut errors);
    let Arguments {
        params,
        message,
        tx_ty,
    } = arguments(sig, &args, &mut errors);
    let error_ty = error_type(sig, &mut errors);
    let name = handler_name(&args, sig, &mut errors);
    let event_types = event_types(&args, message.as_ref(), &mut errors);
    if args.batch.is_some() {
        check_batch(&args, error_ty.as_ref(), &mut errors);
    }
    let krate: syn::Path = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::consumer));
    let retry = retry_tokens(&args, &krate, &mut errors);
    let holds_key = holds_key(&args, &mut errors);
    let circuit = crate::circuit::tokens(args.circuit.as_ref(), &krate).unwrap_or_else(|e| {
        errors.push_error(e);
        None
    });

    let codec = crate::codec::codec_type(args.codec.as_ref(), &krate).unwrap_or_else(|e| {
        errors.push_error(e);
        None
    });
    if let (Some(span), Some(_)) = (args.batch, &codec) {
        errors.push(
            span,
            "a batch handler decodes JSON only: drop `codec = ..`, or handle the messages one by one",
        );
    }

    if let Some(e) = errors.0 {
        return Err(e);
    }
    let Some((message_binding, message_ty)) = message else {
        return Err(syn::Error::new(
            Span::call_site(),
            "a handler needs a message argument",
        ));
    };
    Ok(Model {
        krate,
        name,
        message_binding,
        message_ty,
        params,
        tx_ty,
        error_ty,
        key: args.idempotency_key,
        retry,
        terminal: args.terminal,
        event_types,
        batch: args.batch.is_some(),
        holds_key,
        circuit,
        codec,
    })
}

/// `on_dead_letter = hold_key | move_on`; a batch holds no key (its
/// messages are not one key's).
fn holds_key(args: &Args, errors: &mut Errors) -> bool {
    let Some(what) = &args.on_dead_letter else {
        return false;
    };
    let holds = match what.to_string().as_str() {
        "hold_key" => true,
        "move_on" => false,
        other => {
            errors.push(
                what.span(),
                format!(
                    "unknown `on_dead_letter = {other}`: expected `hold_key` (the key's later \
                     messages wait until an operator releases or skips the dead letter) or \
                     `move_on` (the default)"
                ),
            );
            return false;
        }
    };
    if holds && args.batch.is_some() {
        errors.push(
            what.span(),
            "`on_dead_letter = hold_key` holds one key's later messages, and a batch mixes \
             keys: remove it, or handle the messages one at a time",
        );
    }
    holds
}

/// What the function's signature may not be: not async, `const`,
/// `unsafe`, `extern`, generic, variadic.
fn check_signature(sig: &syn::Signature, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.push(
            sig.fn_token.span(),
            "a handler must be an `async fn`: add `async`",
        );
    }
    if let Some(c) = &sig.constness {
        errors.push(c.span(), "a handler cannot be a `const fn`: remove `const`");
    }
    if let syn::Safety::Unsafe(u) = &sig.safety {
        errors.push(u.span(), "a handler cannot be `unsafe`: remove `unsafe`");
    }
    if let Some(abi) = &sig.abi {
        errors.push(
            abi.span(),
            "a handler cannot have an `extern` ABI: remove it",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push_spanned(
            &sig.generics,
            "a handler cannot be generic: use concrete message and error types",
        );
    }
    if let Some(v) = &sig.variadic {
        errors.push(v.span(), "a handler cannot be variadic");
    }
}

/// The arguments, as the model needs them: their order, the message
/// (binding and type) and the transaction type.
struct Arguments {
    params: Vec<Param>,
    message: Option<(Ident, Type)>,
    tx_ty: Option<Type>,
}

/// Reads each argument: the message (or the batch) first, then at most one
/// transaction and one context, in any order.
fn arguments(sig: &syn::Signature, args: &Args, errors: &mut Errors) -> Arguments {
    let mut out = Arguments {
        params: Vec::new(),
        message: None,
        tx_ty: None,
    };
    let mut first = true;
    for input in &sig.inputs {
        let typed = match input {
            FnArg::Receiver(r) => {
                errors.push_spanned(r, "a handler cannot take `self`: make it a free `async fn`");
                continue;
            }
            FnArg::Typed(t) => t,
        };
        if let Pat::Ident(p) = &*typed.pat
            && p.ident == sig.ident
        {
            errors.push(
                p.ident.span(),
                format_args!(
                    "argument `{0}` has the handler's name, which `#[handler]` gives to a unit \
                     struct: the pattern would match that struct instead of binding the argument; \
                     rename the argument",
                    p.ident
                ),
            );
        }
        // The first argument other than a (rejected) `self` is the message
        // (or, with `batch`, the batch).
        if std::mem::take(&mut first) {
            out.message = message_argument(typed, args, errors);
            if out.message.is_some() {
                out.params.push(Param::Message);
            }
        } else {
            out.other_argument(typed, args, errors);
        }
    }
    if sig.inputs.is_empty() {
        errors.push(
            sig.paren_token.span.join(),
            "a handler takes the decoded message as its first argument: `async fn h(msg: MyMessage) -> Result<(), MyError>`",
        );
    }
    out
}

/// The message argument (with `batch`, the batch's message type): a plain
/// name, taken by value (the batch by `&mut Batch<M>`).
fn message_argument(
    typed: &syn::PatType,
    args: &Args,
    errors: &mut Errors,
) -> Option<(Ident, Type)> {
    if args.batch.is_some() {
        return match (&*typed.pat, batch_message(&typed.ty)) {
            (Pat::Ident(p), Some(ty)) if p.subpat.is_none() && p.by_ref.is_none() => {
                Some((p.ident.clone(), ty.clone()))
            }
            (_, None) => {
                errors.push_spanned(
                    &typed.ty,
                    "with `batch`, the first argument is the batch, lent to the handler: \
                     `orders: &mut Batch<OrderPlaced>` (`consumer::batch::Batch`)",
                );
                None
            }
            (pat, Some(_)) => {
                errors.push(
                    pat.span(),
                    "the batch argument must be a plain name (`orders: &mut Batch<OrderPlaced>`)",
                );
                None
            }
        };
    }
    match (&*typed.pat, &*typed.ty) {
        (_, Type::Reference(r)) => {
            errors.push_spanned(
                r,
                "the first argument is the message and is taken by value: \
                 `msg: MyMessage`, not a reference",
            );
            None
        }
        (Pat::Ident(p), ty) if p.subpat.is_none() && p.by_ref.is_none() => {
            Some((p.ident.clone(), ty.clone()))
        }
        (pat, _) => {
            errors.push(
                pat.span(),
                "the message argument must be a plain name (`order: OrderPlaced`), \
                 so `idempotency_key` can refer to it",
            );
            None
        }
    }
}

impl Arguments {
    /// An argument after the message: the transaction (`&mut`) or the
    /// context (`&`), each at most once.
    fn other_argument(&mut self, typed: &syn::PatType, args: &Args, errors: &mut Errors) {
        match &*typed.ty {
            Type::Reference(r) if r.mutability.is_some() => {
                if self.tx_ty.is_some() {
                    errors.push_spanned(
                        r,
                        "a handler takes at most one transaction `&mut PgTx` / `&mut SqliteTx`: \
                         remove this one",
                    );
                } else {
                    self.tx_ty = Some((*r.elem).clone());
                    self.params.push(Param::Tx);
                }
            }
            Type::Reference(r) if args.batch.is_some() => errors.push_spanned(
                r,
                "with `batch`, each message has its own context: read it from the batch \
                 (`for (i, item) in orders.iter() { item.context() }`); remove this argument",
            ),
            Type::Reference(r) => {
                if self.params.iter().any(|p| matches!(p, Param::Context)) {
                    errors.push_spanned(
                        r,
                        "a handler takes at most one `&MessageContext`: remove this one",
                    );
                } else {
                    self.params.push(Param::Context);
                }
            }
            other => match last_ident(other) {
                Some(t) if t == "PgTx" || t == "SqliteTx" || t == "Tx" => errors.push_spanned(
                    other,
                    format_args!(
                        "the transaction is lent to the handler and committed after it returns: \
                         take it as `&mut {t}`"
                    ),
                ),
                Some(t) if t == "MessageContext" => errors.push_spanned(
                    other,
                    "take the context by reference: `ctx: &MessageContext`",
                ),
                _ => errors.push_spanned(
                    other,
                    "after the message, a handler takes `tx: &mut PgTx` (or `&mut SqliteTx`) \
                     and/or `ctx: &MessageContext`; this argument is neither",
                ),
            },
        }
    }
}

/// `E` of the `Result<(), E>` the handler returns, when it is written.
fn error_type(sig: &syn::Signature, errors: &mut Errors) -> Option<Type> {
    match &sig.output {
        ReturnType::Default => {
            errors.push(
                sig.ident.span(),
                "a handler returns `Result<(), E>` so failures can be retried or dead-lettered: add `-> Result<(), MyError>`",
            );
            None
        }
        ReturnType::Type(_, ty) => match result_error(ty) {
            Ok(e) => e,
            Err(()) => {
                errors.push_spanned(
                    ty,
                    "a handler returns `Result<(), E>`: change the return type",
                );
                None
            }
        },
    }
}

/// The handler's name (its dedup scope): `name = ..` or the function's.
fn handler_name(args: &Args, sig: &syn::Signature, errors: &mut Errors) -> String {
    match &args.name {
        Some(lit) => {
            let v = lit.value();
            if v.trim().is_empty() {
                errors.push(
                    lit.span(),
                    "`name` must not be empty: it scopes the dedup rows",
                );
            } else if v.len() > 200 {
                errors.push(lit.span(), "`name` must be at most 200 bytes");
            }
            v
        }
        None => sig.ident.to_string(),
    }
}

/// The CloudEvents types a router sends the handler: `event_type = ..`,
/// or the message type's own name.
fn event_types(args: &Args, message: Option<&(Ident, Type)>, errors: &mut Errors) -> Vec<String> {
    match &args.event_type {
        Some(given) => {
            let mut seen: Vec<String> = Vec::new();
            for lit in given {
                let v = lit.value();
                if let Err(why) = check_event_type(&v) {
                    errors.push(lit.span(), why);
                } else if seen.contains(&v) {
                    errors.push(lit.span(), format_args!("event type `{v}` is listed twice"));
                } else {
                    seen.push(v);
                }
            }
            seen
        }
        // The message type's own name: `OrderPlaced` for `events::OrderPlaced`.
        None => match message.map(|(_, ty)| (ty, named_type(ty))) {
            Some((_, Some(name))) => vec![name.to_string()],
            Some((ty, None)) => {
                errors.push_spanned(
                    ty,
                    "without `event_type` the event type is the message type's name, and this \
                     type's name says nothing about the event: name the types the handler \
                     takes with `event_type = \"OrderPlaced\"` (or a list), or take a message \
                     type of your own",
                );
                Vec::new()
            }
            None => Vec::new(),
        },
    }
}

/// What `batch` asks more: a key closure, and a written error type for
/// `terminal`.
fn check_batch(args: &Args, error_ty: Option<&Type>, errors: &mut Errors) {
    if let Some(key) = &args.idempotency_key
        && !matches!(key, Expr::Closure(c) if c.inputs.len() == 1)
    {
        errors.push_spanned(
            key,
            "with `batch`, the key is computed for each message of the batch: name the \
                 message in a closure, `idempotency_key = |order| order.order_id`",
        );
    }
    if let (Some(pat), None) = (&args.terminal, error_ty) {
        errors.push_spanned(
            pat,
            "with `batch`, `terminal` is matched against the error the handler returned, \
                 which needs its type: write the return type as `Result<(), MyError>`",
        );
    }
}

/// Why `v` cannot be an event type, if it cannot: it is compared byte for
/// byte with `ce_type`, so an empty name, whitespace or a control
/// character would only ever match a producer's typo.
fn check_event_type(v: &str) -> Result<(), String> {
    const WHY: &str = "an event type is matched byte for byte against the message's `ce_type`";
    if v.is_empty() {
        return Err(
            "an event type must not be empty: it is matched against the message's `ce_type`"
                .to_owned(),
        );
    }
    if v.trim() != v {
        return Err(format!(
            "event type {v:?} starts or ends with whitespace: remove it ({WHY})"
        ));
    }
    if let Some(c) = v.chars().find(|c| c.is_whitespace() || c.is_control()) {
        let what = if c.is_control() {
            format!("the control character {c:?}")
        } else {
            format!("whitespace ({c:?})")
        };
        return Err(format!(
            "event type {v:?} contains {what}: use a name such as `OrderPlaced` or \
             `com.example.order.placed` ({WHY})"
        ));
    }
    Ok(())
}

/// The name a message type gives its events by default: a plain path to a
/// type of the user's own (`OrderPlaced`, `events::OrderPlaced`). `None` for
/// types whose name says nothing about the event: generic ones (`Vec<u8>`,
/// `Box<T>`, `Option<T>`), tuples, references and other non-paths, and the
/// standard and serde catch-alls (`String`, `serde_json::Value`, `Bytes`).
fn named_type(ty: &Type) -> Option<&Ident> {
    const MEANINGLESS: &[&str] = &[
        "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f32", "f64", "String", "Value", "RawValue", "Map", "Bytes",
        "BytesMut", "Vec", "Box", "Option", "Result", "Rc", "Arc", "Cow", "HashMap", "BTreeMap",
        "Self",
    ];
    let p = match ty {
        Type::Paren(t) => return named_type(&t.elem),
        Type::Group(t) => return named_type(&t.elem),
        Type::Path(p) if p.qself.is_none() => p,
        _ => return None,
    };
    let last = p.path.segments.last()?;
    if !matches!(last.arguments, PathArguments::None) || MEANINGLESS.iter().any(|m| last.ident == m)
    {
        return None;
    }
    Some(&last.ident)
}

/// `&mut Batch<M>` → `Some(M)`.
fn batch_message(ty: &Type) -> Option<&Type> {
    let Type::Reference(r) = ty else {
        return None;
    };
    r.mutability?;
    let Type::Path(p) = &*r.elem else {
        return None;
    };
    let last = p.path.segments.last()?;
    if last.ident != "Batch" {
        return None;
    }
    let PathArguments::AngleBracketed(a) = &last.arguments else {
        return None;
    };
    let mut types = a.args.iter().filter_map(|g| match g {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

/// The last path segment's name: `SqliteTx` for `consumer::SqliteTx`.
fn last_ident(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| &s.ident),
        _ => None,
    }
}

/// `Result<T, E>` → `Some(E)`; `Result<T>` (an alias) → `None`; else `Err`.
fn result_error(ty: &Type) -> Result<Option<Type>, ()> {
    let Type::Path(p) = ty else {
        return Err(());
    };
    let Some(last) = p.path.segments.last() else {
        return Err(());
    };
    if last.ident != "Result" {
        return Err(());
    }
    match &last.arguments {
        PathArguments::AngleBracketed(a) => {
            let types: Vec<&Type> = a
                .args
                .iter()
                .filter_map(|g| match g {
                    GenericArgument::Type(t) => Some(t),
                    _ => None,
                })
                .collect();
            match types.as_slice() {
                [_, e] => Ok(Some((*e).clone())),
                [_] => Ok(None),
                _ => Err(()),
            }
        }
        _ => Err(()),
    }
}

fn retry_tokens(args: &Args, krate: &syn::Path, errors: &mut Errors) -> TokenStream {
    match &args.retry {
        None => quote!(#krate::RetryPolicy::DEFAULT),
        Some(Retry::None(span)) => quote::quote_spanned!(*span=> #krate::RetryPolicy::none()),
        Some(Retry::Expr(e)) => {
            quote!({ let __consumer_policy: #krate::RetryPolicy = #e; __consumer_policy })
        }
        Some(Retry::Exponential(exp)) => {
            let mut dur = |lit: &Option<syn::LitStr>, default: u64| -> u64 {
                match lit {
                    None => default,
                    Some(l) => match parse_duration(&l.value()) {
                        Ok(n) => n,
                        Err(msg) => {
                            errors.push(l.span(), msg);
                            default
                        }
                    },
                }
            };
            let base = dur(&exp.base, 100_000_000);
            let max = dur(&exp.max_delay, 30_000_000_000);
            if base > max {
                let shown = |lit: &Option<syn::LitStr>, default: &str| match lit {
                    Some(l) => format!("{:?}", l.value()),
                    None => format!("{default:?}, the default"),
                };
                let msg = format!(
                    "`base` ({}) exceeds `max_delay` ({}): lower `base` or raise `max_delay`",
                    shown(&exp.base, "100ms"),
                    shown(&exp.max_delay, "30s"),
                );
                // Point at whichever of the two the user wrote.
                if let Some(l) = exp.base.as_ref().or(exp.max_delay.as_ref()) {
                    errors.push(l.span(), msg);
                }
            }
            let attempts: u32 = match &exp.attempts {
                None => 5,
                Some(lit) => match lit.base10_parse::<u32>() {
                    Ok(0) | Err(_) => {
                        errors.push(
                            lit.span(),
                            "`attempts` counts every attempt, the first included: use 1 or more (1 never retries)",
                        );
                        5
                    }
                    Ok(n) => n,
                },
            };
            let redeliver = match &exp.mode {
                None => false,
                Some(m) if m == "in_place" => false,
                Some(m) if m == "redeliver" => true,
                Some(m) => {
                    errors.push(
                        m.span(),
                        format!("unknown retry mode `{m}`; expected `in_place` or `redeliver`"),
                    );
                    false
                }
            };
            let span = exp.span();
            quote::quote_spanned!(span=> #krate::__private::exponential(#base, #max, #attempts, #redeliver))
        }
    }
}

/// `"200ms"` → nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || {
        format!(
            "invalid duration {s:?}: expected a whole number and a unit, like \"200ms\" (units: ns, us, ms, s, m, h)"
        )
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("duration {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("200ms"), Ok(200_000_000));
        assert_eq!(parse_duration("30s"), Ok(30_000_000_000));
        assert_eq!(parse_duration("2m"), Ok(120_000_000_000));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("1.5s").is_err());
    }
}
