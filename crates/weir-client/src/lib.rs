//! The client library behind `weir`: one QUIC connection, one stream per request.

mod reach;
mod split;

use quinn::{Connection, Endpoint};

use weir_net::{self as net, AccessFile, Link, LinkEnd};
use weir_proto::{
    EnvironmentStatus, FrameError, JobCounts, JobId, JobSummary, ManagerUnits, NewGroup,
    PolicyReport, ReplicaStatus, Request, RequestId, Response, Role, StatusReport, TaskId,
    TaskResult,
};

pub use weir_net::NetError;
/// The messages a client sends and receives.
pub use weir_proto as proto;

pub use reach::{Patience, reach, reach_with};
pub use split::split_submission;

/// A submission of `groups` (with `components`) under a fresh random request id, to send with
/// [`Client::submit_request`] as often as it takes to be answered.
pub fn submission(components: Vec<Vec<u8>>, groups: Vec<NewGroup>) -> Result<Request, NetError> {
    Ok(Request::Submit {
        components,
        groups,
        request: Some(request_id()?),
    })
}

/// A fresh random request id (128 bits).
pub fn request_id() -> Result<RequestId, NetError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| NetError::Access(format!("no randomness for a request id: {e}")))?;
    Ok(RequestId::from_le_bytes(bytes))
}

/// How [`Client::wait_or_unrunnable`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waited {
    /// Every task is final.
    Done(JobCounts),
    /// The scheduler says `task` (queued) can run nowhere, and why; the job goes on.
    Unrunnable { task: TaskId, reason: String },
}

pub struct Client {
    _endpoint: Endpoint,
    connection: Connection,
}

/// The responses to one request, in order; `None` after the last.
pub struct Responses {
    link: Link<Response>,
}

impl Responses {
    /// Cancel-safe: the link keeps a response read in part for the next call.
    pub async fn next(&mut self) -> Result<Option<Response>, NetError> {
        match self.link.next().await {
            Ok(Response::Error { code, message }) => Err(NetError::Request { code, message }),
            Ok(response) => Ok(Some(response)),
            Err(end) if end.is_closed() => Ok(None),
            Err(LinkEnd::Read(error) | LinkEnd::Write(error)) => Err(error.into()),
            // A request link has no writer task: its request was written before it was made.
            Err(end) => Err(NetError::Link(end)),
        }
    }
}

fn unexpected(response: Option<Response>) -> NetError {
    match response {
        Some(other) => NetError::Unanswered(format!("unexpected response {other:?}")),
        None => NetError::Unanswered("it closed the request without answering".into()),
    }
}

impl Client {
    pub async fn connect(access: &AccessFile) -> Result<Client, NetError> {
        Client::connect_with(&net::udp::HostUdp, access).await
    }

    /// [`Client::connect`] from a socket of `udp` (a simulated network's).
    pub async fn connect_with(
        udp: &dyn net::udp::Udp,
        access: &AccessFile,
    ) -> Result<Client, NetError> {
        let (endpoint, connection, mut send, _recv) =
            net::connect_with(udp, access, Role::Client, net::CLIENT_IDLE_TIMEOUT).await?;
        let _ = send.finish();
        Ok(Client {
            _endpoint: endpoint,
            connection,
        })
    }

    /// Send `request`. One over the frame limit is `NetError::RequestTooLarge` (nothing is sent:
    /// the message is encoded before any of it is written).
    pub async fn call(&self, request: &Request) -> Result<Responses, NetError> {
        let (send, recv) = self.connection.open_bi().await?;
        let link = Link::request(send, recv, request)
            .await
            .map_err(|error| match error {
                FrameError::TooLarge { size, limit } => NetError::RequestTooLarge {
                    size,
                    limit,
                    input: None,
                },
                other => other.into(),
            })?;
        Ok(Responses { link })
    }

    /// Each task's result as it becomes final: the stream yields `Response::Results` chunks,
    /// then `Response::Done` with the job's counts (see [`Request::Watch`]).
    pub async fn watch(&self, job: JobId) -> Result<Responses, NetError> {
        self.call(&Request::Watch { job }).await
    }

    /// Cancel single tasks; returns how many were canceled (the others were final already).
    pub async fn cancel_tasks(&self, tasks: Vec<TaskId>) -> Result<u64, NetError> {
        let mut responses = self.call(&Request::CancelTasks { tasks }).await?;
        match responses.next().await? {
            Some(Response::Canceled { tasks }) => Ok(tasks),
            other => Err(unexpected(other)),
        }
    }

