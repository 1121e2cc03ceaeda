//! The dashboard's demand table ([`Scheduler::last_demand`]): each group of the policy's last
//! snapshot with the managers that could serve it.

use super::*;

#[test]
fn the_demand_table_counts_the_managers_able_to_serve_each_group() {
    // m1 (cap 100) with two one-slot workers.
    let (mut core, _) = super::drain::with_workers(2, 10);
    assert!(core.last_demand().is_empty(), "no snapshot yet");
    round(&mut core, 10, vec![from_client(1, submit(5))]);
    core.handle(1_000, Input::Timeout);
    assert!(
        (core.take_actions().iter()).any(|a| matches!(a, Action::Decide(_))),
        "a snapshot handed to the policy"
    );
    let demand = core.last_demand();
    assert_eq!(demand.len(), 1, "{demand:?}");
    let group = &demand[0];
    assert_eq!((group.demand.queued, group.demand.running), (3, 2));
    // m1 could run them; it runs 2 workers, below its cap, and none is idle.
    assert_eq!((group.able, group.below_cap, group.idle_workers), (1, 1, 0));
}
