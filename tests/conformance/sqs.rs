//! The conformance suite's broker on SQS: moto's server (`SQS_ENDPOINT`,
//! else `AWS_ENDPOINT_URL_SQS`, else http://127.0.0.1:4566, where
//! `scripts/services sqs` starts it), FIFO queues (`FIFO = true`) or
//! standard ones. Every harness works under a queue-name prefix of its own.
//!
//! What moto cannot do comes from [`FaultyApi`], a wrapper around the real
//! client: throttling, partial batch failures, network errors on deletes and
//! visibility changes, a receive whose answer is lost, and a retry (a
//! visibility change) refused for good. A dead-letter queue refused for good
//! is real: the harness deletes it. A dead-letter size limit is the source's
//! `with_max_message_bytes`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::Message;
use consumer::error::BrokerErrorKind;
use consumer::sqs::client::{
    ApiError, ApiFuture, AwsSqs, BatchOutcome, EntryFailure, ReceiptEntry, ReceiveRequest,
    ReceivedMessage, SendEntry, SqsApi, VisibilityEntry,
};
use consumer::sqs::{SqsClient, SqsPublisher, SqsSource, SqsStats, Topology};
use consumer::testing::{Faults, FaultyPublisher};

use super::broker::{BrokerHarness, SettleSettingsByTopic};

