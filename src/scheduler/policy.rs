//! The policy thread: a slow or looping policy (stopped by its deadline) never holds up the
//! actor. Snapshots in, `Event::Decided` out; and a new policy (`weir policy set`) created,
//! tried once on the last snapshot and switched to only if both work.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Event;
use crate::core::scaling::{ScalingPolicy, Snapshot, Tier};
use crate::core::scheduler::{ClientId, PolicyInfo};
use crate::plugin::{Limits, PluginHost, World};

/// Work for the policy thread, in order.
pub(super) enum PolicyJob {
    Decide(Snapshot),
    Swap {
        client: Option<ClientId>,
        policy: PolicyInfo,
        snapshot: Option<Snapshot>,
    },
}

pub(super) fn policy_thread(
    mut policy: Box<dyn ScalingPolicy>,
    host: Arc<PluginHost>,
    limits: Limits,
    events: mpsc::UnboundedSender<Event>,
) -> std::sync::mpsc::Sender<PolicyJob> {
    let (jobs, inbox) = std::sync::mpsc::channel::<PolicyJob>();
    let spawned = std::thread::Builder::new()
        .name("weir-policy".into())
        .spawn(move || {
            while let Ok(job) = inbox.recv() {
                let event = match job {
                    PolicyJob::Decide(snapshot) => {
                        let started = std::time::Instant::now();
                        let result = policy.decide(&snapshot).map_err(|e| e.to_string());
                        let elapsed = started.elapsed();
                        Event::Decided { result, elapsed }
                    }
                    PolicyJob::Swap {
                        client,
                        policy: info,
                        snapshot,
                    } => {
                        let tried = try_policy(&host, &info, snapshot.as_ref(), limits.clone());
                        let result = match tried {
                            Ok((new, tiers)) => {
                                policy = new;
                                Ok(tiers)
                            }
                            Err(error) => Err(error),
                        };
                        Event::PolicySwapped {
                            client,
                            policy: info,
                            result,
                        }
                    }
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the policy thread: no scaling");
    }
    jobs
}

/// Create the policy and run it once on `snapshot`: only a policy that does both takes over.
pub(super) fn try_policy(
    host: &PluginHost,
    info: &PolicyInfo,
    snapshot: Option<&Snapshot>,
    limits: Limits,
) -> Result<(Box<dyn ScalingPolicy>, Vec<Tier>), String> {
    let bytes = info.bytes.as_deref().ok_or("no component")?;
    let loaded = host
        .load(&info.name, bytes, Some(World::Policy))
        .map_err(|e| e.to_string())?;
    let mut policy = host
        .policy(&loaded, &info.content, limits)
        .map_err(|e| e.to_string())?;
    let tiers = policy.tiers().map_err(|e| e.to_string())?;
    if let Some(snapshot) = snapshot {
        // Its decision is checked, not applied: the next tick's is.
        policy
            .decide(snapshot)
            .map_err(|e| format!("on the last snapshot: {e}"))?;
    }
    Ok((Box::new(policy), tiers))
}
