//! Starting from a journal: replaying it into the core (same jobs, same task ids, finished
//! results, forgotten jobs), and compacting it when it holds forgotten jobs.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Actor, journal};
use crate::proto::{ComponentHash, TaskKind};

impl Actor {
    /// Rebuild the state a previous run journaled: same jobs, same task ids, finished results.
    /// Returns how many forgets it replayed since the journal was last compacted (what
    /// compacting would drop).
    pub(super) fn replay(&mut self, records: Vec<journal::Record>) -> u64 {
        let (mut jobs, mut finals, mut forgets) = (0u64, 0u64, 0u64);
        for record in records {
            match record {
                journal::Record::Base {
                    first_job,
                    first_task,
                } => {
                    if !self.core.start_ids_at(first_job, first_task) {
                        tracing::error!(
                            first_job,
                            first_task,
                            "a journal base record after other records; ignored"
                        );
                    }
                }
                journal::Record::Submit { components, groups } => {
                    for (hash, bytes) in components {
                        self.core.add_component(hash);
                        self.components.insert(hash, Arc::new(bytes));
                    }
                    if let Err(error) = self.core.restore(groups) {
                        tracing::error!(%error, "a journaled submission does not validate; skipped");
                    }
                    jobs += 1;
                }
                journal::Record::Final(results) => {
                    for (task, state, outcome, attempts) in results {
                        self.core.restore_final(task, state, outcome, attempts);
                        finals += 1;
                    }
                }
                journal::Record::EnvRegister { def, component } => {
                    self.core.add_component(def.component);
                    self.components.insert(def.component, Arc::new(component));
                    self.core.register_environment(&def.name);
                    self.environments.insert(def.name.clone(), def);
                }
                journal::Record::EnvRemove { name } => {
                    self.core.remove_environment(&name);
                    self.environments.remove(&name);
                }
                journal::Record::Compacted => forgets = 0,
                journal::Record::Started(tasks) => {
                    for (task, attempts) in tasks {
                        self.core.restore_started(task, attempts);
                    }
                }
                journal::Record::Forget { job } => {
                    forgets += 1;
                    if let Err(error) = self.core.forget(job) {
                        tracing::warn!(job, %error, "a journaled forget does not apply; ignored");
                    }
                }
            }
        }
        self.core.replayed();
        let now = self.now();
        self.core.fence_unfinished(now);
        self.core.take_actions();
        if jobs > 0 {
            tracing::info!(jobs, finished = finals, forgets, "journal replayed");
        }
        forgets
    }

    /// Rewrite the journal as the state just replayed: the environments, then every held job
    /// (a forgotten one without inputs or outcomes, to keep its ids), after a `Base` record that
    /// keeps the ids of dropped jobs used. What was forgotten leaves the file.
    pub(super) fn compact_journal(&mut self) {
        let (first_job, first_task) = self.core.first_ids();
        let mut records = vec![journal::Record::Base {
            first_job,
            first_task,
        }];
        for def in self.environments.values() {
            if let Some(bytes) = self.components.get(&def.component) {
                records.push(journal::Record::EnvRegister {
                    def: def.clone(),
                    component: bytes.to_vec(),
                });
            }
        }
        let mut written: HashSet<ComponentHash> = HashSet::new();
        for held in self.core.held_jobs() {
            let mut components = Vec::new();
            for group in &held.groups {
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && written.insert(*component)
                    && let Some(bytes) = self.components.get(component)
                {
                    components.push((*component, bytes.to_vec()));
                }
            }
            records.push(journal::Record::Submit {
                components,
                groups: held.groups,
            });
            if !held.started.is_empty() {
                records.push(journal::Record::Started(held.started));
            }
            if !held.finals.is_empty() {
                records.push(journal::Record::Final(held.finals));
            }
            if held.forgotten {
                records.push(journal::Record::Forget { job: held.job });
            }
        }
        records.push(journal::Record::Compacted);
        let Some(journal) = &mut self.journal else {
            return;
        };
        match journal.rewrite(&records) {
            Ok((before, after)) => {
                self.forgets_since_compaction = 0;
                self.core.compacted();
                tracing::info!(before, after, "journal compacted (forgotten jobs dropped)")
            }
            Err(error) => tracing::error!(%error, "journal not compacted"),
        }
    }
}