/// The SQS endpoint the tests use.
pub fn endpoint() -> String {
    std::env::var("SQS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_SQS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// Fails with a sentence naming moto when nothing answers at the endpoint.
pub fn check_up() {
    let ep = endpoint();
    let hostport = ep
        .split("://")
        .nth(1)
        .unwrap_or(&ep)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
        .map(Iterator::collect)
        .unwrap_or_default();
    let up = addrs
        .iter()
        .any(|a| std::net::TcpStream::connect_timeout(a, Duration::from_secs(2)).is_ok());
    assert!(
        up,
        "no SQS emulator answers at {ep}: run `scripts/services sqs` (it starts moto's server there) or set SQS_ENDPOINT to a running SQS"
    );
}

/// A fresh queue-name prefix (short: names stop at 80 characters).
pub fn unique_prefix(tag: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("ct-{tag}-{}", &id[..12])
}

/// Faults moto cannot produce, armed by the tests; see the module docs.
#[derive(Debug, Default)]
pub struct FaultPlan {
    /// Receives that fail as throttled, without reaching SQS.
    pub throttle_receives: AtomicU32,
    /// Receives that reach SQS (messages taken) and whose answer is lost.
    /// A later receive with the lost one's `ReceiveRequestAttemptId` gets
    /// the same messages and receipt handles, as from AWS during their
    /// visibility timeout (moto ignores the id, and after the timeout it
    /// may hand a FIFO group's messages back out of order).
    pub lose_receive_answers: AtomicU32,
    /// The answer lost last, by the attempt id of its receive.
    lost_answer: Mutex<Option<(String, Vec<ReceivedMessage>)>>,
    /// Delete calls whose first entry fails with SQS's `InternalError`.
    pub partial_deletes: AtomicU32,
    /// Delete calls that fail on the network without reaching SQS.
    pub failed_deletes: AtomicU32,
    /// Visibility-change calls that fail on the network.
    pub failed_visibility_changes: AtomicU32,
    /// Visibility changes shorter than this many seconds, and longer than
    /// zero (a retry's delay), refused for good with this kind.
    pub refuse_retries: Mutex<Option<(i32, BrokerErrorKind)>>,
    /// The `ReceiveRequestAttemptId` of every receive, in order.
    pub attempt_ids: Mutex<Vec<Option<String>>>,
    /// Every delete entry sent to SQS, by receipt handle.
    pub deleted: Mutex<Vec<String>>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn network(what: &str) -> ApiError {
    ApiError::new(
        BrokerErrorKind::Unavailable,
        format!("{what}: connection reset (injected)"),
    )
}

/// The real client with the faults of a [`FaultPlan`].
pub struct FaultyApi {
    inner: Arc<dyn SqsApi>,
    pub plan: Arc<FaultPlan>,
}

impl FaultyApi {
    pub fn new(inner: Arc<dyn SqsApi>) -> Self {
        Self {
            inner,
            plan: Arc::default(),
        }
    }
}

impl SqsApi for FaultyApi {
    fn receive<'a>(&'a self, r: ReceiveRequest<'a>) -> ApiFuture<'a, Vec<ReceivedMessage>> {
        Box::pin(async move {
            self.plan
                .attempt_ids
                .lock()
                .expect("ids")
                .push(r.attempt_id.map(str::to_owned));
            if take(&self.plan.throttle_receives) {
                return Err(ApiError::service(
                    "ThrottlingException",
                    "Rate exceeded (injected)",
                ));
            }
            if let Some(id) = r.attempt_id {
                let mut lost = self.plan.lost_answer.lock().expect("lost");
                if lost.as_ref().is_some_and(|(lost_id, _)| lost_id == id) {
                    return Ok(lost.take().map(|(_, got)| got).unwrap_or_default());
                }
            }
            let attempt_id = r.attempt_id.map(str::to_owned);
            let got = self.inner.receive(r).await?;
            if !got.is_empty() && take(&self.plan.lose_receive_answers) {
                if let Some(id) = attempt_id {
                    *self.plan.lost_answer.lock().expect("lost") = Some((id, got));
                }
                return Err(network("ReceiveMessage"));
            }
            Ok(got)
        })
    }

    fn delete_batch<'a>(
        &'a self,
        url: &'a str,
        mut entries: Vec<ReceiptEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        Box::pin(async move {
            if take(&self.plan.failed_deletes) {
                return Err(network("DeleteMessageBatch"));
            }
            let mut failed = Vec::new();
            if take(&self.plan.partial_deletes) && !entries.is_empty() {
                let first = entries.remove(0);
                failed.push(EntryFailure {
                    id: first.id,
                    code: "InternalError".into(),
                    message: "injected".into(),
                    sender_fault: false,
                });
            }
            self.plan
                .deleted
                .lock()
                .expect("deleted")
                .extend(entries.iter().map(|e| e.receipt_handle.clone()));
            let mut outcome = if entries.is_empty() {
                BatchOutcome::default()
            } else {
                self.inner.delete_batch(url, entries).await?
            };
            outcome.failed.extend(failed);
            Ok(outcome)
        })
    }

    fn change_visibility_batch<'a>(
        &'a self,
        url: &'a str,
        entries: Vec<VisibilityEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        Box::pin(async move {
            if take(&self.plan.failed_visibility_changes) {
                return Err(network("ChangeMessageVisibilityBatch"));
            }
            let refuse = *self.plan.refuse_retries.lock().expect("refuse");
            let (refused, passed): (Vec<_>, Vec<_>) = entries
                .into_iter()
                .partition(|e| refuse.is_some_and(|(below, _)| e.seconds > 0 && e.seconds < below));
            let mut outcome = if passed.is_empty() {
                BatchOutcome::default()
            } else {
                self.inner.change_visibility_batch(url, passed).await?
            };
            outcome
                .failed
                .extend(refused.into_iter().map(|e| EntryFailure {
                    id: e.id,
                    code: "AccessDenied".into(),
                    message: "retries refused (injected)".into(),
                    sender_fault: true,
                }));
            Ok(outcome)
        })
    }

    fn send_batch<'a>(
        &'a self,
        url: &'a str,
        entries: Vec<SendEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        self.inner.send_batch(url, entries)
    }

    fn queue_url<'a>(&'a self, name: &'a str) -> ApiFuture<'a, String> {
        self.inner.queue_url(name)
    }

    fn queue_attributes<'a>(&'a self, url: &'a str) -> ApiFuture<'a, HashMap<String, String>> {
        self.inner.queue_attributes(url)
    }

    fn create_queue<'a>(
        &'a self,
        name: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, String> {
        self.inner.create_queue(name, attributes)
    }

    fn set_queue_attributes<'a>(
        &'a self,
        url: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, ()> {
        self.inner.set_queue_attributes(url, attributes)
    }

    fn purge_queue<'a>(&'a self, url: &'a str) -> ApiFuture<'a, ()> {
        self.inner.purge_queue(url)
    }

    fn delete_queue<'a>(&'a self, url: &'a str) -> ApiFuture<'a, ()> {
        self.inner.delete_queue(url)
    }
}

