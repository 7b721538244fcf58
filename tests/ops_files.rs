//! The operations files (no services: files, and an in-process exporter).
//!
//! * Every metric and label the alerting rules (`ops/prometheus/alerts.yml`),
//!   their unit tests (`ops/prometheus/alerts.test.yml`) and the Grafana
//!   dashboard (`ops/grafana/consumer.json`) name is one a scrape of
//!   `GET /metrics` holds: the committed snapshot
//!   (`tests/snapshots/metrics.txt`) translated as the Prometheus exporter
//!   translates OpenTelemetry names, which a real scrape checks.
//! * Each alert waits a `for`, carries a severity and says what to do, and
//!   has a unit test where it fires and one where it does not.
//! * An alert on a quantile above a threshold reads a histogram whose
//!   buckets reach past that threshold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

const ALERTS: &str = "ops/prometheus/alerts.yml";
const ALERT_TESTS: &str = "ops/prometheus/alerts.test.yml";
const DASHBOARD: &str = "ops/grafana/consumer.json";
const SNAPSHOT: &str = "tests/snapshots/metrics.txt";

/// Labels the exporter puts on every series: the instrumentation scope.
const SCOPE_LABELS: &[&str] = &[
    "otel_scope_name",
    "otel_scope_version",
    "otel_scope_schema_url",
];
/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: &[&str] = &["job", "instance"];

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path} cannot be read: {e}"))
}

fn report(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} problem(s):\n- {}",
        problems.len(),
        problems.join("\n- ")
    );
}

// ---------------------------------------------------------------------------
// What a scrape holds, from the snapshot.

/// An OpenTelemetry name or attribute key as the exporter writes it.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The Prometheus series names of one metric, each with its label names
/// (the attributes, the scope, the target's and a histogram's `le`).
fn prometheus_series(
    name: &str,
    instrument: &str,
    unit: &str,
    attributes: &[&str],
) -> Vec<(String, BTreeSet<String>)> {
    let unit_suffix = match unit {
        "" => "",
        "s" => "_seconds",
        // Annotations such as `{message}` are not units: the exporter drops them.
        u if u.starts_with('{') && u.ends_with('}') => "",
        u => panic!(
            "{SNAPSHOT} gives {name} the unit `{u}`, whose Prometheus suffix this test does not know: add the exporter's rule for it to prometheus_series"
        ),
    };
    let base = format!("{}{unit_suffix}", sanitize(name));
    let mut labels: BTreeSet<String> = attributes.iter().map(|a| sanitize(a)).collect();
    labels.extend(
        SCOPE_LABELS
            .iter()
            .chain(TARGET_LABELS)
            .map(|l| l.to_string()),
    );
    match instrument {
        "counter" => vec![(format!("{base}_total"), labels)],
        "gauge" | "updowncounter" => vec![(base, labels)],
        "histogram" => {
            let mut buckets = labels.clone();
            buckets.insert("le".to_owned());
            vec![
                (format!("{base}_bucket"), buckets),
                (format!("{base}_sum"), labels.clone()),
                (format!("{base}_count"), labels),
            ]
        }
        other => panic!(
            "{SNAPSHOT} says {name} is a `{other}`, an instrument this test cannot name in Prometheus: add it to prometheus_series"
        ),
    }
}

/// Every series name a scrape can hold, with its label names.
struct Exposition {
    metrics: BTreeMap<String, BTreeSet<String>>,
}

impl Exposition {
    fn from_snapshot() -> Self {
        let mut metrics = BTreeMap::new();
        for line in read(SNAPSHOT).lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, instrument, unit, rest @ ..] = fields.as_slice() else {
                panic!(
                    "{SNAPSHOT} has a line that is not `name instrument unit attributes`: {line}"
                )
            };
            let attributes: Vec<&str> = rest
                .first()
                .map(|a| a.split(',').collect())
                .unwrap_or_default();
            metrics.extend(prometheus_series(name, instrument, unit, &attributes));
        }
        Self { metrics }
    }

    fn all_labels(&self) -> BTreeSet<String> {
        self.metrics.values().flatten().cloned().collect()
    }

    /// Names that look like `name` (one is the start of the other), to
    /// suggest in a failure.
    fn near(&self, name: &str) -> Vec<&str> {
        let stem = name
            .trim_end_matches("_total")
            .trim_end_matches("_bucket")
            .trim_end_matches("_seconds");
        self.metrics
            .keys()
            .filter(|m| m.starts_with(stem) || stem.starts_with(m.trim_end_matches("_total")))
            .map(String::as_str)
            .collect()
    }
}

