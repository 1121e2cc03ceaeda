// cost_budget in JavaScript: the same policy as ../rust/src/lib.rs, rule for rule, so both give
// the same decisions on the same snapshots (tests/policies.rs checks it).
//
// componentize-qjs (QuickJS) turns this ES module into a component of the `policy` world
// (build.sh). The exported `scaling` interface is an object holding the `engine` resource's
// class; records have camel-cased keys, enums are their case names, and throwing a string from
// `create` returns the WIT `result`'s error.
//
// Content: `budget_per_hour, AMOUNT` once, and `WORKER_TYPE, COST_PER_WORKER_HOUR` rows.

// weir:plugin@0.2.0: a manager's workers come counted (`manager.summary`); the list of one
// manager's workers is the imported `cluster.workers(id)`.
import cluster from "weir:plugin/cluster@0.2.0";

// A binary heap of [room, index]: the most room first, ties to the smaller index.
class Heap {
  constructor() {
    this.items = [];
  }
  size() {
    return this.items.length;
  }
  before(a, b) {
    return a[0] > b[0] || (a[0] === b[0] && a[1] < b[1]);
  }
  push(item) {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }
  pop() {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < items.length && this.before(items[l], items[best])) best = l;
        if (r < items.length && this.before(items[r], items[best])) best = r;
        if (best === i) break;
        [items[i], items[best]] = [items[best], items[i]];
        i = best;
      }
    }
    return top;
  }
}

function maxWorkersFor(manager, cap) {
  const slots = Math.max(manager.workerSlots, 1);
  return cap === 0 ? 0 : Math.max(Math.floor(cap / slots), 1);
}

function verdict(manager, environment) {
  const found = manager.environments.find(([name]) => name === environment);
  return found ? found[1] : "unknown";
}

class Plan {
  constructor(manager, cost) {
    this.manager = manager;
    this.cost = cost;
    this.cap = maxWorkersFor(manager, manager.maxTaskConcurrency);
    // Counted: a manager's worker list is asked for only to name the idle ones to stop.
    const busy = manager.summary.busy;
    this.target = Math.min(busy, this.cap);
    this.placed = 0;
  }

  serves(group) {
    const has = (name) => {
      const found = this.manager.capabilities.find(([n]) => n === name);
      return found ? found[1] : 0;
    };
    return (
      group.capabilities.every(([name, need]) => need === 0 || has(name) >= need) &&
      group.environments.every((env) => verdict(this.manager, env) !== "no-match")
    );
  }

  conclude(delayMs, budget) {
    const m = this.manager;
    const current = m.summary.busy + m.summary.idle + m.starting;
    let stop = [];
    let desired;
    if (this.target >= current) {
      desired = this.target;
    } else {
      // Starting workers go first, then idle ones past the delay, longest idle first.
      let excess = current - this.target;
      const cancelled = Math.min(excess, m.starting);
      excess -= cancelled;
      const listed = excess > 0 && m.summary.idlePastDelay > 0 ? cluster.workers(m.id) : [];
      const idle = listed.filter((w) => w.busy === 0 && w.idleMs >= delayMs);
      idle.sort((a, b) => b.idleMs - a.idleMs || a.id - b.id);
      stop = idle.slice(0, excess).map((w) => w.id);
      desired = current - cancelled - stop.length;
    }
    desired = Math.min(desired, this.cap, 4294967295);
    return {
      managerId: m.id,
      desiredWorkers: desired,
      stop,
      drain: [],
      workerReasons: [],
      reason: `${this.placed} queued task(s) placed at ${this.cost}/worker-hour -> ${desired} worker(s) (budget ${budget}/hour)`,
    };
  }
}

class Engine {
  constructor(budget, prices) {
    this.budget = budget;
    this.prices = prices;
  }

  static create(content) {
    let budget = null;
    const prices = [];
    content.split(/\r?\n/).forEach((raw, index) => {
      const n = index + 1;
      const line = raw.split("#")[0].trim();
      if (line === "") return;
      const comma = line.indexOf(",");
      if (comma < 0) throw `line ${n}: expected \`NAME, NUMBER\``;
      const name = line.slice(0, comma).trim();
      const text = line.slice(comma + 1).trim();
      const value = Number(text);
      if (text === "" || Number.isNaN(value)) throw `line ${n}: invalid float literal`;
      if (!(value >= 0 && Number.isFinite(value))) throw `line ${n}: ${value} is not a cost`;
      if (name === "budget_per_hour") budget = value;
      else prices.push([name, value]);
    });
    // Array.prototype.sort is stable: rows of one price keep their order.
    prices.sort((a, b) => a[1] - b[1]);
    if (budget === null) throw "no `budget_per_hour, AMOUNT` line";
    return new Engine(budget, prices);
  }

  tiers() {
    const tiers = [];
    for (const [name, cost] of this.prices) {
      const priority = 1 + this.prices.filter(([, c]) => c < cost).length;
      const tier = tiers.find((t) => t.priority === priority);
      if (tier) tier.members.push(name);
      else tiers.push({ priority, members: [name], settings: [] });
    }
    return tiers;
  }

  decide(snapshot) {
    const plans = [];
    for (const [kind, cost] of this.prices) {
      for (const m of snapshot.managers) {
        if (m.online && m.workerType === kind) plans.push(new Plan(m, cost));
      }
    }
    let left = this.budget - plans.reduce((sum, p) => sum + p.target * p.cost, 0);
    for (const group of snapshot.demand.filter((g) => g.queued > 0)) {
      let queued = group.queued;
      let start = 0;
      while (start < plans.length && queued > 0) {
        const price = plans[start].cost;
        let end = start;
        while (end < plans.length && plans[end].cost === price) end++;
        // One worker at a time, to the manager of this price with the most room (ties to the
        // earlier): a heap of [room, index] over those that can serve.
        const rooms = new Heap();
        for (let i = start; i < end; i++) {
          if (plans[i].serves(group) && plans[i].target < plans[i].cap) {
            rooms.push([plans[i].cap - plans[i].target, i]);
          }
        }
        while (queued > 0 && left + 1e-9 >= price && rooms.size() > 0) {
          const [room, i] = rooms.pop();
          const best = plans[i];
          const slots = Math.max(best.manager.workerSlots, 1);
          best.target += 1;
          best.placed += Math.min(slots, queued);
          queued = Math.max(queued - slots, 0);
          left -= price;
          if (room > 1) rooms.push([room - 1, i]);
        }
        start = end;
      }
    }
    return plans.reverse().map((p) => p.conclude(snapshot.scaleDownDelayMs, this.budget));
  }
}

export const scaling = { Engine };
