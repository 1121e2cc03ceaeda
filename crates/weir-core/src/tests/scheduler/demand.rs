//! The dashboard's demand table ([`Scheduler::last_demand`]): each group of the policy's last
//! snapshot with the managers that could serve it.

use super::*;

#[test]
fn the_demand_table_counts_the_managers_able_to_serve_each_group() {
    let mut core = Scheduler::new(config(false));
    let names: Vec<String> = (1..=2).map(|i| format!("m1-7-{i}")).collect();
    let mut state = manager("m1");
    state.max_task_concurrency = 3;
    state.workers = names.clone();
    let mut inputs = vec![manager_joins(state)];
    for (i, name) in names.iter().enumerate() {
        let mut info = worker(name, 1);
        info.manager = Some("m1".into());
        inputs.push(join(i as u64 + 1, info));
    }
    round(&mut core, 0, inputs);
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
    // m1 could run them; it runs 2 workers of its 3 and none is idle.
    assert_eq!((group.able, group.below_cap, group.idle_workers), (1, 1, 0));
}
