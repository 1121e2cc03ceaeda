//! The journal compacted (at start, once big enough) and environment waits that end.

use super::*;

#[test]
fn the_journal_is_compacted_only_once_big_enough_and_as_it_was_at_that_point() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit(2))],
    );
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    round(
        &mut core,
        1,
        vec![
            Input::Finished { worker: 1, results },
            from_client(2, Request::Forget { job: 1 }),
        ],
    );
    // Everything was forgotten, but the journal is small: not worth rewriting.
    core.handle(
        2,
        Input::Synced {
            journal_bytes: 4096,
        },
    );
    core.handle(500, Input::Timeout);
    let actions = core.take_actions();
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Compact(_))),
        "{actions:#?}"
    );
    core.handle(
        501,
        Input::Synced {
            journal_bytes: 2 << 20,
        },
    );
    core.handle(1_000, Input::Timeout);
    let image = core
        .take_actions()
        .into_iter()
        .find_map(|a| match a {
            Action::Compact(records) => Some(records),
            _ => None,
        })
        .expect("compacted once big enough");
    assert!(matches!(
        image.first(),
        Some(Record::Base { first_job: 2, .. })
    ));
    assert!(matches!(image.last(), Some(Record::Compacted)));
}

/// At start the core decides: a journal holding forgotten jobs is compacted whatever its size
/// (into the state replayed), one without them is left as it is.
#[test]
fn a_journal_with_forgotten_jobs_is_compacted_at_start_whatever_its_size() {
    let mut core = Scheduler::new(config(true));
    let mut rounds = Vec::new();
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit(2))],
    );
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    rounds.push(actions);
    rounds.push(round(
        &mut core,
        1,
        vec![Input::Finished { worker: 1, results }],
    ));
    // A scheduler started from what the rounds so far journaled.
    let start = |rounds: &[Vec<Action>]| restarted(rounds.iter().flat_map(|a| journaled(a)));
    let kept = start(&rounds);
    assert!(kept.is_empty(), "nothing forgotten: {kept:#?}");
    rounds.push(round(
        &mut core,
        2,
        vec![from_client(2, Request::Forget { job: 1 })],
    ));
    match &start(&rounds)[..] {
        [Action::Compact(image)] => {
            assert!(matches!(
                image.first(),
                Some(Record::Base { first_job: 2, .. })
            ));
            assert!(matches!(image.last(), Some(Record::Compacted)));
        }
        other => panic!("compacted at start: {other:#?}"),
    }
}

/// A compacted journal that still names a forgotten job (kept for its ids: a job before it is
/// held) is not compacted again at the next start: its closing `Compacted` ends the count of
/// what was forgotten (it would be rewritten at every start otherwise).
#[test]
fn a_compacted_journal_is_not_compacted_again_at_start() {
    let mut core = Scheduler::new(config(true));
    let mut records = Vec::new();
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 4)),
            from_client(1, submit(2)),
            from_client(2, submit(2)),
        ],
    );
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    records.extend(journaled(&actions));
    let finished = round(&mut core, 1, vec![Input::Finished { worker: 1, results }]);
    records.extend(journaled(&finished));
    let forgot = round(
        &mut core,
        2,
        vec![from_client(3, Request::Forget { job: 2 })],
    );
    records.extend(journaled(&forgot));
    let image: Vec<Record> = match &restarted(records)[..] {
        [Action::Compact(image)] => image.iter().map(copy).collect(),
        other => panic!("compacted at start: {other:#?}"),
    };
    assert!(
        image.iter().any(|r| matches!(r, Record::Forget { job: 2 })),
        "the image keeps job 2's place: {image:#?}"
    );
    let again = restarted(image);
    assert!(again.is_empty(), "compacted again: {again:#?}");
}

/// An `env register --wait` whose environment is removed meanwhile is answered at once (no
/// worker would ever give a verdict on it), not left waiting.
#[test]
fn an_environment_wait_ends_when_its_environment_is_removed() {
    let mut core = Scheduler::new(config(false));
    let register = Input::Request {
        client: 1,
        request: Request::EnvRegister {
            name: "big".into(),
            component: vec![],
            config: vec![],
            wait: true,
        },
        components: vec![([3; 32], std::sync::Arc::from(&b"c"[..]))],
    };
    let actions = round(&mut core, 0, vec![join(1, worker("w1", 1)), register]);
    assert!(replies(&actions, 1).is_empty(), "waits for w1's verdict");
    let remove = from_client(2, Request::EnvRemove { name: "big".into() });
    let actions = round(&mut core, 1, vec![remove]);
    assert!(matches!(
        replies(&actions, 1)[..],
        [(
            Response::Error {
                code: weir_proto::ErrorCode::NotFound,
                ..
            },
            true
        )]
    ));
}

#[test]
fn an_environment_wait_ends_when_the_worker_it_waits_for_falls_silent() {
    let mut core = Scheduler::new(config(false));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 1)),
            Input::Request {
                client: 1,
                request: Request::EnvRegister {
                    name: "big".into(),
                    component: vec![],
                    config: vec![],
                    wait: true,
                },
                components: vec![([3; 32], std::sync::Arc::from(&b"c"[..]))],
            },
        ],
    );
    assert!(replies(&actions, 1).is_empty());
    // No heartbeat past the timeout: lost, and the wait answers without it.
    core.handle(20_000, Input::Timeout);
    core.handle(20_000, Input::EndOfBatch);
    let actions = core.take_actions();
    assert!(matches!(
        replies(&actions, 1)[..],
        [(Response::Environments(_), true)]
    ));
}
