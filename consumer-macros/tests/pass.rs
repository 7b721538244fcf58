//! What `#[handler]` accepts, compiled with the rest of the tests: each
//! file under `tests/pass/` is a module of this binary, so a case that no
//! longer compiles fails the build; each checks its handlers against the
//! traits in its `main`, which a test of the same name runs. They were trybuild pass cases; as modules they
//! build with the workspace's own dependencies, and the trybuild project
//! of `tests/ui.rs`, with only the cases that must fail, checks without
//! generating code: about two minutes less in the suite.

#[allow(dead_code)]
#[path = "pass/all_arguments_sqlite.rs"]
mod all_arguments_sqlite;

#[allow(dead_code)]
#[path = "pass/anyhow_result.rs"]
mod anyhow_result;

#[allow(dead_code)]
#[path = "pass/batch_no_tx_generic_over_store.rs"]
mod batch_no_tx_generic_over_store;

#[allow(dead_code)]
#[path = "pass/batch_pg_tx.rs"]
mod batch_pg_tx;

#[allow(dead_code)]
#[path = "pass/circuit.rs"]
mod circuit;

#[allow(dead_code)]
#[path = "pass/codec.rs"]
mod codec;

#[allow(dead_code)]
#[path = "pass/crate_path.rs"]
mod crate_path;

#[allow(dead_code)]
#[path = "pass/event_types.rs"]
mod event_types;

#[allow(dead_code)]
#[path = "pass/mode_redeliver.rs"]
mod mode_redeliver;

#[allow(dead_code)]
#[path = "pass/no_tx_generic_over_store.rs"]
mod no_tx_generic_over_store;

#[allow(dead_code)]
#[path = "pass/pg_tx.rs"]
mod pg_tx;

#[allow(dead_code)]
#[path = "pass/retry_expr.rs"]
mod retry_expr;

#[allow(dead_code)]
#[path = "pass/retry_none.rs"]
mod retry_none;

#[allow(dead_code)]
#[path = "pass/terminal_patterns.rs"]
mod terminal_patterns;

/// One test per case, running its `main`.
macro_rules! run_each {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                super::$case::main();
            }
        )*
    };
}

mod run {
    run_each!(
        all_arguments_sqlite,
        anyhow_result,
        batch_no_tx_generic_over_store,
        batch_pg_tx,
        circuit,
        codec,
        crate_path,
        event_types,
        mode_redeliver,
        no_tx_generic_over_store,
        pg_tx,
        retry_expr,
        retry_none,
        terminal_patterns,
    );
}
