//! `weir managers` for people: one line per manager, or one line per unit of one manager.

use weir::proto::{ManagerUnits, UnitReport, UnitState};

/// One line per manager: id, worker type, backend (or fixed pool), online, workers, units by
/// state.
pub(super) fn managers(managers: &[ManagerUnits]) {
    if managers.is_empty() {
        println!("no managers");
        return;
    }
    println!(
        "{:<16} {:<10} {:<10} {:<7} {:<20} units",
        "manager", "type", "backend", "online", "workers"
    );
    for m in managers {
        let s = &m.status;
        let backend = match s.fixed {
            Some(n) => format!("fixed {n}"),
            None => m.backend.clone(),
        };
        let workers = format!("{} live, {} starting", s.live, s.starting);
        println!(
            "{:<16} {:<10} {:<10} {:<7} {:<20} {}{}",
            s.id,
            s.worker_type,
            backend,
            if s.online { "yes" } else { "NO" },
            workers,
            by_state(&m.units),
            labels(&s.labels)
        );
    }
}

/// `, labels cost=3 zone=a`; nothing without labels.
pub(super) fn labels(labels: &[(String, String)]) -> String {
    match labels.is_empty() {
        true => String::new(),
        false => {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!(", labels {}", pairs.join(" "))
        }
    }
}

/// `2 running, 1 pending, 3 ended`; `none`.
fn by_state(units: &[UnitReport]) -> String {
    let states = [
        UnitState::Pending,
        UnitState::Running,
        UnitState::Completing,
        UnitState::Ended,
    ];
    let counts: Vec<String> = states
        .iter()
        .map(|state| (state, units.iter().filter(|u| u.state == *state).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(state, n)| format!("{n} {}", state.as_str()))
        .collect();
    match counts.is_empty() {
        true => "none".into(),
        false => counts.join(", "),
    }
}

/// One line per unit of one manager: id, state (and why), age, workers registered of its
/// workers, time left, how long ago it ended.
pub(super) fn units(m: &ManagerUnits) {
    let s = &m.status;
    println!(
        "manager {} ({}, {}, {}): {} live, {} starting",
        s.id,
        s.worker_type,
        m.backend,
        if s.online { "online" } else { "OFFLINE" },
        s.live,
        s.starting
    );
    if m.units.is_empty() {
        println!("no units");
        return;
    }
    println!(
        "{:<24} {:<32} {:>8} {:>8} {:>9} {:>8}",
        "unit", "state", "age", "workers", "time left", "ended"
    );
    for u in &m.units {
        let state = match &u.reason {
            Some(reason) => format!("{} ({reason})", u.state.as_str()),
            None => u.state.as_str().to_string(),
        };
        let workers = match u.state {
            UnitState::Ended => "-".to_string(),
            _ => {
                let joined = u.workers.iter().filter(|w| m.registered.contains(w));
                format!("{}/{}", joined.count(), u.workers.len())
            }
        };
        let time_left = u.time_left_ms.map_or("-".into(), span);
        let ended = u
            .ended_ms
            .map_or("-".into(), |ms| format!("{} ago", span(ms)));
        println!(
            "{:<24} {:<32} {:>8} {:>8} {:>9} {:>8}",
            u.id,
            state,
            span(u.age_ms),
            workers,
            time_left,
            ended
        );
    }
}

/// `45s`, `3m05s`, `2h04m`, `1d03h`.
fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}
