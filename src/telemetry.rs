//! Logging set-up shared by the executables: `tracing` to stderr, filtered by `RUST_LOG`
//! (default `warn`, so a plugin's stderr and refused calls are visible).

pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
