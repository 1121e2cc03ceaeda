//! The policy thread: a slow or looping policy (stopped by its deadline) never holds up the
//! actor. Snapshots in, `Event::Decided` out; and a new policy (`weir policy set`) created,
//! tried once on the last snapshot and switched to only if both work.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::event::{Event, Tried};
use crate::core::scaling::{PolicyFailure, ScalingPolicy, Snapshot};
use crate::core::scheduler::{ClientId, PolicyInfo};
use crate::plugin::{Limits, PluginHost, World};

/// Work for the policy thread, in order.
pub(super) enum PolicyJob {
    Decide(Arc<Snapshot>),
    /// A new policy that passed its trial: it decides from the next snapshot on.
    Replace(Box<dyn ScalingPolicy>),
}

/// Where the running policy decides: on a thread of its own (the host's), or in line on the
/// actor's task ([`super::Seams::policy_inline`]: a simulation, where a decision must land at
/// the step it was asked for, whatever the machine's threads do, so a seed replays).
pub(super) enum PolicyRunner {
    Thread(std::sync::mpsc::Sender<PolicyJob>),
    Inline {
        policy: Box<dyn ScalingPolicy>,
        events: mpsc::UnboundedSender<Event>,
    },
}

impl PolicyRunner {
    pub(super) fn new(
        policy: Box<dyn ScalingPolicy>,
        events: mpsc::UnboundedSender<Event>,
        inline: bool,
    ) -> PolicyRunner {
        match inline {
            true => PolicyRunner::Inline { policy, events },
            false => PolicyRunner::Thread(policy_thread(policy, events)),
        }
    }

    /// Hand `job` over (in line: do it now); `false` if the thread is gone.
    pub(super) fn send(&mut self, job: PolicyJob) -> bool {
        match self {
            PolicyRunner::Thread(thread) => thread.send(job).is_ok(),
            PolicyRunner::Inline { policy, events } => match job {
                PolicyJob::Decide(snapshot) => {
                    events.send(decide(policy.as_mut(), &snapshot)).is_ok()
                }
                PolicyJob::Replace(new) => {
                    *policy = new;
                    true
                }
            },
        }
    }
}

fn decide(policy: &mut dyn ScalingPolicy, snapshot: &Arc<Snapshot>) -> Event {
    let started = std::time::Instant::now();
    let result = policy.decide(snapshot);
    Event::Decided {
        result,
        elapsed: started.elapsed(),
    }
}

fn policy_thread(
    mut policy: Box<dyn ScalingPolicy>,
    events: mpsc::UnboundedSender<Event>,
) -> std::sync::mpsc::Sender<PolicyJob> {
    let (jobs, inbox) = std::sync::mpsc::channel::<PolicyJob>();
    let spawned = std::thread::Builder::new()
        .name("weir-policy".into())
        .spawn(move || {
            while let Ok(job) = inbox.recv() {
                match job {
                    PolicyJob::Decide(snapshot) => {
                        if events.send(decide(policy.as_mut(), &snapshot)).is_err() {
                            return;
                        }
                    }
                    PolicyJob::Replace(new) => policy = new,
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the policy thread: no scaling");
    }
    jobs
}

/// Where a new policy is tried: on a thread of its own, so a policy that takes its whole
/// deadline to be created never holds up the running one's decisions.
#[derive(Clone)]
pub(super) struct Trials {
    pub host: Arc<PluginHost>,
    pub limits: Limits,
    pub events: mpsc::UnboundedSender<Event>,
}

impl Trials {
    /// Try `info` on `snapshot` and report `Event::PolicyTried`.
    pub(super) fn start(
        &self,
        client: Option<ClientId>,
        info: PolicyInfo,
        snapshot: Option<Arc<Snapshot>>,
    ) {
        let trials = self.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-policy-trial".into())
            .spawn(move || {
                let result = try_policy(&trials.host, &info, snapshot.as_ref(), trials.limits);
                let _ = trials.events.send(Event::PolicyTried {
                    client,
                    policy: info,
                    result,
                });
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start a thread to try the new policy");
        }
    }
}

/// Create the policy and run it once on `snapshot`: only a policy that does both takes over.
pub(super) fn try_policy(
    host: &PluginHost,
    info: &PolicyInfo,
    snapshot: Option<&Arc<Snapshot>>,
    limits: Limits,
) -> Tried {
    let bytes = info.bytes.as_deref().ok_or(PolicyFailure::NoComponent)?;
    let loaded = host.load(&info.name, bytes, Some(World::Policy))?;
    let mut policy = host.policy(&loaded, &info.content, limits)?;
    let tiers = policy.tiers()?;
    if let Some(snapshot) = snapshot {
        // Its decision is checked, not applied: the next tick's is.
        policy
            .decide(snapshot)
            .map_err(|e| PolicyFailure::OnLastSnapshot(Box::new(e.into())))?;
    }
    Ok((Box::new(policy), tiers))
}
