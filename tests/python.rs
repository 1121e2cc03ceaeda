//! The Python package's tests (python/tests, pytest) against this build's scheduler and workers:
//! python/test.sh builds the package into a virtualenv (maturin, from PyPI) and runs them.
//! Ignored in a plain `cargo test` (it needs Python, pip and the network); CI runs it.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs python3 with venv and pip, and PyPI: CI runs it (cargo test -- --include-ignored)"]
fn the_python_package_passes_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = Path::new(env!("CARGO_BIN_EXE_scheduler"))
        .parent()
        .expect("the executables' directory");
    let target = bin.parent().expect("the target directory");
    let status = Command::new(root.join("python/test.sh"))
        .env("CARGO_TARGET_DIR", target)
        .status()
        .expect("python/test.sh runs");
    assert!(
        status.success(),
        "the Python package's tests failed: {status}"
    );
}
