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
