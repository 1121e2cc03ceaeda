//! When a manager is online, and the pace it is told to report at: its allowance for silence
//! grows with the pace a large cluster sets (`crate::lease::manager_pace`), a manager silent
//! past it has its connection closed, and one offline long enough is forgotten.

use super::*;

impl Entry {
    /// A report from it was heard at `now`. One heard an earlier pace after the latest was
    /// told was sent by the latest (by the earlier it would have come sooner): it is judged by
    /// that alone from now on, so a cluster that shrank sees a dead manager at its new, shorter
    /// pace.
    pub(super) fn heard(&mut self, now: u64) {
        self.last_seen = now;
        if now.saturating_sub(self.told_at) > self.paces[1] {
            self.paces[1] = 0;
        }
    }
}

impl Managers {
    /// Connected managers silent past their allowance (a machine gone, a cut link, SIGSTOP),
    /// each returned once, to have its connection closed. A manager offers QUIC a long idle
    /// timeout, so QUIC alone would close it only after the scheduler's (70 s by default), and
    /// until then its id is refused to its restart, which would be forgotten meanwhile
    /// (`--manager-forget-after`) and its workers told to leave.
    pub(crate) fn silent_connections(&mut self, now: u64) -> Vec<String> {
        let silent: Vec<String> = (self.connections.keys())
            .filter(|id| !self.closing.contains(*id))
            .filter(|id| (self.entries.get(*id)).is_some_and(|e| !self.online(e, now)))
            .cloned()
            .collect();
        self.closing.extend(silent.iter().cloned());
        silent
    }

    /// Managers silent for longer than `after` (killed, their machine gone) leave the status;
    /// one that comes back registers again.
    pub(crate) fn drop_offline(&mut self, now: u64, after: u64) -> Vec<String> {
        // Offline for `after`: silent that long beyond its allowance (beyond the timeout, as
        // before paces, while it is told to report every half of it).
        let gone: Vec<String> = (self.entries.iter())
            .filter(|(_, e)| {
                let offline_after = self.allowance(e).saturating_sub(self.timeout_ms);
                now.saturating_sub(e.last_seen) > after.saturating_add(offline_after)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            tracing::info!(manager = %id, "worker manager forgotten after being offline");
            // Its connection, if one is still open, stays its (its heartbeats come back in).
            self.entries.remove(id);
            self.orphaned.insert(id.clone());
        }
        gone
    }

    pub(super) fn online(&self, entry: &Entry, now: u64) -> bool {
        now.saturating_sub(entry.last_seen) <= self.allowance(entry)
    }

    /// How long `entry` may be silent and still be online: [`crate::lease::manager_silence`] of
    /// the longer of the last two paces it was told (the timeout itself before any).
    fn allowance(&self, entry: &Entry) -> u64 {
        let ms = std::time::Duration::from_millis;
        let pace = ms(entry.paces[0].max(entry.paces[1]));
        let silence = crate::lease::manager_silence(ms(self.timeout_ms), pace);
        u64::try_from(silence.as_millis()).unwrap_or(u64::MAX)
    }

    /// The pace `id` is to report at now is `pace` (ms): whether to tell it (the first time, or
    /// it moved by more than an eighth from the last told: a growing cluster's pace moves with
    /// every registration, and telling 1,000 managers each time would cost what pacing saves).
    pub(crate) fn tell_pace(&mut self, id: &str, pace: u64, now: u64) -> bool {
        let Some(entry) = self.entries.get_mut(id) else {
            return false;
        };
        let told = entry.paces[0];
        if told != 0 && pace.abs_diff(told) <= told / 8 {
            return false;
        }
        let earlier = if told == 0 { entry.paces[1] } else { told };
        entry.paces = [pace, earlier];
        entry.told_at = now;
        true
    }

    /// Known managers (each reports at a pace the cluster's size sets, as idle workers beat).
    pub(crate) fn count(&self) -> usize {
        self.entries.len()
    }
}
