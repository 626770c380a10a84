//! Test hosts of their own: every process of a test cluster in a Linux network namespace with
//! an address of its own, and faults between any two of them that loopback cannot produce — a
//! link that drops while both ends live, delay, loss.
//!
//! # Topology
//!
//! A [`Network`] is one router namespace and one namespace per host. Host `i` has a veth
//! `eth0` at 10.77.`i`.2/24 whose peer `h<i>` sits in the router at 10.77.`i`.1; each host
//! routes 10.77.0.0/16 through the router and nothing else. Every interface and address lives
//! inside the test's own namespaces: the machine's own interfaces and routes are never
//! touched, and no address of a test is reachable from outside it (nor anything outside from
//! it). Names are `weirnet-<pid>-<n>-…`, so tests run in parallel and a crashed run's leftovers
//! are told apart and removed by the next run ([`Network::create`]).
//!
//! # Faults
//!
//! All in the router, so neither end sees an error — packets simply stop arriving, as on a
//! real network:
//! - [`Network::cut`] / [`Network::restore`]: policy rules that blackhole traffic between two
//!   hosts, both ways ([`Network::isolate`]: from every other host);
//! - [`Network::degrade`] / [`Network::repair`]: delay and loss between two hosts, both ways:
//!   an iptables NFQUEUE rule hands their packets to `scripts/netns-delay.py`, which releases
//!   them after the delay and drops the lost ones (the kernels this runs on may lack netem).
//!
//! # Cleanup
//!
//! Dropping the [`Network`] — also when a test fails or panics — kills every process left in
//! its namespaces and deletes them, which removes every link with them. Processes started with
//! [`Network::spawn`] are killed when their [`Process`] is dropped too.
//!
//! Namespaces need root. Without it the tests skip with a message, unless
//! `WEIR_REQUIRE_NETNS=1` is set (as scripts/test.sh does), in which case they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use crate::common::text;

/// The prefix of every namespace a test creates.
const PREFIX: &str = "weirnet-";

/// One host of a [`Network`]: its namespace and address.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub namespace: String,
    pub address: Ipv4Addr,
    index: u8,
}

/// A test's hosts and the router between them; deleted with every process in them on drop.
pub struct Network {
    id: String,
    router: String,
    hosts: Mutex<Vec<Host>>,
    faults: Mutex<Faults>,
}

#[derive(Default)]
struct Faults {
    /// Blackholed directions, (from, to) host indices.
    cut: BTreeSet<(u8, u8)>,
    /// Degraded pairs (lower index first) and the process that delays their packets.
    degraded: BTreeMap<(u8, u8), Child>,
}

/// Whether this run must have namespaces (CI): then their absence fails the tests.
fn required() -> bool {
    std::env::var("WEIR_REQUIRE_NETNS").as_deref() == Ok("1")
}

/// Says why a test cannot run here and returns `None`, or fails the test when namespaces are
/// required.
pub fn unavailable<T>(reason: &str) -> Option<T> {
    assert!(
        !required(),
        "WEIR_REQUIRE_NETNS=1, but test hosts in network namespaces are not available: {reason}"
    );
    eprintln!(
        "skipped: this test runs its processes in network namespaces of their own, which are not available here ({reason}); run it as root with iproute2 installed (WEIR_REQUIRE_NETNS=1 turns this skip into a failure)"
    );
    None
}

