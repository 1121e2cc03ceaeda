//! Every shell example in README.md and docs/*.md runs as written.
//!
//! The ```` ```sh ```` blocks of a file run in order in one `bash` (so `export PATH=...`, `cd` and
//! processes started with `&` carry from one block to the next, as in a reader's terminal), in a
//! fresh copy of the repository's tracked files whose `target/debug` is this build (the file must
//! put it on `PATH` itself), with `cargo build` and `cargo run --bin X --` standing for this
//! build's executables (they were built for this test). Each
//! block has a time limit; a block that fails or overruns fails the test with its `file:line` and
//! its output. After the last block nothing the file started may still run, and the copy's root
//! holds nothing new but `.weir/` (ignored by git).
//!
//! Fence info strings: ```` ```sh ```` runs here; ```` ```sh needs=WHAT ```` needs something a plain
//! machine lacks (`slurm`: a running Slurm with `SLURM_CONF`; `python`: a venv and PyPI;
//! `toolchains`: examples/conditions/install-toolchains.sh): `cargo test` prints `NOT RUN` for it,
//! and the ignored test `docs_examples_that_need_WHAT_run` runs those files whole (CI,
//! `--include-ignored`, where a missing need fails). ```` ```sh norun: WHY ```` is never run (e.g. `cargo test` itself, a GPU).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The longest one block may run (`weir local` in a debug build takes well under this).
const BLOCK_LIMIT: Duration = Duration::from_secs(240);
/// The longest a block that needs more may run (`pip install ./python` compiles in release).
const NEEDS_LIMIT: Duration = Duration::from_secs(1200);
/// How long processes may take to end after the file's last block.
const END_LIMIT: Duration = Duration::from_secs(30);
/// The examples listen on the scheduler's default port: one file at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const DONE: &str = "__weir_docs_block_done__";

#[derive(Debug, PartialEq)]
enum Run {
    Always,
    Needs(String),
    Never(String),
}

#[derive(Debug)]
struct Block {
    line: usize,
    run: Run,
    text: String,
}

/// The shell blocks of a markdown file, with the line of their opening fence.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    let mut fence_other = false;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(block) = open.as_mut() {
            if trimmed.starts_with("```") {
                blocks.extend(open.take());
            } else {
                block.text.push_str(line);
                block.text.push('\n');
            }
            continue;
        }
        if fence_other {
            fence_other = !trimmed.starts_with("```");
            continue;
        }
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        let info = info.trim();
        let (lang, rest) = info.split_once(char::is_whitespace).unwrap_or((info, ""));
        if !matches!(lang, "sh" | "bash" | "shell") {
            fence_other = true;
            continue;
        }
        let rest = rest.trim();
        let run = if rest.is_empty() {
            Run::Always
        } else if let Some(need) = rest.strip_prefix("needs=") {
            Run::Needs(need.to_string())
        } else if let Some(why) = rest.strip_prefix("norun:") {
            Run::Never(why.trim().to_string())
        } else {
            panic!(
                "line {}: unknown fence `{info}` (sh, sh needs=WHAT or sh norun: WHY)",
                index + 1
            );
        };
        open = Some(Block {
            line: index + 1,
            run,
            text: String::new(),
        });
    }
    assert!(open.is_none(), "a ```sh block is never closed");
    blocks
}

/// The relative links of `file` (`](path)` or `](path#anchor)`) whose path does not exist.
fn broken_links(file: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let markdown = std::fs::read_to_string(&path).expect("read");
    let dir = path.parent().expect("a directory");
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| !target.contains("://") && !target.starts_with('#'))
        .filter(|target| {
            let file = target.split('#').next().unwrap_or(target);
            !dir.join(file).exists()
        })
        .map(str::to_string)
        .collect()
}

/// Why `need` is missing on this machine, if it is.
fn missing(need: &str) -> Option<String> {
    let has = |program: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    match need {
        "slurm" => (std::env::var_os("SLURM_CONF").is_none() || !has("sbatch")).then(|| {
            "a running Slurm: sbatch and SLURM_CONF (examples/backends/slurm/start-slurm.sh)".into()
        }),
        "python" => (!Command::new("python3")
            .args(["-c", "import venv, ensurepip"])
            .status()
            .is_ok_and(|status| status.success()))
        .then(|| "python3 with venv and pip (apt-get install python3-venv) and PyPI".into()),
        "toolchains" => (!has("componentize-py"))
            .then(|| "the condition toolchains (examples/conditions/install-toolchains.sh)".into()),
        other => panic!("unknown need `{other}` (slurm, python, toolchains)"),
    }
}

