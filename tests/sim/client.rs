//! The simulated client: submits each job at its time (resending until acknowledged), waits for
//! or watches every acknowledged one across the scheduler's restarts, and reads every result
//! again after a last power loss of the scheduler.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::client::Client;
use weir::proto::{JobId, Outcome, Request, Response, TaskResult};

use weir::proto::TaskId;
use weir::scheduler::journal::{Journal, MemoryStore, Record};

use crate::cluster::{self, Cluster, Error};
use crate::net::SimUdp;
use crate::timeline::{Event, Timeline};
use crate::workers;

/// Each job's results, in the order submitted.
pub(crate) type Results = Arc<Mutex<Option<Vec<Vec<TaskResult>>>>>;

/// Where the client is at its end: it has every result (the scheduler is crashed and started
/// again then), and the scheduler is back.
pub(crate) const RESULTS_IN: u8 = 1;
pub(crate) const RESTARTED: u8 = 2;

/// What differs between a job's results before and after the scheduler's restart (`None`:
/// nothing): every task's final state, outcome and attempts must be what the journal had.
fn replayed(before: &[TaskResult], mut after: Vec<TaskResult>) -> Option<String> {
    let mut before = before.to_vec();
    before.sort_by_key(|r| r.task);
    after.sort_by_key(|r| r.task);
    let key = |r: &TaskResult| (r.task, r.state, r.outcome.clone(), r.attempts);
    let (was, is): (Vec<_>, Vec<_>) = (
        before.iter().map(key).collect(),
        after.iter().map(key).collect(),
    );
    (was != is).then(|| format!("results were {was:?}, are {is:?}"))
}

