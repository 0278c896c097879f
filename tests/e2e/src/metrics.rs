//! Prometheus metrics of the webhook replicas and of the API server, for the
//! scenarios, the rolling-restart test and the on-cluster benchmarks: a small parser of the
//! text format, histograms that can be diffed (after − before) and summed
//! over replicas, and quantiles by linear interpolation inside a bucket (the
//! way PromQL's `histogram_quantile` does it).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use kube::Client;

use crate::webhook::{WEBHOOK_METRICS_PORT, WEBHOOK_NAMESPACE, webhook_pods};

/// Name of our webhook in the MutatingWebhookConfiguration (the API server's
/// `name` label).
pub const WEBHOOK_NAME: &str = "inject.kube-prestop.io";
/// The webhook's own admission latency histogram.
pub const WEBHOOK_DURATION: &str = "kube_prestop_admission_duration_seconds";
/// The webhook's admissions counter (`decision`, `reason`).
pub const WEBHOOK_ADMISSIONS: &str = "kube_prestop_admissions_total";
/// The API server's view of each webhook call (includes the network and TLS).
pub const APISERVER_WEBHOOK_DURATION: &str =
    "apiserver_admission_webhook_admission_duration_seconds";
/// Calls that failed and were let through (`failurePolicy: Ignore`).
pub const APISERVER_FAIL_OPEN: &str = "apiserver_admission_webhook_fail_open_count";
/// Calls that rejected the request or failed with `failurePolicy: Fail`.
pub const APISERVER_REJECTIONS: &str = "apiserver_admission_webhook_rejection_count";
/// Calls by HTTP status code (`code` 0 when no answer came).
pub const APISERVER_WEBHOOK_REQUESTS: &str = "apiserver_admission_webhook_request_total";

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the Prometheus text (or OpenMetrics) format; comments and lines it
/// cannot read are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = BTreeMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(body)?;
        labels = parsed;
        after
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `k="v",...}` and returns the labels and what follows the `}`.
fn parse_labels(body: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_owned();
        rest = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    value.push(match e {
                        'n' => '\n',
                        other => other,
                    });
                }
                '"' => break i,
                other => value.push(other),
            }
        };
        labels.insert(key, value);
        rest = &rest[end + 1..];
    }
}

/// Sum of the samples named `name` whose labels pass `filter`.
pub fn sum(
    samples: &[Sample],
    name: &str,
    filter: impl Fn(&BTreeMap<String, String>) -> bool,
) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && filter(&s.labels))
        .map(|s| s.value)
        .sum()
}

/// A cumulative histogram: `(upper bound, cumulative count)` per bucket,
/// sorted, the last one `+Inf`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

impl Histogram {
    /// The histogram `name` (its `_bucket`, `_count` and `_sum` series),
    /// summed over every series whose labels (besides `le`) pass `filter`.
    pub fn from_samples(
        samples: &[Sample],
        name: &str,
        filter: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> Self {
        let bucket_name = format!("{name}_bucket");
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == bucket_name && filter(&s.labels))
        {
            let Some(le) = s.labels.get("le") else {
                continue;
            };
            let le = match le.as_str() {
                "+Inf" => f64::INFINITY,
                v => match v.parse::<f64>() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
            };
            // Keyed by the bound's bits: positive floats sort like their bits.
            let entry = buckets.entry(le.to_bits()).or_insert((le, 0.0));
            entry.1 += s.value;
        }
        Self {
            buckets: buckets.into_values().collect(),
            count: sum(samples, &format!("{name}_count"), &filter),
            sum: sum(samples, &format!("{name}_sum"), &filter),
        }
    }

    /// Adds another histogram with the same buckets (e.g. another replica).
    pub fn add(&mut self, other: &Self) {
        if self.buckets.is_empty() {
            self.buckets = other.buckets.iter().map(|(le, _)| (*le, 0.0)).collect();
        }
        for (b, (le, c)) in self.buckets.iter_mut().zip(&other.buckets) {
            if b.0.to_bits() == le.to_bits() {
                b.1 += c;
            }
        }
        self.count += other.count;
        self.sum += other.sum;
    }

