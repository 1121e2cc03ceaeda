//! Policy content: the CSV-like rows of the reference configs.
//!
//! ```text
//! # priority, worker_manager_id, max_task_concurrency     (waterfall_v1; the cap is optional)
//!          1,               wm1,                   10  # comment
//! # priority, worker_type                                 (waterfall_v2)
//!          1,            native
//!          2,             cloud, min=2, cooldown=5m       # optional settings, any order
//! ```
//! `#` starts a comment; blank lines are skipped. Bad rows, duplicates and content without rows
//! are errors that name the line.
//!
//! After its columns a row may carry `key=value` settings (the reference formats have no `=`,
//! so old content never reads as one):
//! - `min=N`: keep at least N workers (capped by the manager's own cap) even with no demand — a
//!   warm minimum. Idle workers at the minimum do not hold the tiers above from shrinking.
//! - `cooldown=DURATION` (`90s`, `5m`, `1h`, `500ms`): after the manager failed to start a
//!   worker, for that long since the last failure (or until one of its workers comes up) the tier
//!   offers only its live workers: demand spills to the next tier at once instead of waiting, and
//!   the workers it is still starting are cancelled.

use std::fmt;

use crate::model::{Tier, UNLIMITED};

/// Which column the second field names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `waterfall_v1`: rows `priority, worker_manager_id[, max_task_concurrency]`.
    ManagerId,
    /// `waterfall_v2`: rows `priority, worker_type`.
    WorkerType,
}

impl Flavor {
    fn row_shape(self) -> &'static str {
        match self {
            Flavor::ManagerId => "priority, worker_manager_id[, max_task_concurrency]",
            Flavor::WorkerType => "priority, worker_type",
        }
    }
    fn member_noun(self) -> &'static str {
        match self {
            Flavor::ManagerId => "worker manager",
            Flavor::WorkerType => "worker type",
        }
    }
}

/// One row of the content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub priority: u32,
    /// A manager id (v1) or a worker type (v2).
    pub member: String,
    /// v1's optional third column; `None` is no limit beyond the manager's own.
    pub cap: Option<u32>,
    /// The row's `key=value` settings.
    pub settings: Settings,
    /// 1-based line number in the content.
    pub line: usize,
}

/// A row's optional settings (`min=2, cooldown=5m`); the default is none of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `min=N`: the warm minimum of workers per manager of the row.
    pub min_workers: Option<u32>,
    /// `cooldown=DURATION`: how long after a failed start the manager offers no new workers.
    pub cooldown_ms: Option<u64>,
}

impl Settings {
    fn is_empty(&self) -> bool {
        *self == Settings::default()
    }

    /// Apply one `key=value` field.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "min" => {
                let min = value.parse::<u32>().map_err(|_| {
                    format!(
                        "min `{value}` is not a whole number of workers (0 to {})",
                        u32::MAX
                    )
                })?;
                replace(&mut self.min_workers, min, key)
            }
            "cooldown" => replace(&mut self.cooldown_ms, parse_duration(value)?, key),
            _ => Err(format!(
                "unknown setting `{key}`; a row's settings are `min=N` and `cooldown=DURATION`"
            )),
        }
    }
}

impl fmt::Display for Settings {
    /// As the content would write them: `min=2, cooldown=300s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(min) = self.min_workers {
            parts.push(format!("min={min}"));
        }
        if let Some(ms) = self.cooldown_ms {
            parts.push(match ms % 1000 {
                0 => format!("cooldown={}s", ms / 1000),
                _ => format!("cooldown={ms}ms"),
            });
        }
        f.write_str(&parts.join(", "))
    }
}

fn replace<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    match slot.replace(value) {
        Some(_) => Err(format!("setting `{key}` is given twice")),
        None => Ok(()),
    }
}

/// `500ms`, `90s`, `5m`, `1h` (a unit is required: a bare number could mean either).
fn parse_duration(text: &str) -> Result<u64, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "cooldown `{text}` needs a unit: ms, s, m or h (e.g. `cooldown=90s`)"
            ));
        }
    };
    let n = (digits.parse::<u64>().ok())
        .ok_or_else(|| format!("cooldown `{text}` is not a whole number of {unit}"))?;
    n.checked_mul(scale)
        .ok_or_else(|| format!("cooldown `{text}` is longer than this accepts"))
}

/// A parse error. `line` is 1-based; `None` for errors about the whole content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentError {
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ContentError {}

