//! Which scaling policy to run, from flags (`--policy`, `--policy-content`) or from the
//! reference TOML form:
//!
//! ```toml
//! policy_engine_type = "waterfall_v2"      # a bundled engine, or a path to a .wasm component
//! policy_content = """
//! 1, native
//! 2, burst
//! """
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::plugin::{Limits, PluginError, PluginHost, PolicyPlugin, World, bundled};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Toml { path: PathBuf, message: String },
    #[error(
        "unknown policy engine `{0}`: use waterfall_v1, waterfall_v2 or a path to a .wasm component"
    )]
    UnknownEngine(String),
    #[error("{0} is required with --policy (the rows, or @FILE)")]
    MissingContent(&'static str),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// A flag's value that does not parse (clap prints it after the flag's name).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("`{arg}`: expected [NAME=]FILE.wasm[,key=value...]")]
    EnvPluginForm { arg: String },
    #[error("`{arg}`: environment name `{name}` must be letters, digits, `_` or `-`")]
    EnvName { arg: String, name: String },
    #[error("`{arg}`: `{file}` is neither a .wasm file nor a bundled condition")]
    EnvSource { arg: String, file: String },
    #[error("`{arg}`: `{pair}` is not key=value")]
    ConfigPair { arg: String, pair: String },
    #[error("`{0}` is not name=amount")]
    CapabilityPair(String),
    #[error("capability name `{0}` must be letters, digits, `_` or `-`")]
    CapabilityName(String),
    #[error("`{0}` is not an amount (e.g. 4, 16GB, 512MiB)")]
    Amount(String),
    #[error("capability `{0}` given twice")]
    CapabilityTwice(String),
    #[error("`{0}` is not zero or a positive number of seconds")]
    Seconds(String),
    #[error("`{0}` seconds is more than this accepts (at most 10^12)")]
    TooManySeconds(String),
    #[error("`{0}`: must be more than zero seconds")]
    ZeroSeconds(String),
    #[error("`{0}` is not zero or a positive number a second up to 1000000 (e.g. 500, 0.5)")]
    Rate(String),
    #[error("`{0}` is not key=value (e.g. cost=3,zone=a)")]
    LabelPair(String),
    #[error("label key `{0}` must be 1 to 64 letters, digits, `_`, `-` or `.`")]
    LabelKey(String),
    #[error("label `{key}`: its value must be at most 256 printable characters")]
    LabelValue { key: String },
    #[error("label `{0}` given twice")]
    LabelTwice(String),
    #[error("at most {MAX_LABELS} labels")]
    TooManyLabels,
}

pub use weir_proto::MAX_LABELS;

/// Letters, digits, `_` and `-`, at least one: environment and capability names.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A policy engine: bundled in the executable, or a component file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Engine {
    Bundled(&'static str),
    File(PathBuf),
}

impl Engine {
    /// `waterfall_v1` / `waterfall_v2` / `mem_gt` name the bundled components (unless a file of
    /// that name exists), and so does the bare file name `NAME.wasm` when no such file is here
    /// (`--env-plugin mem_gt.wasm`, as users type it); anything else is a path.
    pub fn parse(arg: &str) -> Result<Engine, ConfigError> {
        let path = Path::new(arg);
        let bare = path.parent().is_none_or(|p| p.as_os_str().is_empty());
        let name = match arg.strip_suffix(".wasm") {
            Some(stem) if bare => stem,
            _ => arg,
        };
        if let Some((name, _)) = bundled::ALL.iter().find(|(bundled, _)| *bundled == name)
            && !path.exists()
        {
            return Ok(Engine::Bundled(name));
        }
        if path.extension().is_some_and(|e| e == "wasm") || path.exists() {
            return Ok(Engine::File(path.to_path_buf()));
        }
        Err(ConfigError::UnknownEngine(arg.to_string()))
    }

    pub fn name(&self) -> String {
        match self {
            Engine::Bundled(name) => (*name).to_string(),
            Engine::File(path) => path.display().to_string(),
        }
    }
}

/// A policy engine with its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySpec {
    pub engine: Engine,
    pub content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyToml {
    policy_engine_type: String,
    policy_content: String,
}

impl PolicySpec {
    /// The policy the flags choose: the TOML file when given, else the engine with its content
    /// (`content_flag` names the content flag in the error when it is missing). `None` when no
    /// policy flag was given at all.
    pub fn from_flags(
        config: Option<&Path>,
        policy: Option<&str>,
        content: Option<&str>,
        content_flag: &'static str,
    ) -> Result<Option<PolicySpec>, ConfigError> {
        if let Some(path) = config {
            return PolicySpec::from_toml_file(path).map(Some);
        }
        let Some(policy) = policy else {
            return Ok(None);
        };
        let engine = Engine::parse(policy)?;
        let content = content_arg(content.ok_or(ConfigError::MissingContent(content_flag))?)?;
        Ok(Some(PolicySpec { engine, content }))
    }

    /// The reference TOML form. A relative engine path is relative to the file.
    pub fn from_toml_file(path: &Path) -> Result<PolicySpec, ConfigError> {
        let text = read(path)?;
        let parsed: PolicyToml = toml::from_str(&text).map_err(|e| ConfigError::Toml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let engine = match Engine::parse(&parsed.policy_engine_type)? {
            Engine::File(file) if file.is_relative() => {
                Engine::File(path.parent().unwrap_or(Path::new(".")).join(file))
            }
            engine => engine,
        };
        Ok(PolicySpec {
            engine,
            content: parsed.policy_content,
        })
    }

    /// Load the component and create the engine from the content (so bad content fails here,
    /// with its line number).
    /// The engine's component bytes (the bundled one's, or the file's).
    pub fn component(&self) -> Result<Vec<u8>, ConfigError> {
        match &self.engine {
            Engine::Bundled(name) => bundled::by_name(name)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| ConfigError::UnknownEngine(name.to_string())),
            Engine::File(path) => Ok(std::fs::read(path).map_err(|error| ConfigError::Read {
                path: path.clone(),
                error,
            })?),
        }
    }

    pub fn instantiate(
        &self,
        host: &PluginHost,
        limits: Limits,
    ) -> Result<PolicyPlugin, ConfigError> {
        let loaded = match &self.engine {
            Engine::Bundled(name) => {
                let bytes = bundled::by_name(name)
                    .ok_or_else(|| ConfigError::UnknownEngine(name.to_string()))?;
                host.load(name, bytes, Some(World::Policy))?
            }
            Engine::File(path) => host.load_file(path, Some(World::Policy))?,
        };
        Ok(host.policy(&loaded, &self.content, limits)?)
    }
}

/// A `--policy-content` value: the text itself, or `@FILE` for a file's contents.
pub fn content_arg(arg: &str) -> Result<String, ConfigError> {
    match arg.strip_prefix('@') {
        Some(path) => read(Path::new(path)),
        None => Ok(arg.to_string()),
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })
}