    /// Submit one job. Returns (job, first task id, number of tasks). Not resent: see
    /// [`submission`] and [`Client::submit_request`] to resend one safely.
    pub async fn submit(
        &self,
        components: Vec<Vec<u8>>,
        groups: Vec<NewGroup>,
    ) -> Result<(JobId, TaskId, u64), NetError> {
        self.submit_request(&submission(components, groups)?).await
    }

    /// Send a [`submission`]. Safe to send again, on this connection or another, after an error
    /// that left it unanswered ([`NetError::is_connection_lost`]): the scheduler knows it by its
    /// request id and answers a resend with the first one's job.
    pub async fn submit_request(
        &self,
        submission: &Request,
    ) -> Result<(JobId, TaskId, u64), NetError> {
        let mut responses = self.call(submission).await?;
        match responses.next().await? {
            Some(Response::Submitted {
                job,
                first_task,
                tasks,
            }) => Ok((job, first_task, tasks)),
            other => Err(unexpected(other)),
        }
    }

    /// Wait until every task of `job` is final, calling `progress` on each update; tasks
    /// nothing can run are ignored (they stay queued): see [`Client::wait_or_unrunnable`].
    pub async fn wait(
        &self,
        job: JobId,
        progress: impl FnMut(&JobCounts),
    ) -> Result<JobCounts, NetError> {
        match self.waiting(job, progress, false).await? {
            Waited::Done(counts) => Ok(counts),
            Waited::Unrunnable { task, reason } => Err(NetError::Unanswered(format!(
                "task {task} unrunnable ({reason}) in a wait that goes on"
            ))),
        }
    }

    /// [`Client::wait`], but return at the scheduler's first word that a queued task of the
    /// job can run nowhere ([`Response::Unrunnable`]; it stays queued).
    pub async fn wait_or_unrunnable(
        &self,
        job: JobId,
        progress: impl FnMut(&JobCounts),
    ) -> Result<Waited, NetError> {
        self.waiting(job, progress, true).await
    }

    async fn waiting(
        &self,
        job: JobId,
        mut progress: impl FnMut(&JobCounts),
        stop_at_unrunnable: bool,
    ) -> Result<Waited, NetError> {
        let mut responses = self.call(&Request::Wait { job }).await?;
        loop {
            match responses.next().await? {
                Some(Response::Progress(counts)) => progress(&counts),
                Some(Response::Done(counts)) => {
                    progress(&counts);
                    return Ok(Waited::Done(counts));
                }
                Some(Response::Unrunnable { task, reason }) if stop_at_unrunnable => {
                    return Ok(Waited::Unrunnable { task, reason });
                }
                Some(Response::Unrunnable { .. }) => {}
                other => return Err(unexpected(other)),
            }
        }
    }

