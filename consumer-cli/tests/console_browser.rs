//! `consumer console` in a real headless Chromium (chromedriver), against
//! real PostgreSQL (`DATABASE_URL`: letters in the store's dead-letter
//! table, sagas in its saga table) and RabbitMQ (`AMQP_URL`: replays go to
//! the work queue a real consumer of `book` reads): the groups, one letter
//! (a payload of HTML and script shown, not run), a group replayed with a
//! canary that fails and then one that passes (the journal has each letter
//! once, the canary first), a saga resumed, a held key released, a
//! handler paused and resumed (the store's pauses and the running
//! consumer's paused handlers checked), the outbox and the audit log; a
//! Kafka dead-letter topic listed, one letter shown and replayed alone, then
//! a selection (each letter once, the canary first, checked in the journal,
//! on the retry topic and in the bookings);
//! no JavaScript error on any page; a screenshot of each page under the
//! target dir's `console-screenshots/`.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::Duration;

use browser::{Browser, wait_for_line};
use consumer::envelope::{Origin, names};
use consumer::store::held::HeldKeys;
use consumer::store::paused::PausedHandlers;
use consumer::{DeadLetter, DeadLetterKind, Envelope, Headers, PgStore};
use fantoccini::Locator;
use support::kafka::KafkaTopics;
use support::sagas::make_sagas;
use support::{Booking, World};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "console-test-token-0123456789";
const GROUP_ERROR: &str = "the card processor refused";
const SCRIPT: &str =
    "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"><b>bold</b>";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

/// Stores a letter of `book` for booking `id` in the dead-letter table, as
/// the settle fallback would: from `queue`, failing with `error`.
async fn store_letter(w: &World, id: &str, payload: &[u8], error: &str) {
    let mut headers = Headers::new();
    headers.insert(names::ID, format!("m-{id}"));
    headers.insert("x-note", "<i>a header</i>");
    headers.append("x-bytes", [0xffu8, 0x00, b'<']);
    let envelope = Envelope::from_parts(
        payload.to_vec().into(),
        headers,
        Some(id.to_owned()),
        Origin {
            channel: w.queue().to_owned().into(),
            position: "1".to_owned().into(),
            ..Origin::default()
        },
        || format!("m-{id}"),
    );
    let letter = DeadLetter::new(
        DeadLetterKind::Terminal,
        &Failed(error.to_owned()),
        &envelope,
        "book",
        1,
        None,
    );
    PgStore::new(w.schema.pool.clone())
        .store_dead_letter(&letter, "refused by the test")
        .await
        .expect("a letter in the table");
}

/// The status code of a request sent to the console without a browser.
async fn status(address: &str, request: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("the console takes connections");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"))
}

async fn text(b: &Browser, css: &str) -> String {
    b.client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} on the page: {e}"))
        .text()
        .await
        .expect("its text")
}

async fn click(b: &Browser, css: &str) {
    b.client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

async fn type_into(b: &Browser, css: &str, value: &str) {
    b.client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} on the page: {e}"))
        .send_keys(value)
        .await
        .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
}

/// `f`'s output, failing the test when it takes over a minute.
async fn within_a_minute<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("within a minute")
}

/// Waits for `css` to be on the page (after a form's navigation).
async fn arrived(b: &Browser, css: &str) {
    b.client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} never appeared: {e}"));
}

async fn no_errors(b: &Browser, page: &str) {
    let errors = b.errors().await;
    assert!(
        errors.is_empty(),
        "JavaScript errors on {page}: {errors:#?}"
    );
}