/// Parsed policy content: rules sorted by priority (stable, so content order within a tier).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub flavor: Flavor,
    pub rules: Vec<Rule>,
}

impl Policy {
    pub fn parse(flavor: Flavor, content: &str) -> Result<Policy, ContentError> {
        let mut rules: Vec<Rule> = Vec::new();
        // Each member's line, to refuse one listed twice without a pass over the rows per row
        // (content of 30,000 rows took over a second to parse that way).
        let mut listed: std::collections::BTreeMap<&str, usize> = Default::default();
        for (index, raw) in content.lines().enumerate() {
            let line = index + 1;
            let text = raw.split('#').next().unwrap_or("").trim();
            if text.is_empty() {
                continue;
            }
            let err = |message: String| ContentError {
                line: Some(line),
                message,
            };
            // Columns, then `key=value` settings.
            let all: Vec<&str> = text.split(',').map(str::trim).collect();
            let columns = all.iter().take_while(|f| !f.contains('=')).count();
            let (fields, settings_fields) = all.split_at(columns);
            let max_fields = if flavor == Flavor::ManagerId { 3 } else { 2 };
            if fields.len() < 2 || fields.len() > max_fields {
                return Err(err(format!(
                    "expected `{}`, found {} field{} in `{text}`",
                    flavor.row_shape(),
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                )));
            }
            let mut settings = Settings::default();
            for field in settings_fields {
                let Some((key, value)) = field.split_once('=') else {
                    if field.is_empty() {
                        return Err(err("empty field after a setting".to_string()));
                    }
                    return Err(err(format!(
                        "`{field}` follows a setting: a row's columns come first, then its \
                         `key=value` settings"
                    )));
                };
                settings.set(key.trim(), value.trim()).map_err(err)?;
            }
            let priority = fields[0].parse::<u32>().map_err(|_| match fields[0].parse::<i64>() {
                // Scaler takes any integer; the policy world's tiers carry a u32, so say how to
                // write the same order instead of guessing a shift.
                Ok(negative) if negative < 0 => err(format!(
                    "priority `{negative}` is negative: priorities are 0 to {}; only their order \
                     matters, so add the same amount to every row",
                    u32::MAX
                )),
                _ => err(format!("priority `{}` is not a whole number (0 to {})", fields[0], u32::MAX)),
            })?;
            // Inner spaces are part of the name (`worker-manager --id "gpu pool"`), as in Scaler.
            let member = fields[1];
            if member.is_empty() {
                return Err(err(format!("empty {}", flavor.member_noun())));
            }
            let cap = match fields.get(2) {
                None => None,
                Some(&"") => return Err(err("empty max_task_concurrency".to_string())),
                Some(&text) => Some(parse_cap(text).map_err(err)?),
            };
            if let Some(previous) = listed.insert(member, line) {
                return Err(err(format!(
                    "{} `{member}` is already listed on line {previous}",
                    flavor.member_noun(),
                )));
            }
            rules.push(Rule {
                priority,
                member: member.to_string(),
                cap,
                settings,
                line,
            });
        }
        if rules.is_empty() {
            return Err(ContentError {
                line: None,
                message: format!(
                    "policy content has no rows; expected `{}` rows",
                    flavor.row_shape()
                ),
            });
        }
        rules.sort_by_key(|r| r.priority);
        Ok(Policy { flavor, rules })
    }

    /// The tiers, in ascending priority, members in content order, with the settings of those
    /// that have some.
    pub fn tiers(&self) -> Vec<Tier> {
        let mut tiers: Vec<Tier> = Vec::new();
        for rule in &self.rules {
            let tier = match tiers.last_mut() {
                Some(tier) if tier.priority == rule.priority => tier,
                _ => {
                    tiers.push(Tier {
                        priority: rule.priority,
                        ..Tier::default()
                    });
                    let last = tiers.len() - 1;
                    &mut tiers[last]
                }
            };
            tier.members.push(rule.member.clone());
            if !rule.settings.is_empty() {
                (tier.settings).push((rule.member.clone(), rule.settings.to_string()));
            }
        }
        tiers
    }
}

fn parse_cap(text: &str) -> Result<u32, String> {
    if text == "-1" || text.eq_ignore_ascii_case("unlimited") {
        return Ok(UNLIMITED);
    }
    text.parse::<u32>().map_err(|_| {
        format!("max_task_concurrency `{text}` is not a whole number, `-1` or `unlimited`")
    })
}
