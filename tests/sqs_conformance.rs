//! The conformance suite on SQS (needs an SQS emulator: `scripts/services
//! sqs` starts moto on 127.0.0.1:4566, `SQS_ENDPOINT` names another) with
//! the PostgreSQL store (needs PostgreSQL: `DATABASE_URL`). Every test
//! works on queues of its own.
//!
//! On FIFO queues every case runs but four, which SQS's FIFO semantics
//! answer differently: a duplicate publish within five minutes never
//! reaches the consumer (SQS's own deduplication, checked below instead),
//! and a group's later messages are not received while an earlier one is
//! in flight, so a consumer never holds a whole group at once (the two
//! shutdown cases wait for that). Those four run on standard queues, with
//! the cases that promise nothing about order.
//!
//! The saga cases run on FIFO queues but two: replaying a saga's whole
//! input publishes the same ids again (FIFO deduplication would drop them
//! before the consumer's dedup is reached), and an event that overtook its
//! saga's start is retried by visibility, which holds its FIFO group, so a
//! start behind it in that group cannot pass it (on FIFO the start must
//! come through another group or queue). Both run on standard queues.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(@cases crate::conformance::sqs::SqsBroker;
    poison_pill_is_dead_lettered_on_the_first_attempt_with_context,
    transient_failures_retry_with_growing_delays_then_succeed,
    exhaustion_dead_letters_after_exactly_max_attempts,
    terminal_errors_and_panics_are_dead_lettered_without_retry,
    per_key_order_is_kept_while_keys_run_in_parallel,
    a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order,
    handler_span_continues_the_producers_trace,
    crash_between_commit_and_ack_redelivers_without_a_second_effect,
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
    a_failing_message_in_a_batch_is_isolated_and_the_others_commit_once,
    an_unattributed_batch_failure_is_narrowed_to_its_message_and_classified,
    a_batch_runs_in_one_span_linked_to_each_messages_span,
    keys_stay_in_order_within_and_across_batches,
    a_crash_after_a_batch_commits_redelivers_without_a_second_effect,
);
crate::declare!(@sagas crate::conformance::sqs::SqsBroker;
    the_saga_shop_completes_times_out_compensates_and_dead_letters_a_failed_compensation,
    a_saga_crash_between_commit_and_ack_leaves_one_transition_per_message,
    two_instances_on_one_saga_one_wins_and_the_other_applies_on_top,
    a_timeout_after_completion_or_replaced_does_nothing,
);

mod standard {
    //! The cases that apply on standard queues: no order is promised, so
    //! only those that check no order run here.

    crate::declare!(@cases crate::conformance::sqs::SqsStandardBroker;
        duplicate_delivery_writes_once,
        a_batch_claims_each_key_once_and_acks_its_duplicates,
        poison_pill_is_dead_lettered_on_the_first_attempt_with_context,
        exhaustion_dead_letters_after_exactly_max_attempts,
        crash_between_commit_and_ack_redelivers_without_a_second_effect,
        retries_through_the_broker_carry_the_attempt_in_a_header,
    );
    crate::declare!(@sagas crate::conformance::sqs::SqsStandardBroker;
        replaying_a_sagas_whole_input_leaves_the_same_state_and_outbox,
        an_event_before_its_saga_starts_follows_its_not_found_policy,
    );
}

mod fifo {
    //! What FIFO queues add.

    use consumer::Consumer;

    use crate::conformance::broker::BrokerHarness;
    use crate::conformance::sqs::SqsBroker;
    use crate::conformance::support::{self, Harness, Job, PgHarness};
    use crate::suite::handlers;

    /// A message published twice with one id (a relay that crashed before
    /// marking it published) is stored once by SQS's deduplication within
    /// five minutes; the same business key under another id is skipped by
    /// the consumer's dedup.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_duplicate_publish_is_dropped_by_fifo_deduplication_and_dedup_skips_the_rest() {
        let h = PgHarness::new().await;
        let broker = <SqsBroker as BrokerHarness>::new(1).await;
        let job = Job::new("k1", 1);
        BrokerHarness::publish(&broker, "t", job.message())
            .await
            .expect("publish");
        BrokerHarness::duplicate_next_publishes(&broker, 1);
        BrokerHarness::publish(&broker, "t", job.message())
            .await
            .expect("publish");
        broker
            .publish("t", job.message().with_id("another-id"))
            .await
            .expect("publish");
        assert_eq!(
            BrokerHarness::depth(&broker, "t").await,
            3,
            "SQS stored the duplicated id once"
        );
        let consumer = Consumer::new(
            BrokerHarness::source(&broker, "t").await,
            h.store(),
            handlers::work,
        );
        let stats = consumer.stats();
        let drained = broker.clone();
        support::within(consumer.run_until(async move {
            BrokerHarness::wait_drained(&drained, "t").await;
        }))
        .await
        .expect("consumer");
        let s = stats.snapshot();
        assert_eq!(h.effects_of("work", &job.id).await, 1);
        assert_eq!((s.processed, s.duplicates), (1, 2), "{s:?}");
    }
}
