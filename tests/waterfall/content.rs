//! Policy content: comments, blank lines and optional caps parsed alike, and errors that name
//! the line, in the native reference and the WASM builds.

use super::*;

#[test]
fn content_is_parsed_with_comments_blank_lines_and_optional_caps() {
    let content =
        "# priority, id, cap\n 1, wm1, 10 # ten\n\n2, wm2\n 1 ,wm3, unlimited\n3, wm4, -1\n";
    let policy = Policy::parse(Flavor::ManagerId, content).unwrap();
    let rules: Vec<_> = policy
        .rules
        .iter()
        .map(|r| (r.priority, r.member.as_str(), r.cap, r.line))
        .collect();
    assert_eq!(
        rules,
        vec![
            (1, "wm1", Some(10), 2),
            (1, "wm3", Some(UNLIMITED), 5),
            (2, "wm2", None, 4),
            (3, "wm4", Some(UNLIMITED), 6)
        ]
    );
}

#[test]
fn content_errors_name_the_line_in_native_and_wasm_alike() {
    let cases: &[(Flavor, &str, &str)] = &[
        (
            Flavor::WorkerType,
            "1,a\n1,b,3\n",
            "line 2: expected `priority, worker_type`, found 3 fields in `1,b,3`",
        ),
        (
            Flavor::ManagerId,
            "x, wm1\n",
            "line 1: priority `x` is not a whole number (0 to 4294967295)",
        ),
        (
            Flavor::ManagerId,
            "1, wm1, ten\n",
            "line 1: max_task_concurrency `ten` is not a whole number, `-1` or `unlimited`",
        ),
        (
            Flavor::ManagerId,
            "1, wm1\n\n2, wm1\n",
            "line 3: worker manager `wm1` is already listed on line 1",
        ),
        (Flavor::WorkerType, "1,\n", "line 1: empty worker type"),
        (
            Flavor::WorkerType,
            "1\n",
            "line 1: expected `priority, worker_type`, found 1 field in `1`",
        ),
        (
            Flavor::ManagerId,
            "1, wm1,\n",
            "line 1: empty max_task_concurrency",
        ),
        (
            Flavor::ManagerId,
            "-1, wm1\n",
            "line 1: priority `-1` is negative: priorities are 0 to 4294967295; only their order matters, so add the same amount to every row",
        ),
        (
            Flavor::WorkerType,
            "# only a comment\n\n",
            "policy content has no rows; expected `priority, worker_type` rows",
        ),
        (
            Flavor::WorkerType,
            "",
            "policy content has no rows; expected `priority, worker_type` rows",
        ),
    ];
    for (flavor, content, want) in cases {
        let native = Policy::parse(*flavor, content).unwrap_err().to_string();
        assert_eq!(&native, want, "content {content:?}");
        let name = if *flavor == Flavor::ManagerId {
            "waterfall_v1"
        } else {
            "waterfall_v2"
        };
        let loaded = host()
            .load(name, bundled::by_name(name).unwrap(), Some(World::Policy))
            .unwrap();
        match host().policy(&loaded, content, Limits::default()) {
            Err(weir::plugin::PluginError::Refused {
                call: "create",
                message,
                ..
            }) => assert_eq!(&message, want),
            Err(other) => panic!("{content:?}: {other}"),
            Ok(_) => panic!("{content:?}: accepted"),
        }
    }
}

/// Large content (30,000 rows, ~400 KB, under the 1 MiB limit) parses, and a member listed
/// twice is named with the line that listed it first, however far apart they are.
#[test]
fn large_content_parses_and_a_repeat_names_its_first_line() {
    let rows: String = (1..=30_000).map(|i| format!("{i}, t{i}\n")).collect();
    let policy = Policy::parse(Flavor::WorkerType, &rows).expect("parses");
    assert_eq!(policy.rules.len(), 30_000);
    let repeated = format!("{rows}7, t2\n");
    let error = Policy::parse(Flavor::WorkerType, &repeated).unwrap_err();
    assert_eq!(error.line, Some(30_001));
    assert!(
        error.message.contains("already listed on line 2"),
        "{error}"
    );
}
