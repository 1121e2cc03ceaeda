//! Clients' requests: each one answered (now, when durable, or as a stream).

use std::sync::Arc;

use super::{ClientId, PolicyInfo, Record, Scheduler};
use weir_proto::{
    ComponentHash, ErrorCode, JobId, NewGroup, Request, RequestId, Response, TaskResult,
};

/// Most bytes of results in one `Results` frame (well under `MAX_FRAME`: a task's output is
/// capped by the worker's `--output-limit`, 1 MiB per stream by default).
const RESULTS_CHUNK_BYTES: usize = 8 << 20;

impl Scheduler {
    pub(super) fn request(
        &mut self,
        now: u64,
        client: ClientId,
        request: Request,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
    ) {
        match request {
            Request::Submit {
                groups, request, ..
            } => self.submit(now, client, groups, components, request),
            Request::Wait { job } => self.wait(client, job),
            Request::Results { job } => match self.tasks.results(job) {
                Err(error) => self.refuse(client, error.code(), error.to_string()),
                Ok(results) => self.send_results(client, results),
            },
            Request::Watch { job } => {
                // This round's finished tasks go to the watchers they have first: a new one
                // gets them with what ended before, and not again from the flush.
                self.flush(now);
                self.watch(client, job)
            }
            Request::CancelTasks { tasks } => {
                let canceled = self.tasks.cancel_tasks(&tasks);
                self.flush(now);
                self.reply_durable(client, Response::Canceled { tasks: canceled });
            }
            Request::Cancel { job } => match self.tasks.job_counts(job) {
                Err(error) => self.refuse(client, error.code(), error.to_string()),
                Ok(_) => {
                    let tasks = self.tasks.cancel_job(job);
                    self.reply_durable(client, Response::Canceled { tasks });
                }
            },
            Request::ForgetFinished => {
                // This round's finished tasks are journaled first: a replay must see them final
                // before it sees their jobs forgotten.
                self.flush(now);
                let (jobs, tasks) = self.tasks.forget_finished();
                for &job in &jobs {
                    self.journal(Record::Forget { job });
                }
                if !jobs.is_empty() {
                    tracing::info!(jobs = jobs.len(), tasks, "finished jobs forgotten");
                }
                self.reply_durable(client, Response::ForgottenFinished { jobs, tasks });
            }
            Request::Forget { job } => {
                self.flush(now); // as for ForgetFinished
                match self.tasks.forget(job) {
                    Err(error) => self.refuse(client, error.code(), error.to_string()),
                    Ok(tasks) => {
                        if tasks > 0 {
                            self.journal(Record::Forget { job });
                            tracing::info!(job, tasks, "job forgotten");
                        }
                        self.reply_durable(client, Response::Forgotten { job, tasks });
                    }
                }
            }
            Request::Jobs { limit } => {
                let jobs = self
                    .tasks
                    .jobs(usize::try_from(limit).unwrap_or(usize::MAX));
                self.reply(client, Response::Jobs(jobs), true);
            }
            Request::Status => {
                let status = self.status(now);
                self.reply(client, Response::Status(status), true);
            }
            Request::EnvRegister {
                name, config, wait, ..
            } => self.env_register(client, name, config, wait, components),
            Request::EnvList => {
                let report = self.environment_report(None);
                self.reply(client, Response::Environments(report), true);
            }
            Request::EnvRemove { name } => self.env_remove(client, name),
            Request::WaitWorkers { count, environment } => {
                self.wait_workers(client, count, environment)
            }
            Request::PolicySet { name, content, .. } => match components.into_iter().next() {
                Some((component, bytes)) => {
                    let policy = PolicyInfo {
                        name,
                        component,
                        content,
                        bytes: Some(bytes),
                    };
                    self.set_policy(client, policy);
                }
                None => self.refuse(client, ErrorCode::Invalid, "no policy component".into()),
            },
            Request::PolicyShow => {
                let report = self.policy_report();
                self.reply(client, Response::Policy(report), true);
            }
            Request::Explain { task } => match self.explain(now, task) {
                Some(lines) => self.reply(client, Response::Explanation { lines }, true),
                None => self.refuse(client, ErrorCode::NotFound, format!("no task {task}")),
            },
            // The shell answers it (the core knows of no replica): a core alone has none.
            Request::Replicas => self.reply(client, Response::Replicas(Vec::new()), true),
            Request::ReplicaAdd { .. } | Request::ReplicaRemove { .. } => self.refuse(
                client,
                ErrorCode::Invalid,
                "this scheduler has no replicas (start it with --replica)".into(),
            ),
            Request::Managers { id } => match self.managers_view(now, id.as_deref()) {
                Some(view) => self.reply(client, Response::Managers(view), true),
                None => self.refuse(
                    client,
                    ErrorCode::NotFound,
                    format!("no manager {}", id.unwrap_or_default()),
                ),
            },
        }
    }