/// The repository's tracked files copied into a fresh directory.
fn fresh_copy() -> tempfile::TempDir {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo)
        .output()
        .expect("git ls-files runs");
    assert!(listed.status.success(), "git ls-files failed");
    let dir = tempfile::tempdir().expect("a temporary directory");
    for name in listed.stdout.split(|byte| *byte == 0) {
        if name.is_empty() {
            continue;
        }
        let name = Path::new(std::str::from_utf8(name).expect("a UTF-8 path"));
        let from = repo.join(name);
        if !from.is_file() {
            continue; // deleted in the work tree, not yet committed
        }
        let to = dir.path().join(name);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
    dir
}

fn root_entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read the copy's root")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// `cargo build` and `cargo run [-q] [--release] --bin NAME -- ARGS` on this build's executables.
const PRELUDE: &str = r#"
exec 2>&1
set -eo pipefail
cargo() {
  case "$1" in
    build) return 0 ;;
    run)
      shift
      local bin=""
      while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        case "$1" in --bin) bin="$2"; shift ;; esac
        shift
      done
      [ $# -gt 0 ] && shift
      "$WEIR_DOCS_BIN/$bin" "$@" ;;
    *) echo "tests/docs.rs: cargo $1 is not run by the docs test" >&2; return 1 ;;
  esac
}
"#;

/// Runs the blocks of `file` (relative to the repository) in a fresh copy; `need` also runs the
/// blocks that need it, failing when this machine lacks it.
fn run_file(file: &str, need: Option<&str>) {
    let markdown = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap_or_else(|e| panic!("read {file}: {e}"));
    run_markdown(file, &markdown, need, END_LIMIT);
}