/// The plain client on the test endpoint.
pub fn real_api() -> Arc<dyn SqsApi> {
    check_up();
    Arc::new(AwsSqs::local(endpoint()))
}

/// The counts SQS gives of a queue: visible, in flight, delayed.
pub async fn counts(api: &dyn SqsApi, url: &str) -> (u64, u64, u64) {
    let a = api.queue_attributes(url).await.unwrap_or_default();
    let n = |k: &str| a.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    (
        n("ApproximateNumberOfMessages"),
        n("ApproximateNumberOfMessagesNotVisible"),
        n("ApproximateNumberOfMessagesDelayed"),
    )
}

/// Every message of the queue at `url`, read and put back (visibility 0),
/// oldest first.
pub async fn read_in_place(api: &dyn SqsApi, url: &str) -> Vec<ReceivedMessage> {
    let mut all = Vec::new();
    loop {
        let got = api
            .receive(ReceiveRequest {
                queue_url: url,
                max: 10,
                wait_seconds: 0,
                visibility_seconds: 30,
                attempt_id: None,
            })
            .await
            .expect("read the queue");
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    for chunk in all.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, m)| VisibilityEntry {
                id: i.to_string(),
                receipt_handle: m.receipt_handle.clone(),
                seconds: 0,
            })
            .collect();
        let _ = api.change_visibility_batch(url, entries).await;
    }
    let sent = |m: &ReceivedMessage| {
        m.system
            .get("SentTimestamp")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    all.sort_by_key(sent);
    all
}

/// SQS as a `BrokerHarness`, on FIFO queues (`FIFO = true`) or standard ones.
#[derive(Clone)]
pub struct SqsBroker<const FIFO: bool = true> {
    prefix: String,
    api: Arc<FaultyApi>,
    publisher: FaultyPublisher<SqsPublisher>,
    faults: Faults,
    stats: Arc<Mutex<HashMap<String, SqsStats>>>,
    urls: Arc<Mutex<HashMap<String, (String, String)>>>,
    settle: SettleSettingsByTopic,
}

/// The suite's broker on standard queues.
pub type SqsStandardBroker = SqsBroker<false>;

impl<const FIFO: bool> SqsBroker<FIFO> {
    /// The queue of `topic`.
    pub fn queue(&self, topic: &str) -> String {
        let name = format!("{}-{topic}", self.prefix);
        if FIFO { format!("{name}.fifo") } else { name }
    }

    /// The topology of `topic`: a redrive policy counting up to SQS's most
    /// receives, so that no handler of the suite is refused.
    pub fn topology(&self, topic: &str) -> Topology {
        Topology::new(self.queue(topic))
            .expect("a valid test queue name")
            .with_max_receive_count(1000)
    }

    /// The client with this harness's faults.
    pub fn client(&self) -> SqsClient {
        SqsClient::from_api(Arc::clone(&self.api) as Arc<dyn SqsApi>)
    }

    /// The faults moto cannot produce.
    pub fn plan(&self) -> &FaultPlan {
        &self.api.plan
    }

    /// The URLs of `topic`'s queue and dead-letter queue (declaring them).
    pub async fn urls(&self, topic: &str) -> (String, String) {
        if let Some(urls) = self.urls.lock().expect("urls").get(topic) {
            return urls.clone();
        }
        let urls = self
            .topology(topic)
            .declare(&self.client())
            .await
            .unwrap_or_else(|e| panic!("declaring the queues of {topic}: {e}"));
        self.urls
            .lock()
            .expect("urls")
            .insert(topic.to_owned(), urls.clone());
        urls
    }