    /// Accept a job (acknowledged once the journal has it on disk). A resend of a submission
    /// (its request id known) gets the first one's answer, once that is durable too: the
    /// first may have been accepted this very round.
    fn submit(
        &mut self,
        now: u64,
        client: ClientId,
        groups: Vec<NewGroup>,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
        request: Option<RequestId>,
    ) {
        if let Some((job, first_task, tasks)) = request.and_then(|r| self.tasks.submitted(r)) {
            tracing::info!(job, "a submission resent: answered with its job");
            let response = Response::Submitted {
                job,
                first_task,
                tasks,
            };
            return self.reply_durable(client, response);
        }
        let mut new_components = Vec::new();
        for (hash, bytes) in components {
            if self.tasks.add_component(hash, bytes.clone()) && self.config.journal {
                new_components.push((hash, bytes.to_vec()));
            }
        }
        let journaled = self.config.journal.then(|| groups.clone());
        match self.tasks.submit_as(now, groups, request) {
            Ok((job, first_task, tasks)) => {
                tracing::info!(job, tasks, "job submitted");
                if let Some(groups) = journaled {
                    self.journal(match request {
                        Some(request) => Record::SubmitOnce {
                            request,
                            components: new_components,
                            groups,
                        },
                        None => Record::Submit {
                            components: new_components,
                            groups,
                        },
                    });
                }
                let response = Response::Submitted {
                    job,
                    first_task,
                    tasks,
                };
                self.reply_durable(client, response);
            }
            Err(error) => self.refuse(client, error.code(), error.to_string()),
        }
    }

    /// `weir wait`: progress now, then as it changes, until done.
    fn wait(&mut self, client: ClientId, job: JobId) {
        match self.tasks.job_counts(job) {
            Err(error) => self.refuse(client, error.code(), error.to_string()),
            Ok(counts) if counts.finished() == counts.total() => {
                let done = Response::Done(counts.clone());
                self.reply(client, done, true);
            }
            Ok(counts) => {
                let progress = Response::Progress(counts.clone());
                self.reply(client, progress, false);
                self.waiters.entry(job).or_default().push(client);
            }
        }
    }

    /// `Watch`: the results final so far, then each as its task ends (see `flush`), then `Done`.
    fn watch(&mut self, client: ClientId, job: JobId) {
        let (counts, results) = match (self.tasks.job_counts(job), self.tasks.results(job)) {
            (Ok(counts), Ok(results)) => (counts.clone(), results),
            (Err(error), _) | (_, Err(error)) => {
                return self.refuse(client, error.code(), error.to_string());
            }
        };
        self.send_chunks(client, results);
        if counts.finished() == counts.total() {
            self.reply(client, Response::Done(counts), true);
        } else {
            self.watchers.entry(job).or_default().push(client);
        }
    }

    /// A job's results in frames bounded by bytes, then `ResultsEnd` with the count.
    fn send_results(&mut self, client: ClientId, results: Vec<TaskResult>) {
        let count = results.len() as u64;
        self.send_chunks(client, results);
        self.reply(client, Response::ResultsEnd { count }, true);
    }

    /// `results` as `Results` frames of at most [`RESULTS_CHUNK_BYTES`] (or one result each).
    pub(super) fn send_chunks(&mut self, client: ClientId, results: Vec<TaskResult>) {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for result in results {
            let size = result.outcome.size_hint();
            if !chunk.is_empty() && bytes + size > RESULTS_CHUNK_BYTES {
                self.reply(client, Response::Results(std::mem::take(&mut chunk)), false);
                bytes = 0;
            }
            bytes += size;
            chunk.push(result);
        }
        if !chunk.is_empty() {
            self.reply(client, Response::Results(chunk), false);
        }
    }
}