/// `run_file` on `markdown`, named `file`; what it starts must end within `end_limit` of its
/// last block.
fn run_markdown(file: &str, markdown: &str, need: Option<&str>, end_limit: Duration) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let blocks = blocks(markdown);
    let copy = fresh_copy();
    // `target/debug` of the copy is this build, as after `cargo build` in a clone; PATH has no
    // weir, so a bare `weir` before the file's `export PATH=...` fails as it would there.
    let bin = Path::new(env!("CARGO_BIN_EXE_weir"))
        .parent()
        .expect("the executables' directory");
    std::fs::create_dir(copy.path().join("target")).expect("mkdir target");
    std::os::unix::fs::symlink(bin, copy.path().join("target/debug")).expect("link target/debug");
    let before = root_entries(copy.path());
    let scripts = tempfile::tempdir().expect("a temporary directory");

    let mut shell = Command::new("bash")
        .args(["--noprofile", "--norc", "-s"])
        .current_dir(copy.path())
        .env("WEIR_DOCS_BIN", bin)
        .env("PATH", path_without_weir())
        .env_remove("CARGO_TARGET_DIR")
        .env("WEIR_CACHE_DIR", scripts.path().join("cache"))
        .env("RUST_LOG", "error")
        .env_remove("WEIR_ACCESS_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("bash starts");
    let group = shell.id();
    let mut input = shell.stdin.take().expect("bash's stdin");
    let (lines, received) = mpsc::channel();
    let stdout = shell.stdout.take().expect("bash's stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    // Ends the whole group (processes a block left running) when the test ends, failed or not.
    let _reaper = Reaper(group);
    writeln!(
        input,
        "{PRELUDE}\ntrap 'printf \"\\n{DONE} %d\\n\" $?' EXIT"
    )
    .expect("write");

    for (index, block) in blocks.iter().enumerate() {
        let at = format!("{file}:{}", block.line);
        match &block.run {
            Run::Never(why) => {
                println!("NOT RUN: {at}: {why}");
                continue;
            }
            Run::Needs(what) if Some(what.as_str()) == need => {
                if let Some(why) = missing(what) {
                    panic!("{at} needs {why}");
                }
            }
            Run::Needs(what) => {
                println!(
                    "NOT RUN: {at}: needs {what} (the ignored test \
                     docs_examples_that_need_{what}_run runs it; CI does)"
                );
                continue;
            }
            Run::Always => {}
        }
        let script = scripts.path().join(format!("block-{index}.sh"));
        std::fs::write(&script, &block.text).expect("write the block");
        writeln!(
            input,
            "source {} </dev/null; printf '\\n{DONE} 0\\n'",
            script.display()
        )
        .expect("bash takes the next block");
        input.flush().expect("flush");
        let limit = match block.run {
            Run::Needs(_) => NEEDS_LIMIT,
            _ => BLOCK_LIMIT,
        };
        let started = Instant::now();
        let mut output = String::new();
        let status = loop {
            let left = limit.saturating_sub(started.elapsed());
            match received.recv_timeout(left) {
                Ok(line) => match line.strip_prefix(DONE) {
                    Some(code) => break code.trim().to_string(),
                    None => {
                        output.push_str(&line);
                        output.push('\n');
                    }
                },
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "{at}: still running after {} s\n--- block\n{}--- output\n{output}",
                    limit.as_secs(),
                    block.text
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => break "the shell ended".into(),
            }
        };
        print!(
            "{at}: ok in {:.1} s\n{output}",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(
            status, "0",
            "{at}: the block failed (exit status {status})\n--- block\n{}--- output\n{output}",
            block.text
        );
    }

    writeln!(input, "exit 0").expect("bash exits");
    drop(input);
    let ended = Instant::now();
    let mut leftover = String::new();
    loop {
        match received.recv_timeout(end_limit.saturating_sub(ended.elapsed())) {
            Ok(line) => {
                if !line.starts_with(DONE) && !line.is_empty() {
                    leftover.push_str(&line);
                    leftover.push('\n');
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "{file}: processes it started still run {} s after its last block: \
                 the file must stop what it starts\n{leftover}",
                end_limit.as_secs()
            ),
        }
    }
    let _ = shell.wait();
    let new: Vec<_> = root_entries(copy.path())
        .difference(&before)
        .filter(|name| name.as_str() != ".weir")
        .cloned()
        .collect();
    assert!(
        new.is_empty(),
        "{file} leaves {new:?} in the repository's root: write to a temporary directory"
    );
}

/// The caller's PATH without directories that hold a `weir` executable: a file that uses one
/// before its own `export PATH=...` fails here as in a fresh clone.
fn path_without_weir() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::env::split_paths(&path).filter(|dir| !dir.join("weir").exists()))
        .expect("a PATH")
}

/// Kills a process group when dropped.
struct Reaper(u32);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// README.md and every docs/*.md, in a stable order.
fn doc_files() -> Vec<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    files.sort();
    std::iter::once("README.md".to_string())
        .chain(files.iter().map(|path| {
            format!(
                "docs/{}",
                path.file_name().expect("a name").to_string_lossy()
            )
        }))
        .collect()
}

#[test]
fn the_fences_parse_and_every_doc_has_its_test() {
    let tested = [
        "README.md",
        "docs/architecture.md",
        "docs/cli.md",
        "docs/conditions.md",
        "docs/development.md",
        "docs/operators.md",
        "docs/policies.md",
        "docs/python.md",
        "docs/replicas.md",
        "docs/slurm.md",
    ];
    for file in doc_files() {
        assert!(
            tested.contains(&file.as_str()),
            "{file} has no test in tests/docs.rs: add one"
        );
        let markdown = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&file))
            .expect("read");
        for block in blocks(&markdown) {
            // Debian's root has no sudo; the prose says where another user needs it.
            assert!(
                !block.text.split_whitespace().any(|word| word == "sudo"),
                "{file}:{}: sudo in a shell block",
                block.line
            );
            if let Run::Needs(need) = &block.run {
                let _ = missing(need); // an unknown need panics here
            }
            if let Run::Never(why) = &block.run {
                assert!(
                    !why.is_empty(),
                    "{file}:{}: norun without a reason",
                    block.line
                );
            }
        }
    }
    for file in doc_files() {
        let broken = broken_links(&file);
        assert!(
            broken.is_empty(),
            "{file} links to missing files: {broken:?}"
        );
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read");
    let lines = readme.lines().count();
    assert!(
        lines <= 160,
        "README.md has {lines} lines: keep it the front door (<= ~150)"
    );
}