/// Whether `program` is on the PATH.
pub fn has_program(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `line` (a program and its arguments, none with a space in it) and fails the test if
/// it fails.
fn run(line: &str) {
    let mut words = line.split_whitespace();
    let program = words.next().expect("a program");
    let out = Command::new(program)
        .args(words)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(out.status.success(), "{line}: {}", text(&out.stderr));
}

/// Runs a command for cleanup: failures are ignored.
fn run_quietly(program: &str, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output();
    let Ok(out) = out else { return Vec::new() };
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// Kills every process in namespace `ns` and deletes it (with its links).
fn delete_namespace(ns: &str) {
    for _ in 0..50 {
        let out = Command::new("ip").args(["netns", "pids", ns]).output();
        let pids: Vec<String> = out
            .map(|o| {
                text(&o.stdout)
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if pids.is_empty() {
            break;
        }
        for pid in &pids {
            run_quietly("kill", &["-9", pid]);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run_quietly("ip", &["netns", "del", ns]);
}

/// Removes the namespaces of test processes that no longer run (a run that crashed or was
/// killed before its cleanup). Called before this process makes any, so those named with its
/// own id are an earlier run's too.
fn remove_stale_namespaces() {
    let me = std::process::id().to_string();
    for ns in namespaces() {
        let Some(rest) = ns.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next() else {
            continue;
        };
        if pid == me || !Path::new("/proc").join(pid).exists() {
            eprintln!("removing the namespace {ns} of an earlier run");
            delete_namespace(&ns);
        }
    }
}

impl Network {
    /// A network of no hosts yet, for test `test` (named in messages). `None`, with a message,
    /// where namespaces cannot be made (not root, no `ip`), unless `WEIR_REQUIRE_NETNS=1`.
    pub fn create(test: &str) -> Option<Network> {
        static STALE: Once = Once::new();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        if !has_program("ip") {
            return unavailable("`ip` (Debian's iproute2) is not installed");
        }
        let uid = Command::new("id").arg("-u").output();
        if !uid.is_ok_and(|o| text(&o.stdout).trim() == "0") {
            return unavailable("creating network namespaces needs root");
        }
        STALE.call_once(remove_stale_namespaces);
        let id = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let router = format!("{id}-router");
        let made = Command::new("ip")
            .args(["netns", "add", &router])
            .stderr(Stdio::piped())
            .output();
        match made {
            Ok(out) if out.status.success() => {}
            Ok(out) => return unavailable(&format!("ip netns add: {}", text(&out.stderr).trim())),
            Err(e) => return unavailable(&format!("ip netns add: {e}")),
        }
        let network = Network {
            id,
            router,
            hosts: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
        };
        run(&format!("ip -n {} link set lo up", network.router));
        // Forwarding in the router's namespace only: the machine's own setting is untouched.
        let forwarding = Command::new("ip")
            .args(["netns", "exec", &network.router, "sh", "-c"])
            .arg("echo 1 > /proc/sys/net/ipv4/ip_forward")
            .status();
        assert!(
            forwarding.is_ok_and(|s| s.success()),
            "ip forwarding in the router"
        );
        eprintln!("{test}: test hosts in namespaces {}-*", network.id);
        Some(network)
    }

    /// Runs `line` in the router's namespace; fails the test if it fails.
    fn in_router(&self, line: &str) {
        run(&format!("ip netns exec {} {line}", self.router));
    }

    /// Adds host `name` (a short word: it is part of its namespace's name).
    pub fn add_host(&self, name: &str) -> Host {
        let mut hosts = self.hosts.lock().unwrap();
        let index = u8::try_from(hosts.len() + 1).expect("at most 254 hosts");
        let host = Host {
            name: name.to_string(),
            namespace: format!("{}-{name}", self.id),
            address: Ipv4Addr::new(10, 77, index, 2),
            index,
        };
        let (ns, router, address) = (&host.namespace, &self.router, host.address);
        let (router_if, gateway) = (format!("h{index}"), format!("10.77.{index}.1"));
        // Recorded first: should a step fail, the drop still deletes the namespace.
        hosts.push(host.clone());
        run(&format!("ip netns add {ns}"));
        run(&format!("ip -n {ns} link set lo up"));
        run(&format!(
            "ip -n {router} link add {router_if} type veth peer name eth0 netns {ns}"
        ));
        run(&format!(
            "ip -n {router} addr add {gateway}/24 dev {router_if}"
        ));
        run(&format!("ip -n {router} link set {router_if} up"));
        run(&format!("ip -n {ns} addr add {address}/24 dev eth0"));
        run(&format!("ip -n {ns} link set eth0 up"));
        run(&format!("ip -n {ns} route add 10.77.0.0/16 via {gateway}"));
        host
    }

    /// `program` to be run in `host`'s namespace.
    pub fn command(&self, host: &Host, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.namespace]).arg(program);
        cmd
    }

    /// Starts `cmd` (from [`Network::command`]) with its output in `log`.
    pub fn spawn(&self, mut cmd: Command, log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Process {
            child: Some(child),
            log,
        }
    }

    /// Drops every packet between `a` and `b`, both ways, silently.
    pub fn cut(&self, a: &Host, b: &Host) {
        let mut faults = self.faults.lock().unwrap();
        for (from, to) in [(a, b), (b, a)] {
            if faults.cut.insert((from.index, to.index)) {
                run(&format!(
                    "ip -n {} rule add from {} to {} blackhole pref {}",
                    self.router,
                    from.address,
                    to.address,
                    rule_preference(from, to)
                ));
            }
        }
    }

    /// Undoes [`Network::cut`] between `a` and `b`.
    pub fn restore(&self, a: &Host, b: &Host) {
        let mut faults = self.faults.lock().unwrap();
        for (from, to) in [(a, b), (b, a)] {
            if faults.cut.remove(&(from.index, to.index)) {
                let pref = rule_preference(from, to);
                run(&format!("ip -n {} rule del pref {pref}", self.router));
            }
        }
    }

    /// Cuts `host` off from every other host.
    pub fn isolate(&self, host: &Host) {
        for other in self.others(host) {
            self.cut(host, &other);
        }
    }

    /// Undoes [`Network::isolate`].
    pub fn rejoin(&self, host: &Host) {
        for other in self.others(host) {
            self.restore(host, &other);
        }
    }

    fn others(&self, host: &Host) -> Vec<Host> {
        let hosts = self.hosts.lock().unwrap();
        hosts
            .iter()
            .filter(|h| h.index != host.index)
            .cloned()
            .collect()
    }

    /// Delays every packet between `a` and `b` by `delay`, and drops `loss_percent` of them,
    /// both ways, until [`Network::repair`]. Needs `iptables` (Debian's package) and python3.
    pub fn degrade(&self, a: &Host, b: &Host, delay: Duration, loss_percent: f64) {
        assert!(
            has_program("iptables") && has_program("python3"),
            "degrading a link needs iptables and python3 (scripts/test.sh installs Debian's iptables)"
        );
        let key = (a.index.min(b.index), a.index.max(b.index));
        let mut faults = self.faults.lock().unwrap();
        if faults.degraded.contains_key(&key) {
            return;
        }
        let queue = (u32::from(key.0) << 8 | u32::from(key.1)).to_string();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns-delay.py");
        let mut delayer = Command::new("ip")
            .args(["netns", "exec", &self.router, "python3", "-u"])
            .arg(&script)
            .args([
                &queue,
                &delay.as_millis().to_string(),
                &loss_percent.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start netns-delay.py");
        // It says so once its queue is bound: only then may packets be queued to it.
        let mut line = String::new();
        let stderr = delayer.stderr.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stderr), &mut line).unwrap();
        assert!(
            line.starts_with("netns-delay: queue"),
            "netns-delay.py: {line}"
        );
        faults.degraded.insert(key, delayer);
        for (from, to) in [(a, b), (b, a)] {
            self.in_router(&nfqueue_rule("-A", from, to, &queue));
        }
    }

    /// Undoes [`Network::degrade`] between `a` and `b`.
    pub fn repair(&self, a: &Host, b: &Host) {
        let key = (a.index.min(b.index), a.index.max(b.index));
        let mut faults = self.faults.lock().unwrap();
        let Some(mut delayer) = faults.degraded.remove(&key) else {
            return;
        };
        let queue = (u32::from(key.0) << 8 | u32::from(key.1)).to_string();
        for (from, to) in [(a, b), (b, a)] {
            self.in_router(&nfqueue_rule("-D", from, to, &queue));
        }
        // What it still holds goes out before it stops.
        std::thread::sleep(Duration::from_millis(500));
        let _ = delayer.kill();
        let _ = delayer.wait();
    }
}

/// The preference of the policy rule that blackholes `from` → `to`: one per direction.
fn rule_preference(from: &Host, to: &Host) -> String {
    (1000 + u32::from(from.index) * 256 + u32::from(to.index)).to_string()
}

/// The iptables command that adds (`-A`) or deletes (`-D`) the queueing of `from` → `to`
/// packets to `queue` (which they pass unharmed should nothing read the queue).
fn nfqueue_rule(op: &str, from: &Host, to: &Host, queue: &str) -> String {
    format!(
        "iptables {op} FORWARD -s {} -d {} -j NFQUEUE --queue-num {queue} --queue-bypass",
        from.address, to.address
    )
}

impl Drop for Network {
    fn drop(&mut self) {
        let faults = self.faults.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, mut delayer) in std::mem::take(&mut faults.degraded) {
            let _ = delayer.kill();
            let _ = delayer.wait();
        }
        let hosts = self.hosts.get_mut().unwrap_or_else(|p| p.into_inner());
        for host in hosts.iter() {
            delete_namespace(&host.namespace);
        }
        delete_namespace(&self.router);
    }
}

/// A process of a test host, killed when dropped.
pub struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    pub fn log(&self) -> String {
        text(&std::fs::read(&self.log).unwrap_or_default())
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().unwrap().is_none(),
            None => false,
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit; fails the test after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "{} still running after {timeout:?}; its log:\n{}",
                    self.log.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A standalone ZooKeeper on a test host (scripts/zookeeper.sh bound to the host's address);
/// stopped when dropped.
pub struct ZooKeeperServer {
    dir: PathBuf,
    pub address: String,
}

impl ZooKeeperServer {
    /// Starts one on `host`, its state in `dir`; returns once it serves requests.
    pub fn start(net: &Network, host: &Host, dir: &Path) -> ZooKeeperServer {
        let out = net
            .command(host, "bash")
            .arg(zookeeper_script())
            .arg("start")
            .env("WEIR_ZK_DIR", dir)
            .env("WEIR_ZK_HOST", host.address.to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/zookeeper.sh start on {}: {}",
            host.name,
            text(&out.stderr)
        );
        ZooKeeperServer {
            dir: dir.to_path_buf(),
            address: text(&out.stdout).trim().to_string(),
        }
    }
}

fn zookeeper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zookeeper.sh")
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(zookeeper_script())
            .arg("stop")
            .env("WEIR_ZK_DIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
