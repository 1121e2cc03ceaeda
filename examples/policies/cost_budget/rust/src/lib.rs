//! `cost_budget`: a scaling policy of a different kind than the waterfall, on weir's policy SDK.
//!
//! Content: `budget_per_hour, AMOUNT` once, and `WORKER_TYPE, COST_PER_WORKER_HOUR` rows
//! (`#` comments, blank lines). Rules:
//! - Cheapest capacity first: queued tasks go to the cheapest managers able to run them (the
//!   capabilities of their workers cover the tasks', no environment verdict is `no-match`);
//!   managers of one price share (by free capacity, ties to the earlier one).
//! - Never above the budget: the sum over managers of workers × cost stays within it; busy
//!   workers count first (they are never stopped).
//! - Scale-down: a manager above its target gives up starting workers, then idle ones past the
//!   snapshot's delay; managers are shrunk most expensive first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use weir_policy_sdk::{Decision, Demand, Manager, Policy, Snapshot, Tier, Verdict};

struct CostBudget {
    budget: f64,
    /// (worker type, cost per worker hour), cheapest first.
    prices: Vec<(String, f64)>,
}

impl Policy for CostBudget {
    fn create(content: &str) -> Result<Self, String> {
        let (mut budget, mut prices) = (None, Vec::new());
        for (n, line) in content.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let (name, value) = line
                .split_once(',')
                .ok_or_else(|| format!("line {}: expected `NAME, NUMBER`", n + 1))?;
            let value: f64 = value.trim().parse().map_err(|e| format!("line {}: {e}", n + 1))?;
            if !(value >= 0.0 && value.is_finite()) {
                return Err(format!("line {}: {value} is not a cost", n + 1));
            }
            match name.trim() {
                "budget_per_hour" => budget = Some(value),
                name => prices.push((name.to_string(), value)),
            }
        }
        prices.sort_by(|a, b| a.1.total_cmp(&b.1));
        let budget = budget.ok_or("no `budget_per_hour, AMOUNT` line")?;
        Ok(CostBudget { budget, prices })
    }

    fn tiers(&self) -> Vec<Tier> {
        let mut tiers: Vec<Tier> = Vec::new();
        for (name, cost) in &self.prices {
            let priority = 1 + self.prices.iter().filter(|(_, c)| c < cost).count() as u32;
            match tiers.iter_mut().find(|t| t.priority == priority) {
                Some(tier) => tier.members.push(name.clone()),
                None => tiers.push(Tier { priority, members: vec![name.clone()], settings: vec![] }),
            }
        }
        tiers
    }

    fn decide(&self, snapshot: &Snapshot) -> Vec<Decision> {
        // The managers it prices, cheapest first; busy workers are kept and paid for first.
        let mut plans: Vec<Plan> = self
            .prices
            .iter()
            .flat_map(|(kind, cost)| {
                let managers = snapshot.managers.iter().filter(move |m| m.online && m.worker_type == *kind);
                managers.map(|m| Plan::new(m, *cost, snapshot.scale_down_delay_ms))
            })
            .collect();
        let mut left = self.budget - plans.iter().map(|p| p.target as f64 * p.cost).sum::<f64>();
        for group in snapshot.demand.iter().filter(|g| g.queued > 0) {
            let mut queued = u64::from(group.queued);
            let mut start = 0;
            while start < plans.len() && queued > 0 {
                let price = plans[start].cost;
                let end = start + plans[start..].iter().take_while(|p| p.cost == price).count();
                // One worker at a time, to the manager of this price with the most room (ties
                // to the earlier): a heap of (room, earlier first) over those that can serve.
                let mut rooms: BinaryHeap<(u64, Reverse<usize>)> = (start..end)
                    .filter(|&i| plans[i].serves(group) && plans[i].target < plans[i].cap)
                    .map(|i| (plans[i].cap - plans[i].target, Reverse(i)))
                    .collect();
                while queued > 0 && left + 1e-9 >= price {
                    let Some((room, Reverse(i))) = rooms.pop() else {
                        break;
                    };
                    let plan = &mut plans[i];
                    let slots = u64::from(plan.manager.worker_slots.max(1));
                    plan.target += 1;
                    plan.placed += slots.min(queued);
                    queued = queued.saturating_sub(slots);
                    left -= price;
                    if room > 1 {
                        rooms.push((room - 1, Reverse(i)));
                    }
                }
                start = end;
            }
        }
        // Most expensive first: the order scale-down reads in the reasons.
        plans.reverse();
        plans.iter().map(|p| p.conclude(snapshot, self.budget)).collect()
    }
}

struct Plan<'a> {
    manager: &'a Manager,
    cost: f64,
    /// Most workers its task cap allows.
    cap: u64,
    /// Workers wanted: its busy ones, then one per placed worker's worth of tasks.
    target: u64,
    placed: u64,
}

impl<'a> Plan<'a> {
    fn new(manager: &'a Manager, cost: f64, delay_ms: u64) -> Plan<'a> {
        // Counted: the list of a manager's workers is asked for only to name the ones to stop.
        let busy = u64::from(manager.summary(delay_ms).busy);
        let cap = manager.max_workers_for(manager.max_task_concurrency);
        Plan { manager, cost, cap, target: busy.min(cap), placed: 0 }
    }

    fn serves(&self, group: &Demand) -> bool {
        let has = |name: &str| {
            self.manager.capabilities.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
        };
        group.capabilities.iter().all(|(name, need)| *need == 0 || has(name) >= *need)
            && group.environments.iter().all(|env| self.manager.verdict(env) != Verdict::NoMatch)
    }

    fn conclude(&self, snapshot: &Snapshot, budget: f64) -> Decision {
        let m = self.manager;
        let delay_ms = snapshot.scale_down_delay_ms;
        let current = m.current_workers();
        let mut stop = Vec::new();
        let desired = if self.target >= current {
            self.target
        } else {
            // Starting workers go first, then idle ones past the delay, longest idle first.
            let mut excess = current - self.target;
            let cancelled = excess.min(u64::from(m.starting));
            excess -= cancelled;
            if excess > 0 && m.summary(delay_ms).idle_past_delay > 0 {
                let workers = snapshot.workers_of(m);
                let mut idle: Vec<_> = workers.iter().filter(|w| w.busy == 0 && w.idle_ms >= delay_ms).collect();
                idle.sort_by(|a, b| b.idle_ms.cmp(&a.idle_ms).then(a.id.cmp(&b.id)));
                stop.extend(idle.iter().take(excess as usize).map(|w| w.id));
            }
            current - cancelled - stop.len() as u64
        };
        let desired = desired.min(self.cap);
        Decision {
            manager_id: m.id.clone(),
            desired_workers: u32::try_from(desired).unwrap_or(u32::MAX),
            stop,
            reason: format!(
                "{} queued task(s) placed at {}/worker-hour -> {desired} worker(s) (budget {budget}/hour)",
                self.placed, self.cost
            ),
            ..Default::default()
        }
    }
}

weir_policy_sdk::export!(CostBudget);
