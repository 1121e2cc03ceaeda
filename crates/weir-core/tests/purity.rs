//! `weir-core` is the pure state machine (DESIGN §2): no async runtime, no network, no wasmtime,
//! no clock (no `Instant` at all: time is an argument), no I/O. Its manifest keeps the crates
//! out (checked here too, so adding one is a decision that fails this test first), and this
//! reads its sources (the scheduler's core, the worker's and the worker manager's convergence;
//! not `src/tests`, which may read files) and fails on any use of the standard library's clock,
//! files, network, threads, processes or environment.

#[test]
fn the_core_depends_on_no_runtime_network_or_sandbox() {
    let manifest = include_str!("../Cargo.toml");
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("Cargo.toml has a [dependencies] table");
    let names: Vec<&str> = dependencies
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty())
        .collect();
    assert!(names.contains(&"weir-proto"), "read {names:?}");
    for name in names {
        for word in [
            "tokio", "quinn", "wasmtime", "mio", "async", "futures", "rustls",
        ] {
            assert!(
                !name.contains(word),
                "weir-core must not depend on `{name}` (DESIGN §2: the core is pure)"
            );
        }
    }
}

#[test]
fn the_core_uses_no_runtime_network_sandbox_clock_or_io() {
    let forbidden = [
        "tokio",
        "quinn",
        "wasmtime",
        "Instant",
        "SystemTime",
        "std::fs",
        "std::net",
        "std::thread",
        "std::process",
        "std::env",
        // std's maps are keyed at random per map: their order would differ run to run (the
        // core's are `weir_core::hash`'s, keyed the same every run).
        "collections::HashMap",
        "collections::HashSet",
        "RandomState",
    ];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut files = 0;
    let mut worker = 0;
    let mut units = 0;
    for path in sources(std::path::Path::new(dir)) {
        let tests = path.components().any(|part| part.as_os_str() == "tests")
            || path.file_name().is_some_and(|name| name == "tests.rs");
        if tests {
            continue;
        }
        // The one file that names std's maps: to key them the same every run.
        let defines_maps = path.ends_with("src/hash.rs");
        files += 1;
        // The worker's core (its lease, held tasks, reports) is held to the same rule.
        worker += usize::from(path.parent().is_some_and(|p| p.ends_with("src/worker")));
        // So is the manager's convergence step (its units, the backoff after failures).
        units += usize::from(path.parent().is_some_and(|p| p.ends_with("src/units")));
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in forbidden {
                if defines_maps && word.starts_with("collections::") {
                    continue;
                }
                assert!(
                    !code.contains(word),
                    "{}:{}: the core must not use `{word}`: {line}",
                    path.display(),
                    number + 1
                );
            }
        }
    }
    assert!(files >= 12, "read {files} files of {dir}");
    assert!(worker >= 3, "read {worker} files of the worker's core");
    assert!(
        units >= 3,
        "read {units} files of the manager's convergence core"
    );
}

/// Every `.rs` file under `dir`, in its subfolders too.
fn sources(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}