#[test]
fn the_block_parser_finds_fences_lines_and_tags() {
    let markdown = "# t\n```sh\necho a\n```\n```python\nx = 1\n```\n```sh needs=slurm\nsbatch\n```\n\
                    ```sh norun: a GPU\nnvidia-smi\n```\n";
    let found = blocks(markdown);
    assert_eq!(found.len(), 3);
    assert_eq!((found[0].line, found[0].text.as_str()), (2, "echo a\n"));
    assert_eq!(found[1].run, Run::Needs("slurm".into()));
    assert_eq!(found[2].run, Run::Never("a GPU".into()));
}

#[test]
fn readme_examples_run_as_written() {
    run_file("README.md", None);
}

#[test]
fn docs_cli_examples_run_as_written() {
    run_file("docs/cli.md", None);
}

#[test]
fn docs_development_examples_run_as_written() {
    run_file("docs/development.md", None);
}

#[test]
fn docs_operators_examples_run_as_written() {
    run_file("docs/operators.md", None);
}

#[test]
fn docs_slurm_examples_run_as_written() {
    run_file("docs/slurm.md", None);
}

#[test]
fn docs_policies_examples_run_as_written() {
    run_file("docs/policies.md", None);
}

#[test]
fn docs_conditions_examples_run_as_written() {
    run_file("docs/conditions.md", None);
}

#[test]
fn docs_python_examples_run_as_written() {
    run_file("docs/python.md", None);
}

#[test]
fn docs_replicas_examples_run_as_written() {
    run_file("docs/replicas.md", None);
}

#[test]
fn docs_architecture_examples_run_as_written() {
    run_file("docs/architecture.md", None);
}

/// Runs, whole, every file with a block that needs `need`.
fn run_files_that_need(need: &str) {
    let mut ran = 0;
    for file in doc_files() {
        let markdown = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&file))
            .expect("read");
        if blocks(&markdown)
            .iter()
            .any(|block| block.run == Run::Needs(need.to_string()))
        {
            run_file(&file, Some(need));
            ran += 1;
        }
    }
    assert!(ran > 0, "no block needs {need}: remove its test");
}

#[test]
#[ignore = "needs a running Slurm (SLURM_CONF; examples/backends/slurm/start-slurm.sh); CI runs it (--include-ignored)"]
fn docs_examples_that_need_slurm_run() {
    run_files_that_need("slurm");
}

#[test]
#[ignore = "needs python3-venv and PyPI, and compiles the wheel in release; CI runs it (--include-ignored)"]
fn docs_examples_that_need_python_run() {
    run_files_that_need("python");
}

#[test]
#[ignore = "needs the condition toolchains (examples/conditions/install-toolchains.sh); CI runs it (--include-ignored)"]
fn docs_examples_that_need_toolchains_run() {
    run_files_that_need("toolchains");
}

/// The checker's own failures: what `run_markdown` panics with on `markdown`.
fn failure_of(markdown: &str) -> String {
    let ran = std::panic::catch_unwind(|| {
        run_markdown("test.md", markdown, None, Duration::from_secs(2))
    });
    match ran {
        Ok(()) => panic!("the docs test passed on:\n{markdown}"),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic without a message".into()),
    }
}

#[test]
fn a_failing_block_is_reported_with_its_file_line_and_output() {
    let failure =
        failure_of("# t\n```sh\ntrue\n```\n\n```sh\necho said-before\nfalse\necho never\n```\n");
    assert!(failure.contains("test.md:6: the block failed"), "{failure}");
    assert!(
        failure.contains("said-before") && !failure.contains("\nnever"),
        "{failure}"
    );
}

#[test]
fn weir_before_the_path_step_fails_as_in_a_fresh_clone() {
    let failure = failure_of("```sh\nweir --version\n```\n");
    assert!(failure.contains("test.md:1"), "{failure}");
    assert!(failure.contains("not found"), "{failure}");
    // ... and after it, it runs.
    run_markdown(
        "test.md",
        "```sh\nexport PATH=\"$PWD/target/debug:$PATH\"\nweir --version\n```\n",
        None,
        END_LIMIT,
    );
}

#[test]
fn a_file_left_in_the_root_fails() {
    let failure = failure_of("```sh\nseq 1 3 > numbers.txt\n```\n");
    assert!(failure.contains("numbers.txt"), "{failure}");
}

#[test]
fn a_process_left_running_fails() {
    let failure = failure_of("```sh\nsleep 1000 &\n```\n");
    assert!(failure.contains("still run"), "{failure}");
}
