//! Three scheduler replicas (`scheduler --replica`, issue 34), real processes: the leader
//! `kill -9`ed in the middle of a job of 2,000 tasks while `weir submit --wait` waits (loopback);
//! a replica whose disk is lost rejoins from the others and then holds every result (loopback);
//! the leader cut off from the other replicas but not from the workers (network namespaces:
//! root only, like the other namespace tests); a fourth replica added and one removed while the
//! cluster runs, a replica at a wrong address refused, and membership changes refused without
//! the key's token (loopback). Every run of every task is logged
//! (`task_script`): no two runs of one task may overlap, and every task has one result.
//! How long a failover took is printed, not asserted (BENCHMARKS.md has the numbers).

use super::*;

/// Ports on 127.0.0.1 free a moment ago (bound and let go).
fn free_ports(n: usize) -> Vec<u16> {
    let sockets: Vec<std::net::UdpSocket> = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    sockets
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect()
}

/// `--peers` for the replicas at `addresses` (ids 1, 2, 3 in order).
fn peers(addresses: &[String]) -> String {
    let named: Vec<String> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| format!("{}={address}", i + 1))
        .collect();
    named.join(",")
}

/// A worker silent 2 s is lost (the default is 5 s); the election timeout is the default (a
/// follower stands for election after 1–2 s without a leader).
const REPLICA_FLAGS: [&str; 2] = ["--heartbeat-timeout", "2"];

impl Net {
    /// Manager `m` (up to two workers of two slots) from here: it follows the leader as its
    /// workers do.
    fn manager(&mut self, access: &Path) {
        let mut command = self.command(None, "worker-manager", "manager");
        command.arg("--access-file").arg(access).args([
            "--id",
            "m",
            "--max-task-concurrency",
            "4",
            "--slots",
            "2",
            "--heartbeat-interval",
            "0.2",
        ]);
        let child = command.spawn().expect("worker-manager starts");
        self.keep("manager", child);
    }