/// A `--env-plugin [NAME=]FILE.wasm[,key=value...]` value: an environment condition a worker
/// evaluates. NAME defaults to the file stem; a bundled condition (`mem_gt`) needs no file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvPluginSpec {
    pub name: String,
    pub source: Engine,
    pub config: Vec<(String, String)>,
}

impl EnvPluginSpec {
    pub fn parse(arg: &str) -> Result<EnvPluginSpec, ValueError> {
        let mut parts = arg.split(',');
        let head = parts.next().unwrap_or_default().trim();
        let (name, file) = match head.split_once('=') {
            Some((name, file)) => (name.trim().to_string(), file.trim()),
            None => {
                let stem = Path::new(head)
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default();
                (stem.to_string(), head)
            }
        };
        let arg = || arg.to_string();
        if file.is_empty() {
            return Err(ValueError::EnvPluginForm { arg: arg() });
        }
        if !is_name(&name) {
            return Err(ValueError::EnvName { arg: arg(), name });
        }
        let source = Engine::parse(file).map_err(|_| ValueError::EnvSource {
            arg: arg(),
            file: file.to_string(),
        })?;
        let mut config = Vec::new();
        for pair in parts {
            let Some((key, value)) = pair.split_once('=') else {
                let pair = pair.to_string();
                return Err(ValueError::ConfigPair { arg: arg(), pair });
            };
            config.push((key.trim().to_string(), value.trim().to_string()));
        }
        Ok(EnvPluginSpec {
            name,
            source,
            config,
        })
    }

    /// The component's bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, ConfigError> {
        match &self.source {
            Engine::Bundled(name) => bundled::by_name(name)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| ConfigError::UnknownEngine(name.to_string())),
            Engine::File(path) => std::fs::read(path).map_err(|error| ConfigError::Read {
                path: path.clone(),
                error,
            }),
        }
    }

    /// Load and check the condition component.
    pub fn load(&self, host: &PluginHost) -> Result<crate::plugin::Loaded, ConfigError> {
        Ok(host.load(&self.name, &self.bytes()?, Some(World::Environment))?)
    }
}

/// `cpu=4,memory=16GB,gpu=1`: capability amounts. Amounts are whole numbers, optionally with a
/// decimal (`k`, `M`, `G`, `T`, `KB`, `MB`, `GB`, `TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`) suffix.
pub fn parse_capabilities(text: &str) -> Result<Vec<(String, u64)>, ValueError> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(ValueError::CapabilityPair(pair.to_string()));
        };
        let name = name.trim();
        if !is_name(name) {
            return Err(ValueError::CapabilityName(name.to_string()));
        }
        let amount =
            parse_amount(value.trim()).ok_or_else(|| ValueError::Amount(value.to_string()))?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(ValueError::CapabilityTwice(name.to_string()));
        }
        out.push((name.to_string(), amount));
    }
    Ok(out)
}

