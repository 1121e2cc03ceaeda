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
    Decide(Snapshot),
    /// A new policy that passed its trial: it decides from the next snapshot on.
    Replace(Box<dyn ScalingPolicy>),
}

pub(super) fn policy_thread(
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
                        let started = std::time::Instant::now();
                        let result = policy.decide(&snapshot);
                        let elapsed = started.elapsed();
                        if events.send(Event::Decided { result, elapsed }).is_err() {
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
        snapshot: Option<Snapshot>,
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
    snapshot: Option<&Snapshot>,
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
