//! A job's progress while waiting: a bar on a terminal, a line a second otherwise (both on
//! stderr), nothing for programs and scripts.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use weir::proto::{JobCounts, JobId};

use super::Progress;

/// The progress people see.
pub(super) fn for_people(job: JobId) -> Box<dyn Progress> {
    if !std::io::stderr().is_terminal() {
        return Box::new(Lines { job, last: None });
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} tasks  {per_sec}  eta {eta}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Box::new(Bar(bar))
}

struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn update(&mut self, counts: &JobCounts) {
        self.0.set_length(counts.total());
        self.0.set_position(counts.finished());
        self.0.set_message(format!(
            "{} running, {} failed",
            counts.running, counts.failed
        ));
    }

    fn finish(self: Box<Self>) {
        self.0.finish_and_clear();
    }
}

/// A line at most every second.
struct Lines {
    job: JobId,
    last: Option<Instant>,
}

impl Progress for Lines {
    fn update(&mut self, counts: &JobCounts) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last = Some(Instant::now());
        eprintln!(
            "job {}: {}/{} finished, {} running, {} queued, {} failed",
            self.job,
            counts.finished(),
            counts.total(),
            counts.running,
            counts.queued,
            counts.failed
        );
    }

    fn finish(self: Box<Self>) {}
}

/// No progress: JSON and quiet outputs.
pub(super) struct Silent;

impl Progress for Silent {
    fn update(&mut self, _: &JobCounts) {}
    fn finish(self: Box<Self>) {}
}
