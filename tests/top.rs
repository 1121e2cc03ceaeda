//! `weir top` driven in a real terminal (tmux): it shows the cluster and quits cleanly on `q`.

mod common;

use std::process::Command;

use common::Cluster;

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux is installed (.ci/run installs it)")
}

#[test]
fn top_shows_managers_workers_and_environments_and_quits_on_q() {
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, pool", &[]);
    cluster.dynamic_manager("pool_1", "pool", 2);
    cluster.worker("standalone", &["--slots", "3", "--capabilities", "gpu=1"]);
    cluster.env_register("big", "mem_gt", "threshold=1");
    cluster.json(&["submit", "--count", "4", "--wait", "--", "true"]);

    let session = format!("weir-top-{}", std::process::id());
    let command = format!(
        "{} --access-file {} top --refresh 0.2",
        env!("CARGO_BIN_EXE_weir"),
        cluster.access_file().display()
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "140",
        "-y",
        "40",
        &command,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let deadline = common::Deadline::start("weir top to show the cluster");
    loop {
        let pane = tmux(&["capture-pane", "-p", "-t", &session]);
        let text = String::from_utf8_lossy(&pane.stdout).into_owned();
        // Every panel drawn whole: a capture can land in the middle of a redraw (CI caught one
        // cut off at the environments panel).
        let whole = [
            "pool_1",
            "standalone",
            "4 succeeded",
            "managers by tier",
            "gpu=1",
            "big",
        ]
        .iter()
        .all(|part| text.contains(part));
        if whole {
            break;
        }
        assert!(pane.status.success(), "weir top exited early: {text}");
        deadline.pause(text);
    }

    tmux(&["send-keys", "-t", &session, "q"]);
    // The session ends when weir top exits.
    let deadline = common::Deadline::start("weir top to quit on `q`");
    while tmux(&["has-session", "-t", &session]).status.success() {
        deadline.pause("its tmux session is still there");
    }
}
