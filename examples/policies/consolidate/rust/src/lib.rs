//! `consolidate`: the waterfall (`waterfall_v2` content: `priority, worker_type` rows), plus
//! consolidation as Karpenter does it: when the lower (cheaper) tiers have room for the work a
//! higher tier's workers run, those workers are **drained** (no new tasks; they finish what they
//! run) and stopped as soon as they are idle, without waiting for the scale-down delay. Work
//! moves down as it frees up, and the expensive tier empties earlier. Built on weir's policy
//! SDK and `weir:plugin@0.2.0`.
//!
//! Rules, on top of the waterfall's decisions:
//! - A manager of tier P > the lowest may be drained when the managers of tiers below P that
//!   can run its work (their workers have at least its capabilities, and no environment it
//!   matches is `no-match` there) have **room**: free slots on their live workers that are not
//!   drained, slots of workers they are starting or asked to start, less every queued task
//!   (queued work takes room first).
//! - It drains at most its `drain-budget` workers (`scheduler --max-drain-percent`), and only
//!   as many busy slots as that room holds; the workers already drained first (so a drain
//!   holds), then idle ones, then the least busy.
//! - A worker drained by the last decision that is idle now is stopped (reason per worker),
//!   without waiting for the scale-down delay: an idle worker is drained first, for one
//!   decision, taking room for its slots. When the room is gone (a new burst), nothing is
//!   drained: the core takes the drained workers back.
//! - Room is counted once per lower manager and used up as it is given, lower tiers first (a
//!   manager that drains offers no room to the tiers above it). `starting` counts workers being
//!   stopped too (the snapshot does not tell them apart): room may be over-counted while some stop.

use weir_policy_sdk::{Decision, Flavor, Manager, Policy, Snapshot, Tier, Verdict, Waterfall};

struct Consolidate {
    waterfall: Waterfall,
}

impl Policy for Consolidate {
    fn create(content: &str) -> Result<Self, String> {
        let waterfall = Waterfall::parse(Flavor::WorkerType, content).map_err(|e| e.to_string())?;
        Ok(Consolidate { waterfall })
    }

    fn tiers(&self) -> Vec<Tier> {
        self.waterfall.tiers()
    }

