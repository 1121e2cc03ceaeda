//! The waterfall rules (DESIGN §4).
//!
//! 1. Tiers: every online manager the content lists, grouped by ascending priority. A manager's
//!    capacity is `min(rule cap, reported max_task_concurrency)` tasks, i.e. that many task slots
//!    divided into workers of `worker_slots` slots. Offline and unlisted managers get no decision.
//! 2. Running tasks stay where they run: a worker with a busy slot is never stopped and counts
//!    against its manager's capacity; its spare room takes queued tasks first. Spare room is
//!    counted in the resource that binds: free slots, and for each capability a group needs, the
//!    amount its running tasks may hold (each counted at the largest need of that capability
//!    among running demand, so room is never counted that is not there).
//! 3. Queued demand is placed group by group (a group is one set of capabilities and
//!    environments), most constrained group first (fewest managers able to serve it). A group
//!    fills tier 1, spills to tier 2, and so on. A manager can serve a group when the capability
//!    amounts of its workers cover the group's and no required environment is `no-match`; when a
//!    verdict is `unknown` it gets one worker's worth to learn, and nothing more while it has a
//!    worker that has not answered yet; that worker is kept until it answers. Managers of one tier share
//!    what the tier takes in proportion to their free capacity (largest remainder, ties to the
//!    earlier row), never "first row wins". Demand spills past a tier only once that tier is up:
//!    while one of its managers able to serve the group is still starting workers (or is being
//!    asked to start more), the rest of the group waits a tick, so cheaper tiers fill first.
//! 4. A manager's target is the workers its placed tasks need. Above its current count it grows;
//!    below, it first cancels workers still starting, then stops idle workers that have been idle
//!    for at least the scale-down delay, longest idle first. Scale-down runs the waterfall in
//!    reverse, strictly: a tier shrinks only when every later tier is empty (no worker, none
//!    starting), with one exception. A manager of a later tier whose workers serve only demand
//!    (queued or running) this manager could never run (a GPU task on tier 2 for a CPU tier 1)
//!    does not hold it: what keeps that tier busy is not work that could come back here. A
//!    later manager with workers holds it when they serve demand it could serve too, and when
//!    they serve no demand at all (idle: the demand that may return is not known, and it may
//!    be any this manager could take).
//! 5. No decision asks for more workers than the manager's cap: a manager above it (its cap was
//!    lowered, or dead workers were replaced before the scheduler knew) is brought down to it,
//!    starting workers first, then idle ones whatever their idle time.
//! 6. A row's settings (content.rs), none by default: `min=N` raises the manager's target to N
//!    workers (never past its cap), and a manager at or below its minimum with none of its
//!    workers busy counts as empty when rule 4 asks whether a later tier holds an earlier one
//!    (busy, it holds as before: the work it runs could come back). `cooldown=D`: while the manager's
//!    last failed start is less than D ago (and none of its starts has succeeded since), its
//!    capacity is its live workers: it takes no new ones (those starting are cancelled as rule
//!    5 cancels workers above a cap) and does not hold the spill, so demand goes to the next
//!    tier at once — the fallback Ray and Karpenter make after a launch fails.

use std::collections::HashMap;

use crate::content::{Flavor, Policy};
use crate::model::{Decision, Demand, Manager, Snapshot};
use crate::plan::{Plan, Room, fill_tier, largest_running_need};

