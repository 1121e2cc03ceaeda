//! Network namespaces for the network fault tests: a namespace per simulated machine, joined to
//! the test's own (root) namespace or to another namespace by a veth pair with addresses in a
//! private /24 of 10.213.0.0/16 that this fixture reserves, `ip link set down/up` for a
//! partition, and everything deleted on drop (also when the test panics).
//!
//! Only addresses inside namespaces a test created here are ever used. Names carry the test
//! process's pid, so tests run in parallel; what a killed test run left behind (namespaces and
//! subnet reservations of a pid that is gone) is deleted by the next run.

#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every namespace this fixture creates is named `weir-PID-TAG-N`.
const PREFIX: &str = "weir-";

/// `ip ARGS` in the namespace `netns` (None: the test's own); its stderr on failure.
fn ip(netns: Option<&str>, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("ip");
    if let Some(netns) = netns {
        command.args(["netns", "exec", netns, "ip"]);
    }
    let out = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}{}: {}",
            netns.map(|n| format!("-n {n} ")).unwrap_or_default(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip_ok(netns: Option<&str>, args: &[&str]) {
    if let Err(e) = ip(netns, args) {
        panic!("{e}");
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Delete what earlier runs of the tests left (their process is gone): namespaces and subnet
/// reservations. Once per process.
fn sweep_stale() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                let Some(rest) = name.strip_prefix(PREFIX) else {
                    continue;
                };
                let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|pid| !alive(pid)) {
                    let _ = ip(None, &["netns", "delete", name]);
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(reservations()) {
            for entry in entries.flatten() {
                let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
                if owner.trim().parse::<u32>().is_ok_and(|pid| !alive(pid)) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    });
}

fn reservations() -> PathBuf {
    std::env::temp_dir().join("weir-netns-subnets")
}

/// A /24 of 10.213.0.0/16 reserved for this process until dropped (a file created with
/// `create_new`, so two test processes never share one), and not on any interface of the root
/// namespace.
pub(crate) struct Subnet {
    pub third: u8,
    file: PathBuf,
}

impl Subnet {
    pub(crate) fn reserve() -> Subnet {
        sweep_stale();
        let dir = reservations();
        std::fs::create_dir_all(&dir).unwrap();
        let used = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        // Spread the tests of different processes apart to begin with.
        let start = (std::process::id() % 200) as usize;
        for k in 0..250 {
            let third = ((start + k) % 250 + 1) as u8;
            if used.contains(&format!("10.213.{third}.")) {
                continue;
            }
            let file = dir.join(third.to_string());
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&file);
            if let Ok(mut f) = created {
                use std::io::Write;
                let _ = write!(f, "{}", std::process::id());
                return Subnet { third, file };
            }
        }
        panic!("no free 10.213.X.0/24 subnet (see {})", dir.display());
    }

    /// 10.213.THIRD.HOST
    pub(crate) fn host(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.third, host)
    }
}

impl Drop for Subnet {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A network namespace with loopback up, deleted (with the veth ends in it) on drop.
pub(crate) struct Netns {
    pub name: String,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Netns {
    /// A new namespace `weir-PID-TAG-N`; the error says why there can be none (not root, no
    /// `ip`, no namespaces in this kernel or container).
    pub(crate) fn new(tag: &str) -> Result<Netns, String> {
        sweep_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(24)
            .collect();
        let name = format!("{PREFIX}{}-{tag}-{n}", std::process::id());
        ip(None, &["netns", "add", &name])?;
        let netns = Netns { name };
        ip(Some(&netns.name), &["link", "set", "lo", "up"])?;
        Ok(netns)
    }

    /// `ip netns exec NAME PROGRAM`: a command that runs PROGRAM inside this namespace (`ip`
    /// execs it, so the child's pid is PROGRAM's). Add its arguments and spawn it.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// `ip ARGS` inside this namespace.
    pub(crate) fn ip(&self, args: &[&str]) {
        ip_ok(Some(&self.name), args);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Processes still inside keep it alive as an anonymous namespace, but the name goes,
        // and with the last process the veth ends inside.
        if let Err(e) = ip(None, &["netns", "delete", &self.name]) {
            eprintln!("cannot delete network namespace {}: {e}", self.name);
        }
    }
}

/// One end of a veth pair: its interface, the namespace it is in (None: the test's own) and its
/// address.
#[derive(Clone, Debug)]
pub(crate) struct End {
    pub interface: String,
    pub netns: Option<String>,
    pub address: Ipv4Addr,
}

/// A veth pair joining two namespaces (or one and the test's own), each end with an address
/// in one reserved /24 (`.1` and `.2`). Deleted with its namespace; the subnet's reservation
/// goes on drop, and the pair too when both ends are in the root namespace's view (never).
pub(crate) struct Link {
    pub a: End,
    pub b: End,
    pub subnet: Subnet,
}

impl Link {
    /// A veth pair from the test's own namespace (`.1`) to `netns` (`.2`).
    pub(crate) fn to_root(netns: &Netns) -> Link {
        Link::join(None, Some(netns))
    }

    /// A veth pair from `a` (`.1`) to `b` (`.2`).
    pub(crate) fn between(a: &Netns, b: &Netns) -> Link {
        Link::join(Some(a), Some(b))
    }

    fn join(a: Option<&Netns>, b: Option<&Netns>) -> Link {
        let subnet = Subnet::reserve();
        // Interface names are at most 15 bytes: unique per subnet while it is reserved.
        let a_name = format!("wv{}a{}", subnet.third, std::process::id() % 100_000);
        let b_name = format!("wv{}b{}", subnet.third, std::process::id() % 100_000);
        // Leftovers of a killed run with this very name (a root-namespace end) go first.
        let _ = ip(None, &["link", "delete", &a_name]);
        ip_ok(
            None,
            &[
                "link", "add", &a_name, "type", "veth", "peer", "name", &b_name,
            ],
        );
        let a_end = End {
            interface: a_name,
            netns: a.map(|n| n.name.clone()),
            address: subnet.host(1),
        };
        let b_end = End {
            interface: b_name,
            netns: b.map(|n| n.name.clone()),
            address: subnet.host(2),
        };
        for end in [&a_end, &b_end] {
            if let Some(netns) = &end.netns {
                ip_ok(None, &["link", "set", &end.interface, "netns", netns]);
            }
            let address = format!("{}/24", end.address);
            ip_ok(
                end.netns.as_deref(),
                &["addr", "add", &address, "dev", &end.interface],
            );
            ip_ok(end.netns.as_deref(), &["link", "set", &end.interface, "up"]);
        }
        Link {
            a: a_end,
            b: b_end,
            subnet,
        }
    }

    /// `ip link set END down`: nothing passes either way until `up` (the kernel drops the
    /// routes through it; packets sent meanwhile are lost).
    pub(crate) fn down(&self, end: &End) {
        ip_ok(
            end.netns.as_deref(),
            &["link", "set", &end.interface, "down"],
        );
    }

    /// `ip link set END up` (the routes of its address come back with it).
    pub(crate) fn up(&self, end: &End) {
        ip_ok(end.netns.as_deref(), &["link", "set", &end.interface, "up"]);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // An end in the root namespace outlives nothing: deleting one end deletes the pair. A
        // pair between two namespaces goes with either.
        for end in [&self.a, &self.b] {
            if end.netns.is_none() {
                let _ = ip(None, &["link", "delete", &end.interface]);
            }
        }
    }
}