    /// Replica `id` of `peers`, in `netns`, with its access file in `r{id}/` (the first one
    /// started makes the certificate and tokens; the others get copies, as an operator copies
    /// them). Returns the access file it wrote.
    fn replica(&mut self, netns: Option<&Netns>, id: u64, peers: &str, args: &[&str]) -> PathBuf {
        let dir = self.path(&format!("r{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let first = (1..=3)
            .map(|n| self.path(&format!("r{n}")))
            .find(|d| d != &dir && d.join("access.json").exists());
        if let Some(first) = first.filter(|_| !dir.join("access.json").exists()) {
            for file in ["access.json", "scheduler-cert.pem", "scheduler-key.pem"] {
                std::fs::copy(first.join(file), dir.join(file)).unwrap();
            }
        }
        let name = format!("replica-{id}");
        let mut command = self.command(netns, "scheduler", &name);
        command
            .arg("--access-file")
            .arg(dir.join("access.json"))
            .args(["--replica", &id.to_string(), "--peers", peers])
            .args(args);
        let (child, _, _) = listening(command, &format!("replica {id}"));
        self.keep(&name, child);
        self.say(&format!("replica {id} started"));
        dir.join("access.json")
    }

    /// `kill -9` replica `id` (and reap it).
    fn kill_replica(&mut self, id: u64) {
        let child = self.child(&format!("replica-{id}"));
        let _ = child.kill();
        let _ = child.wait();
        let name = format!("replica-{id}");
        self.processes.retain(|(n, _)| n != &name);
        self.say(&format!("replica {id} killed"));
    }

    /// The replica that leads (by `weir replicas`), other than `not`; waits up to 60 s.
    fn leader(&self, access: &Path, not: Option<u64>) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.weir(access, &["--output", "json", "replicas"]);
            let replicas: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            let leader = replicas.as_array().and_then(|all| {
                all.iter()
                    .find(|r| r["leader"] == true)
                    .and_then(|r| r["id"].as_u64())
            });
            if let Some(leader) = leader.filter(|l| Some(*l) != not) {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no replica leads: {}{}",
                common::text(&out.stdout),
                common::text(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Three replicas on loopback; the access file of replica 1 (it lists all three) and the
    /// `--peers` they were given.
    fn loopback_replicas(&mut self) -> (PathBuf, String) {
        self.loopback_replicas_at(&loopback(3))
    }

    /// Replicas 1, 2, 3 at the first three `addresses`.
    fn loopback_replicas_at(&mut self, addresses: &[String]) -> (PathBuf, String) {
        self.loopback_replicas_with(addresses, &[])
    }

    /// Replicas 1, 2, 3 at the first three `addresses`, each with `args` too.
    fn loopback_replicas_with(&mut self, addresses: &[String], args: &[&str]) -> (PathBuf, String) {
        let peers = peers(&addresses[..3]);
        let flags = [&REPLICA_FLAGS[..], args].concat();
        let access = self.replica(None, 1, &peers, &flags);
        for id in [2, 3] {
            self.replica(None, id, &peers, &flags);
        }
        (access, peers)
    }

    /// Workers `names` of `slots` slots, heartbeating every 0.2 s, registered when it returns.
    fn workers_of(&mut self, access: &Path, names: &[&str], slots: u32) {
        let slots = slots.to_string();
        for name in names {
            self.worker(
                None,
                access,
                name,
                &["--slots", &slots, "--heartbeat-interval", "0.2"],
            );
        }
        self.await_workers(access, names.len(), 60);
    }
}

/// `n` loopback addresses on free ports.
fn loopback(n: usize) -> Vec<String> {
    free_ports(n)
        .into_iter()
        .map(|port| format!("quic://127.0.0.1:{port}"))
        .collect()
}

#[test]
fn the_leader_killed_mid_job_another_leads_and_the_waiting_client_gets_every_result_once() {
    let mut net = Net::new();
    // Every replica scales manager `m` (the waterfall made again in each term it leads).
    let (access, _) = net.loopback_replicas_with(&loopback(3), &MANAGER_POLICY);
    let leader = net.leader(&access, None);
    net.say(&format!("replica {leader} leads"));
    net.workers_of(&access, &["w1"], 4);
    net.manager(&access);
    // The waiting client: `weir submit --wait` of 2,000 short tasks.
    let script = task_script(&net.path("runs.txt"), 0.0);
    let mut waiting = Command::new(bin("weir"))
        .arg("--access-file")
        .arg(&access)
        .args(["submit", "--count", "2000", "--retries", "100", "--wait"])
        .args(["--", "sh", "-c", &script])
        .env("WEIR_CACHE_DIR", net.path("cache"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    net.await_ends("runs.txt", 300, 120);
    net.kill_replica(leader);
    let killed = Instant::now();
    let next = net.leader(&access, Some(leader));
    // From here on no run can have been handed out by the killed leader.
    let led_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let failover = killed.elapsed();
    net.say(&format!(
        "replica {next} leads {:.2} s after the leader was killed",
        failover.as_secs_f64()
    ));
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = waiting.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "`weir submit --wait` did not end; status: {}",
            net.json(&access, &["status"])
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut out = String::new();
    let mut err = String::new();
    waiting
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    waiting
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "weir submit --wait: {status}: {out}{err}");
    assert!(
        out.contains("2000 succeeded, 0 failed"),
        "weir submit --wait said {out}{err}"
    );
    let mut failures = Failures(Vec::new());
    check_runs_and_results(&mut failures, &net, &access, ("1", "runs.txt", 2000), false);
    // The manager's workers served the new leader too (its policy made again for its term).
    let runs = Runs::read(&net.path("runs.txt"));
    let after: Vec<&Run> = (runs.runs.values())
        .filter(|r| r.first > led_ns && r.worker.starts_with("m-"))
        .collect();
    failures.check(!after.is_empty(), || {
        format!(
            "no run on the manager's workers after the failover: {}",
            runs.summary()
        )
    });
    let jobs = net.json(&access, &["jobs"]);
    failures.check(jobs.as_array().is_some_and(|j| j.len() == 1), || {
        format!("one submission, one job: {jobs}")
    });
    failures.finish("the leader killed mid-job");
}

/// The leader's dashboard shows the replicas as `weir replicas` does; a follower's says it does
/// not lead (and where to look), and its page still loads.
#[test]
fn the_leaders_dashboard_shows_the_replicas_and_a_followers_says_it_does_not_lead() {
    let mut net = Net::new();
    let addresses = loopback(3);
    let peers = peers(&addresses);
    let dashboards: Vec<String> = free_ports(3)
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let mut access = None;
    for (id, dashboard) in (1..=3).zip(&dashboards) {
        let flags = [&REPLICA_FLAGS[..], &["--dashboard", dashboard]].concat();
        let written = net.replica(None, id, &peers, &flags);
        access.get_or_insert(written);
    }
    let access = access.unwrap();
    let leader = net.leader(&access, None);
    let at = |id: u64| dashboards[usize::try_from(id - 1).unwrap()].clone();
    // Every replica is known to the leader once each has answered it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let replicas = loop {
        // A 503 while the lead settles is asked again.
        let answer = common::http_request(&at(leader), "/api/snapshot", "127.0.0.1");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        let snapshot: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let replicas = snapshot["replicas"].as_array().cloned().unwrap_or_default();
        if replicas.len() == 3 && replicas.iter().all(|r| r["matched"].is_u64()) {
            break replicas;
        }
        assert!(Instant::now() < deadline, "the leader's replicas: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let leaders: Vec<u64> = (replicas.iter())
        .filter(|r| r["leader"] == true)
        .filter_map(|r| r["id"].as_u64())
        .collect();
    assert_eq!(leaders, [leader], "{replicas:?}");
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let answer = common::http_request(&at(follower), "/api/snapshot", "127.0.0.1");
    assert!(answer.starts_with("HTTP/1.0 503"), "{answer}");
    assert!(answer.contains("does not lead"), "{answer}");
    let page = common::http_get(&format!("http://{}/", at(follower)));
    assert!(page.contains("replicas-section"), "{page}");
}

#[test]
fn a_replica_whose_disk_is_lost_rejoins_from_the_others_and_holds_every_result() {
    let mut net = Net::new();
    let (access, peers) = net.loopback_replicas();
    let leader = net.leader(&access, None);
    net.workers_of(&access, &["w1"], 4);
    // The worker token does not let a peer speak Raft: replicas want a token made from the key.
    let file = weir::net::AccessFile::read(&access).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let posing = runtime.block_on(weir::net::connect(
        &file,
        weir::proto::Role::Replica,
        Duration::from_secs(5),
    ));
    assert!(
        matches!(posing, Err(weir::net::NetError::Refused(_))),
        "a worker token posing as a replica: {:?}",
        posing.map(|_| ())
    );
    let first = net.submit(&access, 200, 0.0);
    net.wait_job(&access, &first, Instant::now() + Duration::from_secs(120));
    // A follower loses its disk for good: its log and snapshot are gone.
    let lost = (1..=3).find(|id| *id != leader).unwrap();
    net.kill_replica(lost);
    let dir = net.path(&format!("r{lost}"));
    let mut removed = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("replica-") {
            std::fs::remove_file(entry.path()).unwrap();
            removed += 1;
        }
    }
    assert!(removed >= 1, "no log to delete in {}", dir.display());
    net.replica(None, lost, &peers, &REPLICA_FLAGS);
    let second = net.submit_logging(&access, "runs2.txt", 100, 0.0, &[]);
    net.wait_job(&access, &second, Instant::now() + Duration::from_secs(120));
    // It caught up: no lag as the leader sees it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let replicas = net.json(&access, &["replicas"]);
        let lag = replicas.as_array().and_then(|all| {
            all.iter()
                .find(|r| r["id"] == lost)
                .and_then(|r| r["lag"].as_u64())
        });
        if lag == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica {lost} did not catch up: {replicas}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The leader is lost now: the two left, the rejoined one among them, still have all.
    net.kill_replica(leader);
    let next = net.leader(&access, Some(leader));
    net.say(&format!("replica {next} leads"));
    let mut failures = Failures(Vec::new());
    check_runs_and_results(
        &mut failures,
        &net,
        &access,
        (&first, "runs.txt", 200),
        false,
    );
    check_runs_and_results(
        &mut failures,
        &net,
        &access,
        (&second, "runs2.txt", 100),
        false,
    );
    failures.finish("a replica's disk lost");
}

/// The replicas in three namespaces, each reached at a service address of its own (on its
/// `lo`): from the others through direct links between their namespaces, from here (the
/// workers and clients) through a link to each. Cutting the leader's two direct links cuts it
/// off from the other replicas and from nothing else.
struct Triangle {
    net: Net,
    /// Links: 0-1, 0-2, 1-2 (direct), then one from here to each.
    links: Vec<Link>,
    spaces: Vec<Netns>,
    addresses: Vec<String>,
    _service: netns::Subnet,
}

fn triangle() -> Triangle {
    let spaces: Vec<Netns> = (1..=3).map(|n| namespace(&format!("replica{n}"))).collect();
    let service = netns::Subnet::reserve();
    let svc: Vec<Ipv4Addr> = (1..=3).map(|n| service.host(n)).collect();
    for (space, address) in spaces.iter().zip(&svc) {
        space.ip(&["addr", "add", &format!("{address}/32"), "dev", "lo"]);
    }
    let mut links = Vec::new();
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let link = Link::between(&spaces[a], &spaces[b]);
        // a reaches b's service address through b's end, and b a's through a's.
        spaces[a].ip(&[
            "route",
            "add",
            &format!("{}/32", svc[b]),
            "via",
            &link.b.address.to_string(),
        ]);
        spaces[b].ip(&[
            "route",
            "add",
            &format!("{}/32", svc[a]),
            "via",
            &link.a.address.to_string(),
        ]);
        links.push(link);
    }
    for (n, space) in spaces.iter().enumerate() {
        let link = Link::to_root(space);
        // Here reaches each service address through its own link (removed with the link).
        let route = Command::new("ip")
            .args([
                "route",
                "add",
                &format!("{}/32", svc[n]),
                "via",
                &link.b.address.to_string(),
            ])
            .output()
            .unwrap();
        assert!(route.status.success(), "{}", common::text(&route.stderr));
        links.push(link);
    }
    let port = 7400;
    Triangle {
        net: Net::new(),
        links,
        spaces,
        addresses: svc.iter().map(|a| format!("quic://{a}:{port}")).collect(),
        _service: service,
    }
}

#[test]
#[ignore = "needs root and iproute2 (network namespaces); CI runs it"]
fn the_leader_cut_off_from_the_replicas_but_not_the_workers_stops_serving_and_no_task_runs_twice_at_once()
 {
    let mut t = triangle();
    let peers = peers(&t.addresses);
    let mut access = PathBuf::new();
    let flags = [&REPLICA_FLAGS[..], &MANAGER_POLICY[..]].concat();
    for id in 1..=3u64 {
        let space = &t.spaces[id as usize - 1];
        access = t.net.replica(Some(space), id, &peers, &flags);
    }
    let net = &mut t.net;
    let leader = net.leader(&access, None);
    net.say(&format!("replica {leader} leads"));
    // The three replicas in three namespaces, a worker and a manager's workers in a fourth.
    net.workers_of(&access, &["w1"], 2);
    net.manager(&access);
    // Tasks of 3 s: runs are under way when the leader is cut off.
    let job = net.submit(&access, 40, 3.0);
    net.await_starts(4, 60);
    let cut: Vec<usize> = match leader {
        1 => vec![0, 1],
        2 => vec![0, 2],
        _ => vec![1, 2],
    };
    for &l in &cut {
        // Either end down cuts the pair.
        let end = t.links[l].a.clone();
        t.links[l].down(&end);
    }
    net.say(&format!("replica {leader} cut off from the other replicas"));
    let next = net.leader(&access, Some(leader));
    net.say(&format!("replica {next} leads"));
    net.wait_job(&access, &job, Instant::now() + Duration::from_secs(240));
    let mut failures = Failures(Vec::new());
    check_runs_and_results(&mut failures, net, &access, (&job, "runs.txt", 40), false);
    let runs = Runs::read(&net.path("runs.txt"));
    failures.check(
        runs.runs.values().any(|r| r.worker.starts_with("m-")),
        || format!("no run on the manager's workers: {}", runs.summary()),
    );
    failures.finish("the leader cut off");
}

#[test]
fn a_replica_added_while_the_cluster_runs_votes_and_one_removed_no_longer_counts() {
    let mut net = Net::new();
    let addresses = loopback(5);
    let (access, _) = net.loopback_replicas_at(&addresses);
    // Replica 4 is started now (its port taken at once), with --join: it forms nothing and
    // waits to be added.
    let all_four = peers(&addresses[..4]);
    net.replica(
        None,
        4,
        &all_four,
        &[&REPLICA_FLAGS[..], &["--join"]].concat(),
    );
    let leader = net.leader(&access, None);
    net.workers_of(&access, &["w1"], 4);
    let first = net.submit(&access, 50, 0.0);
    net.wait_job(&access, &first, Instant::now() + Duration::from_secs(120));
    // Without the key's token a membership change is refused.
    let stranger = net.path("not-the-key.pem");
    std::fs::write(&stranger, "not the key").unwrap();
    let refused = net.weir(
        &access,
        &[
            "replicas",
            "remove",
            "2",
            "--key",
            stranger.to_str().unwrap(),
        ],
    );
    assert!(
        !refused.status.success() && common::text(&refused.stderr).contains("token"),
        "removed without the key: {}{}",
        common::text(&refused.stdout),
        common::text(&refused.stderr)
    );
    // A replica at an address where nothing answers is not added (it would be a voter that
    // never votes), and the cluster goes on.
    let nowhere = net.weir(&access, &["replicas", "add", "5", &addresses[4]]);
    assert!(
        !nowhere.status.success() && common::text(&nowhere.stderr).contains("did not catch up"),
        "a replica that does not answer: {}{}",
        common::text(&nowhere.stdout),
        common::text(&nowhere.stderr)
    );
    let replicas = net.json(&access, &["replicas"]);
    assert_eq!(
        replicas.as_array().map(Vec::len),
        Some(3),
        "replica 5 left out: {replicas}"
    );
    // Replica 4 is added by the leader: it learns the log, then votes.
    let added = net.json(&access, &["replicas", "add", "4", &addresses[3]]);
    let voters = |replicas: &Value| -> Vec<u64> {
        let all = replicas.as_array().cloned().unwrap_or_default();
        all.iter()
            .filter(|r| r["voter"] == true)
            .filter_map(|r| r["id"].as_u64())
            .collect()
    };
    assert_eq!(voters(&added).len(), 4, "replica 4 votes: {added}");
    // The leader's access file lists the replicas of now, for whoever reads it next.
    let listed = |net: &Net| -> Vec<String> {
        let file = net.path(&format!("r{leader}/access.json"));
        weir::net::AccessFile::read(&file)
            .map(|a| a.replicas)
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed(&net) != addresses[..4] {
        assert!(Instant::now() < deadline, "listed: {:?}", listed(&net));
        std::thread::sleep(Duration::from_millis(50));
    }
    // A follower of the first three is removed, then stopped: it no longer counts.
    let removed = (1..=3).find(|id| *id != leader).unwrap();
    let after = net.json(&access, &["replicas", "remove", &removed.to_string()]);
    assert!(
        !voters(&after).contains(&removed) && voters(&after).len() == 3,
        "replica {removed} removed: {after}"
    );
    let now: Vec<String> = (1..=4)
        .filter(|id| *id != removed)
        .map(|id| addresses[id as usize - 1].clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed(&net) != now {
        assert!(Instant::now() < deadline, "listed: {:?}", listed(&net));
        std::thread::sleep(Duration::from_millis(50));
    }
    net.kill_replica(removed);
    // The other first follower is lost too: the leader and replica 4 are a majority of the
    // three voters, so the cluster goes on.
    let other = (1..=3).find(|id| *id != leader && *id != removed).unwrap();
    net.kill_replica(other);
    let second = net.submit_logging(&access, "runs2.txt", 50, 0.0, &[]);
    net.wait_job(&access, &second, Instant::now() + Duration::from_secs(120));
    let mut failures = Failures(Vec::new());
    check_runs_and_results(
        &mut failures,
        &net,
        &access,
        (&first, "runs.txt", 50),
        false,
    );
    check_runs_and_results(
        &mut failures,
        &net,
        &access,
        (&second, "runs2.txt", 50),
        false,
    );
    failures.finish("a replica added and one removed");
}