/// `--label` values (each `cost=3,zone=a`; the flag repeats): a manager's labels in order.
/// Keys are 1 to 64 letters, digits, `_`, `-` or `.`, each once; values are at most 256
/// printable characters (no `,`, which separates labels) and may be empty.
pub fn parse_labels(args: &[String]) -> Result<Vec<(String, String)>, ValueError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let pairs = args.iter().flat_map(|a| a.split(',')).map(str::trim);
    for pair in pairs.filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(ValueError::LabelPair(pair.to_string()));
        };
        let (key, value) = (key.trim(), value.trim());
        if !weir_proto::label_ok(key, "") {
            return Err(ValueError::LabelKey(key.to_string()));
        }
        if !weir_proto::label_ok(key, value) {
            return Err(ValueError::LabelValue {
                key: key.to_string(),
            });
        }
        if out.iter().any(|(k, _)| k == key) {
            return Err(ValueError::LabelTwice(key.to_string()));
        }
        if out.len() == MAX_LABELS {
            return Err(ValueError::TooManyLabels);
        }
        out.push((key.to_string(), value.to_string()));
    }
    Ok(out)
}

pub fn parse_amount(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let multiplier: u64 = match unit {
        "" => 1,
        "k" | "K" | "KB" | "kB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "T" | "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

/// A `--flag SECONDS` value for clap (`value_parser = seconds`): zero or more seconds, fractions
/// allowed (`0.5`), as a [`std::time::Duration`].
pub fn seconds(text: &str) -> Result<std::time::Duration, ValueError> {
    match text.trim().parse::<f64>() {
        Ok(value) if value >= 0.0 && value.is_finite() && value < 1e12 => {
            Ok(std::time::Duration::from_secs_f64(value))
        }
        Ok(value) if value.is_finite() && value >= 1e12 => {
            Err(ValueError::TooManySeconds(text.to_string()))
        }
        _ => Err(ValueError::Seconds(text.to_string())),
    }
}

/// `scheduler --idle-beats N` (beats a second in all, fractions allowed) as what each worker
/// adds to the idle pace: `1 s / N`, zero for 0 (no budget).
pub fn idle_beats(text: &str) -> Result<std::time::Duration, ValueError> {
    let rate = || ValueError::Rate(text.to_string());
    match text.trim().parse::<f64>() {
        Ok(0.0) => Ok(std::time::Duration::ZERO),
        // Above a million a second the pace a worker adds is under a microsecond, which the
        // core (microseconds) would read as no budget at all.
        Ok(value) if value > 0.0 && value <= 1e6 => {
            std::time::Duration::try_from_secs_f64(1.0 / value).map_err(|_| rate())
        }
        _ => Err(rate()),
    }
}

/// As [`seconds`], but more than zero.
pub fn positive_seconds(text: &str) -> Result<std::time::Duration, ValueError> {
    match seconds(text)? {
        zero if zero.is_zero() => Err(ValueError::ZeroSeconds(text.to_string())),
        duration => Ok(duration),
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_LABELS, ValueError, parse_labels};

    fn labels(args: &[&str]) -> Result<Vec<(String, String)>, ValueError> {
        parse_labels(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn labels_are_key_value_pairs_in_order_over_repeated_flags() {
        let got = labels(&["cost=3, zone=eu-west.1", "spot=", "team=ml ops"]).unwrap();
        let want = [
            ("cost", "3"),
            ("zone", "eu-west.1"),
            ("spot", ""),
            ("team", "ml ops"),
        ];
        assert_eq!(
            got,
            want.map(|(k, v)| (k.to_string(), v.to_string())).to_vec()
        );
        assert_eq!(labels(&[]).unwrap(), Vec::new());
        assert_eq!(labels(&[" , "]).unwrap(), Vec::new());
    }

    #[test]
    fn bad_labels_are_refused_naming_what_is_wrong() {
        let message = |args: &[&str]| labels(args).unwrap_err().to_string();
        assert_eq!(
            message(&["cost"]),
            "`cost` is not key=value (e.g. cost=3,zone=a)"
        );
        assert!(message(&["=3"]).starts_with("label key ``"));
        assert!(message(&["a b=1"]).starts_with("label key `a b`"));
        assert!(message(&[&format!("{}=1", "k".repeat(65))]).contains("1 to 64"));
        assert_eq!(
            message(&[&format!("k={}", "v".repeat(257))]),
            "label `k`: its value must be at most 256 printable characters"
        );
        assert_eq!(
            message(&["k=\u{7}"]),
            "label `k`: its value must be at most 256 printable characters"
        );
        assert!(
            message(&["k=a\u{202e}b"]).starts_with("label `k`"),
            "a bidi override"
        );
        assert!(
            message(&["k=a\u{200b}"]).starts_with("label `k`"),
            "a zero-width space"
        );
        assert_eq!(message(&["cost=1", "cost=2"]), "label `cost` given twice");
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            parse_labels(&many).unwrap_err().to_string(),
            format!("at most {MAX_LABELS} labels")
        );
    }
}