impl Policy {
    /// One decision for every online manager the content lists, in tier order.
    pub fn decide(&self, snapshot: &Snapshot) -> Vec<Decision> {
        let mut plans = self.plans(snapshot);

        // Most constrained groups first; stable, so equal groups keep the snapshot's order.
        let mut groups: Vec<&Demand> = snapshot.demand.iter().filter(|g| g.queued > 0).collect();
        groups.sort_by_key(|g| plans.iter().filter(|p| p.free_for(g) > 0).count());

        for group in groups {
            let mut remaining = u64::from(group.queued);
            let mut start = 0;
            while start < plans.len() && remaining > 0 {
                let priority = plans[start].priority;
                let end = start
                    + plans[start..]
                        .iter()
                        .take_while(|p| p.priority == priority)
                        .count();
                remaining -= fill_tier(&mut plans[start..end], group, remaining);
                // Only a manager that can serve the group holds it back: one whose verdict is
                // `no-match` (its workers never qualify) never takes it, filling or not.
                if remaining > 0
                    && plans[start..end]
                        .iter()
                        .any(|p| p.serves(group) && p.filling())
                {
                    break; // the rest spills once this tier is up
                }
                start = end;
            }
        }

        // Conclude from the lowest tier up: a manager may shrink only while no manager of a later
        // tier with workers serves demand it could serve too, or serves no demand at all.
        let active: Vec<&Demand> = snapshot
            .demand
            .iter()
            .filter(|g| g.queued > 0 || g.running > 0)
            .collect();
        let mut served_below = vec![false; active.len()];
        let mut idle_below = false;
        let mut decisions = Vec::with_capacity(plans.len());
        let mut end = plans.len();
        while end > 0 {
            let priority = plans[end - 1].priority;
            let start = end
                - plans[..end]
                    .iter()
                    .rev()
                    .take_while(|p| p.priority == priority)
                    .count();
            let tier = &plans[start..end];
            let mut concluded: Vec<Decision> = tier
                .iter()
                .map(|plan| {
                    let held = idle_below
                        || active
                            .iter()
                            .zip(&served_below)
                            .any(|(group, below)| *below && plan.serves(group));
                    conclude(snapshot, plan, !held, plan.learning(&active))
                })
                .collect();
            // A manager at its warm minimum with none of them busy counts as empty (rule 6).
            for (group, below) in active.iter().zip(served_below.iter_mut()) {
                *below |= tier.iter().any(|p| p.occupied() && p.serves(group));
            }
            idle_below |= tier
                .iter()
                .any(|p| p.above_minimum() && !active.iter().any(|g| p.serves(g)));
            concluded.reverse();
            decisions.extend(concluded);
            end = start;
        }
        decisions.reverse();
        decisions
    }

    fn plans<'a>(&self, snapshot: &'a Snapshot) -> Vec<Plan<'a>> {
        // Online managers by what the rows name: one pass, not one per row.
        let mut by_member: HashMap<&str, Vec<&Manager>> = HashMap::new();
        for manager in snapshot.managers.iter().filter(|m| m.online) {
            let key = match self.flavor {
                Flavor::ManagerId => manager.id.as_str(),
                Flavor::WorkerType => manager.worker_type.as_str(),
            };
            by_member.entry(key).or_default().push(manager);
        }
        let mut plans = Vec::new();
        for rule in &self.rules {
            for &manager in by_member
                .get(rule.member.as_str())
                .map_or(&[][..], Vec::as_slice)
            {
                let cap = rule.cap.map_or(manager.max_task_concurrency, |c| {
                    c.min(manager.max_task_concurrency)
                });
                let mut max_workers = manager.max_workers_for(cap);
                // Cooling down after a failed start: only its live workers count (rule 6).
                let launch = &manager.launch;
                let cooling = (rule.settings.cooldown_ms)
                    .zip(launch.last_failure_ms)
                    .is_some_and(|(cooldown, ago)| launch.failures > 0 && ago < cooldown);
                if cooling {
                    max_workers = max_workers.min(manager.live_workers());
                }
                let min_workers =
                    u64::from(rule.settings.min_workers.unwrap_or(0)).min(max_workers);
                // A room per run of alike busy workers, in the order of the list (the
                // summary's groups are its runs), filled as the workers would be one by one:
                // counted or listed, tasks fill the same workers.
                let summary = manager.summary(snapshot.scale_down_delay_ms);
                let room: Vec<Room> = summary
                    .busy_groups
                    .iter()
                    .map(|g| Room {
                        count: u64::from(g.count),
                        run: true,
                        slots: u64::from(g.slots.saturating_sub(g.busy)),
                        amounts: manager
                            .capabilities
                            .iter()
                            .map(|(name, have)| {
                                let held = largest_running_need(snapshot, name)
                                    .saturating_mul(u64::from(g.busy));
                                have.saturating_sub(held)
                            })
                            .collect(),
                    })
                    .collect();
                plans.push(Plan {
                    manager,
                    priority: rule.priority,
                    max_workers,
                    min_workers,
                    cooling,
                    used_workers: u64::from(summary.busy),
                    summary,
                    room,
                    placed: 0,
                });
            }
        }
        plans
    }
}

