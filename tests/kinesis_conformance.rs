//! The conformance suite on Kinesis (needs moto's Kinesis: `scripts/services
//! sqs` starts moto on 127.0.0.1:4566, `KINESIS_ENDPOINT` names another)
//! with the PostgreSQL store (needs PostgreSQL: `DATABASE_URL`). Every
//! test works on streams of its own, deleted afterwards.
//!
//! Every case runs but three, which retry through the broker (`mode =
//! redeliver`): Kinesis has no per-record redelivery, so a Kinesis source
//! refuses such a handler at start (checked below instead), and retries
//! happen in place, the shard's checkpoint staying below the record:
//! `retries_through_the_broker_carry_the_attempt_in_a_header`,
//! `a_retry_copy_refused_for_good_is_retried_in_place` and
//! `a_message_without_an_id_keeps_it_through_a_retry_copy_and_a_crash_before_the_ack`.
//! The saga cases do not run either: the suite's saga waits for a start
//! that has not come yet by retrying through the broker
//! (`NotFound::Retry` in mode redeliver), which a Kinesis source refuses.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(@cases crate::conformance::kinesis::KinesisBroker;
    duplicate_delivery_writes_once,
    poison_pill_is_dead_lettered_on_the_first_attempt_with_context,
    transient_failures_retry_with_growing_delays_then_succeed,
    exhaustion_dead_letters_after_exactly_max_attempts,
    an_attempt_header_past_the_policy_does_not_skip_the_retries,
    a_downstream_outage_opens_the_circuit_and_dead_letters_nothing,
    terminal_errors_and_panics_are_dead_lettered_without_retry,
    per_key_order_is_kept_while_keys_run_in_parallel,
    a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order,
    handler_span_continues_the_producers_trace,
    crash_between_commit_and_ack_redelivers_without_a_second_effect,
    shutdown_finishes_running_work_releases_the_rest_and_loses_nothing,
    bad_input_is_dead_lettered_with_a_reason_and_the_consumer_goes_on,
    two_handlers_of_one_message_each_run_once,
    a_dead_letter_publish_failure_is_retried_and_nothing_is_lost,
    retention_shorter_than_the_retry_window_is_refused,
    purge_deletes_old_rows_in_bounded_batches,
    a_dead_letter_refused_for_its_size_goes_without_its_payload_and_the_key_moves_on,
    a_dead_letter_refused_for_good_is_kept_in_the_dead_letter_table,
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
mod redeliver {
    //! What Kinesis does with a handler that retries through the broker.

    use consumer::Consumer;

    use crate::conformance::broker::BrokerHarness;
    use crate::conformance::kinesis::KinesisBroker;
    use crate::conformance::support::{Harness, PgHarness};
    use crate::suite::handlers;

    /// The consumer refuses to start, with a sentence that says to retry
    /// in place, before it takes a record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handler_retrying_through_the_broker_is_refused_at_start() {
        let h = PgHarness::new().await;
        let broker = <KinesisBroker as BrokerHarness>::new(1).await;
        let consumer = Consumer::new(
            BrokerHarness::source(&broker, "t").await,
            h.store(),
            handlers::work_redeliver,
        );
        let refused = consumer
            .run_until(std::future::pending::<()>())
            .await
            .expect_err("refused at start");
        let text = refused.to_string();
        assert!(text.contains("in_place"), "{text}");
    }
}