// ---------------------------------------------------------------------------
// What a PromQL expression names.

/// Aggregation operators and functions of PromQL (3.x), and `start`/`end`
/// of the `@` modifier.
#[rustfmt::skip]
const FUNCTIONS: &[&str] = &[
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio", "abs", "absent", "absent_over_time", "ceil",
    "changes", "clamp", "clamp_max", "clamp_min", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "delta", "deriv", "double_exponential_smoothing", "exp", "floor",
    "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
    "increase", "info", "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute",
    "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector", "year",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time",
    "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time",
    "present_over_time", "mad_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos",
    "cosh", "sin", "sinh", "tan", "tanh", "deg", "pi", "rad", "start", "end",
];
/// Keywords followed by a list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other keywords: set and comparison modifiers, `offset`, number literals.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

/// The metrics and labels one expression names.
#[derive(Debug, Default)]
struct Refs {
    /// Each metric, with the labels its selector matches on.
    metrics: Vec<(String, Vec<String>)>,
    /// Labels of selectors without a metric name (`{otel_scope_name="consumer"}`).
    bare_labels: Vec<String>,
    /// Labels of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
    grouping: Vec<String>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// A tokenizer that reads only what names metrics and labels: it skips
/// strings, ranges (`[5m]`, `[$__rate_interval]`), numbers, durations,
/// Grafana variables and operators.
fn references(expr: &str) -> Result<Refs, String> {
    let s: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    let mut i = 0;
    // The metric a following `{` belongs to.
    let mut selector_of: Option<usize> = None;
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&s, i)?;
            selector_of = None;
        } else if c == '[' {
            i = s[i..]
                .iter()
                .position(|&c| c == ']')
                .map(|p| i + p + 1)
                .ok_or("a `[` is never closed")?;
            selector_of = None;
        } else if c == '{' {
            let (labels, end) = matchers(&s, i)?;
            match selector_of.take() {
                Some(m) => refs.metrics[m].1.extend(labels),
                None => refs.bare_labels.extend(labels),
            }
            i = end;
        } else if c == '$' {
            i += 1;
            if s.get(i) == Some(&'{') {
                i += s[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or("a `${` is never closed")?
                    + 1;
            } else {
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
            selector_of = None;
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                i += 1;
            }
            selector_of = None;
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let next = s[i..].iter().copied().find(|c| !c.is_whitespace());
            selector_of = None;
            if GROUPING.contains(&lower.as_str()) {
                if next == Some('(') {
                    let (labels, end) = label_list(&s, i)?;
                    refs.grouping.extend(labels);
                    i = end;
                }
            } else if !FUNCTIONS.contains(&lower.as_str()) && !KEYWORDS.contains(&lower.as_str()) {
                if next == Some('(') {
                    return Err(format!("`{word}(` is not a PromQL function"));
                }
                selector_of = Some(refs.metrics.len());
                refs.metrics.push((word, Vec::new()));
            }
        } else {
            i += 1;
            selector_of = None;
        }
    }
    Ok(refs)
}

/// The index after the string that opens at `i`.
fn skip_string(s: &[char], i: usize) -> Result<usize, String> {
    let quote = s[i];
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            '\\' if quote != '`' => j += 2,
            c if c == quote => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(format!("a string opened with {quote} is never closed"))
}

fn skip_space(s: &[char], mut i: usize) -> usize {
    while i < s.len() && s[i].is_whitespace() {
        i += 1;
    }
    i
}

fn ident_at(s: &[char], i: usize) -> Option<(String, usize)> {
    if !s.get(i).copied().is_some_and(is_ident_start) {
        return None;
    }
    let end = i + s[i..].iter().take_while(|&&c| is_ident(c)).count();
    Some((s[i..end].iter().collect(), end))
}