/// The client: submits each job at its time (retrying until acknowledged, reconnecting as
/// needed), then waits for every acknowledged one across the scheduler's restarts, and fetches
/// its results.
pub(crate) fn client(
    cluster: &mut Cluster,
    jobs: Vec<(Duration, Vec<Vec<u8>>)>,
    ended: Arc<AtomicU8>,
) -> Results {
    let slot = Arc::new(Mutex::new(None));
    let out = slot.clone();
    let published = cluster.scheduler.access.clone();
    let timeline = cluster.timeline.clone();
    // One scheduler's journal (replicas keep theirs in Raft logs: not judged here).
    let disk = cluster
        .replicas
        .is_empty()
        .then(|| cluster.scheduler.disk.clone());
    let udp = cluster.net.udp("client", 0);
    cluster.sim.client("client", async move {
        let start = tokio::time::Instant::now();
        let mut link = Link {
            client: None,
            udp,
            published,
            timeline: timeline.clone(),
        };
        let mut acknowledged = Vec::new();
        for (index, (at, tasks)) in jobs.into_iter().enumerate() {
            tokio::time::sleep_until(start + at).await;
            // One request id per job, its resends included (chosen here, not at random, so a
            // seed replays exactly): each must make one job, however often it is resent.
            let submission = Arc::new(Request::Submit {
                components: vec![],
                groups: cluster::groups(tasks),
                request: Some(index as u128 + 1),
            });
            let (job, first, n) = link
                .retry("submit", |client| {
                    let submission = submission.clone();
                    async move { Ok(client.submit_request(&submission).await?) }
                })
                .await;
            timeline.note(Event::Client(format!(
                "job {job} acknowledged: tasks {first}..+{n}"
            )));
            acknowledged.push(job);
        }
        let mut results = Vec::new();
        for &job in &acknowledged {
            let heard = Heard {
                timeline: timeline.clone(),
                disk: disk.clone(),
            };
            let got = link
                .retry("wait", |client| {
                    let heard = heard.clone();
                    async move { finished(&client, job, &heard).await }
                })
                .await;
            results.push(got);
        }
        // Every result is in: the scheduler loses power now (see `run`), and once it is back,
        // what its journal replays must be what the client was told.
        ended.store(RESULTS_IN, Ordering::SeqCst);
        while ended.load(Ordering::SeqCst) != RESTARTED {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Told by the harness, it connects again at once rather than find its connection dead
        // at the idle timeout (what this phase checks is the journal, not that detection).
        link.client = None;
        for (job, before) in acknowledged.iter().zip(&results) {
            let job = *job;
            let after = link
                .retry("results after the restart", |client| async move {
                    Ok(client.results(job).await?)
                })
                .await;
            if let Some(why) = replayed(before, after) {
                timeline.note(Event::Broken(format!(
                    "job {job} after the scheduler's restart: {why}"
                )));
            }
        }
        timeline.note(Event::Client("results the same after the restart".into()));
        // However often a submission was resent, it made one job.
        let held = link
            .retry("jobs after the restart", |client| async move {
                Ok(client.jobs(u32::MAX).await?)
            })
            .await;
        if held.len() != acknowledged.len() {
            let ids: Vec<JobId> = held.iter().map(|j| j.job).collect();
            timeline.note(Event::Broken(format!(
                "{} jobs submitted, the scheduler holds {}: {ids:?}",
                acknowledged.len(),
                held.len()
            )));
        }
        if let Ok(mut out) = out.lock() {
            *out = Some(results);
        }
        Ok(())
    });
    slot
}

/// The client's connection, made again when a call on it fails.
struct Link {
    client: Option<Arc<Client>>,
    udp: SimUdp,
    published: Arc<Mutex<Option<weir::net::AccessFile>>>,
    timeline: Timeline,
}

impl Link {
    /// `call` until it succeeds, reconnecting after each failure (each noted on the timeline).
    async fn retry<T, F, Fut>(&mut self, what: &str, mut call: F) -> T
    where
        F: FnMut(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        loop {
            let client = match self.client.take() {
                Some(client) => Ok(client),
                None => cluster::connect_once(&self.udp, &self.published)
                    .await
                    .map(Arc::new),
            };
            match client {
                Ok(client) => match call(client.clone()).await {
                    Ok(value) => {
                        self.client = Some(client);
                        return value;
                    }
                    Err(error) => self
                        .timeline
                        .note(Event::Client(format!("{what}: {error}"))),
                },
                Err(error) => self
                    .timeline
                    .note(Event::Client(format!("connect: {error}"))),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// What the client heard, judged as it hears it: the timeline, and the scheduler's disk.
#[derive(Clone)]
struct Heard {
    timeline: Timeline,
    disk: Option<Arc<Mutex<MemoryStore>>>,
}

impl Heard {
    /// A client told a task ended must find it ended after any crash: its final state is on
    /// the scheduler's disk (synced, not only written) before the client hears of it. Else a
    /// power loss now, with its worker gone too, runs it again after its result was seen.
    fn on_disk(&self, job: JobId, results: &[TaskResult]) {
        let Some(disk) = &self.disk else {
            return;
        };
        let durable = match disk.lock() {
            Ok(disk) => MemoryStore::with(disk.durable()),
            Err(_) => return,
        };
        let records = match Journal::open_in(std::path::Path::new("sim"), Box::new(durable), None) {
            Ok((_, records)) => records,
            Err(error) => {
                return self
                    .timeline
                    .note(Event::Broken(format!("the journal on disk: {error}")));
            }
        };
        let mut ended = std::collections::HashSet::<TaskId>::new();
        for record in records {
            if let Record::Final(tasks) = record {
                ended.extend(tasks.into_iter().map(|(task, ..)| task));
            }
        }
        if let Some(result) = results.iter().find(|r| !ended.contains(&r.task)) {
            self.timeline.note(Event::Broken(format!(
                "job {job}: the client heard task {} ended before its end was on disk",
                result.task
            )));
        }
    }
}

/// Wait for `job` and fetch its results.
/// Odd jobs are watched (each result as its task ends: the Python futures' path), even ones
/// waited for; a watcher must hear of each task once, and what it heard must be the results.
async fn finished(client: &Client, job: JobId, heard: &Heard) -> Result<Vec<TaskResult>, Error> {
    let timeline = &heard.timeline;
    let watched = match job % 2 {
        1 => Some(watch(client, job, heard).await?),
        _ => {
            let mut last = None;
            client
                .wait(job, |counts| {
                    if last.as_ref() != Some(counts) {
                        last = Some(counts.clone());
                        timeline.note(Event::Client(format!("job {job}: {counts:?}")));
                    }
                })
                .await?;
            None
        }
    };
    let results = client.results(job).await?;
    heard.on_disk(job, &results);
    if let Some(watched) = watched
        && let Some(why) = replayed(&watched, results.clone())
    {
        timeline.note(Event::Broken(format!(
            "job {job}: what its watcher heard is not its results: {why}"
        )));
    }
    timeline.note(Event::Client(format!(
        "job {job} finished: {} results",
        results.len()
    )));
    Ok(results)
}

/// Watch `job` to its end: each task's result once (a second one on the stream breaks the
/// invariant), then `Done`.
async fn watch(client: &Client, job: JobId, told: &Heard) -> Result<Vec<TaskResult>, Error> {
    let timeline = &told.timeline;
    let mut stream = client.watch(job).await?;
    let mut heard: Vec<TaskResult> = Vec::new();
    loop {
        match stream.next().await? {
            Some(Response::Results(chunk)) => {
                told.on_disk(job, &chunk);
                for result in chunk {
                    if heard.iter().any(|r| r.task == result.task) {
                        timeline.note(Event::Broken(format!(
                            "job {job}: task {} delivered twice to one watcher",
                            result.task
                        )));
                    }
                    heard.push(result);
                }
            }
            Some(Response::Done(counts)) => {
                timeline.note(Event::Client(format!("job {job} watched: {counts:?}")));
                return Ok(heard);
            }
            Some(Response::Progress(_)) => {}
            other => return Err(format!("job {job}: the watch answered {other:?}").into()),
        }
    }
}

/// Whether `outcome` is what a run of `input` produces.
pub(crate) fn produced(outcome: &Outcome, input: &[u8]) -> bool {
    matches!(outcome, Outcome::Exited { code: Some(0), stdout, .. } if *stdout == workers::output(input))
}
