//! One manager's bookkeeping during a decision (its room, the tasks placed on it) and the
//! placement rules over it: filling workers, sharing a tier in proportion to free capacity.

use std::borrow::Cow;

use crate::model::{Demand, Manager, Snapshot, Summary};

/// Room left on `count` alike workers counted in `used_workers`: free slots and capability
/// amounts of each.
#[derive(Clone)]
pub(crate) struct Room {
    pub(crate) count: u64,
    pub(crate) slots: u64,
    /// Free amount per capability of the manager's workers (in `Manager::capabilities` order).
    pub(crate) amounts: Vec<u64>,
    /// It stands for `count` rooms one after the other (a run of alike busy workers): tasks
    /// fill it as they would fill those one by one, in order ([`absorb`]). Otherwise (new
    /// workers placed together) the full ones are moved after the rest.
    pub(crate) run: bool,
}

/// Per-manager bookkeeping during one decision.
pub(crate) struct Plan<'a> {
    pub(crate) manager: &'a Manager,
    /// Its workers counted (once per decision).
    pub(crate) summary: Cow<'a, Summary>,
    pub(crate) priority: u32,
    /// Capacity in workers (from the tier's task cap; only the live ones while cooling down).
    pub(crate) max_workers: u64,
    /// The row's warm minimum (`min=N`), at most `max_workers`.
    pub(crate) min_workers: u64,
    /// Within the row's cooldown after a failed start (`cooldown=D`).
    pub(crate) cooling: bool,
    /// Workers needed so far: the busy ones, then the new ones placed tasks need.
    pub(crate) used_workers: u64,
    /// Spare room on the workers counted in `used_workers`.
    pub(crate) room: Vec<Room>,
    /// Queued tasks placed on this manager.
    pub(crate) placed: u64,
}

impl Plan<'_> {
    /// The need of `group` for each of the manager's capabilities (0 where it needs none).
    pub(crate) fn needs(&self, group: &Demand) -> Vec<u64> {
        self.manager
            .capabilities
            .iter()
            .map(|(name, _)| need_of(group, name))
            .collect()
    }

    /// Tasks with `needs` that fit on one worker of `room`.
    pub(crate) fn fits(room: &Room, needs: &[u64]) -> u64 {
        needs
            .iter()
            .zip(&room.amounts)
            .filter(|(need, _)| **need > 0)
            .fold(room.slots, |fit, (need, have)| fit.min(have / need))
    }

    /// [`Plan::fits`] for `group`'s needs, counted without building them.
    fn fits_group(&self, room: &Room, group: &Demand) -> u64 {
        (self.manager.capabilities.iter())
            .zip(&room.amounts)
            .map(|((name, _), have)| (need_of(group, name), have))
            .filter(|(need, _)| *need > 0)
            .fold(room.slots, |fit, (need, have)| fit.min(have / need))
    }

    /// It has more workers (live or starting) than its warm minimum.
    pub(crate) fn above_minimum(&self) -> bool {
        self.manager.current_workers() > self.min_workers
    }

    /// It runs work, or keeps workers beyond its warm minimum (rule 4's "has workers", less
    /// the idle warm ones).
    pub(crate) fn occupied(&self) -> bool {
        self.summary.busy > 0 || self.above_minimum()
    }

    /// Whether a worker of this manager could ever run `group` ([`Manager::serves`]).
    pub(crate) fn serves(&self, group: &Demand) -> bool {
        self.manager.serves(group)
    }

    /// Tasks of `group` a worker of this manager can run at once (0: it cannot serve the group).
    pub(crate) fn density(&self, group: &Demand) -> u64 {
        let mut density = u64::from(self.manager.worker_slots.max(1));
        for (name, need) in &group.capabilities {
            if *need == 0 {
                continue;
            }
            let have = self
                .manager
                .capabilities
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, amount)| *amount);
            density = density.min(have / need);
        }
        density
    }

    /// Still coming up: workers starting, or more asked for than are live.
    /// A manager cooling down after a failed start is not waited for.
    pub(crate) fn filling(&self) -> bool {
        !self.cooling && (self.manager.starting > 0 || self.used_workers > self.summary.live())
    }

    /// It has a worker, not yet answered, learning a verdict queued tasks wait for: that worker
    /// is kept (not cancelled while it starts, nor stopped while it evaluates), or the next
    /// decision would start another to ask again.
    pub(crate) fn learning(&self, active: &[&Demand]) -> bool {
        self.manager.current_workers() > 0
            && active
                .iter()
                .filter(|g| g.queued > 0 && self.density(g) > 0)
                .any(|g| {
                    let verdicts = || g.environments.iter().map(|env| self.manager.verdict(env));
                    verdicts().any(|v| v == crate::Verdict::Unknown)
                        && verdicts().all(|v| v != crate::Verdict::NoMatch)
                })
    }

    /// Queued tasks of `group` this manager can still take.
    pub(crate) fn free_for(&self, group: &Demand) -> u64 {
        let density = self.density(group);
        if density == 0 {
            return 0;
        }
        let mut unknown = false;
        for env in &group.environments {
            match self.manager.verdict(env) {
                crate::Verdict::NoMatch => return 0,
                crate::Verdict::Unknown => unknown = true,
                crate::Verdict::Match => {}
            }
        }
        let spare: u64 = (self.room.iter())
            .map(|room| self.fits_group(room, group) * room.count)
            .sum();
        let free = spare + self.max_workers.saturating_sub(self.used_workers) * density;
        match unknown {
            // One worker to learn the verdict; none more while one exists that has not answered.
            true if self.manager.current_workers() > 0 => 0,
            true => free.min(density),
            false => free,
        }
    }

    pub(crate) fn place(&mut self, group: &Demand, tasks: u64) {
        let needs = self.needs(group);
        let rest = absorb(&mut self.room, 0, &needs, tasks);
        if rest > 0 {
            let new = rest.div_ceil(self.density(group).max(1));
            self.used_workers += new;
            let from = self.room.len();
            self.room.push(Room {
                count: new,
                slots: u64::from(self.manager.worker_slots.max(1)),
                amounts: self
                    .manager
                    .capabilities
                    .iter()
                    .map(|(_, have)| *have)
                    .collect(),
                run: false,
            });
            absorb(&mut self.room, from, &needs, rest);
        }
        self.placed += tasks;
    }
}

