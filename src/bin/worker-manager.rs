//! `worker-manager`: starts and stops the workers of one pool of machines.
//! Not built yet: it arrives with the network runtime (see the README's status section).

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "worker-manager", version, about = "A weir worker manager (not built yet)")]
struct Args {}

fn main() -> ExitCode {
    weir::telemetry::init_logging();
    let Args {} = Args::parse();
    eprintln!("error: the worker manager is not built yet in this version of weir");
    ExitCode::FAILURE
}
