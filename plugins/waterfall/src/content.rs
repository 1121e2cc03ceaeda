//! Policy content: the CSV-like rows of the reference configs.
//!
//! ```text
//! # priority, worker_manager_id, max_task_concurrency     (waterfall_v1; the cap is optional)
//!          1,               wm1,                   10  # comment
//! # priority, worker_type                                 (waterfall_v2)
//!          1,            native
//! ```
//! `#` starts a comment; blank lines are skipped. Bad rows, duplicates and content without rows
//! are errors that name the line.

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
    /// 1-based line number in the content.
    pub line: usize,
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
            let fields: Vec<&str> = text.split(',').map(str::trim).collect();
            let max_fields = if flavor == Flavor::ManagerId { 3 } else { 2 };
            if fields.len() < 2 || fields.len() > max_fields {
                return Err(err(format!(
                    "expected `{}`, found {} field{} in `{text}`",
                    flavor.row_shape(),
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                )));
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
            if let Some(previous) = rules.iter().find(|r| r.member == member) {
                return Err(err(format!(
                    "{} `{member}` is already listed on line {}",
                    flavor.member_noun(),
                    previous.line
                )));
            }
            rules.push(Rule {
                priority,
                member: member.to_string(),
                cap,
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

    /// The tiers, in ascending priority, members in content order.
    pub fn tiers(&self) -> Vec<Tier> {
        let mut tiers: Vec<Tier> = Vec::new();
        for rule in &self.rules {
            match tiers.last_mut() {
                Some(tier) if tier.priority == rule.priority => {
                    tier.members.push(rule.member.clone())
                }
                _ => tiers.push(Tier {
                    priority: rule.priority,
                    members: vec![rule.member.clone()],
                }),
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
