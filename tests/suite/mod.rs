//! The conformance suite: one set of behaviours every backend and store
//! must show, written once as ordinary generic functions ([`cases`]) over a
//! [`BrokerHarness`](crate::conformance::broker::BrokerHarness).
//!
//! A test crate names its store and declares the tests for its broker:
//!
//! ```text
//! mod conformance;
//! mod suite;
//! type SuiteHarness = conformance::support::PgHarness;   // the store
//! type SuiteTx = consumer::PgTx;                          // its handler transaction
//! crate::declare!(conformance::broker::MemoryHarness);    // one #[test] per case
//! ```
//!
//! Business effects are rows in an `effects` table written through the
//! handler's transaction, so "processed once" is checked in the database,
//! not in memory.

#![allow(dead_code)]

pub mod cases;
pub mod handlers;
pub mod sagas;

/// Runs one case of `B` on a runtime of its own (a multi-threaded one with
/// two workers, as `#[tokio::test(flavor = "multi_thread")]` would), with
/// [`BrokerHarness::between_cases`](crate::conformance::broker::BrokerHarness::between_cases)
/// before and after it; when `B` asks for it, holding [`ONE_AT_A_TIME`]
/// around all of that, the runtime's shutdown included.
pub fn run<B: crate::conformance::broker::BrokerHarness>(
    case: impl std::future::Future<Output = ()>,
) {
    let _turn = B::ONE_AT_A_TIME.then(|| {
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    B::between_cases();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(case);
    drop(runtime);
    B::between_cases();
}

/// Held by each case of a broker whose cases run one at a time (RabbitMQ
/// quorum queues: see `AmqpBroker::between_cases`).
pub static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Declares one `#[tokio::test]` per case of [`cases`] on `$broker`.
#[macro_export]
macro_rules! declare {
    ($broker:ty) => {
        $crate::declare!(@cases $broker;
            duplicate_delivery_writes_once,
            poison_pill_is_dead_lettered_on_the_first_attempt_with_context,
            transient_failures_retry_with_growing_delays_then_succeed,
            exhaustion_dead_letters_after_exactly_max_attempts,
            an_attempt_header_past_the_policy_does_not_skip_the_retries,
            a_downstream_outage_opens_the_circuit_and_dead_letters_nothing,
            a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order,
            terminal_errors_and_panics_are_dead_lettered_without_retry,
            per_key_order_is_kept_while_keys_run_in_parallel,
            handler_span_continues_the_producers_trace,
            crash_between_commit_and_ack_redelivers_without_a_second_effect,
            shutdown_finishes_running_work_releases_the_rest_and_loses_nothing,
            bad_input_is_dead_lettered_with_a_reason_and_the_consumer_goes_on,
            retries_through_the_broker_carry_the_attempt_in_a_header,
            two_handlers_of_one_message_each_run_once,
            a_dead_letter_publish_failure_is_retried_and_nothing_is_lost,
            retention_shorter_than_the_retry_window_is_refused,
            purge_deletes_old_rows_in_bounded_batches,
            a_dead_letter_refused_for_its_size_goes_without_its_payload_and_the_key_moves_on,
            a_dead_letter_refused_for_good_is_kept_in_the_dead_letter_table,
            a_retry_copy_refused_for_good_is_retried_in_place,
            a_message_without_an_id_keeps_it_through_a_retry_copy_and_a_crash_before_the_ack,
            per_key_order_holds_across_event_types_under_parallelism,
            an_unknown_event_type_is_dead_lettered_with_the_types_the_router_handles,
            an_unknown_event_type_is_acked_and_counted_when_the_router_ignores_them,
            one_handlers_failure_leaves_another_types_dedup_and_order_intact,
            the_host_stops_every_part_with_work_in_flight_and_loses_nothing,
            a_batch_claims_each_key_once_and_acks_its_duplicates,
            a_failing_message_in_a_batch_is_isolated_and_the_others_commit_once,
            an_unattributed_batch_failure_is_narrowed_to_its_message_and_classified,
            a_batch_runs_in_one_span_linked_to_each_messages_span,
            keys_stay_in_order_within_and_across_batches,
            a_crash_after_a_batch_commits_redelivers_without_a_second_effect,
        );
        $crate::declare!(@sagas $broker;
            the_saga_shop_completes_times_out_compensates_and_dead_letters_a_failed_compensation,
            a_saga_crash_between_commit_and_ack_leaves_one_transition_per_message,
            two_instances_on_one_saga_one_wins_and_the_other_applies_on_top,
            a_timeout_after_completion_or_replaced_does_nothing,
            replaying_a_sagas_whole_input_leaves_the_same_state_and_outbox,
            an_event_before_its_saga_starts_follows_its_not_found_policy,
        );
    };
    (@sagas $broker:ty; $($case:ident),* $(,)?) => {
        mod sagas {
            $(
                #[test]
                fn $case() {
                    $crate::suite::run::<$broker>($crate::suite::sagas::$case::<$broker>());
                }
            )*
        }
    };
    (@cases $broker:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::suite::run::<$broker>($crate::suite::cases::$case::<$broker>());
            }
        )*
    };
}