    fn decide(&self, snapshot: &Snapshot) -> Vec<Decision> {
        let mut decisions = self.waterfall.decide(snapshot);
        let priority = |m: &Manager| {
            let rules = self.waterfall.rules.iter();
            rules.filter(|r| r.member == m.worker_type).map(|r| r.priority).min()
        };
        let queued: u64 = snapshot.demand.iter().map(|d| u64::from(d.queued)).sum();
        let managers: Vec<(&Manager, u32, Option<usize>)> = snapshot
            .managers
            .iter()
            .filter(|m| m.online)
            .filter_map(|m| {
                let decided = decisions.iter().position(|d| d.manager_id == m.id);
                Some((m, priority(m)?, decided))
            })
            .collect();
        let lowest = managers.iter().map(|(_, p, _)| *p).min().unwrap_or(0);
        // Room each manager has for work moving down, counted once and used up as it is given:
        // two higher managers never drain into the same free slot.
        let mut rooms: Vec<u64> =
            (managers.iter()).map(|(m, _, d)| room(snapshot, m, d.map(|i| &decisions[i]))).collect();
        // Queued work takes the room first.
        let mut queued = queued;
        // Lower tiers first: a manager that drains has no room for the tiers above it.
        let mut order: Vec<usize> = (0..managers.len()).collect();
        order.sort_by_key(|&i| managers[i].1);
        for i in order {
            let (high, tier, decided) = managers[i];
            let Some(index) = decided else { continue };
            if tier == lowest || high.drain_budget == 0 || high.live_workers() == 0 {
                continue;
            }
            let below: Vec<usize> = (0..managers.len())
                .filter(|&j| managers[j].1 < tier && can_take_work_of(managers[j].0, high))
                .collect();
            let total: u64 = below.iter().map(|&j| rooms[j]).sum();
            let mut room = total.saturating_sub(queued);
            if room == 0 {
                continue; // nothing drained: the core takes drained workers back
            }
            let workers = snapshot.workers_of(high);
            let decision = &mut decisions[index];
            // Drained ones first (a drain holds), then idle, then the least busy. Each takes
            // room for what it runs, an idle one for its slots (the work it would have taken).
            let mut order: Vec<_> = workers.iter().filter(|w| !decision.stop.contains(&w.id)).collect();
            order.sort_by_key(|w| (!high.is_drained(w.id), w.busy, w.id));
            let mut drain = Vec::new();
            for worker in order {
                if drain.len() >= high.drain_budget as usize {
                    break;
                }
                let takes = match worker.busy {
                    0 => u64::from(worker.slots.max(1)),
                    busy => u64::from(busy),
                };
                if takes > room {
                    continue;
                }
                room -= takes;
                drain.push(worker);
            }
            // What the queue took of this room and what the drain took are gone for the next.
            let queue_took = queued.min(total);
            let mut used = queue_took + (total - queue_took - room);
            queued -= queue_took;
            for &j in &below {
                let take = used.min(rooms[j]);
                rooms[j] -= take;
                used -= take;
            }
            // Only a worker drained by an earlier decision is stopped: idle workers are drained
            // first (one decision's notice), then stopped without waiting for the scale-down
            // delay: the tiers below have room for their work.
            let mut stopped = 0;
            for worker in drain {
                if worker.busy == 0 && high.is_drained(worker.id) {
                    decision.stop.push(worker.id);
                    let why = format!("drained and idle: tiers below {tier} have room for its work");
                    decision.worker_reasons.push((worker.id, why));
                    stopped += 1;
                } else {
                    decision.drain.push(worker.id);
                    let why = format!("drained: tiers below {tier} have room for its {} task(s)", worker.busy);
                    decision.worker_reasons.push((worker.id, why));
                }
            }
            if !decision.drain.is_empty() {
                rooms[i] = 0;
            }
            decision.desired_workers = decision.desired_workers.saturating_sub(stopped);
            if !decision.drain.is_empty() || stopped > 0 {
                decision.reason.push_str(&format!(
                    "; consolidating: {} drained, {stopped} stopped (room below: {total} slots)",
                    decision.drain.len()
                ));
            }
        }
        decisions
    }
}

/// Whether `low`'s workers can run what `high`'s run: at least its capabilities, and no
/// environment `high` matches is `no-match` on `low`.
fn can_take_work_of(low: &Manager, high: &Manager) -> bool {
    let has = |name: &str| low.capabilities.iter().find(|(n, _)| n == name).map_or(0, |(_, a)| *a);
    high.capabilities.iter().all(|(name, amount)| has(name) >= *amount)
        && high
            .environments
            .iter()
            .filter(|(_, v)| *v == Verdict::Match)
            .all(|(name, _)| low.verdict(name) != Verdict::NoMatch)
}

/// Free task slots `low` has or will have: on its live workers not drained, on those it is
/// starting, and on those its decision asks it to start.
fn room(snapshot: &Snapshot, low: &Manager, decision: Option<&Decision>) -> u64 {
    let summary = low.summary(snapshot.scale_down_delay_ms);
    let slots = u64::from(low.worker_slots.max(1));
    let free_busy: u64 = summary
        .busy_groups
        .iter()
        .map(|g| u64::from(g.slots.saturating_sub(g.busy)) * u64::from(g.count))
        .sum();
    let idle = u64::from(summary.idle);
    let mut room = free_busy + idle * slots + u64::from(low.starting) * slots;
    if !low.drained.is_empty() {
        // Drained workers take nothing: their free slots are not room.
        let workers = snapshot.workers_of(low);
        let drained = workers.iter().filter(|w| low.is_drained(w.id));
        room = room.saturating_sub(drained.map(|w| u64::from(w.slots - w.busy.min(w.slots))).sum());
    }
    let more = decision.map_or(0, |d| u64::from(d.desired_workers).saturating_sub(low.current_workers()));
    room + more * slots
}

weir_policy_sdk::export!(Consolidate);
