//! Logging set-up shared by the executables: `tracing` to stderr, filtered by `RUST_LOG`
//! (default `warn`, so a plugin's stderr and refused calls are visible), as text or JSON lines.
//! Also the flags the `scheduler`, `worker` and `worker-manager` executables share.

use std::path::PathBuf;

/// Flags of every long-running executable (`#[command(flatten)]`).
#[derive(clap::Args, Clone, Debug)]
pub struct CommonArgs {
    /// The access file: the scheduler writes it (address, certificate, tokens), the others read
    /// it to find and authenticate to the scheduler.
    #[arg(
        long,
        env = "WEIR_ACCESS_FILE",
        default_value = ".weir/access.json",
        value_name = "FILE"
    )]
    pub access_file: PathBuf,
    /// Log format on stderr (`RUST_LOG` filters, default `warn`).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// Colours only on a terminal: a file (a Slurm job's `--output`, a redirected log) gets plain
/// text.
pub fn init(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // openraft warns of every vote it ignores and every replica it cannot reach while
        // one is down: weir says what matters of that itself (a replica leads, stops).
        tracing_subscriber::EnvFilter::new("warn,openraft=error")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Text logs (the executables without a `--log-format` flag).
pub fn init_logging() {
    init(LogFormat::Text);
}

/// How every executable ends: 0, or the error and its causes on stderr and 1.
pub fn exit<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
