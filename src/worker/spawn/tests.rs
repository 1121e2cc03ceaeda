use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Command, Process, spawn};

fn command<'a>(program: &'a str, args: &'a [String], env: &'a [(String, String)]) -> Command<'a> {
    Command {
        program,
        args,
        env,
        stdin: false,
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

async fn output(process: &mut Process) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    if let Some(mut stdout) = process.stdout.take() {
        stdout.read_to_end(&mut out).await.expect("stdout");
    }
    if let Some(mut stderr) = process.stderr.take() {
        stderr.read_to_end(&mut err).await.expect("stderr");
    }
    (out, err)
}

#[tokio::test]
async fn a_program_on_path_gets_its_args_env_and_stdin_and_its_output_and_code_come_back() {
    let args = strings(&[
        "-c",
        "read line; echo \"$line $WEIR_SPAWN_TEST $0 ${PATH##*:} $(env | grep -c -e ^PATH= -e ^WEIR_SPAWN_TEST=)\"; echo oops >&2; exit 3",
    ]);
    // A variable of its own, and one the worker has too (the task's wins, once).
    // PATH: the worker always has one.
    let path = std::env::var("PATH").expect("a PATH") + ":/weir-extra";
    let env = vec![
        ("WEIR_SPAWN_TEST".to_string(), "first".to_string()),
        ("PATH".to_string(), path),
        // Set twice: the last value, once, as std's `envs` gives it.
        ("WEIR_SPAWN_TEST".to_string(), "set".to_string()),
    ];
    let mut process = spawn(&Command {
        stdin: true,
        ..command("sh", &args, &env)
    })
    .expect("spawn sh");
    let mut stdin = process.stdin.take().expect("a stdin pipe");
    stdin.write_all(b"hello\n").await.expect("write stdin");
    drop(stdin);
    let (out, err) = output(&mut process).await;
    assert_eq!(process.wait().await.expect("wait"), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out),
        "hello set sh /weir-extra 2\n"
    );
    assert_eq!(err, b"oops\n");
}

#[tokio::test]
async fn the_program_leads_its_own_group_with_no_signal_blocked_and_sigpipe_at_its_default() {
    let args = strings(&["/proc/self/status"]);
    let mut process = spawn(&command("cat", &args, &[])).expect("spawn cat");
    let pid = process.id();
    let (out, _) = output(&mut process).await;
    assert_eq!(process.wait().await.expect("wait"), Some(0));
    let status = String::from_utf8(out).expect("utf-8");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| u64::from_str_radix(v.trim(), 16).expect("a hex mask"))
            .expect("the field")
    };
    assert_eq!(field("SigBlk:"), 0, "{status}");
    assert_eq!(field("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "{status}");
    // `cat` ran as its own group's leader: the group is the pid the spawn returned.
    let stat = status.lines().find_map(|l| l.strip_prefix("NSpgid:"));
    assert_eq!(
        stat.map(str::trim),
        Some(pid.to_string().as_str()),
        "{status}"
    );
}

#[tokio::test]
async fn a_missing_or_unrunnable_program_fails_the_spawn_with_execvps_error() {
    let missing = spawn(&command("weir-no-such-program", &[], &[])).err();
    assert_eq!(missing.and_then(|e| e.raw_os_error()), Some(libc::ENOENT));
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").expect("write");
    let path = script.to_str().expect("utf-8 path");
    let denied = spawn(&command(path, &[], &[])).err();
    assert_eq!(denied.and_then(|e| e.raw_os_error()), Some(libc::EACCES));
    // Looked up in the task's own PATH, as `execvp` does.
    let env = vec![(
        "PATH".to_string(),
        dir.path().to_str().expect("utf-8").to_string(),
    )];
    let denied = spawn(&command("not-executable", &[], &env)).err();
    assert_eq!(denied.and_then(|e| e.raw_os_error()), Some(libc::EACCES));
}

#[tokio::test]
async fn a_signal_ends_it_without_a_code_and_a_dropped_process_is_killed_and_reaped() {
    let args = strings(&["-c", "kill -TERM $$"]);
    let mut process = spawn(&command("sh", &args, &[])).expect("spawn");
    assert_eq!(process.wait().await.expect("wait"), None);

    let args = strings(&["1000"]);
    let process = spawn(&command("sleep", &args, &[])).expect("spawn sleep");
    let pid = process.id();
    drop(process);
    // Killed and reaped in the background: its /proc entry goes once it is reaped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(std::time::Instant::now() < deadline, "{pid} is still there");
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    let mut process = spawn(&command("sleep", &args, &[])).expect("spawn sleep");
    process.kill().await.expect("kill");
    assert!(process.wait().await.is_err(), "reaped once, by kill");
}

#[tokio::test]
async fn the_program_holds_only_its_stdio_and_reads_dev_null_without_input() {
    // `ls` lists the descriptors it holds: what this test process itself inherited without
    // close-on-exec (a test harness's jobserver), as std's spawn passes them on, and no more.
    let script = "readlink /proc/self/fd/0; ls /proc/self/fd | wc -l";
    let args = strings(&["-c", script]);
    let mut process = spawn(&command("sh", &args, &[])).expect("spawn");
    let (out, err) = output(&mut process).await;
    assert_eq!(process.wait().await.expect("wait"), Some(0), "{err:?}");
    let std = std::process::Command::new("sh")
        .args(["-c", script])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("std's spawn");
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&std.stdout)
    );
    assert!(out.starts_with(b"/dev/null\n"));
}

#[tokio::test]
async fn a_script_without_a_shebang_runs_with_the_shell_as_execvp_runs_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("plain");
    std::fs::write(&script, "echo \"plain $1\"\n").expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let args = strings(&["arg"]);
    let path = script.to_str().expect("utf-8 path");
    let mut process = spawn(&command(path, &args, &[])).expect("spawn a shebang-less script");
    let (out, _) = output(&mut process).await;
    assert_eq!(process.wait().await.expect("wait"), Some(0));
    assert_eq!(out, b"plain arg\n");
}

#[test]
fn this_system_can_wait_on_task_processes() {
    super::check_support().expect("pidfds");
}