/// The label names of the matchers `{a="x", b=~"y"}` that open at `i`, and
/// the index after them.
fn matchers(s: &[char], i: usize) -> Result<(Vec<String>, usize), String> {
    let mut labels = Vec::new();
    let mut i = i + 1;
    loop {
        i = skip_space(s, i);
        match s.get(i) {
            Some('}') => return Ok((labels, i + 1)),
            Some(',') => {
                i += 1;
                continue;
            }
            Some(_) => {}
            None => return Err("a `{` is never closed".to_owned()),
        }
        let (label, end) =
            ident_at(s, i).ok_or_else(|| format!("expected a label name at `{}`", rest(s, i)))?;
        i = skip_space(s, end);
        let op: String = s[i..]
            .iter()
            .take_while(|c| matches!(c, '=' | '!' | '~'))
            .collect();
        if !matches!(op.as_str(), "=" | "!=" | "=~" | "!~") {
            return Err(format!(
                "expected `=`, `!=`, `=~` or `!~` after the label {label}"
            ));
        }
        i = skip_space(s, i + op.len());
        if !matches!(s.get(i), Some('"' | '\'' | '`')) {
            return Err(format!("expected a quoted value after {label}{op}"));
        }
        i = skip_string(s, i)?;
        labels.push(label);
    }
}

/// The label names of the list `(a, b)` after a grouping keyword (`i` is
/// before its `(`), and the index after it.
fn label_list(s: &[char], i: usize) -> Result<(Vec<String>, usize), String> {
    let mut i = skip_space(s, i) + 1;
    let mut labels = Vec::new();
    loop {
        i = skip_space(s, i);
        match s.get(i) {
            Some(')') => return Ok((labels, i + 1)),
            Some(',') => i += 1,
            _ => {
                let (label, end) = ident_at(s, i)
                    .ok_or_else(|| format!("expected a label name at `{}`", rest(s, i)))?;
                labels.push(label);
                i = end;
            }
        }
    }
}

fn rest(s: &[char], i: usize) -> String {
    s[i.min(s.len())..].iter().take(30).collect()
}

