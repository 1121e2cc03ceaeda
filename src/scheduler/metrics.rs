//! `scheduler --metrics ADDR`: Prometheus metrics (served by `web/`). prometheus-client renders the text (OpenMetrics) from one consistent snapshot the actor
//! takes on each scrape. Metric names and labels are those of the hand-written renderer this
//! replaced (tests/scaling.rs compares them), so existing scrapers and dashboards keep working.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::core::scheduler::Scheduler;

/// Upper bounds (seconds) of the policy call latency histogram.
pub(super) const BUCKETS: [f64; 10] =
    [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

/// The policy call latency histogram the actor keeps between scrapes.
pub(super) type Histogram = prometheus_client::metrics::histogram::Histogram;

pub(super) fn policy_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Serve until the process ends.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabel {
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ManagerLabel {
    manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotsLabel {
    manager: String,
    busy: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    manager: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    environment: String,
    verdict: &'static str,
}

/// A label value as the exposition needs it: prometheus-client writes label values as they are,
/// so a manager id with a quote or a newline would break (or forge) the scrape.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A gauge's value from a count (saturating: gauges are signed).
fn value(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The Prometheus text of `/metrics`: the core's state at `now`, and the policy call latency
/// the actor keeps.
pub(super) fn render(
    core: &Scheduler,
    now: u64,
    policy_latency: &Histogram,
    replicas: &[crate::proto::ReplicaStatus],
) -> String {
    let status = core.status(now);
    let mut registry = Registry::default();

    // Scheduler replicas (none for one scheduler), as the leader sees them.
    if let Some(leader) = replicas.iter().find(|r| r.leader) {
        let term = Gauge::<i64>::default();
        term.set(value(leader.term));
        registry.register(
            "weir_replica_term",
            "The Raft term of the leading replica: it grows by one or more at each election",
            term,
        );
        let lag = Family::<ReplicaLabel, Gauge>::default();
        for replica in replicas {
            let label = ReplicaLabel {
                replica: replica.id.to_string(),
            };
            if let Some(behind) = replica.lag {
                lag.get_or_create(&label).set(value(behind));
            }
        }
        registry.register(
            "weir_replica_lag_entries",
            "Log entries each replica is behind the leader (0: caught up; a replica that is down falls behind)",
            lag,
        );
    }

    let tasks = Family::<StateLabel, Gauge>::default();
    let t = &status.tasks;
    for (state, n) in [
        ("queued", t.queued),
        ("running", t.running),
        ("succeeded", t.succeeded),
        ("failed", t.failed),
        ("canceled", t.canceled),
    ] {
        tasks.get_or_create(&StateLabel { state }).set(value(n));
    }
    registry.register("weir_tasks", "Tasks by state", tasks);
    let jobs = Counter::<u64>::default();
    jobs.inc_by(status.jobs);
    registry.register("weir_jobs", "Jobs accepted", jobs);

    let mut by_manager: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for w in &status.workers {
        let entry = by_manager
            .entry(escape(w.manager.as_deref().unwrap_or_default()))
            .or_default();
        entry.0 += 1;
        entry.1 += u64::from(w.slots);
        entry.2 += u64::from(w.running);
    }
    let workers = Family::<ManagerLabel, Gauge>::default();
    let slots = Family::<SlotsLabel, Gauge>::default();
    for (manager, (n, all, busy)) in by_manager {
        let label = |busy| SlotsLabel {
            manager: manager.clone(),
            busy,
        };
        slots.get_or_create(&label("false")).set(value(all - busy));
        slots.get_or_create(&label("true")).set(value(busy));
        workers
            .get_or_create(&ManagerLabel { manager })
            .set(value(n));
    }
    registry.register(
        "weir_workers",
        "Live workers by manager (empty: none)",
        workers,
    );
    registry.register(
        "weir_slots",
        "Task slots of live workers, busy or not",
        slots,
    );

    let manager_workers = Family::<KindLabel, Gauge>::default();
    let online = Family::<ManagerLabel, Gauge>::default();
    let fixed = Family::<ManagerLabel, Gauge>::default();
    for m in &status.managers {
        for (kind, n) in [
            ("desired", m.desired.unwrap_or(0)),
            ("live", m.live),
            ("starting", m.starting),
        ] {
            let label = KindLabel {
                manager: escape(&m.id),
                kind,
            };
            manager_workers.get_or_create(&label).set(value(n));
        }
        let manager = ManagerLabel {
            manager: escape(&m.id),
        };
        online.get_or_create(&manager).set(i64::from(m.online));
        if let Some(n) = m.fixed {
            fixed.get_or_create(&manager).set(value(n));
        }
    }
    registry.register(
        "weir_manager_workers",
        "Workers per manager",
        manager_workers,
    );
    registry.register(
        "weir_manager_online",
        "Whether a manager heartbeats",
        online,
    );
    registry.register(
        "weir_manager_fixed_workers",
        "Workers a fixed pool keeps (--fixed N)",
        fixed,
    );

    registry.register(
        "weir_policy_decide_seconds",
        "Time of one sandboxed scaling policy call",
        policy_latency.clone(),
    );
    let errors = Counter::<u64>::default();
    errors.inc_by(core.policy_errors());
    registry.register("weir_policy_errors", "Policy calls that failed", errors);

    let environments = Family::<VerdictLabel, Gauge>::default();
    for env in core.environment_report(None) {
        for (verdict, n) in [
            ("match", env.matching.len()),
            ("no_match", env.not_matching.len()),
            ("error", env.erroring.len()),
            ("pending", env.pending.len()),
        ] {
            let label = VerdictLabel {
                environment: escape(&env.name),
                verdict,
            };
            environments.get_or_create(&label).set(value(n));
        }
    }
    registry.register(
        "weir_environment_workers",
        "Workers per environment verdict",
        environments,
    );

    let mut out = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(%error, "cannot render the metrics");
    }
    out
}

/// The classic Prometheus text format (0.0.4) of an OpenMetrics exposition, for scrapers and
/// tools that do not ask for OpenMetrics (`curl`, `promtool check metrics`): a counter family's
/// HELP and TYPE name its `_total` series, and the `# UNIT` and `# EOF` lines go (the samples
/// are the same).
#[cfg(feature = "http")]
pub(super) fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = (openmetrics.lines())
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = (line.strip_prefix("# HELP ").map(|rest| ("# HELP ", rest)))
            .or_else(|| line.strip_prefix("# TYPE ").map(|rest| ("# TYPE ", rest)));
        match meta {
            Some((kind, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{kind}{name}{total} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "http")]
    fn the_classic_format_names_counters_by_their_series() {
        let open = "# HELP weir_jobs Jobs accepted.\n# TYPE weir_jobs counter\nweir_jobs_total 3\n\
                    # HELP weir_up_seconds Up.\n# TYPE weir_up_seconds gauge\n# UNIT weir_up_seconds seconds\n\
                    weir_up_seconds 9\n# EOF\n";
        assert_eq!(
            classic(open),
            "# HELP weir_jobs_total Jobs accepted.\n# TYPE weir_jobs_total counter\nweir_jobs_total 3\n\
             # HELP weir_up_seconds Up.\n# TYPE weir_up_seconds gauge\nweir_up_seconds 9\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            escape("evil\"} 1\nweir_tasks 9 \\"),
            "evil\\\"} 1\\nweir_tasks 9 \\\\"
        );
    }
}
