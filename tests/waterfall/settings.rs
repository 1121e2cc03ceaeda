//! A row's optional settings (`min=N`, `cooldown=D`): parsed, listed with the tiers, and what
//! they change. Old content has none and decides as before (the cases in `main.rs`); the frozen
//! 0.1.0 builds do not know settings, so the cases here run the native reference against the
//! bundled 0.2.0 builds only.

use weir::core::scaling::Launch;

use super::*;

fn busy(id: u64) -> Worker {
    Worker {
        time_left_ms: None,
        id,
        slots: 1,
        busy: 1,
        idle_ms: 0,
    }
}

#[test]
fn settings_follow_the_columns_in_any_order_and_are_listed_with_the_tiers() {
    let content =
        "1, wm1, 10, min=2\n1, wm2, cooldown=90s , min=0\n2, wm3, cooldown=1500ms\n3, wm4\n";
    let policy = Policy::parse(Flavor::ManagerId, content).unwrap();
    let rules: Vec<_> = (policy.rules.iter())
        .map(|r| {
            let s = &r.settings;
            (r.member.as_str(), r.cap, s.min_workers, s.cooldown_ms)
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            ("wm1", Some(10), Some(2), None),
            ("wm2", None, Some(0), Some(90_000)),
            ("wm3", None, None, Some(1_500)),
            ("wm4", None, None, None),
        ]
    );
    let tiers = policy.tiers();
    let described: Vec<String> = tiers.iter().map(|t| t.describe_members()).collect();
    assert_eq!(
        described,
        [
            "wm1 (min=2), wm2 (min=0, cooldown=90s)",
            "wm3 (cooldown=1500ms)",
            "wm4"
        ]
    );
    // The component lists the same tiers, settings included, across the boundary.
    let loaded = host()
        .load("waterfall_v1", bundled::WATERFALL_V1, Some(World::Policy))
        .unwrap();
    let mut engine = host().policy(&loaded, content, Limits::default()).unwrap();
    assert_eq!(engine.tiers().unwrap(), tiers);
}

#[test]
fn bad_settings_are_refused_with_the_line_in_native_and_wasm_alike() {
    let cases: &[(Flavor, &str, &str)] = &[
        (
            Flavor::WorkerType,
            "1, a\n2, b, min=two\n",
            "line 2: min `two` is not a whole number of workers (0 to 4294967295)",
        ),
        (
            Flavor::WorkerType,
            "1, a, cooldown=90\n",
            "line 1: cooldown `90` needs a unit: ms, s, m or h (e.g. `cooldown=90s`)",
        ),
        (
            Flavor::WorkerType,
            "1, a, cooldown=1.5m\n",
            "line 1: cooldown `1.5m` is not a whole number of m",
        ),
        (
            Flavor::WorkerType,
            "1, a, warm=2\n",
            "line 1: unknown setting `warm`; a row's settings are `min=N` and `cooldown=DURATION`",
        ),
        (
            Flavor::WorkerType,
            "1, a, min=1, min=2\n",
            "line 1: setting `min` is given twice",
        ),
        (
            Flavor::ManagerId,
            "1, wm1, min=1, 10\n",
            "line 1: `10` follows a setting: a row's columns come first, then its `key=value` settings",
        ),
        (
            Flavor::WorkerType,
            "1, a, min=1,\n",
            "line 1: empty field after a setting",
        ),
        (
            Flavor::WorkerType,
            "1, a, 3, min=1\n",
            "line 1: expected `priority, worker_type`, found 3 fields in `1, a, 3, min=1`",
        ),
    ];
    for (flavor, content, want) in cases {
        let native = Policy::parse(*flavor, content).unwrap_err().to_string();
        assert_eq!(&native, want, "content {content:?}");
        let (name, bytes) = match flavor {
            Flavor::ManagerId => ("waterfall_v1", bundled::WATERFALL_V1),
            Flavor::WorkerType => ("waterfall_v2", bundled::WATERFALL_V2),
        };
        let loaded = host().load(name, bytes, Some(World::Policy)).unwrap();
        match host().policy(&loaded, content, Limits::default()) {
            Err(weir::plugin::PluginError::Refused { message, .. }) => {
                assert_eq!(&message, want)
            }
            Err(other) => panic!("{content:?}: {other}"),
            Ok(_) => panic!("{content:?}: accepted"),
        }
    }
}

