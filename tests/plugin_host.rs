//! The wasmtime host with real components: the bundled plugins, the hostile fixtures
//! (`plugins/fixtures/`), files that are not components, and the compiled-component cache.
//! Every failure must come back as the right typed error and leave the host usable.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use weir::core::scaling::{Manager, Nonsense, PolicyFailure, Snapshot};
use weir::plugin::{HostFacts, Limits, Origin, PluginError, PluginHost, Version, World, bundled};

const HOSTILE_POLICY: &[u8] = include_bytes!("../plugins/fixtures/hostile_policy.wasm");
const HOSTILE_CONDITION: &[u8] = include_bytes!("../plugins/fixtures/hostile_condition.wasm");
const HOSTILE_TASK: &[u8] = include_bytes!("../plugins/fixtures/hostile_task.wasm");
const EMPTY_POLICY: &[u8] = include_bytes!("../plugins/fixtures/empty_policy.wasm");

fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| PluginHost::new(None).expect("plugin host"))
}

/// Short deadline and small memory so hostile calls end quickly.
fn tight() -> Limits {
    Limits {
        deadline: Duration::from_millis(200),
        memory_bytes: 16 << 20,
        ..Limits::default()
    }
}

fn facts(total_memory_bytes: u64) -> Arc<HostFacts> {
    Arc::new(HostFacts {
        total_memory_bytes,
        cpu_count: 2,
        ..HostFacts::default()
    })
}