/// Checks that `expr` names only metrics and labels of the exposition and
/// returns the labels its result can carry (what it groups by, or else its
/// metrics' labels), for the templates that read them; `None` when a
/// mistake already reported would make every label look wrong.
fn check_expr(
    place: &str,
    expr: &str,
    exposition: &Exposition,
    problems: &mut Vec<String>,
) -> Option<BTreeSet<String>> {
    let refs = match references(expr) {
        Ok(refs) => refs,
        Err(e) => {
            problems.push(format!(
                "{place}: the expression cannot be read ({e}): {}",
                expr.trim()
            ));
            return None;
        }
    };
    if refs.metrics.is_empty() && refs.bare_labels.is_empty() {
        problems.push(format!("{place} names no metric: {expr}"));
    }
    let mut carried = BTreeSet::new();
    let mut unknown = false;
    for (metric, labels) in &refs.metrics {
        let Some(known) = exposition.metrics.get(metric) else {
            unknown = true;
            let near = exposition.near(metric);
            problems.push(format!(
                "{place} uses the metric {metric}, which the service does not expose: no entry of {SNAPSHOT} becomes {metric} under the exporter's naming{}.",
                if near.is_empty() {
                    String::new()
                } else {
                    format!(" (it does expose {})", near.join(", "))
                }
            ));
            continue;
        };
        for label in labels.iter().filter(|l| !known.contains(*l)) {
            problems.push(format!(
                "{place} selects {metric} by the label {label}, which {metric} does not carry (its labels: {}).",
                known.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        carried.extend(known.iter().cloned());
    }
    let all = exposition.all_labels();
    for label in refs.bare_labels.iter().filter(|l| !all.contains(*l)) {
        problems.push(format!(
            "{place} selects series by the label {label}, which no metric of the service carries."
        ));
    }
    if unknown {
        return None;
    }
    if refs.metrics.is_empty() {
        carried = all;
    }
    let grouping: BTreeSet<String> = refs.grouping.iter().cloned().collect();
    for label in grouping.iter().filter(|l| !carried.contains(*l)) {
        problems.push(format!(
            "{place} groups by the label {label}, which none of its metrics ({}) carries.",
            refs.metrics
                .iter()
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Some(if grouping.is_empty() {
        carried
    } else {
        grouping
    })
}

/// The names in `{{ $labels.name }}` (alert templates) or `{{name}}`
/// (Grafana legends).
fn template_labels(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(p) = rest.find("{{") {
        let Some(end) = rest[p..].find("}}") else {
            break;
        };
        let inner = rest[p + 2..p + end].trim();
        if let Some(name) = inner.strip_prefix(prefix) {
            let name: String = name.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
        rest = &rest[p + end + 2..];
    }
    out
}

// ---------------------------------------------------------------------------
// The files.

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
struct RuleGroup {
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    wait: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Rule {
    fn name(&self) -> &str {
        self.alert
            .as_deref()
            .or(self.record.as_deref())
            .unwrap_or("(unnamed)")
    }
}

fn rules() -> Vec<Rule> {
    let file: RuleFile = serde_norway::from_str(&read(ALERTS))
        .unwrap_or_else(|e| panic!("{ALERTS} is not a Prometheus rule file: {e}"));
    file.groups.into_iter().flat_map(|g| g.rules).collect()
}

#[derive(Deserialize)]
struct TestFile {
    tests: Vec<TestGroup>,
}

#[derive(Deserialize)]
struct TestGroup {
    #[serde(default)]
    input_series: Vec<InputSeries>,
    #[serde(default)]
    alert_rule_test: Vec<AlertTest>,
}

#[derive(Deserialize)]
struct InputSeries {
    series: String,
}

#[derive(Deserialize)]
struct AlertTest {
    alertname: String,
    #[serde(default)]
    exp_alerts: Vec<serde_norway::Value>,
}

#[test]
fn the_alerts_name_only_metrics_and_labels_the_service_exposes() {
    let exposition = Exposition::from_snapshot();
    let mut problems = Vec::new();
    for rule in rules() {
        let place = format!("{ALERTS}, rule {}", rule.name());
        let Some(carried) = check_expr(&place, &rule.expr, &exposition, &mut problems) else {
            continue;
        };
        for (key, text) in &rule.annotations {
            for label in template_labels(text, "$labels.") {
                if !carried.contains(&label) {
                    problems.push(format!(
                        "{place}: its {key} reads $labels.{label}, which the alert does not carry (it carries: {}).",
                        carried.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    report(&problems);
}

#[test]
fn every_alert_waits_has_a_severity_and_says_what_to_do() {
    let mut problems = Vec::new();
    for rule in rules().iter().filter(|r| r.alert.is_some()) {
        let place = format!("{ALERTS}, alert {}", rule.name());
        if rule.wait.is_none() {
            problems.push(format!(
                "{place} has no `for:` (write `for: 0m` to fire at once)."
            ));
        }
        match rule.labels.get("severity").map(String::as_str) {
            Some("warning" | "critical") => {}
            other => problems.push(format!(
                "{place} has the severity {other:?}: give it the label severity: warning or critical."
            )),
        }
        for key in ["summary", "description"] {
            if rule
                .annotations
                .get(key)
                .is_none_or(|t| t.trim().is_empty())
            {
                problems.push(format!("{place} has no {key} annotation."));
            }
        }
    }
    report(&problems);
}

#[test]
fn every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() {
    let exposition = Exposition::from_snapshot();
    let tests: TestFile = serde_norway::from_str(&read(ALERT_TESTS))
        .unwrap_or_else(|e| panic!("{ALERT_TESTS} is not a promtool test file: {e}"));
    let mut problems = Vec::new();
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (n, group) in tests.tests.iter().enumerate() {
        for (k, series) in group.input_series.iter().enumerate() {
            let place = format!("{ALERT_TESTS}, test {}, input series {}", n + 1, k + 1);
            check_expr(&place, &series.series, &exposition, &mut problems);
        }
        for case in &group.alert_rule_test {
            let (firing, quiet) = cases.entry(case.alertname.clone()).or_default();
            if case.exp_alerts.is_empty() {
                *quiet += 1;
            } else {
                *firing += 1;
            }
        }
    }
    let alerts: BTreeSet<String> = rules().into_iter().filter_map(|r| r.alert).collect();
    for alert in &alerts {
        let (firing, quiet) = cases.get(alert).copied().unwrap_or_default();
        if firing == 0 {
            problems.push(format!(
                "{ALERT_TESTS} has no case where the alert {alert} of {ALERTS} fires."
            ));
        }
        if quiet == 0 {
            problems.push(format!(
                "{ALERT_TESTS} has no case where the alert {alert} of {ALERTS} stays quiet (exp_alerts: [])."
            ));
        }
    }
    for alert in cases.keys().filter(|a| !alerts.contains(*a)) {
        problems.push(format!(
            "{ALERT_TESTS} tests the alert {alert}, which {ALERTS} does not define."
        ));
    }
    report(&problems);
}

#[test]
fn a_quantile_alert_reads_buckets_that_reach_past_its_threshold() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for rule in rules()
        .iter()
        .filter(|r| r.expr.contains("histogram_quantile"))
    {
        let place = format!("{ALERTS}, rule {}", rule.name());
        let Some(threshold) = rule
            .expr
            .rsplit_once('>')
            .and_then(|(_, t)| t.trim().parse::<f64>().ok())
        else {
            problems.push(format!(
                "{place} takes a quantile but does not end in `> threshold`, which this test reads."
            ));
            continue;
        };
        let Ok(refs) = references(&rule.expr) else {
            continue;
        };
        for (metric, _) in refs.metrics.iter().filter(|(m, _)| m.ends_with("_bucket")) {
            let spec = every_spec().find(|s| {
                prometheus_series(s.name, &s.instrument.to_string(), s.unit, s.attributes)
                    .iter()
                    .any(|(name, _)| name == metric)
            });
            let Some(spec) = spec else { continue };
            checked += 1;
            let highest = spec.boundaries.iter().copied().fold(f64::NAN, f64::max);
            if highest.is_nan() || highest <= threshold {
                problems.push(format!(
                    "{place} fires when a quantile of {metric} passes {threshold}, but the highest bucket boundary of {} is {highest}: histogram_quantile never reads more than that, so the alert cannot fire.",
                    spec.name
                ));
            }
        }
    }
    assert!(
        checked > 0 || !problems.is_empty(),
        "{ALERTS} has no quantile alert on a catalogued histogram: the p99 alert is expected there."
    );
    report(&problems);
}

/// Every panel, rows' panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    let mut stack: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    while let Some(panel) = stack.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            stack.extend(inner);
        }
        out.push(panel);
    }
    out
}

/// A Grafana variable query: `label_values(selector, label)`,
/// `label_values(label)`, `query_result(expr)` or an expression.
fn check_variable_query(
    place: &str,
    query: &str,
    exposition: &Exposition,
    problems: &mut Vec<String>,
) {
    let query = query.trim();
    if let Some(inner) = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        let (selector, label) = inner.rsplit_once(',').unwrap_or(("", inner));
        let label = label.trim();
        let carried = if selector.trim().is_empty() {
            Some(exposition.all_labels())
        } else {
            check_expr(place, selector, exposition, problems)
        };
        if carried.is_some_and(|c| !c.contains(label)) {
            problems.push(format!(
                "{place} lists the values of the label {label}, which its series do not carry."
            ));
        }
    } else if let Some(inner) = query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))
    {
        check_expr(place, inner, exposition, problems);
    } else {
        check_expr(place, query, exposition, problems);
    }
}

#[test]
fn the_dashboard_names_only_metrics_and_labels_the_service_exposes() {
    let exposition = Exposition::from_snapshot();
    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let mut problems = Vec::new();
    if dashboard["schemaVersion"].as_u64().is_none() {
        problems.push(format!("{DASHBOARD} has no schemaVersion."));
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !variables.iter().any(|v| {
        v["type"] == "datasource" && v["name"] == "datasource" && v["query"] == "prometheus"
    }) {
        problems.push(format!(
            "{DASHBOARD} has no Prometheus data source variable named datasource, which its panels select."
        ));
    }
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let place = format!("{DASHBOARD}, variable {}", variable["name"]);
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str());
        match query {
            Some(q) => check_variable_query(&place, q, &exposition, &mut problems),
            None => problems.push(format!("{place} has no query.")),
        }
    }
    let mut queries = 0;
    for panel in panels(&dashboard)
        .into_iter()
        .filter(|p| p["type"] != "row")
    {
        let place = format!("{DASHBOARD}, panel {}", panel["title"]);
        if panel["datasource"]["uid"] != "${datasource}" {
            problems.push(format!(
                "{place} does not read the data source variable (datasource uid \"${{datasource}}\")."
            ));
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                problems.push(format!("{place} has a query with no PromQL expr."));
                continue;
            };
            queries += 1;
            let Some(carried) = check_expr(&place, expr, &exposition, &mut problems) else {
                continue;
            };
            let legend = target["legendFormat"].as_str().unwrap_or_default();
            for label in template_labels(legend, "") {
                if !carried.contains(&label) {
                    problems.push(format!(
                        "{place}: its legend reads {{{{{label}}}}}, which the query's series do not carry."
                    ));
                }
            }
        }
    }
    if queries == 0 {
        problems.push(format!("{DASHBOARD} has no panel with a query."));
    }
    report(&problems);
}

#[test]
fn the_tokenizer_finds_metrics_and_labels_and_skips_the_rest() {
    let refs = references(
        r#"histogram_quantile(0.99, sum by (le, job) (rate(a_seconds_bucket{job=~"$job", x!="y"}[$__rate_interval])))
           > 30 and on (job) b_total offset 10m unless {otel_scope_name="consumer"} or label_replace(c, "d", "e", "f", "")"#,
    )
    .expect("the expression reads");
    assert_eq!(
        refs.metrics,
        [
            (
                "a_seconds_bucket".to_owned(),
                vec!["job".to_owned(), "x".to_owned()]
            ),
            ("b_total".to_owned(), vec![]),
            ("c".to_owned(), vec![]),
        ]
    );
    assert_eq!(refs.grouping, ["le", "job", "job"]);
    assert_eq!(refs.bare_labels, ["otel_scope_name"]);
    assert!(
        references("sum(rat(a[5m]))").is_err(),
        "an unknown function is an error"
    );
    assert!(
        references(r#"a{b="c""#).is_err(),
        "an unclosed selector is an error"
    );
}

/// The naming rules above are the exporter's: a scrape of every catalogued
/// metric, each with all its attributes, holds exactly the series names and
/// labels they derive from the snapshot (less `job` and `instance`, which
/// Prometheus adds).
#[cfg(feature = "prometheus")]
#[test]
fn the_naming_rules_are_the_exporters() {
    use consumer::metrics::Instrument;
    use opentelemetry::KeyValue;

    let metrics =
        consumer::service::PrometheusMetrics::new("ops-files").expect("the exporter starts");
    let meter = metrics.meter();
    for spec in every_spec() {
        let attrs: Vec<KeyValue> = spec
            .attributes
            .iter()
            .map(|k| KeyValue::new(*k, "x"))
            .collect();
        match spec.instrument {
            Instrument::Counter => meter
                .u64_counter(spec.name)
                .with_unit(spec.unit)
                .build()
                .add(1, &attrs),
            Instrument::UpDownCounter => meter
                .i64_up_down_counter(spec.name)
                .with_unit(spec.unit)
                .build()
                .add(1, &attrs),
            Instrument::Gauge => meter
                .f64_gauge(spec.name)
                .with_unit(spec.unit)
                .build()
                .record(1.0, &attrs),
            Instrument::Histogram => meter
                .f64_histogram(spec.name)
                .with_unit(spec.unit)
                .with_boundaries(spec.boundaries.to_vec())
                .build()
                .record(1.0, &attrs),
        }
    }
    let body = metrics.scrape().expect("a scrape");

    let mut scraped: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if name == "target_info" {
            continue;
        }
        let labels = scraped.entry(name.to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let s: Vec<char> = line[name_end..].chars().collect();
            let (names, _) = matchers(&s, 0).unwrap_or_else(|e| {
                panic!("the scrape has a line this test cannot read ({e}): {line}")
            });
            labels.extend(names);
        }
    }
    let expected: BTreeMap<String, BTreeSet<String>> = Exposition::from_snapshot()
        .metrics
        .into_iter()
        .map(|(name, mut labels)| {
            for l in TARGET_LABELS {
                labels.remove(*l);
            }
            (name, labels)
        })
        .collect();
    let mut problems = Vec::new();
    for (name, labels) in &scraped {
        match expected.get(name) {
            None => problems.push(format!(
                "the exporter names a series {name}, which the rules of this test do not derive from {SNAPSHOT}."
            )),
            Some(want) if want != labels => problems.push(format!(
                "the exporter labels {name} with {labels:?}, where the rules of this test derive {want:?} from {SNAPSHOT}."
            )),
            Some(_) => {}
        }
    }
    for name in expected.keys().filter(|n| !scraped.contains_key(*n)) {
        problems.push(format!(
            "the rules of this test derive {name} from {SNAPSHOT}, which the exporter does not name so (or the snapshot is not the catalogue: tests/metrics.rs compares them)."
        ));
    }
    report(&problems);
}

/// The runtime's metrics and those of the parts built on it (sagas).
fn every_spec() -> impl Iterator<Item = &'static consumer::metrics::MetricSpec> {
    consumer::metrics::CATALOGUE
        .iter()
        .chain(consumer::saga::metrics::CATALOGUE)
}