    /// `self − before`: what was observed in between.
    pub fn minus(&self, before: &Self) -> Self {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let b = before
                    .buckets
                    .iter()
                    .find(|(l, _)| l.to_bits() == le.to_bits())
                    .map_or(0.0, |(_, c)| *c);
                (*le, c - b)
            })
            .collect();
        Self {
            buckets,
            count: self.count - before.count,
            sum: self.sum - before.sum,
        }
    }

    /// The `q` quantile (0..=1), interpolated linearly inside its bucket
    /// (lower bound 0 for the first one); the highest finite bound when it
    /// falls into `+Inf`. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map(|(_, c)| *c)?;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut prev_le = 0.0;
        let mut prev_count = 0.0;
        for (le, count) in &self.buckets {
            if *count >= rank {
                if le.is_infinite() {
                    return Some(prev_le);
                }
                let in_bucket = count - prev_count;
                if in_bucket <= 0.0 {
                    return Some(*le);
                }
                return Some(prev_le + (le - prev_le) * (rank - prev_count) / in_bucket);
            }
            prev_le = *le;
            prev_count = *count;
        }
        Some(prev_le)
    }

    /// Mean of the observations (`sum / count`).
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// The metrics text of every running webhook replica, scraped through the
/// API server's pod proxy: `(pod name, samples)`.
pub async fn webhook_replica_metrics(client: &Client) -> Result<Vec<(String, Vec<Sample>)>> {
    let mut out = Vec::new();
    for pod in webhook_pods(client).await? {
        let name = pod.metadata.name.unwrap_or_default();
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{WEBHOOK_NAMESPACE}/pods/{name}:{WEBHOOK_METRICS_PORT}/proxy/metrics"
        ))
        .body(Vec::new())?;
        let text = client
            .request_text(req)
            .await
            .with_context(|| format!("metrics of webhook pod {name}"))?;
        out.push((name, parse(&text)));
    }
    Ok(out)
}

/// Sum of `kube_prestop_admissions_total` over all running webhook pods,
/// scraped through the apiserver's pod proxy
/// ([`webhook_replica_metrics`]).
pub async fn admissions_total(client: &Client) -> Result<f64> {
    Ok(webhook_replica_metrics(client)
        .await?
        .iter()
        .flat_map(|(_, samples)| samples)
        .filter(|s| s.name == WEBHOOK_ADMISSIONS)
        .map(|s| s.value)
        .sum())
}

/// The API server's own `/metrics`.
pub async fn apiserver_metrics(client: &Client) -> Result<Vec<Sample>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("the API server's /metrics")?;
    Ok(parse(&text))
}

/// Whether a sample's labels name our webhook.
pub fn is_our_webhook(labels: &BTreeMap<String, String>) -> bool {
    labels.get("name").is_some_and(|n| n == WEBHOOK_NAME)
}

/// What the API server counted about our webhook at one moment: failed calls
/// let through, rejections, calls by status code, and its latency histogram.
#[derive(Debug, Clone, Default)]
pub struct ApiserverWebhookStats {
    pub fail_open: f64,
    pub rejections: f64,
    pub calls: f64,
    pub calls_not_200: f64,
    pub duration: Histogram,
}

impl ApiserverWebhookStats {
    /// Scrapes the API server now.
    pub async fn scrape(client: &Client) -> Result<Self> {
        Ok(Self::from_samples(&apiserver_metrics(client).await?))
    }

    /// From already parsed samples.
    pub fn from_samples(samples: &[Sample]) -> Self {
        Self {
            fail_open: sum(samples, APISERVER_FAIL_OPEN, is_our_webhook),
            rejections: sum(samples, APISERVER_REJECTIONS, is_our_webhook),
            calls: sum(samples, APISERVER_WEBHOOK_REQUESTS, is_our_webhook),
            calls_not_200: sum(samples, APISERVER_WEBHOOK_REQUESTS, |l| {
                is_our_webhook(l) && l.get("code").is_none_or(|c| c != "200")
            }),
            duration: Histogram::from_samples(samples, APISERVER_WEBHOOK_DURATION, |l| {
                is_our_webhook(l) && l.get("type").is_none_or(|t| t == "admit")
            }),
        }
    }

