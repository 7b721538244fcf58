//! `dead-letters list | show | export | import | purge`.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};

use consumer_core::envelope::format_time;

use crate::args::{FilterArgs, GroupBy, PlaceArgs, Services};
use crate::database;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::json::{LetterJson, ListedJson, line};
use crate::letter::{Filter, Letter};
use crate::places::{Held, Letters};
use crate::render::{Table, write};

/// What a read selected.
pub(crate) struct Selected {
    /// The letters selected, in the place's order.
    pub(crate) letters: Vec<Letter>,
    /// What the snapshot left out, as a sentence.
    pub(crate) remarks: Option<String>,
    /// Whether replayed letters stay in the place (a Kafka topic).
    pub(crate) keeps_replayed: bool,
}

/// Reads a snapshot, keeps what `filter` selects, releases the place.
pub(crate) async fn selected(
    services: &Services,
    place: &PlaceArgs,
    filter: &FilterArgs,
) -> Result<Selected> {
    let filter = Filter::from_args(filter)?;
    let mut letters = Letters::open(services, place).await?;
    let keeps_replayed = !letters.removes_letters();
    let snapshot = letters.snapshot().await;
    letters.release().await?;
    let snapshot = snapshot?;
    let remarks = snapshot.remarks();
    Ok(Selected {
        letters: snapshot
            .letters
            .into_iter()
            .map(|h| h.letter)
            .filter(|l| filter.matches(l))
            .collect(),
        remarks,
        keeps_replayed,
    })
}

/// The letters the replay journal says were sent; `None`, with a note, when
/// the store cannot be read (the list is still shown).
pub(crate) async fn replayed_ids(services: &Services) -> Option<HashSet<String>> {
    let read = async {
        let journal = Journal::open(database::connect(services).await?, false).await?;
        journal.sent_ids().await
    };
    match read.await {
        Ok(ids) => Some(ids),
        Err(e) => {
            eprintln!("note: which letters were already replayed is unknown: {e}");
            None
        }
    }
}

/// `list`: a table, counts per group, or JSON lines.
pub async fn list(
    services: &Services,
    place: &PlaceArgs,
    filter: &FilterArgs,
    group_by: Option<GroupBy>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Selected {
        letters,
        remarks,
        keeps_replayed,
    } = selected(services, place, filter).await?;
    if let Some(r) = &remarks {
        eprintln!("note: {r}");
    }
    if let Some(group) = group_by {
        return write_groups(out, &letters, group, json);
    }
    // On a Kafka topic a replayed letter stays: the journal says which.
    let replayed = if keeps_replayed {
        replayed_ids(services).await
    } else {
        None
    };
    if json {
        for l in &letters {
            let listed = ListedJson::of(l, false).replayed(was_replayed(replayed.as_ref(), l));
            write(out, &format!("{}\n", line(&listed)))?;
        }
        return Ok(());
    }
    let table = letters_table(&letters, keeps_replayed, replayed.as_ref());
    write(out, &table.render())?;
    write(out, &format!("{} dead letter(s)\n", letters.len()))
}

