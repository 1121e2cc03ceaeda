//! `weir top`: a live view of the cluster — managers by tier, workers, task counts and
//! throughput, environments, the scaling policy's last error. `q` or Esc quits.

use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use weir::client::Client;
use weir::proto::{EnvironmentStatus, StatusReport};

struct View {
    status: StatusReport,
    environments: Vec<EnvironmentStatus>,
    rate: f64,
    error: Option<String>,
}

pub(crate) async fn run(client: &Client, refresh: Duration) -> Result<()> {
    let mut terminal = ratatui::init();
    let result = run_loop(client, refresh, &mut terminal).await;
    ratatui::restore();
    result
}

async fn run_loop(
    client: &Client,
    refresh: Duration,
    terminal: &mut ratatui::DefaultTerminal,
) -> Result<()> {
    let mut view = View {
        status: StatusReport::default(),
        environments: Vec::new(),
        rate: 0.0,
        error: None,
    };
    let mut last: Option<(Instant, u64)> = None;
    loop {
        match (client.status().await, client.env_list().await) {
            (Ok(status), Ok(environments)) => {
                let finished = status.tasks.finished();
                if let Some((at, before)) = last {
                    let seconds = at.elapsed().as_secs_f64();
                    if seconds > 0.0 {
                        view.rate = finished.saturating_sub(before) as f64 / seconds;
                    }
                }
                last = Some((Instant::now(), finished));
                view.status = status;
                view.environments = environments;
                view.error = None;
            }
            (Err(error), _) | (_, Err(error)) => view.error = Some(error.to_string()),
        }
        terminal.draw(|frame| draw(frame, &view))?;
        // Wait for a key up to the refresh interval.
        let deadline = Instant::now() + refresh;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if !event::poll(left)? {
                break;
            }
            if let Event::Key(key) = event::read()?
                && key.kind == KeyEventKind::Press
                && matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
            {
                return Ok(());
            }
        }
    }
}

fn draw(frame: &mut ratatui::Frame, view: &View) {
    let s = &view.status;
    let t = &s.tasks;
    let [header, managers, workers, environments] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(s.managers.len() as u16 + 3),
        Constraint::Min(4),
        Constraint::Length(view.environments.len() as u16 + 3),
    ])
    .areas(frame.area());

    let mut lines = vec![
        Line::from(format!(
            "tasks: {} queued  {} running  {} succeeded  {} failed  {} canceled   jobs {}   {:.0} tasks/s",
            t.queued, t.running, t.succeeded, t.failed, t.canceled, s.jobs, view.rate
        )),
        Line::from(format!(
            "workers: {}   managers: {}   (q quits)",
            s.workers.len(),
            s.managers.len()
        )),
    ];
    if let Some(error) = &s.policy_error {
        lines.push(Line::from(format!(
            "scaling policy error (last good decision held): {error}"
        )));
    }
    if let Some(error) = &view.error {
        lines.push(Line::from(format!("cannot reach the scheduler: {error}")));
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" weir top ")),
        header,
    );

    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut by_tier: Vec<_> = s.managers.iter().collect();
    by_tier.sort_by_key(|m| (m.tier.unwrap_or(u32::MAX), m.id.clone()));
    let rows = by_tier.iter().map(|m| {
        Row::new(vec![
            match (m.fixed, m.tier) {
                (Some(n), _) => format!("fixed {n}"),
                (None, Some(p)) => p.to_string(),
                (None, None) => "-".to_string(),
            },
            m.id.clone(),
            m.worker_type.clone(),
            if m.online {
                "online".into()
            } else {
                "OFFLINE".into()
            },
            m.desired.map_or("-".to_string(), |d| d.to_string()),
            m.live.to_string(),
            m.starting.to_string(),
            m.reason.clone(),
        ])
    });
    let widths = [
        Constraint::Length(5),
        Constraint::Length(16),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Min(20),
    ];
    let table = Table::new(rows, widths)
        .header(
            Row::new(vec![
                "tier",
                "manager",
                "type",
                "state",
                "desired",
                "live",
                "starting",
                "last decision",
            ])
            .style(bold),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" managers by tier "),
        );
    frame.render_widget(table, managers);

    let rows = s.workers.iter().map(|w| {
        let caps: Vec<String> = w
            .capabilities
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        Row::new(vec![
            w.id.to_string(),
            w.name.clone(),
            w.manager.clone().unwrap_or_default(),
            w.worker_type.clone(),
            match w.prefetched {
                0 => format!("{}/{}", w.running, w.slots),
                n => format!("{}/{} +{n}", w.running, w.slots),
            },
            caps.join(","),
        ])
    });
    let widths = [
        Constraint::Length(5),
        Constraint::Length(20),
        Constraint::Length(12),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Min(10),
    ];
    let table = Table::new(rows, widths)
        .header(
            Row::new(vec![
                "id",
                "worker",
                "manager",
                "type",
                "busy",
                "capabilities",
            ])
            .style(bold),
        )
        .block(Block::default().borders(Borders::ALL).title(" workers "));
    frame.render_widget(table, workers);

    let rows = view.environments.iter().map(|e| {
        Row::new(vec![
            e.name.clone(),
            e.source.clone(),
            e.matching.len().to_string(),
            e.not_matching.len().to_string(),
            e.erroring.len().to_string(),
            e.pending.len().to_string(),
        ])
    });
    let widths = [
        Constraint::Length(16),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(13),
        Constraint::Length(9),
        Constraint::Length(8),
    ];
    let table = Table::new(rows, widths)
        .header(
            Row::new(vec![
                "environment",
                "source",
                "matching",
                "not matching",
                "erroring",
                "pending",
            ])
            .style(bold),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" environments "),
        );
    frame.render_widget(table, environments);
}
