//! The messages of the scheduler process to its actor: from connection tasks, the policy
//! thread, `/metrics` and the dashboard. A leaf: the actor and each sender depend on it, it on
//! none of them.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::core::scaling::{PolicyFailure, ScalingPolicy, Tier};
use crate::core::scheduler::{ClientId, Input, PolicyInfo};
use crate::net::Outbox;
use crate::proto::{
    ComponentHash, EnvironmentStatus, JobSummary, ManagerState, ManagerUnits, PolicyReport,
    Request, Response, StatusReport, TaskId, ToManager, ToWorker, WorkerId, WorkerRegistration,
};

/// The answer to a joining worker's connection: its id, or why it is refused.
pub(crate) type JoinReply = oneshot::Sender<Result<WorkerId, String>>;

/// The answer to a joining manager's connection: its id, or why it is refused.
pub(crate) type ManagerReply = oneshot::Sender<Result<String, String>>;

/// Messages from connection tasks (and the policy thread, and `/metrics`) to the actor: the
/// core's own inputs, and those that bring a channel the actor keeps.
pub(crate) enum Event {
    /// Fed to the core as it is (heartbeats, reports, a worker or manager gone).
    Core(Input),
    WorkerJoined {
        info: WorkerRegistration,
        frames: Outbox<ToWorker>,
        reply: JoinReply,
    },
    Request {
        request: Request,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
        reply: Outbox<Response>,
    },
    /// A manager connection's first heartbeat: registered, or refused (its id is taken).
    ManagerJoined {
        state: ManagerState,
        peer: String,
        link: Outbox<ToManager>,
        reply: ManagerReply,
    },
    Decided {
        result: Result<Vec<crate::core::scaling::Decision>, PolicyFailure>,
        elapsed: Duration,
    },
    /// A new policy's trial ended: it is ready to take over (with its tiers), or why not.
    PolicyTried {
        client: Option<ClientId>,
        policy: PolicyInfo,
        result: Tried,
    },
    /// A scrape of `/metrics` (only the `http` feature's server sends it).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Metrics { reply: oneshot::Sender<String> },
    /// The dashboard's snapshot or a task's explanation.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Dashboard(View),
}

/// What the actor answers for the page.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) enum View {
    Snapshot(oneshot::Sender<Snapshot>),
    /// The snapshot without what grows with the workers (the worker list, environments,
    /// units, jobs): what the dashboard's history needs each second when no page is open.
    Sample(oneshot::Sender<Snapshot>),
    Explain(TaskId, oneshot::Sender<Option<Vec<String>>>),
    /// The task stream of the last this many ms: (the scheduler's now, the runs).
    Stream(u64, oneshot::Sender<(u64, Vec<crate::core::tasks::Run>)>),
    /// One job's page (`None`: no such job held).
    Job(
        crate::proto::JobId,
        oneshot::Sender<Option<crate::core::tasks::JobDetail>>,
    ),
}

/// One consistent picture of the scheduler, as the page shows it.
#[derive(Serialize)]
pub(crate) struct Snapshot {
    pub status: StatusReport,
    pub environments: Vec<EnvironmentStatus>,
    /// The newest jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// Its tiers, last decision per manager with the reason, and last error.
    pub policy: PolicyReport,
    /// Each manager's units (`weir managers`).
    pub managers: Vec<ManagerUnits>,
    /// The scheduler replicas as the leader sees them (`weir replicas`); empty for one
    /// scheduler.
    pub replicas: Vec<crate::proto::ReplicaStatus>,
    /// The last decision applied for each manager, with its stops and drains.
    pub decisions: Vec<crate::core::scaling::Decision>,
    /// The demand the policy last saw: queued and running per group, queue age, run times.
    pub demand: Vec<crate::core::scheduler::DemandView>,
}

/// A tried policy, ready to take over, with its tiers; or why it cannot.
pub(super) type Tried = Result<(Box<dyn ScalingPolicy>, Vec<Tier>), PolicyFailure>;

/// Where connections and the HTTP side send their events: the actor of the moment. A single
/// scheduler has one for its life; a replica has one while it leads (a new one each time it
/// comes to lead), and none while it follows: a peer is then told where the leader is.
#[derive(Clone)]
pub(crate) struct Front {
    current: tokio::sync::watch::Receiver<Option<mpsc::UnboundedSender<Event>>>,
}

impl Front {
    /// A front with no actor yet, and the handle that sets it.
    pub(crate) fn new() -> (
        tokio::sync::watch::Sender<Option<mpsc::UnboundedSender<Event>>>,
        Front,
    ) {
        let (set, current) = tokio::sync::watch::channel(None);
        (set, Front { current })
    }

    /// The actor's inbox now (`None`: a replica that does not lead).
    pub(crate) fn events(&self) -> Option<mpsc::UnboundedSender<Event>> {
        self.current.borrow().clone()
    }

    /// An error when no actor takes it (a replica that does not lead, a scheduler stopping).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn send(&self, event: Event) -> Result<(), NoActor> {
        match self.events() {
            Some(events) => events.send(event).map_err(|_| NoActor),
            None => Err(NoActor),
        }
    }
}

/// No actor took the event ([`Front::send`]).
#[derive(Debug)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct NoActor;