    /// `self − before`.
    pub fn minus(&self, before: &Self) -> Self {
        Self {
            fail_open: self.fail_open - before.fail_open,
            rejections: self.rejections - before.rejections,
            calls: self.calls - before.calls,
            calls_not_200: self.calls_not_200 - before.calls_not_200,
            duration: self.duration.minus(&before.duration),
        }
    }
}

/// Quantile of sorted raw values, interpolated linearly between the two
/// nearest ranks (numpy's default; the median of an even count is the mean
/// of the middle two); `q` in 0..=1.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let pos = q.clamp(0.0, 1.0) * last as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (a, b) = (*sorted.get(lo)?, *sorted.get(hi)?);
    Some(a + (b - a) * (pos - lo as f64))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TEXT: &str = r#"# HELP x
# TYPE kube_prestop_admission_duration_seconds histogram
kube_prestop_admission_duration_seconds_sum 0.3
kube_prestop_admission_duration_seconds_count 10
kube_prestop_admission_duration_seconds_bucket{le="0.0005"} 2
kube_prestop_admission_duration_seconds_bucket{le="0.001"} 6
kube_prestop_admission_duration_seconds_bucket{le="0.0025"} 10
kube_prestop_admission_duration_seconds_bucket{le="+Inf"} 10
apiserver_admission_webhook_fail_open_count{name="inject.kube-prestop.io",type="admit"} 3
apiserver_admission_webhook_fail_open_count{name="other",type="admit"} 5
weird{a="x\"y,}z",b="2"} 7 1700000000
"#;

    #[test]
    fn parses_labels_values_and_escapes() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 9);
        let weird = s.iter().find(|s| s.name == "weird").unwrap();
        assert_eq!(weird.labels["a"], "x\"y,}z");
        assert_eq!(weird.labels["b"], "2");
        assert!((weird.value - 7.0).abs() < f64::EPSILON);
        assert!((sum(&s, APISERVER_FAIL_OPEN, is_our_webhook) - 3.0).abs() < f64::EPSILON);
    }

    #[test]
    fn histogram_quantiles_interpolate_inside_the_bucket() {
        let h = Histogram::from_samples(&parse(TEXT), WEBHOOK_DURATION, |_| true);
        assert_eq!(h.buckets.len(), 4);
        // rank 5 of 10: 3 of the 4 observations of (0.0005, 0.001].
        let p50 = h.quantile(0.5).unwrap();
        assert!((p50 - 0.000_875).abs() < 1e-9, "{p50}");
        // rank 1 of 10: half of the first bucket, lower bound 0.
        assert!((h.quantile(0.1).unwrap() - 0.000_25).abs() < 1e-9);
        let d = h.minus(&h);
        assert_eq!(d.quantile(0.5), None);
        let mut two = h.clone();
        two.add(&h);
        assert!((two.count - 20.0).abs() < f64::EPSILON);
        assert!((two.quantile(0.5).unwrap() - p50).abs() < 1e-12);
    }

    #[test]
    fn quantile_in_the_inf_bucket_is_the_highest_finite_bound() {
        let h = Histogram {
            buckets: vec![(0.1, 1.0), (f64::INFINITY, 4.0)],
            count: 4.0,
            sum: 9.0,
        };
        assert!((h.quantile(0.9).unwrap() - 0.1).abs() < f64::EPSILON);
    }

    #[test]
    fn interpolated_percentile() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert!((percentile(&v, 0.5).unwrap() - 10.5).abs() < 1e-9);
        assert!((percentile(&v, 0.9).unwrap() - 18.1).abs() < 1e-9);
        assert_eq!(percentile(&v, 1.0), Some(20.0));
        assert_eq!(percentile(&[3.0], 0.9), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