fn config(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn one_manager() -> Arc<Snapshot> {
    Arc::new(Snapshot {
        fetch: Default::default(),
        now_ms: 0,
        scale_down_delay_ms: 0,
        managers: vec![Manager {
            labels: Vec::new(),
            counted: None,
            drained: Vec::new(),
            drain_budget: 0,
            walltime_ms: None,
            id: "wm1".into(),
            worker_type: "native".into(),
            max_task_concurrency: 10,
            worker_slots: 1,
            online: true,
            workers: vec![],
            starting: 0,
            capabilities: vec![],
            environments: vec![],
            ..Default::default()
        }],
        demand: vec![],
    })
}

#[test]
fn bundled_components_declare_their_worlds_and_versions() {
    let frozen = include_bytes!("../plugins/fixtures/frozen/waterfall_v2-0.1.0.wasm");
    for (name, bytes, world, version) in [
        (
            "waterfall_v1",
            bundled::WATERFALL_V1,
            World::Policy,
            Version::V0_2,
        ),
        (
            "waterfall_v2",
            bundled::WATERFALL_V2,
            World::Policy,
            Version::V0_2,
        ),
        (
            "waterfall_v2-0.1.0",
            &frozen[..],
            World::Policy,
            Version::V0_1,
        ),
        ("mem_gt", bundled::MEM_GT, World::Environment, Version::V0_1),
        (
            "hostile_policy",
            HOSTILE_POLICY,
            World::Policy,
            Version::V0_1,
        ),
        (
            "hostile_condition",
            HOSTILE_CONDITION,
            World::Environment,
            Version::V0_1,
        ),
        ("empty_policy", EMPTY_POLICY, World::Policy, Version::V0_2),
    ] {
        let loaded = host().load(name, bytes, None).expect(name);
        assert_eq!(loaded.world, Some(world), "{name}");
        assert_eq!(loaded.version, Some(version), "{name}");
        let inspection = host().inspect(&loaded);
        assert_eq!(inspection.version, Some(version), "{name}");
        let interface = match world {
            World::Environment => "condition",
            World::Policy => "scaling",
            World::Task => "runner",
        };
        let export = format!("weir:plugin/{interface}@{}", version.as_str());
        assert!(
            inspection.exports.contains(&export),
            "{name}: {inspection:?}"
        );
        // WASI is imported (Rust std) but granted nothing; nothing else outside weir:plugin.
        for import in &inspection.imports {
            assert!(
                import.starts_with("weir:plugin/") || import.starts_with("wasi:"),
                "{name} imports {import}"
            );
        }
    }
}

/// `weir bench --plugins-only` times this fixture as the 0.2.0 interface's own cost: it must
/// take every snapshot and answer nothing, or the floor it prints would measure something else.
#[test]
fn the_empty_policy_takes_a_snapshot_and_decides_nothing() {
    let loaded = host()
        .load("empty_policy", EMPTY_POLICY, Some(World::Policy))
        .expect("loads");
    let mut policy = host()
        .policy(&loaded, "anything", Limits::default())
        .expect("created");
    let decisions = policy.decide(&one_manager()).expect("decides");
    assert!(decisions.is_empty(), "{decisions:?}");
}

#[test]
fn mem_gt_compares_total_memory_with_the_threshold_in_any_unit() {
    let loaded = host()
        .load("mem_gt", bundled::MEM_GT, Some(World::Environment))
        .unwrap();
    let mut condition = host().condition(&loaded, Limits::default()).unwrap();
    let gib = 1u64 << 30;
    let cases: &[(u64, &str, bool)] = &[
        (64 * gib, "32GiB", true),
        (32 * gib, "32GiB", false), // strictly greater
        (32 * gib, "32GB", true),   // 32e9 < 32 GiB
        (32 * gib, "32e9", true),
        (32 * gib, "34359738367", true),
        (32 * gib, "1.5TB", false),
        (32 * gib, "1PB", false),
        (32 * gib, "1", true),
        (32 * gib, "32 gib", false),
    ];
    for (total, threshold, expected) in cases {
        let got = condition
            .evaluate(&facts(*total), &config(&[("threshold", threshold)]))
            .unwrap();
        assert_eq!(got, *expected, "total {total} threshold {threshold}");
    }
    let values = condition
        .setup(&facts(64 * gib), &config(&[("threshold", "32GiB")]))
        .unwrap();
    assert_eq!(
        values,
        config(&[
            ("threshold", "34359738368"),
            ("total_memory_bytes", "68719476736")
        ])
    );
}

#[test]
fn mem_gt_reports_missing_or_bad_thresholds_as_errors_not_no_match() {
    let loaded = host()
        .load("mem_gt", bundled::MEM_GT, Some(World::Environment))
        .unwrap();
    let mut condition = host().condition(&loaded, Limits::default()).unwrap();
    for (cfg, expected) in [
        (config(&[]), "missing config `threshold`"),
        (
            config(&[("threshold", "lots")]),
            "threshold `lots` is not a size",
        ),
        (
            config(&[("threshold", "-5GB")]),
            "threshold `-5GB` is not a size",
        ),
        (
            config(&[("threshold", "32XB")]),
            "threshold `32XB` is not a size",
        ),
        (
            config(&[("threshold", "1e30")]),
            "threshold `1e30` is not a size",
        ),
        (
            config(&[("threshold", "1"), ("thresold", "2")]),
            "unknown config key `thresold`",
        ),
    ] {
        match condition.evaluate(&facts(1 << 30), &cfg) {
            Err(PluginError::Refused {
                call: "evaluate",
                message,
                ..
            }) => {
                assert!(message.contains(expected), "{cfg:?}: {message}")
            }
            other => panic!("{cfg:?}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn hostile_conditions_are_contained_with_the_right_error() {
    let loaded = host()
        .load(
            "hostile_condition",
            HOSTILE_CONDITION,
            Some(World::Environment),
        )
        .unwrap();
    let mut condition = host().condition(&loaded, tight()).unwrap();
    let f = facts(1 << 30);
    let run = |c: &mut weir::plugin::ConditionPlugin, mode: &str| {
        c.evaluate(&f, &config(&[("mode", mode)]))
    };

    assert!(matches!(
        run(&mut condition, "loop"),
        Err(PluginError::Timeout {
            call: "evaluate",
            ..
        })
    ));
    assert!(
        matches!(run(&mut condition, "oom"), Err(PluginError::MemoryLimit { limit, .. }) if limit == 16 << 20)
    );
    match run(&mut condition, "panic") {
        Err(PluginError::Panic { message, .. }) => {
            assert_eq!(message, "hostile condition panicked on purpose")
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert!(matches!(
        run(&mut condition, "trap"),
        Err(PluginError::Trap { .. })
    ));
    match run(&mut condition, "error") {
        Err(PluginError::Refused { message, .. }) => {
            assert_eq!(message, "hostile condition says no")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Output is capped: the guest's writes fail once it is full (a Rust guest then panics).
    assert!(run(&mut condition, "flood").is_err());
    // After all that the same plugin, in a fresh instance, still works.
    assert!(run(&mut condition, "fine").unwrap());
    let error = run(&mut condition, "loop").unwrap_err().to_string();
    assert_eq!(error, "hostile_condition: evaluate timed out after 200ms");
}

#[test]
fn hostile_tasks_are_contained_with_the_right_error() {
    let loaded = host()
        .load("hostile_task", HOSTILE_TASK, Some(World::Task))
        .unwrap();
    let mut task = host().task(&loaded, tight()).unwrap();
    let never: weir::plugin::StopCheck = std::sync::Arc::new(|| false);
    let mut run = |input: &str| task.run(input.as_bytes(), Vec::new(), never.clone());
    assert!(matches!(
        run("loop"),
        Err(PluginError::Timeout { call: "run", .. })
    ));
    assert!(matches!(run("oom"), Err(PluginError::MemoryLimit { limit, .. }) if limit == 16 << 20));
    match run("panic") {
        Err(PluginError::Panic { message, .. }) => {
            assert_eq!(message, "hostile task panicked on purpose")
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert!(matches!(run("trap"), Err(PluginError::Trap { .. })));
    match run("spin:x") {
        Err(PluginError::Refused { message, .. }) => {
            assert_eq!(message, "`spin:x`: spin:N needs a whole number")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // After all that the same plugin, in a fresh instance, still works.
    assert_eq!(run("hello").unwrap(), b"hello");
    assert!(run("spin:1000").unwrap().starts_with(b"spun 1000"));
}

#[test]
fn a_looping_task_stops_when_canceled_long_before_its_deadline() {
    let loaded = host()
        .load("hostile_task", HOSTILE_TASK, Some(World::Task))
        .unwrap();
    let limits = Limits {
        deadline: std::time::Duration::from_secs(3600),
        ..Limits::default()
    };
    let mut task = host().task(&loaded, limits).unwrap();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancel.clone();
    let stop: weir::plugin::StopCheck =
        std::sync::Arc::new(move || flag.load(std::sync::atomic::Ordering::SeqCst));
    let running = std::thread::spawn(move || task.run(b"loop", Vec::new(), stop));
    // The loop is entered (no way to observe it from here but the result), then canceled: the
    // run ends with `Canceled` although its deadline is an hour away. Had it not stopped, the
    // join below would hang for that hour (and the test harness would report it).
    cancel.store(true, std::sync::atomic::Ordering::SeqCst);
    match running.join().unwrap() {
        Err(PluginError::Canceled { call: "run", .. }) => {}
        other => panic!("expected a cancel, got {other:?}"),
    }
}

/// The scheduler keeps a policy's failure as the core's `PolicyFailure`: each host error maps to
/// the variant that says what happened, with the very words `weir policy show` printed before.
#[test]
fn policy_failures_keep_the_host_s_words_and_say_what_happened() {
    let loaded = host()
        .load("hostile_policy", HOSTILE_POLICY, Some(World::Policy))
        .unwrap();
    let snapshot = one_manager();
    let decide = |mode: &str| host().policy(&loaded, mode, tight())?.decide(&snapshot);
    let unloadable = host().load("junk", b"not wasm", Some(World::Policy));
    let cases = [
        decide("loop").map(drop),
        decide("oom").map(drop),
        decide("panic").map(drop),
        decide("reject").map(drop),
        decide("unknown-manager").map(drop),
        unloadable.map(drop),
    ];
    let mut kinds = Vec::new();
    for case in cases {
        let error = case.expect_err("each case fails");
        let words = error.to_string();
        let failure = PolicyFailure::from(error);
        assert_eq!(failure.to_string(), words);
        kinds.push(match failure {
            PolicyFailure::TimedOut { call: "decide", .. } => "timed out",
            PolicyFailure::OutOfMemory { call: "decide", .. } => "out of memory",
            PolicyFailure::Panicked { .. } => "panicked",
            PolicyFailure::Refused { call: "create", .. } => "refused",
            PolicyFailure::Nonsense {
                rule: Nonsense::UnknownManager { .. },
                ..
            } => "nonsense",
            PolicyFailure::Unloadable(_) => "unloadable",
            other => panic!("unexpected {other:?}"),
        });
    }
    let expected = [
        "timed out",
        "out of memory",
        "panicked",
        "refused",
        "nonsense",
        "unloadable",
    ];
    assert_eq!(kinds, expected);
}

#[test]
fn hostile_policies_are_contained_with_the_right_error() {
    let loaded = host()
        .load("hostile_policy", HOSTILE_POLICY, Some(World::Policy))
        .unwrap();
    let snapshot = one_manager();
    let decide = |mode: &str| host().policy(&loaded, mode, tight())?.decide(&snapshot);

    assert!(matches!(
        decide("loop"),
        Err(PluginError::Timeout { call: "decide", .. })
    ));
    assert!(matches!(
        decide("oom"),
        Err(PluginError::MemoryLimit { call: "decide", .. })
    ));
    match decide("panic") {
        Err(PluginError::Panic { message, .. }) => {
            assert_eq!(message, "hostile policy panicked on purpose")
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert!(matches!(
        decide("create-loop"),
        Err(PluginError::Timeout { call: "create", .. })
    ));
    match decide("reject") {
        Err(PluginError::Refused {
            call: "create",
            message,
            ..
        }) => assert_eq!(message, "line 1: rejected on purpose"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    for (mode, detail) in [
        ("unknown-manager", "unknown manager `ghost`"),
        (
            "over-cap",
            "asks manager `wm1` for 4294967295 workers; its max task concurrency 10 allows 10",
        ),
        ("duplicate", "two decisions for manager `wm1`"),
    ] {
        match decide(mode) {
            Err(PluginError::Nonsense { rule, .. }) => {
                assert_eq!(rule.to_string(), detail, "{mode}")
            }
            other => panic!("{mode}: expected nonsense, got {other:?}"),
        }
    }
    // A policy that panicked is re-instantiated on the next call (and panics again, as asked),
    // while a well-behaved one carries on.
    let mut panicking = host().policy(&loaded, "panic", tight()).unwrap();
    assert!(matches!(
        panicking.decide(&snapshot),
        Err(PluginError::Panic { .. })
    ));
    assert!(matches!(
        panicking.decide(&snapshot),
        Err(PluginError::Panic { .. })
    ));
    let decisions = host()
        .policy(&loaded, "fine", tight())
        .unwrap()
        .decide(&snapshot)
        .unwrap();
    assert_eq!(decisions.len(), 1);
}

#[test]
fn waterfall_content_errors_name_the_line() {
    let loaded = host()
        .load("waterfall_v2", bundled::WATERFALL_V2, Some(World::Policy))
        .unwrap();
    let error = host()
        .policy(&loaded, "1, native\n\n1, native\n", Limits::default())
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "waterfall_v2: create failed: line 3: worker type `native` is already listed on line 1"
    );
    let mut policy = host()
        .policy(&loaded, "1, native\n2, burst\n1, aws\n", Limits::default())
        .unwrap();
    let tiers: Vec<_> = policy
        .tiers()
        .unwrap()
        .into_iter()
        .map(|t| (t.priority, t.members))
        .collect();
    assert_eq!(
        tiers,
        vec![
            (1, vec!["native".to_string(), "aws".to_string()]),
            (2, vec!["burst".to_string()])
        ]
    );
}

#[test]
fn wrong_world_and_non_components_get_one_clear_error() {
    let wrong = host()
        .load("mem_gt.wasm", bundled::MEM_GT, Some(World::Policy))
        .unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "mem_gt.wasm: does not implement the `policy` world (it must export \
         `weir:plugin/scaling@0.2.0` or `weir:plugin/scaling@0.1.0`); \
         it implements the `environment` world instead"
    );
    let text = host()
        .load(
            "notes.txt",
            b"hello, I am not wasm\n",
            Some(World::Environment),
        )
        .unwrap_err();
    assert_eq!(
        text.to_string(),
        "notes.txt: not a WebAssembly component (no WebAssembly header); expected a component of the `environment` world"
    );
    assert!(matches!(
        host().load("empty", b"", None),
        Err(PluginError::NotWasm { .. })
    ));
    let core_module = b"\0asm\x01\0\0\0";
    assert!(matches!(
        host().load("core.wasm", core_module, Some(World::Policy)),
        Err(PluginError::CoreModule { .. })
    ));
    let empty_component = b"\0asm\x0d\0\x01\0";
    assert!(matches!(
        host().load("empty.wasm", empty_component, Some(World::Policy)),
        Err(PluginError::WrongWorld { found: None, .. })
    ));
    // Truncated component bytes: a compile error, not a crash.
    let truncated = &bundled::MEM_GT[..bundled::MEM_GT.len() / 2];
    assert!(matches!(
        host().load("half.wasm", truncated, None),
        Err(PluginError::Compile { .. })
    ));
}

/// What the scheduler does with components it passes on: validate without compiling.
#[test]
fn validation_checks_the_world_and_the_code_without_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let host = PluginHost::new(Some(dir.path().to_path_buf())).unwrap();
    let bundled = [
        (bundled::MEM_GT, World::Environment),
        (bundled::WATERFALL_V1, World::Policy),
        (bundled::SQUARE, World::Task),
    ];
    for (bytes, world) in bundled {
        host.validate("bundled", bytes, world).unwrap();
    }
    // Nothing was compiled: the compile cache is still empty.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    for (bytes, world) in bundled {
        let sha256 = host.validate("bundled", bytes, world).unwrap();
        assert_eq!(sha256, host.load("bundled", bytes, None).unwrap().sha256);
    }
    let wrong = host.validate("mem_gt.wasm", bundled::MEM_GT, World::Policy);
    assert!(
        matches!(
            wrong,
            Err(PluginError::WrongWorld {
                found: Some(World::Environment),
                ..
            })
        ),
        "{wrong:?}"
    );
    // Accepted once does not mean accepted for another world.
    let again = host.validate("mem_gt.wasm", bundled::MEM_GT, World::Task);
    assert!(
        matches!(again, Err(PluginError::WrongWorld { .. })),
        "{again:?}"
    );
    assert!(matches!(
        host.validate("notes.txt", b"hello", World::Environment),
        Err(PluginError::NotWasm { .. })
    ));
    assert!(matches!(
        host.validate("core.wasm", b"\0asm\x01\0\0\0", World::Environment),
        Err(PluginError::CoreModule { .. })
    ));
    let truncated = &bundled::MEM_GT[..bundled::MEM_GT.len() / 2];
    let invalid = host.validate("half.wasm", truncated, World::Environment);
    assert!(
        matches!(invalid, Err(PluginError::Invalid { .. })),
        "{invalid:?}"
    );
    // A flipped byte at 64 places of a component: refused or accepted, never a crash.
    let fixture = HOSTILE_CONDITION;
    for at in (8..fixture.len()).step_by(fixture.len() / 64) {
        let mut bytes = fixture.to_vec();
        bytes[at] ^= 0x5a;
        let _ = host.validate("flipped.wasm", &bytes, World::Environment);
    }
}

#[test]
fn compiled_components_are_cached_on_disk_and_damaged_entries_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let first = PluginHost::new(Some(dir.path().to_path_buf())).unwrap();
    assert_eq!(
        first
            .load("v2", bundled::WATERFALL_V2, None)
            .unwrap()
            .origin,
        Origin::Compiled
    );
    assert_eq!(
        first
            .load("v2", bundled::WATERFALL_V2, None)
            .unwrap()
            .origin,
        Origin::Memory
    );

    // A second process (a new host) deserializes instead of compiling, and the result works.
    let second = PluginHost::new(Some(dir.path().to_path_buf())).unwrap();
    let loaded = second
        .load("v2", bundled::WATERFALL_V2, Some(World::Policy))
        .unwrap();
    assert_eq!(loaded.origin, Origin::Disk);
    assert!(
        second
            .policy(&loaded, "1, native\n", Limits::default())
            .unwrap()
            .decide(&one_manager())
            .is_ok()
    );

    // Damage every entry: the next host notices, recompiles and rewrites it.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let third = PluginHost::new(Some(dir.path().to_path_buf())).unwrap();
    assert_eq!(
        third
            .load("v2", bundled::WATERFALL_V2, None)
            .unwrap()
            .origin,
        Origin::Compiled
    );
    let fourth = PluginHost::new(Some(dir.path().to_path_buf())).unwrap();
    assert_eq!(
        fourth
            .load("v2", bundled::WATERFALL_V2, None)
            .unwrap()
            .origin,
        Origin::Disk
    );
}