    pub async fn results(&self, job: JobId) -> Result<Vec<TaskResult>, NetError> {
        let mut responses = self.call(&Request::Results { job }).await?;
        let mut all = Vec::new();
        loop {
            match responses.next().await? {
                Some(Response::Results(chunk)) => all.extend(chunk),
                Some(Response::ResultsEnd { count }) if count == all.len() as u64 => {
                    return Ok(all);
                }
                Some(Response::ResultsEnd { count }) => {
                    return Err(NetError::Unanswered(format!(
                        "the results of job {job} came incomplete: {} of {count}",
                        all.len()
                    )));
                }
                None => {
                    return Err(NetError::Unanswered(format!(
                        "the results of job {job} were cut short after {} results",
                        all.len()
                    )));
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    pub async fn cancel(&self, job: JobId) -> Result<u64, NetError> {
        match self.call(&Request::Cancel { job }).await?.next().await? {
            Some(Response::Canceled { tasks }) => Ok(tasks),
            other => Err(unexpected(other)),
        }
    }

    /// Free a finished job's results and inputs. Returns its task count (0: forgotten already).
    pub async fn forget(&self, job: JobId) -> Result<u64, NetError> {
        match self.call(&Request::Forget { job }).await?.next().await? {
            Some(Response::Forgotten { tasks, .. }) => Ok(tasks),
            other => Err(unexpected(other)),
        }
    }

    /// Forget every finished job. Returns them and how many task results were freed.
    pub async fn forget_finished(&self) -> Result<(Vec<JobId>, u64), NetError> {
        match self.call(&Request::ForgetFinished).await?.next().await? {
            Some(Response::ForgottenFinished { jobs, tasks }) => Ok((jobs, tasks)),
            other => Err(unexpected(other)),
        }
    }

    /// The newest `limit` jobs the scheduler holds, newest first.
    pub async fn jobs(&self, limit: u32) -> Result<Vec<JobSummary>, NetError> {
        match self.call(&Request::Jobs { limit }).await?.next().await? {
            Some(Response::Jobs(jobs)) => Ok(jobs),
            other => Err(unexpected(other)),
        }
    }

    pub async fn status(&self) -> Result<StatusReport, NetError> {
        match self.call(&Request::Status).await?.next().await? {
            Some(Response::Status(report)) => Ok(report),
            other => Err(unexpected(other)),
        }
    }

    /// Replace the running scaling policy (the old one stays if the new one fails).
    pub async fn set_policy(
        &self,
        name: String,
        component: Vec<u8>,
        content: String,
    ) -> Result<PolicyReport, NetError> {
        let request = Request::PolicySet {
            name,
            component,
            content,
        };
        match self.call(&request).await?.next().await? {
            Some(Response::Policy(report)) => Ok(report),
            other => Err(unexpected(other)),
        }
    }

    /// The running scaling policy.
    pub async fn show_policy(&self) -> Result<PolicyReport, NetError> {
        match self.call(&Request::PolicyShow).await?.next().await? {
            Some(Response::Policy(report)) => Ok(report),
            other => Err(unexpected(other)),
        }
    }

    /// Register (or replace) a run-time environment; with `wait`, after every live worker answered.
    pub async fn env_register(
        &self,
        name: &str,
        component: Vec<u8>,
        config: Vec<(String, String)>,
        wait: bool,
    ) -> Result<Vec<EnvironmentStatus>, NetError> {
        let request = Request::EnvRegister {
            name: name.to_string(),
            component,
            config,
            wait,
        };
        match self.call(&request).await?.next().await? {
            Some(Response::Environments(list)) => Ok(list),
            other => Err(unexpected(other)),
        }
    }

    pub async fn env_list(&self) -> Result<Vec<EnvironmentStatus>, NetError> {
        match self.call(&Request::EnvList).await?.next().await? {
            Some(Response::Environments(list)) => Ok(list),
            other => Err(unexpected(other)),
        }
    }

    pub async fn env_remove(&self, name: &str) -> Result<(), NetError> {
        match self
            .call(&Request::EnvRemove {
                name: name.to_string(),
            })
            .await?
            .next()
            .await?
        {
            Some(Response::EnvRemoved { .. }) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Wait until at least `count` live workers (matching `environment`, when given) are
    /// registered, calling `progress(ready)` on every change. Returns the count reached.
    pub async fn wait_workers(
        &self,
        count: u32,
        environment: Option<String>,
        mut progress: impl FnMut(u32),
    ) -> Result<u32, NetError> {
        let mut responses = self
            .call(&Request::WaitWorkers { count, environment })
            .await?;
        loop {
            match responses.next().await? {
                Some(Response::WorkersReady { ready, .. }) if ready >= count => return Ok(ready),
                Some(Response::WorkersReady { ready, .. }) => progress(ready),
                other => return Err(unexpected(other)),
            }
        }
    }

    pub async fn explain(&self, task: TaskId) -> Result<Vec<String>, NetError> {
        match self.call(&Request::Explain { task }).await?.next().await? {
            Some(Response::Explanation { lines }) => Ok(lines),
            other => Err(unexpected(other)),
        }
    }

    /// Managers and their units (`weir managers`): all, or the one named.
    /// The scheduler replicas as the leader sees them (empty for a single scheduler).
    pub async fn replicas(&self) -> Result<Vec<ReplicaStatus>, NetError> {
        self.replicas_after(&Request::Replicas).await
    }

    /// Add replica `id` at `address` (started with `--join`); the replicas once it votes.
    pub async fn add_replica(
        &self,
        id: u64,
        address: String,
        token: String,
    ) -> Result<Vec<ReplicaStatus>, NetError> {
        self.replicas_after(&Request::ReplicaAdd { id, address, token })
            .await
    }

    /// Remove replica `id`; the replicas after.
    pub async fn remove_replica(
        &self,
        id: u64,
        token: String,
    ) -> Result<Vec<ReplicaStatus>, NetError> {
        self.replicas_after(&Request::ReplicaRemove { id, token })
            .await
    }

    /// The `Replicas` answer to `request`.
    async fn replicas_after(&self, request: &Request) -> Result<Vec<ReplicaStatus>, NetError> {
        match self.call(request).await?.next().await? {
            Some(Response::Replicas(replicas)) => Ok(replicas),
            other => Err(unexpected(other)),
        }
    }

    pub async fn managers(&self, id: Option<String>) -> Result<Vec<ManagerUnits>, NetError> {
        match self.call(&Request::Managers { id }).await?.next().await? {
            Some(Response::Managers(managers)) => Ok(managers),
            other => Err(unexpected(other)),
        }
    }
}
