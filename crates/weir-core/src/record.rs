//! What the journal records: everything a restarted scheduler needs to rebuild its state. The
//! core emits these ([`super::scheduler::Action::Journal`]) and replays them
//! ([`super::scheduler::Input::Replay`]); `scheduler/record.rs` frames them on disk.

use serde::{Deserialize, Serialize};

use weir_proto::{
    ComponentHash, EnvironmentDef, JobId, NewGroup, Outcome, RequestId, TaskId, TaskState,
};

#[derive(Debug, Serialize, Deserialize)]
pub enum Record {
    /// Components first time seen, then the groups of one job.
    Submit {
        #[serde(with = "weir_proto::bytes::keyed")]
        components: Vec<(ComponentHash, Vec<u8>)>,
        groups: Vec<NewGroup>,
    },
    /// Tasks that reached a final state: (task, state, outcome, attempts).
    Final(Vec<(TaskId, TaskState, Outcome, u32)>),
    EnvRegister {
        def: EnvironmentDef,
        #[serde(with = "weir_proto::bytes::one")]
        component: Vec<u8>,
    },
    EnvRemove {
        name: String,
    },
    /// A finished job was forgotten (`weir forget`, `--forget-after`).
    Forget {
        job: JobId,
    },
    /// First in a compacted journal: the first job and task ids it holds (all lower ones were
    /// forgotten), so ids continue where they were.
    Base {
        first_job: JobId,
        first_task: TaskId,
    },
    /// Last in a compacted journal: the forgets before it are already compacted away.
    Compacted,
    /// Tasks handed to workers, with their attempts so far: a restarted scheduler fences only
    /// these (the others never ran), and their attempts count against their retries. Written
    /// without a sync of its own (it rides along the next one): a crash may lose the last few,
    /// which then count one attempt less.
    Started(Vec<(TaskId, u32)>),
    /// The scaling policy was replaced while running (`weir policy set`): a restart runs this one.
    PolicySet {
        name: String,
        #[serde(with = "weir_proto::bytes::one")]
        component: Vec<u8>,
        content: String,
    },
    /// Runs cut short by the end of their worker's allocation: (task, times so far), so that
    /// `--max-walltime-requeues` holds across a restart.
    Cut(Vec<(TaskId, u32)>),
    /// [`Record::Submit`] of a submission that carried a client's request id: the id is kept
    /// with the job, so a resend after a restart (or a failover) gets the same answer. One
    /// record, not a `Submit` and an id after it: a torn tail between the two would lose the
    /// id of a job that survived, and a resend would make it twice.
    SubmitOnce {
        request: RequestId,
        #[serde(with = "weir_proto::bytes::keyed")]
        components: Vec<(ComponentHash, Vec<u8>)>,
        groups: Vec<NewGroup>,
    },
}