/// Put up to `tasks` tasks with `needs` into `rooms[from..]`, filling each worker as far as it
/// goes (alike workers are split into those that took tasks and those that did not; the one
/// filled in part is moved to the end). Returns the tasks that did not fit.
///
/// A [`Room::run`] ends as the rooms it stands for would, filled one by one: those filled stay
/// in place, before those untouched. Otherwise the filled ones move to the end as well.
fn absorb(rooms: &mut Vec<Room>, from: usize, needs: &[u64], mut tasks: u64) -> u64 {
    let take = |room: &mut Room, n: u64| {
        room.slots -= n;
        for (amount, need) in room.amounts.iter_mut().zip(needs) {
            *amount -= n * need;
        }
    };
    let mut split = Vec::new();
    let old = std::mem::take(rooms);
    rooms.reserve(old.len() + 2);
    for (index, mut room) in old.into_iter().enumerate() {
        let fit = match index >= from && tasks > 0 {
            true => Plan::fits(&room, needs),
            false => 0,
        };
        if fit == 0 {
            rooms.push(room);
            continue;
        }
        let whole = (tasks / fit).min(room.count);
        if whole == room.count {
            take(&mut room, fit);
            tasks -= whole * fit;
            rooms.push(room);
            continue;
        }
        if whole > 0 {
            let mut full = room.clone();
            full.count = whole;
            take(&mut full, fit);
            match room.run {
                true => rooms.push(full),
                false => split.push(full),
            }
            room.count -= whole;
            tasks -= whole * fit;
        }
        if tasks > 0 {
            let mut one = room.clone();
            one.count = 1;
            take(&mut one, tasks);
            split.push(one);
            room.count -= 1;
            tasks = 0;
        }
        if room.count > 0 {
            rooms.push(room);
        }
    }
    rooms.extend(split);
    tasks
}

/// The need of `group` for capability `name` (0 where it needs none).
fn need_of(group: &Demand, name: &str) -> u64 {
    (group.capabilities.iter())
        .find(|(n, _)| n == name)
        .map_or(0, |(_, need)| *need)
}

/// The most of capability `name` one running task may hold: the largest need of it among demand
/// groups with running tasks.
pub(crate) fn largest_running_need(snapshot: &Snapshot, name: &str) -> u64 {
    snapshot
        .demand
        .iter()
        .filter(|g| g.running > 0)
        .filter_map(|g| {
            g.capabilities
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, need)| *need)
        })
        .max()
        .unwrap_or(0)
}

/// Place up to `wanted` tasks of `group` on one tier, shared in proportion to free capacity.
/// Returns how many were placed.
pub(crate) fn fill_tier(tier: &mut [Plan<'_>], group: &Demand, wanted: u64) -> u64 {
    let free: Vec<u64> = tier.iter().map(|p| p.free_for(group)).collect();
    let total: u128 = free.iter().map(|&f| u128::from(f)).sum();
    if total == 0 {
        return 0;
    }
    let take = u128::from(wanted).min(total);
    let mut shares: Vec<(u64, u128)> = free
        .iter()
        .map(|&f| {
            let exact = take * u128::from(f);
            ((exact / total) as u64, exact % total)
        })
        .collect();
    let mut leftover = take as u64 - shares.iter().map(|(s, _)| s).sum::<u64>();
    // Largest remainders get one more each; ties go to the earlier row.
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].1.cmp(&shares[a].1).then(a.cmp(&b)));
    for index in order {
        if leftover == 0 {
            break;
        }
        if shares[index].1 > 0 {
            shares[index].0 += 1;
            leftover -= 1;
        }
    }
    for (plan, (share, _)) in tier.iter_mut().zip(&shares) {
        if *share > 0 {
            plan.place(group, *share);
        }
    }
    take as u64
}