    /// A source with the harness's test settings: short long polls and
    /// visibility, so a stop or a restart hides nothing for long.
    pub fn builder(&self, topic: &str) -> consumer::sqs::SqsSourceBuilder {
        SqsSource::builder(self.client(), self.topology(topic))
            .with_wait_time(Duration::from_secs(1))
            .with_visibility_timeout(Duration::from_secs(6))
    }

    async fn unsettled(&self, topic: &str) -> u64 {
        let (url, _) = self.urls(topic).await;
        let (visible, in_flight, delayed) = counts(&*self.api, &url).await;
        visible + in_flight + delayed
    }
}

impl<const FIFO: bool> BrokerHarness for SqsBroker<FIFO> {
    type Inner = SqsSource;
    type Publisher = SqsPublisher;

    async fn new(_partitions: usize) -> Self {
        let api = Arc::new(FaultyApi::new(real_api()));
        let faults = Faults::new();
        let client = SqsClient::from_api(Arc::clone(&api) as Arc<dyn SqsApi>);
        let publisher = SqsPublisher::builder(client)
            .connect()
            .await
            .expect("an SQS publisher");
        Self {
            prefix: unique_prefix(if FIFO { "f" } else { "s" }),
            publisher: FaultyPublisher::new(publisher, faults.clone()),
            api,
            faults,
            stats: Arc::default(),
            urls: Arc::default(),
            settle: SettleSettingsByTopic::default(),
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<SqsPublisher> {
        &self.publisher
    }

    async fn prepare(&self, topic: &str) {
        self.urls(topic).await;
    }

    fn publish_destination(&self, topic: &str) -> String {
        self.queue(topic)
    }

    fn destination(&self, topic: &str) -> String {
        self.queue(topic)
    }

    async fn connect(&self, topic: &str) -> Result<SqsSource, consumer::backend::Error> {
        let settings = self.settle.get(topic);
        let mut builder = self.builder(topic);
        if let Some(bytes) = settings.max_dead_letter_bytes {
            builder = builder.with_max_message_bytes(bytes);
        }
        let source = builder.connect().await?;
        self.stats
            .lock()
            .expect("stats")
            .insert(topic.to_owned(), source.stats());
        if settings.no_dead_letter_destination {
            let (_, dlq) = self.urls(topic).await;
            let _ = self.api.delete_queue(&dlq).await;
        }
        if settings.no_retry_destination {
            *self.api.plan.refuse_retries.lock().expect("refuse") =
                Some((6, BrokerErrorKind::NotAuthorized));
        }
        Ok(source)
    }

    /// SQS has no "drained" event: this polls its counts of the queue and
    /// the newest source's unsettled count until all are zero on three
    /// readings in a row.
    async fn wait_drained(&self, topic: &str) {
        let mut zero_readings = 0;
        while zero_readings < 3 {
            let held = self
                .stats
                .lock()
                .expect("stats")
                .get(topic)
                .map_or(0, |s| s.snapshot().in_flight);
            if held == 0 && self.unsettled(topic).await == 0 {
                zero_readings += 1;
            } else {
                zero_readings = 0;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        if self.settle.get(topic).no_dead_letter_destination {
            return Vec::new();
        }
        let (_, dlq) = self.urls(topic).await;
        read_in_place(&*self.api, &dlq)
            .await
            .into_iter()
            .map(|m| {
                let consumer::sqs::attributes::Unpacked {
                    headers, payload, ..
                } = consumer::sqs::attributes::unpack(&m.body, &m.attributes);
                Message {
                    key: m.group_id().map(str::to_owned),
                    headers,
                    payload,
                }
            })
            .collect()
    }

    async fn depth(&self, topic: &str) -> usize {
        usize::try_from(self.unsettled(topic).await).expect("fits")
    }

    fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize) {
        self.settle
            .update(topic, |s| s.max_dead_letter_bytes = Some(bytes));
    }

    fn remove_dead_letter_destination(&self, topic: &str) {
        self.settle
            .update(topic, |s| s.no_dead_letter_destination = true);
    }

    fn remove_retry_destination(&self, topic: &str) {
        self.settle.update(topic, |s| s.no_retry_destination = true);
    }
}
