"""The `engine` resource of cost_budget (see app.py and ../rust/src/lib.rs for the rules).

Content: `budget_per_hour, AMOUNT` once, and `WORKER_TYPE, COST_PER_WORKER_HOUR` rows.
"""

import heapq
import math
from typing import List

from componentize_py_types import Err
from wit_world.exports import scaling as wit
from wit_world.imports import cluster


def number(value: float) -> str:
    """A number as Rust's `Display` writes an f64 (`1`, `2.5`), so reasons read the same."""
    return str(int(value)) if value.is_integer() else repr(value)


def max_workers_for(manager: cluster.Manager, cap: int) -> int:
    slots = max(manager.worker_slots, 1)
    return 0 if cap == 0 else max(cap // slots, 1)


def verdict(manager: cluster.Manager, environment: str) -> cluster.Verdict:
    for name, found in manager.environments:
        if name == environment:
            return found
    return cluster.Verdict.UNKNOWN


class Plan:
    def __init__(self, manager: cluster.Manager, cost: float):
        self.manager = manager
        self.cost = cost
        self.cap = max_workers_for(manager, manager.max_task_concurrency)
        # Counted: a manager's worker list is asked for only to name the idle ones to stop.
        busy = manager.summary.busy
        self.target = min(busy, self.cap)
        self.placed = 0

    def serves(self, group: cluster.Demand) -> bool:
        def has(name: str) -> int:
            return next((v for n, v in self.manager.capabilities if n == name), 0)

        return all(need == 0 or has(name) >= need for name, need in group.capabilities) and all(
            verdict(self.manager, env) != cluster.Verdict.NO_MATCH for env in group.environments
        )

    def conclude(self, delay_ms: int, budget: float) -> wit.Decision:
        m = self.manager
        current = m.summary.busy + m.summary.idle + m.starting
        stop: List[int] = []
        if self.target >= current:
            desired = self.target
        else:
            # Starting workers go first, then idle ones past the delay, longest idle first.
            excess = current - self.target
            cancelled = min(excess, m.starting)
            excess -= cancelled
            listed = cluster.workers(m.id) if excess > 0 and m.summary.idle_past_delay > 0 else []
            idle = [w for w in listed if w.busy == 0 and w.idle_ms >= delay_ms]
            idle.sort(key=lambda w: (-w.idle_ms, w.id))
            stop = [w.id for w in idle[:excess]]
            desired = current - cancelled - len(stop)
        desired = min(desired, self.cap, 4294967295)
        reason = (
            f"{self.placed} queued task(s) placed at {number(self.cost)}/worker-hour -> "
            f"{desired} worker(s) (budget {number(budget)}/hour)"
        )
        return wit.Decision(manager_id=m.id, desired_workers=desired, stop=stop, drain=[], worker_reasons=[], reason=reason)


class Engine(wit.Engine):
    def __init__(self, budget: float, prices: List[tuple]):
        self.budget = budget
        self.prices = prices

    @classmethod
    def create(cls, content: str) -> "Engine":
        budget = None
        prices = []
        for n, line in enumerate(content.splitlines(), start=1):
            line = line.split("#")[0].strip()
            if not line:
                continue
            if "," not in line:
                raise Err(f"line {n}: expected `NAME, NUMBER`")
            name, value = line.split(",", 1)
            try:
                value = float(value.strip())
            except ValueError:
                raise Err(f"line {n}: invalid float literal")
            if not (value >= 0.0 and math.isfinite(value)):
                raise Err(f"line {n}: {number(value)} is not a cost")
            if name.strip() == "budget_per_hour":
                budget = value
            else:
                prices.append((name.strip(), value))
        prices.sort(key=lambda p: p[1])
        if budget is None:
            raise Err("no `budget_per_hour, AMOUNT` line")
        return cls(budget, prices)

    def tiers(self) -> List[wit.Tier]:
        tiers: List[wit.Tier] = []
        for name, cost in self.prices:
            priority = 1 + sum(1 for _, c in self.prices if c < cost)
            tier = next((t for t in tiers if t.priority == priority), None)
            if tier is None:
                tiers.append(wit.Tier(priority=priority, members=[name], settings=[]))
            else:
                tier.members.append(name)
        return tiers

    def decide(self, snapshot: cluster.Snapshot) -> List[wit.Decision]:
        plans = [
            Plan(m, cost)
            for kind, cost in self.prices
            for m in snapshot.managers
            if m.online and m.worker_type == kind
        ]
        left = self.budget - sum(p.target * p.cost for p in plans)
        for group in (g for g in snapshot.demand if g.queued > 0):
            queued = group.queued
            start = 0
            while start < len(plans) and queued > 0:
                price = plans[start].cost
                end = start
                while end < len(plans) and plans[end].cost == price:
                    end += 1
                # One worker at a time, to the manager of this price with the most room (ties
                # to the earlier): a heap of (-room, index) over those that can serve.
                rooms = [
                    (-(plans[i].cap - plans[i].target), i)
                    for i in range(start, end)
                    if plans[i].serves(group) and plans[i].target < plans[i].cap
                ]
                heapq.heapify(rooms)
                while queued > 0 and left + 1e-9 >= price and rooms:
                    room, i = heapq.heappop(rooms)
                    best = plans[i]
                    slots = max(best.manager.worker_slots, 1)
                    best.target += 1
                    best.placed += min(slots, queued)
                    queued = max(queued - slots, 0)
                    left -= price
                    if -room > 1:
                        heapq.heappush(rooms, (room + 1, i))
                start = end
        return [p.conclude(snapshot.scale_down_delay_ms, self.budget) for p in reversed(plans)]