#[test]
fn a_warm_minimum_keeps_workers_without_demand_never_past_the_cap() {
    let content = "1, native, min=2\n2, burst, min=5\n";
    let managers = vec![manager("n", "native", 10, 1), manager("b", "burst", 3, 1)];
    let quiet = snapshot(managers.clone(), vec![]);
    let got = decide_in(Flavor::WorkerType, content, &quiet, false);
    assert_eq!(desired(&got), vec![("n", 2), ("b", 3)]);
    // Demand above the minimum is placed as without one.
    let busy_day = snapshot(managers.clone(), vec![queued(4)]);
    let got = decide_in(Flavor::WorkerType, content, &busy_day, false);
    assert_eq!(desired(&got), vec![("n", 4), ("b", 3)]);
    // Idle past the delay: down to the minimum (the longest idle stopped), not below.
    let mut idle_day = managers;
    idle_day[0].workers = vec![idle(1, 1, 90_000), idle(2, 1, 60_000), idle(3, 1, 40_000)];
    idle_day[1].workers = vec![idle(4, 1, 90_000), idle(5, 1, 90_000), idle(6, 1, 90_000)];
    let got = decide_in(
        Flavor::WorkerType,
        content,
        &snapshot(idle_day.clone(), vec![]),
        false,
    );
    assert_eq!(got, vec![("n".into(), 2, vec![1]), ("b".into(), 3, vec![])]);
    // A later tier at its minimum does not hold an earlier one; above it, it does (rule 4).
    let plain = "1, native, min=2\n2, burst\n";
    let got = decide_in(
        Flavor::WorkerType,
        plain,
        &snapshot(idle_day, vec![]),
        false,
    );
    assert_eq!(
        got,
        vec![("n".into(), 3, vec![]), ("b".into(), 0, vec![4, 5, 6])]
    );
}

#[test]
fn a_later_tier_at_its_minimum_still_holds_an_earlier_one_while_it_runs_work() {
    let content = "1, native\n2, burst, min=1\n";
    let mut native = manager("n", "native", 4, 1);
    native.workers = vec![idle(1, 1, 90_000), idle(2, 1, 90_000)];
    let mut burst = manager("b", "burst", 4, 1);
    burst.workers = vec![busy(3)];
    let running = Demand {
        running: 1,
        ..queued(0)
    };
    // Its one warm worker runs a task tier 1 could run: tier 1 keeps its workers.
    let got = decide_in(
        Flavor::WorkerType,
        content,
        &snapshot(vec![native.clone(), burst.clone()], vec![running.clone()]),
        false,
    );
    assert_eq!(got, vec![("n".into(), 2, vec![]), ("b".into(), 1, vec![])]);
    // Idle at its minimum, it holds nothing: tier 1 shrinks.
    burst.workers = vec![idle(3, 1, 90_000)];
    let got = decide_in(
        Flavor::WorkerType,
        content,
        &snapshot(vec![native, burst], vec![running]),
        false,
    );
    assert_eq!(
        got,
        vec![("n".into(), 0, vec![1, 2]), ("b".into(), 1, vec![])]
    );
}

#[test]
fn a_tier_cooling_down_after_failed_starts_lets_demand_spill_at_once() {
    let mut failing = manager("n", "native", 4, 1);
    failing.starting = 2;
    failing.workers = vec![busy(1)];
    failing.launch = Launch {
        failures: 3,
        last_failure_ms: Some(10_000),
        backoff_ms: 5_000,
    };
    let burst = manager("b", "burst", 10, 1);
    let at = |n: &Manager| snapshot(vec![n.clone(), burst.clone()], vec![queued(5)]);
    let cooling = "1, native, cooldown=60s\n2, burst\n";
    // Cooling down: its live worker stays, the two starting are cancelled, the queue spills.
    let got = decide_in(Flavor::WorkerType, cooling, &at(&failing), false);
    assert_eq!(desired(&got), vec![("n", 1), ("b", 5)]);
    // Without the setting the tier is waited for, as always (the frozen builds agree).
    let got = decide(Flavor::WorkerType, "1, native\n2, burst\n", &at(&failing));
    assert_eq!(desired(&got), vec![("n", 4), ("b", 0)]);
    // Past the cooldown, or once one of its starts succeeded, it fills first again.
    let mut later = failing.clone();
    later.launch.last_failure_ms = Some(60_000);
    let got = decide_in(Flavor::WorkerType, cooling, &at(&later), false);
    assert_eq!(desired(&got), vec![("n", 4), ("b", 0)]);
    let mut recovered = failing;
    recovered.launch.failures = 0;
    let got = decide_in(Flavor::WorkerType, cooling, &at(&recovered), false);
    assert_eq!(desired(&got), vec![("n", 4), ("b", 0)]);
}
