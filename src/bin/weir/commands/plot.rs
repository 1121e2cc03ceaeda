//! `weir policy simulate --plot FILE.svg`: each manager's desired and live workers, and the
//! queued tasks, over the snapshots of a trace, so a policy's behaviour is seen at a glance.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use weir::core::scaling::{Decision, Snapshot};

/// The chart of `steps` (each snapshot with the decisions made on it), written to `path`.
pub(crate) fn draw(steps: &[(Snapshot, Vec<Decision>)], path: &Path) -> Result<()> {
    let seconds = |s: &Snapshot| s.now_ms as f64 / 1000.0;
    // The range the times span, in whatever order the trace has them (a point outside the range
    // would be drawn far off the canvas).
    let times = steps.iter().map(|(s, _)| seconds(s));
    let first = times.clone().fold(f64::INFINITY, f64::min);
    let last = times.fold(f64::NEG_INFINITY, f64::max);
    if steps.is_empty() {
        anyhow::bail!("no snapshot to plot");
    }
    let last = last.max(first + 1.0);
    let mut managers: Vec<String> = steps
        .iter()
        .flat_map(|(s, _)| s.managers.iter().map(|m| m.id.clone()))
        .collect();
    managers.sort();
    managers.dedup();
    let queued = |s: &Snapshot| s.demand.iter().map(|d| u64::from(d.queued)).sum::<u64>();
    let live = |s: &Snapshot, id: &str| {
        s.managers
            .iter()
            .find(|m| m.id == id)
            .map_or(0, |m| m.workers.len() as u64 + u64::from(m.starting))
    };
    let desired = |decisions: &[Decision], id: &str| {
        decisions
            .iter()
            .find(|d| d.manager_id == id)
            .map(|d| u64::from(d.desired_workers))
    };
    let top = steps
        .iter()
        .map(|(s, d)| {
            let workers = managers
                .iter()
                .map(|id| live(s, id).max(desired(d, id).unwrap_or(0)));
            workers.chain([queued(s)]).max().unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
        .max(1);

    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("workers per manager, and queued tasks", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(45)
        .build_cartesian_2d(first..last, 0u64..top + top / 10 + 1)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("count")
        .draw()
        .map_err(|e| fail(&e))?;
    let queued_line = steps.iter().map(|(s, _)| (seconds(s), queued(s)));
    chart
        .draw_series(LineSeries::new(queued_line, BLACK.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label("queued tasks")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    for (index, id) in managers.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        let desired_line = steps
            .iter()
            .filter_map(|(s, d)| desired(d, id).map(|n| (seconds(s), n)));
        chart
            .draw_series(LineSeries::new(desired_line, color.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(format!("{id}: desired"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        let live_line = steps.iter().map(|(s, _)| (seconds(s), live(s, id)));
        chart
            .draw_series(DashedLineSeries::new(
                live_line,
                6,
                4,
                color.stroke_width(1),
            ))
            .map_err(|e| fail(&e))?
            .label(format!("{id}: live + starting"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
