//! What a spawn prepares before its clone: the program's paths as `execvp` would search them,
//! and the environment, as C strings (the child may not allocate).

use std::ffi::{CString, c_char};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

pub(super) fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// Where `execvp` would look for `program`.
pub(super) fn candidates(program: &str, env: &[(&str, &str)]) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(vec![c_string(program.as_bytes())?]);
    }
    let path = match env.iter().find(|(k, _)| *k == "PATH") {
        Some((_, path)) => path.as_bytes().to_vec(),
        None => std::env::var_os("PATH")
            .map(|p| p.as_bytes().to_vec())
            .unwrap_or_else(|| b"/usr/local/bin:/usr/bin:/bin".to_vec()),
    };
    path.split(|b| *b == b':')
        .map(|dir| {
            // An empty entry is the current directory, as for `execvp`.
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            c_string(&[dir, b"/", program.as_bytes()].concat())
        })
        .collect()
}

/// The worker's environment, as `KEY=value` strings: read once (the worker sets no variable of
/// its own after it starts), so a spawn only adds the task's.
pub(super) fn base_environment() -> &'static [CString] {
    static BASE: OnceLock<Vec<CString>> = OnceLock::new();
    BASE.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()).ok())
            .collect()
    })
}

/// The task's variables, the last value of each name (as std's `Command::envs` keeps it: a job's
/// `WEIR_TASK_ID` loses to the worker's, set after it).
pub(super) fn last_of_each(env: &[(String, String)]) -> Vec<(&str, &str)> {
    let mut kept: Vec<(&str, &str)> = Vec::with_capacity(env.len());
    for (k, v) in env.iter().rev() {
        if !kept.iter().any(|(seen, _)| *seen == k.as_str()) {
            kept.push((k, v));
        }
    }
    kept.reverse();
    kept
}

/// The task's variables as `KEY=value`.
pub(super) fn task_environment(env: &[(&str, &str)]) -> io::Result<Vec<CString>> {
    env.iter()
        .map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect()
}

/// `envp`: the worker's variables the task does not set, then the task's.
pub(super) fn envp(base: &[CString], task: &[CString], env: &[(&str, &str)]) -> Vec<*const c_char> {
    let set = |var: &CString| {
        let bytes = var.as_bytes();
        env.iter().any(|(k, _)| {
            bytes.len() > k.len() && bytes.starts_with(k.as_bytes()) && bytes[k.len()] == b'='
        })
    };
    base.iter()
        .filter(|var| env.is_empty() || !set(var))
        .chain(task)
        .map(|var| var.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}
