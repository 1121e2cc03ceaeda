//! The pure convergence step of a process pool: which workers to stop, how many to start.

/// What a pool does to converge: the workers to stop and how many to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub stop: Vec<String>,
    pub start: u32,
}

/// The pure convergence step. `alive`: the pool's worker processes, oldest first; `desired`:
/// the count to reach (already within the cap); `stop`: workers the scheduler drained and names;
/// `registered`: the workers the scheduler knows; `may_start`: not backing off.
///
/// Named workers are stopped first; if still above `desired`, the newest workers that have not
/// registered (they hold no task) are stopped; below it, new ones are started.
pub fn plan(
    alive: &[String],
    desired: u32,
    stop: &[String],
    registered: &[String],
    may_start: bool,
) -> Plan {
    let mut plan = Plan::default();
    plan.stop
        .extend(alive.iter().filter(|n| stop.contains(n)).cloned());
    let left: Vec<&String> = alive.iter().filter(|n| !stop.contains(n)).collect();
    let desired = desired as usize;
    if left.len() > desired {
        let excess = left.len() - desired;
        plan.stop.extend(
            left.iter()
                .rev()
                .filter(|n| !registered.contains(n))
                .take(excess)
                .map(|n| (*n).clone()),
        );
    } else if may_start {
        plan.start = (desired - left.len()) as u32;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn named_workers_go_first_then_the_newest_unregistered() {
        let alive = names(&["a", "b", "c", "d"]);
        let step = plan(&alive, 1, &names(&["b"]), &names(&["a", "c"]), true);
        assert_eq!(
            step.stop,
            names(&["b", "d"]),
            "c is registered: never stopped unnamed"
        );
        assert_eq!(step.start, 0);
    }

    #[test]
    fn a_registered_worker_is_never_stopped_unless_named() {
        let alive = names(&["a", "b"]);
        let step = plan(&alive, 0, &[], &alive, true);
        assert_eq!(step, Plan::default());
    }

    #[test]
    fn below_desired_it_starts_unless_backing_off() {
        let alive = names(&["a"]);
        assert_eq!(plan(&alive, 3, &[], &[], true).start, 2);
        assert_eq!(plan(&alive, 3, &[], &[], false), Plan::default());
    }
}
