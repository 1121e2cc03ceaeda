//! What makes the scheduler's actor: one for a single scheduler's life ([`Leading::actor`]),
//! one for each term a replica leads ([`terms`]), with the start policy made again for each.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::replica::{self, Replica};
use super::{Event, Scaling, SchedulerError, Settings, actor, fence, journal, policy};
use crate::core::scaling::Tier;
use crate::core::scheduler::{Action, Config, Input, PolicyInfo, Scheduler};
use crate::core::tasks;
use crate::plugin::PluginHost;

/// The inbox of the actor of the moment ([`super::Front`]); `None` while none leads.
pub(super) type SetFront = watch::Sender<Option<mpsc::UnboundedSender<Event>>>;

/// Lead each term this replica is elected for: its actor on the committed records, until it
/// is deposed or cannot commit; an error once its Raft has stopped for good.
pub(super) async fn terms(
    started: &Arc<Replica>,
    leading: &mut Leading,
    set_front: &SetFront,
) -> Result<(), SchedulerError> {
    loop {
        let (term, batches) = started.lead().await.map_err(SchedulerError::Replica)?;
        if started.stopped() {
            return Err(SchedulerError::Replica(
                "this replica's Raft stopped (see the error above)".into(),
            ));
        }
        // A replica that stopped leading for want of a majority, and still believes it leads
        // (it does not hear of the new leader while cut off), serves nobody until a majority
        // confirms it again: else it would take workers in, never to answer them.
        if let Err(error) = started.commit(Vec::new()).await {
            tracing::info!(replica = started.id, term, %error, "not serving: the lead is not confirmed");
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        // Confirmed in a later term than the records were read in (lost and won again while it
        // waited): another leader may have committed more since; read them again.
        if started.raft.metrics().borrow().current_term != term {
            continue;
        }
        // Replayed off the runtime's thread: Raft's heartbeats go on meanwhile (a replay longer
        // than the election timeout would otherwise cost this replica its lead).
        let config = leading.config.clone();
        let replay = move || {
            let records = replica::decode(&batches)?;
            let count = records.len();
            let mut core = Scheduler::restored(config, records, 0);
            // A replica's log is compacted by its snapshots, not by the core.
            while core.poll_action().is_some() {}
            Ok::<_, String>((core, count))
        };
        let replayed = match started.inline {
            true => replay(),
            false => tokio::task::spawn_blocking(replay)
                .await
                .unwrap_or_else(|e| Err(format!("the replay's thread failed: {e}"))),
        };
        let (core, count) = match replayed {
            Ok(replayed) => replayed,
            Err(error) => {
                tracing::error!(replica = started.id, term, %error, "cannot replay the committed records: not serving");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        tracing::info!(
            replica = started.id,
            term,
            records = count,
            "this replica leads: the committed records replayed"
        );
        let (mut actor, inbox, events) = leading.actor_on(core);
        actor.replica = Some(started.clone());
        if let Some(hook) = &started.on_lead {
            (hook.0)(started.id, term);
        }
        set_front.send_replace(Some(events));
        let mut run = tokio::spawn(actor.run(inbox));
        tokio::select! {
            ended = &mut run => {
                if let Ok(Some(why)) = ended {
                    tracing::warn!(replica = started.id, term, "{why}");
                }
            }
            _ = started.deposed(term) => {
                run.abort();
                tracing::info!(replica = started.id, term, "this replica no longer leads");
            }
        }
        // Connections of this term end with its actor (their channels close); new ones are told
        // where the leader is until this replica leads again.
        set_front.send_replace(None);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The core's settings from the scheduler's.
pub(super) fn core_config(settings: &Settings, scaling: Option<&Scaling>, journal: bool) -> Config {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Config {
        tasks: tasks::Config {
            heartbeat_timeout_ms: millis(settings.heartbeat_timeout),
            idle_silence_ms: millis(crate::core::lease::idle_silence(
                settings.worker_lease,
                settings.heartbeat_timeout,
            )),
            forget_after_ms: settings.forget_after.map(millis),
            fence_ms: millis(fence(settings.worker_lease)),
            prefetch: settings.prefetch,
            max_walltime_requeues: settings.max_walltime_requeues,
            ..tasks::Config::default()
        },
        manager_timeout_ms: millis(settings.heartbeat_timeout),
        manager_forget_ms: millis(settings.manager_forget_after),
        lease_ms: millis(settings.worker_lease),
        idle_pace_per_worker_us: u64::try_from(settings.idle_pace_per_worker.as_micros())
            .unwrap_or(u64::MAX),
        // At least twice a second, whatever the heartbeat timeout: fenced tasks are released,
        // forgotten jobs dropped and unschedulable ones failed on this tick.
        tick_ms: millis(settings.heartbeat_timeout / 4).clamp(50, 500),
        scaling_ms: scaling.map(|_| millis(settings.scaling_interval).max(1)),
        scale_down_delay_ms: millis(settings.scale_down_delay),
        max_drain_percent: settings.max_drain_percent,
        unschedulable_timeout_ms: settings.unschedulable_timeout.map(millis),
        // A worker of the previous run still running tasks under its lease comes back within
        // this: it takes the scheduler for gone after `IDLE_TIMEOUT` of silence and connects
        // again (each attempt bounded by `CONNECT_TIMEOUT`), and its tasks wait out their fence
        // meanwhile. An idle one may take its idle pace longer; it holds nothing.
        restart_grace_ms: millis(
            fence(settings.worker_lease) + crate::net::IDLE_TIMEOUT + crate::net::CONNECT_TIMEOUT,
        ),
        policy: scaling.map(|s| s.info.clone()).unwrap_or_default(),
        tiers: scaling.map(|s| s.tiers.clone()).unwrap_or_default(),
        journal,
        // Smaller journals are not worth rewriting while running (at start they are).
        compact_min_bytes: 1 << 20,
    }
}

/// What makes an actor: one for a single scheduler's life, one per term a replica leads.
pub(super) struct Leading {
    config: Config,
    /// The start policy; taken by the first actor, made again from its component for later ones.
    scaling: Option<Scaling>,
    host: Arc<PluginHost>,
    record: Option<std::fs::File>,
    clock: Arc<dyn crate::clock::Clock>,
    policy_inline: bool,
    /// Actors made so far.
    terms: u32,
    start: Option<StartPolicy>,
}

impl Leading {
    pub(super) fn new(
        config: Config,
        scaling: Option<Scaling>,
        host: Arc<PluginHost>,
        record: Option<std::fs::File>,
        clock: Arc<dyn crate::clock::Clock>,
        policy_inline: bool,
    ) -> Leading {
        Leading {
            config,
            scaling,
            host,
            record,
            clock,
            policy_inline,
            terms: 0,
            start: None,
        }
    }

    /// An actor on the journal's records (and appending to it), its inbox and the inbox's sender.
    pub(super) fn actor(
        &mut self,
        journal: Option<(journal::Journal, Vec<journal::Record>)>,
    ) -> (
        actor::Actor,
        mpsc::UnboundedReceiver<Event>,
        mpsc::UnboundedSender<Event>,
    ) {
        // Replayed before the actor's clock starts: a fence counts from after the replay.
        let config = self.config.clone();
        let (core, journal) = match journal {
            Some((journal, records)) => (Scheduler::restored(config, records, 0), Some(journal)),
            None => (Scheduler::new(config), None),
        };
        self.make(core, journal)
    }

    /// An actor for a replica's term, on a core the committed records were replayed into.
    pub(super) fn actor_on(
        &mut self,
        core: Scheduler,
    ) -> (
        actor::Actor,
        mpsc::UnboundedReceiver<Event>,
        mpsc::UnboundedSender<Event>,
    ) {
        self.make(core, None)
    }

    fn make(
        &mut self,
        core: Scheduler,
        journal: Option<journal::Journal>,
    ) -> (
        actor::Actor,
        mpsc::UnboundedReceiver<Event>,
        mpsc::UnboundedSender<Event>,
    ) {
        self.terms += 1;
        let (events, inbox) = mpsc::unbounded_channel();
        let record = self.record.as_ref().and_then(|f| f.try_clone().ok());
        let mut actor = actor::Actor::new(core, self.clock.clone(), None, record, journal);
        actor.compact_at_start();
        // The start policy: the one given for the first actor, made again for later ones.
        let mut scaling = match self.terms {
            1 => self.scaling.take(),
            _ => self.scaling_again(),
        };
        if let Some(scaling) = scaling.as_ref().filter(|_| self.terms == 1) {
            self.start = Some(StartPolicy {
                info: scaling.info.clone(),
                tiers: scaling.tiers.clone(),
                limits: scaling.limits.clone(),
                component: scaling.component.clone(),
            });
        }
        // A policy set while running before the restart runs again, from the first tick on.
        if let (Some(scaling), Some(Action::SwapPolicy { client, policy, .. })) =
            (&mut scaling, actor.core.restored_policy())
        {
            let result = policy::try_policy(&self.host, &policy, None, scaling.limits.clone()).map(
                |(restored, tiers)| {
                    scaling.policy = restored;
                    tiers
                },
            );
            let now = actor.now();
            let swapped = Input::PolicySwapped {
                client,
                policy,
                result,
            };
            actor.core.handle(now, swapped);
        }
        if let Some(scaling) = scaling {
            actor.trials = Some(policy::Trials {
                host: self.host.clone(),
                limits: scaling.limits.clone(),
                events: events.clone(),
            });
            actor.policy = Some(policy::PolicyRunner::new(
                scaling.policy,
                events.clone(),
                self.policy_inline,
            ));
        }
        (actor, inbox, events)
    }

    /// The start policy made again (for a replica's later terms), from its component.
    fn scaling_again(&self) -> Option<Scaling> {
        let start = self.start.as_ref()?;
        let Some(bytes) = &start.component else {
            tracing::error!(policy = %start.info.name, "the start policy cannot be made again (its component was not kept): no scaling this term");
            return None;
        };
        let info = PolicyInfo {
            bytes: Some(bytes.clone()),
            ..start.info.clone()
        };
        match policy::try_policy(&self.host, &info, None, start.limits.clone()) {
            Ok((policy, _)) => Some(Scaling {
                policy,
                tiers: start.tiers.clone(),
                info: start.info.clone(),
                limits: start.limits.clone(),
                component: start.component.clone(),
            }),
            Err(error) => {
                tracing::error!(policy = %start.info.name, %error, "the start policy cannot be made again: no scaling this term");
                None
            }
        }
    }
}

/// The start policy as given (without the running instance).
struct StartPolicy {
    info: PolicyInfo,
    tiers: Vec<Tier>,
    limits: crate::plugin::Limits,
    component: Option<Arc<[u8]>>,
}
