//! What a condition may learn about its worker ([`HostFacts`]): gathered by the worker, kept in
//! the sandbox's state, read by the `host` functions of the `environment` world.

/// Everything a condition can learn about its worker. Gathered by the worker ([`HostFacts::probe`])
/// and cached: host functions never touch `/proc` themselves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts {
    pub total_memory_bytes: u64,
    pub available_memory_bytes: u64,
    pub cpu_count: u32,
    pub hostname: String,
    pub os: String,
    pub arch: String,
    pub worker_type: String,
    pub capabilities: Vec<(String, u64)>,
    /// Only the variables the worker allow-lists, with their values.
    pub env: Vec<(String, String)>,
}

impl HostFacts {
    /// Read this machine's facts. `allowed_env` names the environment variables conditions may see.
    pub fn probe(
        worker_type: &str,
        capabilities: &[(String, u64)],
        allowed_env: &[String],
    ) -> HostFacts {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map_or(0, |kib| kib * 1024)
        };
        // A cgroup limit lower than the machine's memory is the memory the worker really has.
        let cgroup_limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let total = match cgroup_limit {
            Some(limit) if limit < field("MemTotal:") => limit,
            _ => field("MemTotal:"),
        };
        let hostname = hostname();
        HostFacts {
            total_memory_bytes: total,
            available_memory_bytes: field("MemAvailable:").min(total),
            cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            hostname,
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            worker_type: worker_type.to_string(),
            capabilities: capabilities.to_vec(),
            env: allowed_env
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
                .collect(),
        }
    }
}

/// This machine's host name (empty when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