/// The manager's decision: counted from its summary; its worker list is asked for only when
/// idle workers are to be stopped (the longest idle first: those past the scale-down delay are
/// the first of that order).
fn conclude(snapshot: &Snapshot, plan: &Plan<'_>, may_shrink: bool, learning: bool) -> Decision {
    let manager = plan.manager;
    let summary = &plan.summary;
    let current = manager.current_workers();
    let target = (plan.used_workers.max(u64::from(learning))).max(plan.min_workers);
    let idle = u64::from(summary.idle);
    // Idle workers to stop: past the delay (to shrink), then any (above the cap).
    let (mut past_delay, mut any) = (0, 0);
    let mut cancelled = 0;
    let mut desired = if target >= current {
        target
    } else if !may_shrink {
        current
    } else {
        let mut excess = current - target;
        cancelled = excess.min(u64::from(manager.starting));
        excess -= cancelled;
        past_delay = excess.min(u64::from(summary.idle_past_delay));
        current - cancelled - past_delay
    };
    let capped = desired > plan.max_workers;
    if capped {
        // Above the cap: starting workers go first, then idle ones whatever their idle time.
        let mut excess = desired - plan.max_workers;
        let starting = u64::from(manager.starting) - cancelled;
        excess -= excess.min(starting);
        any = excess.min(idle.saturating_sub(past_delay));
        desired = plan.max_workers;
    }
    let mut stop = Vec::new();
    if past_delay + any > 0 {
        let workers = snapshot.workers_of(manager);
        let mut idle: Vec<_> = workers.iter().filter(|w| w.busy == 0).collect();
        idle.sort_by(|a, b| b.idle_ms.cmp(&a.idle_ms).then_with(|| a.id.cmp(&b.id)));
        let delay = snapshot.scale_down_delay_ms;
        let past = idle.iter().filter(|w| w.idle_ms >= delay);
        stop.extend(past.take(past_delay as usize).map(|w| w.id));
        let more: Vec<u64> = (idle.iter().map(|w| w.id))
            .filter(|id| !stop.contains(id))
            .take(any as usize)
            .collect();
        stop.extend(more);
        // Counted as the list says (they agree when the host made both): never fewer workers
        // asked for than are kept.
        if !capped {
            desired = current - cancelled - stop.len() as u64;
        }
    }
    let desired = u32::try_from(desired).unwrap_or(u32::MAX);
    let busy = summary.busy;
    let mut reason = format!(
        "priority {}: {} queued task{} placed, {} busy worker{} -> {} worker{} (max {})",
        plan.priority,
        plan.placed,
        plural(plan.placed),
        busy,
        plural(u64::from(busy)),
        desired,
        plural(u64::from(desired)),
        plan.max_workers,
    );
    if !stop.is_empty() {
        reason.push_str(&format!("; stopping {} idle", stop.len()));
    }
    if target < current && !may_shrink {
        reason.push_str("; holding until the tiers below are empty");
    }
    if plan.min_workers > 0 && plan.min_workers >= plan.used_workers.max(u64::from(learning)) {
        reason.push_str(&format!("; warm minimum {}", plan.min_workers));
    }
    if plan.cooling {
        let launch = &manager.launch;
        reason.push_str(&format!(
            "; cooling down: {} failed start{}, the last {} s ago",
            launch.failures,
            plural(u64::from(launch.failures)),
            launch.last_failure_ms.unwrap_or(0) / 1000
        ));
    }
    Decision {
        manager_id: manager.id.clone(),
        desired_workers: desired,
        stop,
        reason,
        ..Decision::default()
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}
