//! Starting from a journal: its records fed back in order ([`Input::Replay`]), and the
//! records a compacted journal holds ([`Scheduler::journal_image`]).
//!
//! [`Input::Replay`]: super::Input::Replay

use crate::hash::HashSet;
use std::sync::Arc;

use super::{PolicyInfo, Record, Scheduler};
use weir_proto::{ComponentHash, NewGroup, RequestId, TaskKind};

impl Scheduler {
    /// A core rebuilt from a journal's records, as a restarted scheduler, a replica that comes
    /// to lead, or a replica's snapshot rebuilds it: each record replayed in order, then
    /// [`Input::Replayed`] at `now`. What that asks for (a compaction) is in its actions.
    ///
    /// [`Input::Replayed`]: super::Input::Replayed
    pub fn restored(
        config: super::Config,
        records: impl IntoIterator<Item = Record>,
        now: u64,
    ) -> Scheduler {
        let mut core = Scheduler::new(config);
        for record in records {
            core.handle(now, super::Input::Replay(record));
        }
        core.handle(now, super::Input::Replayed);
        core
    }

    /// One journaled record: same jobs, same task ids, finished results, forgotten jobs.
    pub(super) fn replay(&mut self, record: Record) {
        match record {
            Record::Base {
                first_job,
                first_task,
            } => {
                if !self.tasks.start_ids_at(first_job, first_task) {
                    tracing::error!(
                        first_job,
                        first_task,
                        "a journal base record after other records; ignored"
                    );
                }
            }
            Record::Submit { components, groups } => self.restore(components, groups, None),
            Record::SubmitOnce {
                request,
                components,
                groups,
            } => self.restore(components, groups, Some(request)),
            Record::Final(results) => {
                for (task, state, outcome, attempts) in results {
                    self.tasks.restore_final(task, state, outcome, attempts);
                }
            }
            Record::EnvRegister { def, component } => {
                self.tasks.register_environment(def, Arc::from(component));
            }
            Record::EnvRemove { name } => {
                self.tasks.remove_environment(&name);
            }
            Record::Compacted => self.tasks.compacted(),
            Record::Started(tasks) => {
                for (task, attempts) in tasks {
                    self.tasks.restore_started(task, attempts);
                }
            }
            Record::Cut(tasks) => {
                for (task, cuts) in tasks {
                    self.tasks.restore_cuts(task, cuts);
                }
            }
            Record::PolicySet {
                name,
                component,
                content,
            } => {
                let bytes: Arc<[u8]> = Arc::from(component);
                self.scaling.restored = Some(PolicyInfo {
                    name,
                    component: crate::component_hash(&bytes),
                    content,
                    bytes: Some(bytes),
                });
            }
            Record::Forget { job } => {
                if let Err(error) = self.tasks.forget(job) {
                    tracing::warn!(job, %error, "a journaled forget does not apply; ignored");
                }
            }
        }
    }

    fn restore(
        &mut self,
        components: Vec<(ComponentHash, Vec<u8>)>,
        groups: Vec<NewGroup>,
        request: Option<RequestId>,
    ) {
        for (hash, bytes) in components {
            self.tasks.add_component(hash, Arc::from(bytes));
        }
        if let Err(error) = self.tasks.restore(groups, request) {
            tracing::error!(%error, "a journaled submission does not validate; skipped");
        }
    }

    /// The last record was replayed: tasks that were handed to workers wait out their fence,
    /// and nothing the replay did is sent or journaled again. A journal that holds forgotten
    /// jobs is compacted now, whatever its size ([`Action::Compact`]).
    ///
    /// [`Action::Compact`]: super::Action::Compact
    pub(super) fn replayed(&mut self, now: u64) {
        self.tasks.replayed();
        self.tasks.fence_unfinished(now);
        self.tasks.take_effects();
        self.actions.clear();
        if self.config.journal && self.tasks.forgotten_tasks_since_compaction() > 0 {
            self.actions
                .push_back(super::Action::Compact(self.journal_image()));
        }
        let status = self.tasks.status();
        if status.jobs > 0 {
            // A previous run had work: its workers are still coming back. (A new journal, or
            // a replica cluster's first term, had none: nothing to wait for.)
            self.unrunnable_from = now.saturating_add(self.config.restart_grace_ms);
            tracing::info!(
                jobs = status.jobs,
                forgotten_tasks = self.tasks.forgotten_tasks_since_compaction(),
                "journal replayed"
            );
        }
    }

    /// The journal rewritten as the state now: the environments, then every held job (a
    /// forgotten one without inputs or outcomes, to keep its ids), after a `Base` record that
    /// keeps the ids of dropped jobs used. What was forgotten leaves the file.
    pub fn journal_image(&self) -> Vec<Record> {
        let (first_job, first_task) = self.tasks.first_ids();
        let mut records = vec![Record::Base {
            first_job,
            first_task,
        }];
        // A policy set while running (or one read back and not yet running: it stays chosen).
        let policy = self
            .scaling
            .restored
            .as_ref()
            .unwrap_or(&self.scaling.policy);
        if let Some(bytes) = &policy.bytes {
            records.push(Record::PolicySet {
                name: policy.name.clone(),
                component: bytes.to_vec(),
                content: policy.content.clone(),
            });
        }
        for def in self.tasks.environments().definitions() {
            if let Some(bytes) = self.tasks.components().get(&def.component) {
                records.push(Record::EnvRegister {
                    def: def.clone(),
                    component: bytes.to_vec(),
                });
            }
        }
        let mut written: HashSet<ComponentHash> = HashSet::default();
        for held in self.tasks.held_jobs() {
            let mut components = Vec::new();
            for group in &held.groups {
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && written.insert(*component)
                    && let Some(bytes) = self.tasks.components().get(component)
                {
                    components.push((*component, bytes.to_vec()));
                }
            }
            records.push(match held.request {
                Some(request) => Record::SubmitOnce {
                    request,
                    components,
                    groups: held.groups,
                },
                None => Record::Submit {
                    components,
                    groups: held.groups,
                },
            });
            if !held.started.is_empty() {
                records.push(Record::Started(held.started));
            }
            if !held.cuts.is_empty() {
                records.push(Record::Cut(held.cuts));
            }
            if !held.finals.is_empty() {
                records.push(Record::Final(held.finals));
            }
            if held.forgotten {
                records.push(Record::Forget { job: held.job });
            }
        }
        records.push(Record::Compacted);
        records
    }
}