/// `consumer console` on a free port of 127.0.0.1 with the test's token
/// and `extra` flags, and the address it said it listens on.
async fn start_console(w: &World, extra: &[&str]) -> (tokio::process::Child, String) {
    let mut console = w
        .cli()
        .args([
            "console",
            "--listen",
            "127.0.0.1:0",
            "--canary-timeout",
            "30s",
        ])
        .args(extra)
        .env("CONSUMER_CONSOLE_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the consumer binary runs");
    let line = wait_for_line(
        &mut console,
        "console listening on",
        "the console exited before listening (is PostgreSQL running? see its error above)",
    )
    .await;
    let base = line
        .rsplit(' ')
        .next()
        .expect("an address")
        .trim_end_matches('/')
        .to_owned();
    (console, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_shows_replays_and_resumes_in_a_real_browser() {
    let w = World::new("console").await;
    make_sagas(&w.schema.pool).await;
    for id in ["g1", "g2", "g3"] {
        let booking = serde_json::to_vec(&Booking { id: id.into() }).expect("json");
        store_letter(&w, id, &booking, GROUP_ERROR).await;
    }
    store_letter(&w, "x1", SCRIPT.as_bytes(), "<b>bad</b> input").await;

    let (mut console, base) = start_console(&w, &[]).await;
    let address = base.trim_start_matches("http://").to_owned();

    // Without the token nothing answers; an action without the form's CSRF
    // token is refused even with it.
    let get = format!("GET /dead-letters HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    assert_eq!(status(&address, &get).await, 401);
    let post = format!(
        "POST /saga/abandon HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 31\r\nConnection: close\r\n\r\ntype=order&id=o-1&reason=forged"
    );
    assert_eq!(status(&address, &post).await, 403);

    let running = w.start_consumer().await;
    let b = Browser::start().await;

    // The groups, opened with the token once.
    b.client
        .goto(&format!("{base}/?token={TOKEN}"))
        .await
        .expect("the console opens");
    arrived(&b, "table.groups").await;
    let groups = text(&b, "table.groups").await;
    assert!(groups.contains(GROUP_ERROR), "{groups}");
    assert!(groups.contains("<b>bad</b> input"), "{groups}");
    b.screenshot("dead-letters").await;
    no_errors(&b, "the groups").await;

    // One letter: its script payload and headers are text on the page.
    click(&b, "td.error a[href*='bad']").await;
    arrived(&b, "table.letters").await;
    click(&b, "table.letters td a").await;
    arrived(&b, "pre.payload").await;
    assert_eq!(text(&b, "pre.payload").await, SCRIPT);
    let headers = text(&b, "table.headers").await;
    assert!(headers.contains("<i>a header</i>"), "{headers}");
    assert!(headers.contains("ff 00 3c"), "{headers}");
    let pwned = b
        .client
        .execute("return typeof window.__pwned;", vec![])
        .await
        .expect("a script runs");
    assert_eq!(pwned, "undefined", "the letter's script ran");
    b.screenshot("letter").await;
    no_errors(&b, "the letter").await;

    // The group, with a canary that fails: g1 is broken, so it comes back
    // dead and nothing more is sent.
    w.set_broken(&["g1"], true).await;
    b.client
        .goto(&format!("{base}/dead-letters"))
        .await
        .expect("groups");
    let replay_group = format!("form:has(input[value='{GROUP_ERROR}']) button");
    click(&b, &replay_group).await;
    arrived(&b, "strong.would").await;
    assert_eq!(text(&b, "strong.would").await, "3");
    b.screenshot("replay-confirm").await;
    click(&b, "button.danger").await;
    arrived(&b, "p.error, p.done").await;
    let stopped = text(&b, "main").await;
    assert!(stopped.contains("canary failed"), "{stopped}");
    no_errors(&b, "the failed canary").await;
    assert_eq!(w.journal_rows().await, 1, "only the canary was sent");

    // Fixed, the group again: the next canary passes, then the rest.
    w.set_broken(&["g1"], false).await;
    b.client
        .goto(&format!("{base}/dead-letters"))
        .await
        .expect("groups");
    click(&b, &replay_group).await;
    arrived(&b, "strong.would").await;
    assert_eq!(text(&b, "strong.would").await, "2");
    click(&b, "button.danger").await;
    arrived(&b, "p.error, p.done").await;
    let done = text(&b, "main").await;
    assert!(done.contains("Replayed the group"), "{done}");
    b.screenshot("replay").await;
    no_errors(&b, "the replay").await;

    assert_eq!(
        journal(&w).await,
        ["m-g1", "m-g2", "m-g3"],
        "each letter once, canaries first"
    );
    support::eventually("g2 and g3 booked", || async {
        w.bookings().await == ["g2", "g3"]
    })
    .await;

    // A saga whose compensation failed, resumed after confirmation.
    b.client
        .goto(&format!("{base}/sagas?status=compensation_failed"))
        .await
        .expect("sagas");
    arrived(&b, "table.sagas").await;
    b.screenshot("sagas").await;
    click(&b, "table.sagas td a").await;
    arrived(&b, "table.compensation").await;
    b.screenshot("saga").await;
    click(&b, "form[action='/saga/resume'] button").await;
    arrived(&b, "button.danger").await;
    click(&b, "button.danger").await;
    arrived(&b, "p.done").await;
    let status = text(&b, "dd.status").await;
    assert!(status.starts_with("compensating"), "{status}");
    no_errors(&b, "the saga").await;

    // A held key (sequenced dead letters), released after confirmation:
    // no consumer of its handler runs here, so it stays released.
    let head = Envelope::from_parts(
        b"{}".to_vec().into(),
        Headers::new(),
        Some("acct-9".to_owned()),
        Origin::default(),
        || "acct-9-2".to_owned(),
    );
    PgStore::new(w.schema.pool.clone())
        .hold_key(
            "apply_entry",
            "acct-9",
            &head,
            "entry 2 of acct-9 refused",
            consumer::store::held::Holding::Dead,
        )
        .await
        .expect("a held key");
    b.client
        .goto(&format!("{base}/held-keys"))
        .await
        .expect("held keys");
    arrived(&b, "table.held").await;
    b.screenshot("held-keys").await;
    click(&b, "form[action='/held-keys/release'] button").await;
    arrived(&b, "button.danger").await;
    click(&b, "button.danger").await;
    arrived(&b, "p.done").await;
    assert_eq!(text(&b, "td.status").await, "released");
    no_errors(&b, "the held keys").await;

    // The book handler paused, then resumed, each confirmed; the store's
    // pauses (what every consumer of book reads) checked from outside.
    b.client
        .goto(&format!("{base}/circuits"))
        .await
        .expect("circuits and pauses");
    arrived(&b, "form.pause").await;
    assert!(text(&b, "p.empty").await.contains("No handler is paused"));
    type_into(&b, "form.pause input[name='handler']", "book").await;
    type_into(&b, "form.pause input[name='reason']", "card processor down").await;
    click(&b, "form.pause button").await;
    arrived(&b, "input[name='confirmed']").await;
    click(&b, "button.danger").await;
    arrived(&b, "table.paused").await;
    assert!(text(&b, "p.done").await.contains("handler book paused"));
    let paused = text(&b, "table.paused").await;
    assert!(paused.contains("card processor down"), "{paused}");
    let pauses = PgStore::new(w.schema.pool.clone())
        .paused_handlers()
        .await
        .expect("the store's pauses");
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert_eq!(pauses[0].handler, "book");
    assert_eq!(pauses[0].reason, "card processor down");
    assert!(
        pauses[0].by.starts_with("console, 127.0.0.1:"),
        "{pauses:?}"
    );
    // The running consumer of book reads the pause and stops taking it.
    within_a_minute(running.stats.wait_for(|s| s.handlers_paused == 1)).await;
    assert_eq!(running.stats.paused_handlers(), ["book"]);
    b.screenshot("circuits").await;
    click(&b, "form[action='/circuits/resume'] button").await;
    arrived(&b, "input[name='confirmed']").await;
    click(&b, "button.danger").await;
    arrived(&b, "p.empty").await;
    assert!(text(&b, "p.done").await.contains("handler book resumed"));
    let pauses = PgStore::new(w.schema.pool.clone())
        .paused_handlers()
        .await
        .expect("the store's pauses");
    assert!(pauses.is_empty(), "{pauses:?}");
    within_a_minute(running.stats.wait_for(|s| s.handlers_paused == 0)).await;
    no_errors(&b, "circuits and pauses").await;

    b.client
        .goto(&format!("{base}/outbox"))
        .await
        .expect("outbox");
    arrived(&b, "dd.pending").await;
    b.screenshot("outbox").await;
    b.client
        .goto(&format!("{base}/audit"))
        .await
        .expect("audit");
    arrived(&b, "table.audit").await;
    let audit = text(&b, "table.audit").await;
    assert!(audit.contains("saga resume"), "{audit}");
    assert!(audit.contains("held key release"), "{audit}");
    assert!(audit.contains("handler book paused"), "{audit}");
    assert!(audit.contains("handler book resumed"), "{audit}");
    assert!(audit.contains("canary failed"), "{audit}");
    assert!(audit.contains("2 sent"), "{audit}");
    b.screenshot("audit").await;
    no_errors(&b, "the outbox and audit pages").await;

    b.close().await;
    let _ = console.kill().await;
    running.stop().await;
    w.close().await;
}

/// The journal's message ids, in the order the replays sent them.
async fn journal(w: &World) -> Vec<String> {
    sqlx::query_scalar("SELECT message_id FROM consumer_replay_journal ORDER BY sent_at, letter_id")
        .fetch_all(&w.schema.pool)
        .await
        .expect("the journal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_shows_and_replays_a_kafka_dead_letter_topic_in_a_real_browser() {
    let w = World::new("console-kafka").await;
    let k = KafkaTopics::create("console").await;
    let running = k.start_consumer(&w).await;
    let ids = ["k1", "k2", "k3"];
    k.dead_letters(&w, &running, &ids, 0).await;
    w.set_broken(&ids, false).await;

    let (mut console, base) = start_console(&w, &["--topic", &k.dlt, "--to-topic", &k.retry]).await;
    let b = Browser::start().await;
    b.client
        .goto(&format!("{base}/?token={TOKEN}"))
        .await
        .expect("the console opens");
    arrived(&b, "table.groups").await;
    assert!(text(&b, "strong.place").await.contains(&k.dlt));
    // Each booking fails with its own error: a group per letter.
    let groups = text(&b, "table.groups").await;
    for id in ids {
        assert!(
            groups.contains(&format!("booking {id} is broken")),
            "{groups}"
        );
    }
    b.screenshot("kafka-dead-letters").await;

    // The handler's letters, then one letter, replayed alone: a canary of
    // one.
    b.client
        .goto(&format!("{base}/dead-letters/list?handler=book"))
        .await
        .expect("the handler's letters");
    arrived(&b, "table.letters").await;
    let rows = b
        .client
        .find_all(Locator::Css("table.letters tbody tr"))
        .await
        .expect("the letters' rows");
    assert_eq!(rows.len(), 3, "the topic's three letters");
    click(&b, "table.letters td a").await;
    arrived(&b, "pre.payload").await;
    let payload = text(&b, "pre.payload").await;
    let first = ids
        .iter()
        .find(|id| payload.contains(&format!("\"{id}\"")))
        .unwrap_or_else(|| panic!("a booking's payload: {payload}"));
    assert_eq!(text(&b, "dd.replayed").await, "no");
    let letter_page = b.client.current_url().await.expect("the letter's address");
    b.screenshot("kafka-letter").await;
    click(&b, "form[action='/dead-letters/replay'] button").await;
    arrived(&b, "strong.would").await;
    assert_eq!(text(&b, "strong.would").await, "1");
    click(&b, "button.danger").await;
    arrived(&b, "p.error, p.done").await;
    let done = text(&b, "main").await;
    assert!(done.contains("Replayed letter(s)"), "{done}");
    assert_eq!(journal(&w).await, [format!("m-{first}")]);

    // The letter stays on the topic (a log), marked replayed.
    b.client
        .goto(letter_page.as_str())
        .await
        .expect("the letter again");
    arrived(&b, "dd.replayed").await;
    assert!(text(&b, "dd.replayed").await.starts_with("yes"));

    // Every letter of the handler selected: the replayed one is skipped,
    // the other two go, the canary first.
    b.client
        .goto(&format!("{base}/dead-letters/list?handler=book"))
        .await
        .expect("the handler's letters");
    arrived(&b, "table.letters").await;
    for checkbox in b
        .client
        .find_all(Locator::Css("table.letters input[name='id']"))
        .await
        .expect("the letters' checkboxes")
    {
        checkbox.click().await.expect("a letter ticked");
    }
    click(&b, "table.letters ~ p button").await;
    arrived(&b, "strong.would").await;
    assert_eq!(text(&b, "strong.would").await, "2");
    let dry = text(&b, "table.replay").await;
    assert!(dry.contains("already sent"), "{dry}");
    click(&b, "button.danger").await;
    arrived(&b, "p.error, p.done").await;
    let done = text(&b, "main").await;
    assert!(done.contains("Replayed letter(s)"), "{done}");
    let canary = text(&b, "table.replay tr[data-outcome='sent'] td:nth-child(4)").await;
    b.screenshot("kafka-replay").await;
    no_errors(&b, "the Kafka pages").await;

    // From outside: each letter journaled and sent once, the single
    // letter first, and each booking made once.
    let sent = journal(&w).await;
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0], format!("m-{first}"), "{sent:?}");
    assert_eq!(
        sent[1], canary,
        "the selection's canary went first: {sent:?}"
    );
    let mut distinct = sent.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct, ["m-k1", "m-k2", "m-k3"], "each letter once");
    assert_eq!(
        k.records(&k.retry),
        3,
        "one copy of each letter on the retry topic"
    );
    support::eventually("three bookings", || async { w.bookings().await.len() >= 3 }).await;
    running.stop().await;
    assert_eq!(w.bookings().await, ids, "each booking once");

    b.close().await;
    let _ = console.kill().await;
    w.close().await;
}
