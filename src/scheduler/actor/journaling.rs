//! The actor's journal: replayed at start, compacted (at start on this thread, later off it),
//! appended to as the core says, and the reason the actor stops when it cannot be written.

use super::Actor;
use crate::core::scheduler::Input;
use crate::scheduler::journal;

impl Actor {
    /// Compact the journal now if the core, restored from it, says so
    /// ([`crate::core::scheduler::Scheduler::restored`]).
    pub(crate) fn compact_at_start(&mut self) {
        while let Some(records) = self.perform() {
            self.compact_journal(records);
        }
    }

    /// At start, before any connection: on this thread.
    pub(super) fn compact_journal(&mut self, records: Vec<journal::Record>) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let result = journal.rewrite(&records);
        self.compacted(result);
    }

    pub(super) fn compacted(&mut self, result: Result<(u64, u64), journal::JournalError>) {
        match result {
            Ok((before, after)) => {
                self.core.handle(self.now(), Input::Compacted);
                tracing::info!(before, after, "journal compacted (forgotten jobs dropped)")
            }
            // The rewrite starts with a sync of what was appended: if that failed, a later
            // sync may report success for pages the kernel dropped, so this is the journal
            // failing, not only the compaction.
            Err(error) if self.journal.as_ref().is_some_and(journal::Journal::dirty) => {
                self.journal_error.get_or_insert(error.to_string());
            }
            Err(error) => tracing::error!(%error, "journal not compacted (the old one stays)"),
        }
    }

    /// Run `work` on the journal on a blocking thread and wait for it. The actor waits as if
    /// it ran here, but the runtime's one thread goes on serving QUIC (acknowledgements,
    /// keep-alives, new connections), so a slow disk does not drop every connection at the
    /// idle timeout; what arrives meanwhile waits in the inbox. `None` without a journal, or
    /// if the thread panicked (the journal is then gone: the caller stops).
    pub(super) async fn off_thread<R: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut journal::Journal) -> R + Send + 'static,
    ) -> Option<R> {
        let mut journal = self.journal.take()?;
        if !journal.blocks() {
            // In memory: here, waiting on the timer for as long as the disk it simulates takes
            // (see `JournalStore::blocks`, `took` and `settled`).
            let result = work(&mut journal);
            let took = journal.took();
            if !took.is_zero() {
                tokio::time::sleep(took).await;
                journal.settled();
            }
            self.journal = Some(journal);
            return Some(result);
        }
        let done = tokio::task::spawn_blocking(move || {
            let result = work(&mut journal);
            (journal, result)
        })
        .await;
        match done {
            Ok((journal, result)) => {
                self.journal = Some(journal);
                Some(result)
            }
            Err(error) => {
                self.journal_error
                    .get_or_insert(format!("the journal's thread failed: {error}"));
                None
            }
        }
    }

    /// Carry out the core's actions; a compaction runs off this thread, before the actions
    /// after it (records journaled after the image belong in the rewritten file).
    pub(super) async fn perform_all(&mut self) {
        while let Some(records) = self.perform() {
            if let Some(result) = self.off_thread(move |j| j.rewrite(&records)).await {
                self.compacted(result);
            }
        }
    }

    pub(super) fn append(&mut self, record: &journal::Record, write_through: bool) {
        if self.replica.is_some() {
            if let Err(error) = self.batches.push(record) {
                self.journal_error.get_or_insert(error);
            }
            return;
        }
        let Some(journal) = &mut self.journal else {
            return;
        };
        let written = match write_through {
            true => journal
                .append_lazily(record)
                .and_then(|()| journal.write_through()),
            false => journal.append(record),
        };
        if let Err(error) = written {
            self.journal_error.get_or_insert(error.to_string());
        }
    }
}

/// Why the event loop ends when the journal failed, logged once and returned.
pub(super) fn stopping(error: &str) -> String {
    tracing::error!(%error, "the journal cannot be written: stopping; start the scheduler again once the disk is fixed (nothing acknowledged is lost)");
    format!("the journal cannot be written: {error}")
}