/// `list --group-by`: how many letters per kind, handler or error, the
/// largest groups first, as a table or JSON lines.
fn write_groups(out: &mut dyn Write, letters: &[Letter], group: GroupBy, json: bool) -> Result<()> {
    let (by, of): (&str, fn(&Letter) -> String) = match group {
        GroupBy::Kind => ("kind", |l| l.letter.kind.as_str().to_owned()),
        GroupBy::Handler => ("handler", |l| l.letter.handler.clone()),
        GroupBy::Error => ("error", |l| l.letter.error.clone()),
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in letters {
        *counts.entry(of(l)).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if json {
        for (name, count) in counts {
            write(
                out,
                &format!(
                    "{}\n",
                    line(&serde_json::json!({ by: name, "count": count }))
                ),
            )?;
        }
        return Ok(());
    }
    let mut table = Table::new(&["COUNT", "GROUP"]);
    for (name, count) in counts {
        table.row(vec![count.to_string(), name]);
    }
    write(out, &table.render())
}

/// Whether the journal says `letter` was replayed; `None` when it could
/// not be read (or was not, the place removing what it replays).
fn was_replayed(replayed: Option<&HashSet<String>>, letter: &Letter) -> Option<bool> {
    replayed.map(|ids| ids.contains(&letter.id))
}

/// The letters as a table; where the place keeps replayed letters, a
/// REPLAYED column says whether each was: yes, no, or `?` when the journal
/// could not be read.
fn letters_table(
    letters: &[Letter],
    keeps_replayed: bool,
    replayed: Option<&HashSet<String>>,
) -> Table {
    let mut header = vec![
        "ID",
        "HANDLER",
        "KIND",
        "ATTEMPTS",
        "LAST FAILURE",
        "KEY",
        "MESSAGE ID",
    ];
    if keeps_replayed {
        header.push("REPLAYED");
    }
    header.push("ERROR");
    let mut table = Table::new(&header);
    for l in letters {
        let dl = &l.letter;
        let mut row = vec![
            l.id.clone(),
            dl.handler.clone(),
            dl.kind.as_str().to_owned(),
            dl.attempts.to_string(),
            format_time(dl.last_failure),
            dl.key.clone().unwrap_or_default(),
            dl.message_id.clone(),
        ];
        if keeps_replayed {
            row.push(
                match was_replayed(replayed, l) {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "?",
                }
                .to_owned(),
            );
        }
        row.push(dl.error.clone());
        table.row(row);
    }
    table
}

/// `show`: every field, the payload pretty-printed when it is JSON.
pub async fn show(
    services: &Services,
    place: &PlaceArgs,
    id: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let letter = Letters::open(services, place).await?.find(id).await?;
    let text = if json {
        format!("{}\n", line(&ListedJson::of(&letter, true)))
    } else {
        describe(&letter)
    };
    out.write_all(text.as_bytes())
        .map_err(Error::io("writing the output"))
}

fn describe(letter: &Letter) -> String {
    let dl = &letter.letter;
    let mut s = String::new();
    let mut field = |name: &str, value: &str| s.push_str(&format!("{name:<15} {value}\n"));
    field("id", &letter.id);
    field("handler", &dl.handler);
    field("kind", dl.kind.as_str());
    field("error", &dl.error);
    for cause in &dl.causes {
        field("caused by", cause);
    }
    field("attempts", &dl.attempts.to_string());
    field("first failure", &format_time(dl.first_failure));
    field("last failure", &format_time(dl.last_failure));
    field("message id", &dl.message_id);
    field("key", dl.key.as_deref().unwrap_or("(none)"));
    field(
        "from",
        &format!("{} at {}", dl.origin.channel, dl.origin.position),
    );
    if let Some(refusal) = &letter.refusal {
        field("refused with", refusal);
    }
    if let Some(at) = letter.stored_at {
        field("stored at", &format_time(at));
    }
    if let Some(omitted) = &dl.payload_omitted {
        field(
            "payload",
            &format!(
                "omitted ({} bytes, sha256 {}): the whole letter is in the dead-letter table",
                omitted.size, omitted.sha256
            ),
        );
    }
    s.push_str("headers\n");
    for (name, value) in dl.original_headers.iter() {
        match std::str::from_utf8(value) {
            Ok(text) => s.push_str(&format!("  {name}: {text}\n")),
            Err(_) => s.push_str(&format!("  {name}: ({} bytes, not text)\n", value.len())),
        }
    }
    s.push_str(&format!("payload ({} bytes)\n", dl.payload.len()));
    match serde_json::from_slice::<serde_json::Value>(&dl.payload) {
        Ok(v) => {
            let pretty = serde_json::to_string_pretty(&v).unwrap_or_default();
            for l in pretty.lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
        Err(_) => s.push_str(&format!("  {}\n", String::from_utf8_lossy(&dl.payload))),
    }
    s
}

/// `export`: one JSON line per selected letter.
pub async fn export(
    services: &Services,
    place: &PlaceArgs,
    filter: &FilterArgs,
    out: &mut impl Write,
) -> Result<usize> {
    let Selected {
        letters, remarks, ..
    } = selected(services, place, filter).await?;
    if let Some(r) = &remarks {
        eprintln!("note: {r}");
    }
    for l in &letters {
        writeln!(out, "{}", line(&LetterJson::of(l))).map_err(Error::io("writing the export"))?;
    }
    out.flush().map_err(Error::io("writing the export"))?;
    Ok(letters.len())
}

/// `import`: every line must parse before the first letter is added.
pub async fn import(services: &Services, place: &PlaceArgs, input: impl BufRead) -> Result<usize> {
    let mut letters = Vec::new();
    for (i, text) in input.lines().enumerate() {
        let text = text.map_err(Error::io("reading the import"))?;
        if text.trim().is_empty() {
            continue;
        }
        let json: LetterJson = serde_json::from_str(&text).map_err(|e| Error::BadImport {
            line: i + 1,
            reason: e.to_string(),
        })?;
        letters.push(json.into_letter().map_err(|reason| Error::BadImport {
            line: i + 1,
            reason,
        })?);
    }
    let mut place = Letters::open(services, place).await?;
    let bar = crate::progress::bar(letters.len() as u64, "importing", letters.len() < 100);
    let mut result = Ok(());
    for l in &letters {
        result = place.append(l).await;
        if result.is_err() {
            break;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    place.release().await?;
    result.map(|()| letters.len())
}

/// `purge`: deletes the selected letters after a confirmation.
pub async fn purge(
    services: &Services,
    place: &PlaceArgs,
    filter: &FilterArgs,
    yes: bool,
    out: &mut impl Write,
) -> Result<usize> {
    let filter = Filter::from_args(filter)?;
    let mut letters = Letters::open(services, place).await?;
    if !letters.removes_letters() {
        return Err(Error::Usage(format!(
            "{} cannot delete single records: its retention deletes letters; purge works on the dead-letter table, RabbitMQ queues and SQS queues",
            letters.describe()
        )));
    }
    let snapshot = match letters.snapshot().await {
        Ok(s) => s,
        Err(e) => {
            letters.release().await?;
            return Err(e);
        }
    };
    let chosen: Vec<&Held> = snapshot
        .letters
        .iter()
        .filter(|h| filter.matches(&h.letter))
        .collect();
    if !yes
        && !chosen.is_empty()
        && !confirm(&format!(
            "delete {} dead letter(s) from {} for good?",
            chosen.len(),
            letters.describe()
        ))?
    {
        letters.release().await?;
        return Err(Error::Refused(
            "purge not confirmed: nothing deleted".into(),
        ));
    }
    let bar = crate::progress::bar(chosen.len() as u64, "purging", chosen.len() < 100);
    let mut result = Ok(());
    for held in &chosen {
        result = letters.remove(held).await;
        if result.is_err() {
            break;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    letters.release().await?;
    result?;
    writeln!(out, "purged {} dead letter(s)", chosen.len())
        .map_err(Error::io("writing the output"))?;
    Ok(chosen.len())
}

/// Asks on the terminal; anything but `y`/`yes` is no, and so is a closed
/// standard input.
pub fn confirm(question: &str) -> Result<bool> {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(Error::io("reading the answer"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
