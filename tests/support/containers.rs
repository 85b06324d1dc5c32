//! Docker-backed test harness: five independent Redis masters for quorumlock's
//! integration tests, with fault injection (kill, pause, partition, restart
//! with or without data).
//!
//! # Usage
//!
//! ```ignore
//! mod support; // tests/support/mod.rs has `pub mod containers;`
//! use support::containers::{Cluster, Profile};
//!
//! #[tokio::test]
//! async fn survives_one_node_down() {
//!     // Exclusive access: fault-injecting tests of this binary run one at a time,
//!     // and every node is running, unpaused and reachable when this returns.
//!     let cluster = Cluster::exclusive(Profile::Fast).await;
//!     let urls: Vec<String> = cluster.urls(); // redis://127.0.0.1:PORT, fixed for the process
//!     cluster.kill(2).await;
//!     // ... quorum of 4 still works ...
//!     cluster.start(2).await;
//! }
//! ```
//!
//! # Lifetime: one cluster per profile per test process
//!
//! [`Cluster::shared`] starts five containers the first time a profile is asked
//! for and keeps them in a `static` for the rest of the process, so every test
//! of a binary (`cargo test`) shares them. Under `cargo nextest`, which runs each
//! test in its own process, each test gets its own cluster (startup is a couple
//! of seconds). Tests that inject faults should take [`Cluster::exclusive`],
//! which serialises them and restores every node first; tests using
//! [`Cluster::shared`] concurrently with a fault-injecting test will see those
//! faults.
//!
//! # Runtimes
//!
//! Each `#[tokio::test]` has its own runtime, which is dropped when the test
//! ends, while the containers outlive every test. So all Docker work (the
//! testcontainers calls, the `docker` CLI calls used for fault injection,
//! readiness probes, the timer of [`Cluster::restart_delayed`]) runs on a
//! private, never-dropped multi-threaded runtime owned by this module; the
//! public `async fn`s only await a handle to that work. They therefore never
//! block the caller's runtime (a lock client running concurrently in the same
//! test keeps making progress) and work from any executor.
//!
//! # Cleanup
//!
//! `static`s are never dropped, so containers are not removed by
//! testcontainers' `Drop`. Instead the first cluster of a process spawns a
//! small reaper (`sh`) whose stdin is a pipe from this process: when the
//! process exits for any reason (normal end, panic, SIGKILL) the kernel closes
//! the pipe and the reaper removes every container labelled with this
//! process's session (`quorumlock.harness.session`). The reaper ignores
//! SIGINT/SIGHUP/SIGTERM so a Ctrl-C or a test-runner timeout does not kill it
//! before it has cleaned up. As a second line of defence, containers are
//! labelled `quorumlock.harness=1` plus the owning PID and host name, and each
//! new process removes labelled containers of this host whose owner is no
//! longer alive. Manual cleanup:
//! `docker rm -f $(docker ps -aq --filter label=quorumlock.harness=1)`.
//!
//! # Image
//!
//! The image is `$QUORUMLOCK_REDIS_IMAGE`, default `quorumlock-redis:local`
//! (as `name:tag`; digests are not supported). If the default image is missing
//! it is built by running `docker/build-image.sh` (found via
//! `CARGO_MANIFEST_DIR`), which needs no registry. A non-default tag that is
//! missing is first `docker pull`ed, then built by the same script if the pull
//! fails. Containers get arguments only (`--port 6379 ...`), which works both
//! with the local image (entrypoint `redis-server`) and with the official
//! `redis:7` image (its entrypoint prepends `redis-server` to arguments that
//! start with `-`).
//!
//! # Ports and URLs
//!
//! Each node publishes its port 6379 on `127.0.0.1` only, on a FIXED host port
//! chosen once at startup, so a node keeps its URL `redis://127.0.0.1:PORT`
//! across kill/start, restarts and re-creations. Ports are picked at random
//! below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`)
//! and checked free by binding `127.0.0.1:PORT`; staying out of the ephemeral
//! range means the port of a stopped node is never handed to an outgoing
//! client connection or to another `bind(:0)`, so the node can take it back
//! when it restarts. (If that range is unusable, falls back to binding
//! `127.0.0.1:0`.)
//!
//! # Clocks
//!
//! Every node runs redis-server with the clock shim `docker/clockshim.c` in
//! `LD_PRELOAD`: it adds an offset, read from `/quorumlock-clock/offset` in
//! the container, to the wall clock (`CLOCK_REALTIME`, `gettimeofday`,
//! `time`), by which Redis expires keys. The shim is compiled with gcc into
//! `target/quorumlock-clockshim/` on first use and added to a derived image
//! (`quorumlock-redis-clockshim:<hash>`, made with `docker create`, `docker
//! cp` and `docker commit` from the base image; it needs only the libc the
//! image has). [`Cluster::jump_clock`] writes the offset with `docker cp`
//! and waits until the node's `TIME` shows it.
//!
//! # Failures
//!
//! This is test code: a missing Docker engine, a failing build or a node that
//! does not come back panics with a message saying what failed. Nothing is
//! ever skipped silently.
// Each test binary uses a different subset of the harness; and as test code
// it reports every failure by panicking with a message (see "Failures").
#![allow(dead_code, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, MutexGuard, OnceCell};
use tokio::task::JoinHandle;

use crate::support::Nodes;

/// Number of Redis masters in a [`Cluster`].
pub const NODES: usize = 5;

/// Image used when `QUORUMLOCK_REDIS_IMAGE` is not set.
pub const DEFAULT_IMAGE: &str = "quorumlock-redis:local";

/// How long [`Cluster::wait_ready`] (and every operation that waits for a node)
/// waits for `PING` to succeed before panicking.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The clock shim's directory, library and offset file in every container.
const SHIM_DIR: &str = "quorumlock-clock";
const SHIM_LIB: &str = "/quorumlock-clock/clockshim.so";
const SHIM_OFFSET: &str = "/quorumlock-clock/offset";

/// Port Redis listens on inside every container.
const REDIS_PORT: u16 = 6379;
/// Docker network the containers are attached to (the default bridge), and
/// which [`Cluster::partition`] disconnects them from.
const NETWORK: &str = "bridge";
const LABEL_ROOT: &str = "quorumlock.harness";
const LABEL_SESSION: &str = "quorumlock.harness.session";
const LABEL_PID: &str = "quorumlock.harness.pid";
const LABEL_HOST: &str = "quorumlock.harness.host";

/// Persistence configuration of the five nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    /// No persistence (`--save "" --appendonly no`): a node that is killed and
    /// started again comes back EMPTY. This is the RedLock restart hazard: such
    /// a node can grant a lock that another client still holds.
    Fast,
    /// AOF with `appendfsync always`: every acknowledged write is on disk, so
    /// [`Cluster::kill`] + [`Cluster::start`] keeps all data (the container's
    /// own filesystem holds `/data`; stop/start reuses it).
    Safe,
}

impl Profile {
    /// Short lowercase name (`"fast"` / `"safe"`), used in container names.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Fast => "fast",
            Profile::Safe => "safe",
        }
    }

    /// The `redis-server` arguments every node of this profile runs with.
    pub fn redis_args(self) -> Vec<String> {
        let mut args: Vec<&str> = vec![
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            // Only reachable through a port published on 127.0.0.1.
            "--protected-mode",
            "no",
            "--dir",
            "/data",
            // When full, refuse writes (acquisition fails, the quorum decides)
            // rather than evict lock keys (which would free held locks).
            "--maxmemory",
            "256mb",
            "--maxmemory-policy",
            "noeviction",
            // No RDB snapshots in either profile: Safe relies on the AOF alone.
            "--save",
            "",
        ];
        match self {
            Profile::Fast => args.extend(["--appendonly", "no"]),
            Profile::Safe => args.extend(["--appendonly", "yes", "--appendfsync", "always"]),
        }
        args.into_iter().map(String::from).collect()
    }

    fn slot(self) -> usize {
        match self {
            Profile::Fast => 0,
            Profile::Safe => 1,
        }
    }
}

/// Five independent Redis masters in Docker containers, reachable on fixed
/// `127.0.0.1` ports, with fault injection.
///
/// Obtain one with [`Cluster::shared`] or [`Cluster::exclusive`]. Node indices
/// are `0..NODES`; an out-of-range index panics. All fault-injection methods
/// are `async`, run their Docker work on the harness's own runtime (see the
/// module docs) and return once the new state is in effect (e.g. `kill`
/// returns when the port refuses connections, `start` when `PING` answers).
/// Operations on the same node are serialised; operations on different nodes
/// may run concurrently.
pub struct Cluster {
    profile: Profile,
    image: String,
    nodes: Vec<Arc<Node>>,
    startup: Duration,
}

/// Exclusive access to a shared cluster, from [`Cluster::exclusive`].
/// Dereferences to [`Cluster`]. Dropping it lets the next exclusive user in
/// (who restores the nodes before use); it does not itself repair anything.
pub struct ClusterGuard {
    cluster: &'static Cluster,
    _guard: MutexGuard<'static, ()>,
}

impl std::ops::Deref for ClusterGuard {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.cluster
    }
}

/// A node restart scheduled by [`Cluster::restart_delayed`]: the node is down
/// now and comes back (empty) in the background when the delay has passed.
/// Await [`PendingRestart::wait`] to know it is back and answering `PING`;
/// dropping this handle does not cancel the restart.
pub struct PendingRestart {
    node: usize,
    handle: JoinHandle<()>,
}

impl PendingRestart {
    /// Waits until the node is back up and answers `PING`. Panics if the
    /// restart failed.
    pub async fn wait(self) {
        let node = self.node;
        match self.handle.await {
            Ok(()) => {}
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("delayed restart of node {node} was cancelled: {e}"),
        }
    }

    /// Whether the node is already back (or the restart failed).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

struct Node {
    index: usize,
    name: String,
    port: u16,
    profile: Profile,
    image: String,
    state: Arc<Mutex<NodeState>>,
}

struct NodeState {
    /// The testcontainers handle. `None` only while a node is removed (during
    /// `restart_delayed`, or after a failed re-creation).
    container: Option<ContainerAsync<GenericImage>>,
    /// Disconnected from the Docker network by `partition`.
    partitioned: bool,
    /// How far ahead of the true time `jump_clock` set the node's clock.
    clock_ahead: Duration,
}

static CLUSTERS: [OnceCell<Cluster>; 2] = [OnceCell::const_new(), OnceCell::const_new()];
static EXCLUSIVE: [Mutex<()>; 2] = [Mutex::const_new(()), Mutex::const_new(())];
static PREPARED: OnceCell<String> = OnceCell::const_new();
static USED_PORTS: StdMutex<BTreeSet<u16>> = StdMutex::new(BTreeSet::new());

impl Cluster {
    /// The process-wide cluster of `profile`, started on first use (five
    /// containers started concurrently; readiness is a successful `PING` on
    /// every node). Later calls, from any test or runtime, return the same
    /// cluster. Panics if Docker is unavailable or the nodes do not start.
    pub async fn shared(profile: Profile) -> &'static Cluster {
        let mut started_here = false;
        let cluster = CLUSTERS[profile.slot()]
            .get_or_init(|| async {
                started_here = true;
                on_harness(Cluster::launch(profile)).await
            })
            .await;
        if started_here {
            eprintln!(
                "quorumlock harness: {} cluster of {NODES} nodes ({}) ready in {:.2?}: {}",
                profile.name(),
                cluster.image,
                cluster.startup,
                cluster.urls().join(" ")
            );
        }
        cluster
    }

    /// Exclusive use of the shared cluster of `profile`: waits for any other
    /// holder in this process, then brings every node back to running,
    /// unpaused, connected and answering `PING` (see [`Cluster::restore`])
    /// before returning. Use this in tests that inject faults.
    pub async fn exclusive(profile: Profile) -> ClusterGuard {
        let cluster = Cluster::shared(profile).await;
        let guard = EXCLUSIVE[profile.slot()].lock().await;
        cluster.restore().await;
        ClusterGuard {
            cluster,
            _guard: guard,
        }
    }

    /// The profile this cluster was started with.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The image the nodes run.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// How long starting the cluster took (containers up and answering PING).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Docker container name of node `i` (stable across re-creation), for
    /// `docker logs` and the like.
    pub fn container_name(&self, i: usize) -> String {
        self.node(i).name.clone()
    }

    /// Crash node `i`: `docker kill` (SIGKILL, no graceful shutdown) and wait
    /// until it has stopped and its port refuses connections. Existing client
    /// connections are closed. The container is kept, so [`Cluster::start`]
    /// brings back the same node: with its data under [`Profile::Safe`]
    /// (AOF, fsync always), empty under [`Profile::Fast`].
    pub async fn kill(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let state = node.state.lock().await;
            let name = node.require_container(&state);
            docker_ok(&["kill", &name]).await;
            docker_ok(&["wait", &name]).await;
            node.wait_down().await;
        })
        .await
    }

    /// Start node `i` again after [`Cluster::kill`] (`docker start` of the
    /// same container, so a Safe node replays its AOF) and wait until it
    /// answers `PING`. If the node is partitioned, it starts still partitioned
    /// and this returns without waiting for readiness.
    pub async fn start(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let state = node.state.lock().await;
            let name = node.require_container(&state);
            docker_ok(&["start", &name]).await;
            if !state.partitioned {
                node.wait_ready().await;
            }
        })
        .await
    }

    /// Freeze every process of node `i` (`docker pause`, cgroup freezer). The
    /// port stays open and connections are accepted, but nothing is answered:
    /// clients see timeouts, like a stalled (GC-paused, swapped) server. TTLs
    /// keep counting in wall-clock time, so keys can expire "during" the pause
    /// and are gone when it resumes.
    pub async fn pause(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let state = node.state.lock().await;
            let name = node.require_container(&state);
            docker_ok(&["pause", &name]).await;
        })
        .await
    }

    /// Resume node `i` after [`Cluster::pause`] and wait until it answers
    /// `PING` (unless it is partitioned).
    pub async fn unpause(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let state = node.state.lock().await;
            let name = node.require_container(&state);
            docker_ok(&["unpause", &name]).await;
            if !state.partitioned {
                node.wait_ready().await;
            }
        })
        .await
    }

    /// Restart node `i` immediately with NO data, in either profile, and wait
    /// until it answers `PING`.
    ///
    /// Method: the container is removed (`docker rm -f`, via testcontainers)
    /// and a new one is created with the same name, arguments and fixed host
    /// port. Redis keeps `/data` in the container's own writable layer (no
    /// volume), so the new container starts from an empty data directory: no
    /// FLUSHALL, no file surgery, and it is the same for `redis:7`. A
    /// partitioned node comes back connected (the partition is healed).
    pub async fn restart_empty(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let mut state = node.state.lock().await;
            node.remove(&mut state).await;
            node.recreate(&mut state).await;
            node.wait_ready().await;
        })
        .await
    }

    /// Take node `i` down now (its container is removed, so the port refuses
    /// connections) and bring it back EMPTY, as [`Cluster::restart_empty`]
    /// does, after `down_for`. Returns as soon as the node is down; the
    /// restart happens in the background on the harness runtime. Await
    /// [`PendingRestart::wait`] to know it is back. Other operations on this
    /// node wait until the restart has finished.
    ///
    /// This models the mitigation for the RedLock restart hazard: a node that
    /// stays down longer than the longest lease cannot grant a lock that is
    /// still held elsewhere.
    pub async fn restart_delayed(&self, i: usize, down_for: Duration) -> PendingRestart {
        let node = self.node(i).clone();
        let down = node.clone();
        // Take the node down and keep its lock until it is back.
        let mut state = on_harness(async move {
            let mut state = down.state.clone().lock_owned().await;
            down.remove(&mut state).await;
            state
        })
        .await;
        let handle = harness_runtime().spawn(async move {
            tokio::time::sleep(down_for).await;
            node.recreate(&mut state).await;
            node.wait_ready().await;
            drop(state);
        });
        PendingRestart { node: i, handle }
    }

    /// Cut node `i` off from clients while it keeps running with its data
    /// (keys keep expiring on its own clock).
    ///
    /// Method: `docker network disconnect bridge <container>`. Docker removes
    /// the node's port publishing with its network endpoint, so new
    /// connections to `127.0.0.1:PORT` are REFUSED and already-open
    /// connections are closed (clients read EOF / get a reset); there is no
    /// silent packet loss (use [`Cluster::pause`] for timeouts). Returns once
    /// the port refuses connections. [`Cluster::heal`] restores the same URL.
    pub async fn partition(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let mut state = node.state.lock().await;
            let name = node.require_container(&state);
            if !state.partitioned {
                docker_ok(&["network", "disconnect", NETWORK, &name]).await;
                state.partitioned = true;
            }
            node.wait_down().await;
        })
        .await
    }

    /// Undo [`Cluster::partition`]: `docker network connect bridge
    /// <container>`, which republishes the same fixed port, then wait until
    /// the node answers `PING` (if it is running). No-op for a node that is
    /// not partitioned.
    pub async fn heal(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move {
            let mut state = node.state.lock().await;
            let name = node.require_container(&state);
            if state.partitioned {
                docker_ok(&["network", "connect", NETWORK, &name]).await;
                state.partitioned = false;
            }
            if container_status(&name).await == "running" {
                node.wait_ready().await;
            }
        })
        .await
    }

    /// Set node `i`'s wall clock `ahead` of the true time, from now on
    /// (replacing any earlier offset; `Duration::ZERO` puts it back), and
    /// wait until its `TIME` shows it. Keys there expire by that clock: a
    /// jump of more than a key's remaining TTL makes it vanish at once.
    ///
    /// Method: every node runs redis-server with the clock shim
    /// (`docker/clockshim.c`) in `LD_PRELOAD`; this writes the shim's offset
    /// file in the container with `docker cp`, and the shim reads it within
    /// a few ms. The offset survives `kill`/`start`; a re-created node
    /// (`restart_empty`, `restart_delayed`) and [`Cluster::restore`] put the
    /// clock back to the true time.
    pub async fn jump_clock(&self, i: usize, ahead: Duration) {
        let node = self.node(i).clone();
        on_harness(async move {
            let mut state = node.state.lock().await;
            node.require_container(&state);
            node.set_clock(ahead).await;
            state.clock_ahead = ahead;
        })
        .await
    }

    /// Wait until node `i` answers `PING` on its URL; panics (with the
    /// container's last log lines) after [`READY_TIMEOUT`].
    pub async fn wait_ready(&self, i: usize) {
        let node = self.node(i).clone();
        on_harness(async move { node.wait_ready().await }).await
    }

    /// Wait until every node answers `PING`.
    pub async fn wait_all_ready(&self) {
        let nodes = self.nodes.clone();
        on_harness(async move {
            let mut set = tokio::task::JoinSet::new();
            for node in nodes {
                set.spawn(async move { node.wait_ready().await });
            }
            join_all_or_panic(set).await;
        })
        .await
    }

    /// Bring every node back to normal: waits for pending delayed restarts,
    /// re-creates a missing container, unpauses, starts stopped nodes, heals
    /// partitions, and waits until all answer `PING`. Data is not touched
    /// (restarted Fast nodes are empty; Safe nodes keep their AOF).
    pub async fn restore(&self) {
        let nodes = self.nodes.clone();
        on_harness(async move {
            let mut set = tokio::task::JoinSet::new();
            for node in nodes {
                set.spawn(async move { node.restore().await });
            }
            join_all_or_panic(set).await;
        })
        .await
    }

    /// Docker's view of every node, in node order: `running`, `paused`,
    /// `exited`, ... or `missing` (removed, e.g. during a delayed restart).
    pub async fn statuses(&self) -> Vec<String> {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        on_harness(async move {
            let mut out = Vec::with_capacity(names.len());
            for name in &names {
                out.push(container_status(name).await);
            }
            out
        })
        .await
    }

    fn node(&self, i: usize) -> &Arc<Node> {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!("node index {i} out of range: the cluster has {NODES} nodes (0..{NODES})")
        })
    }

    /// Runs on the harness runtime.
    async fn launch(profile: Profile) -> Cluster {
        let t0 = Instant::now();
        let image = prepare().await.to_owned();
        let session = session_id();
        let mut set = tokio::task::JoinSet::new();
        for index in 0..NODES {
            let image = image.clone();
            let name = format!("quorumlock-{}-{}-n{index}", profile.name(), session);
            set.spawn(async move {
                let mut last_err = String::new();
                for _attempt in 0..5 {
                    let port = pick_port();
                    let node = Node {
                        index,
                        name: name.clone(),
                        port,
                        profile,
                        image: image.clone(),
                        state: Arc::new(Mutex::new(NodeState {
                            container: None,
                            partitioned: false,
                            clock_ahead: Duration::ZERO,
                        })),
                    };
                    match node.create().await {
                        Ok(container) => {
                            node.state.lock().await.container = Some(container);
                            node.wait_ready().await;
                            return node;
                        }
                        Err(e) => {
                            // A port taken between the check and docker's bind:
                            // remove the half-created container, try another port.
                            let _ = docker(&["rm", "-f", "-v", &name]).await;
                            release_port(port);
                            last_err = e;
                        }
                    }
                }
                panic!("could not start redis node {index} ({name}) from image {image}: {last_err}")
            });
        }
        let mut nodes: Vec<Arc<Node>> = join_all_or_panic(set)
            .await
            .into_iter()
            .map(Arc::new)
            .collect();
        nodes.sort_by_key(|n| n.index);
        Cluster {
            profile,
            image,
            nodes,
            startup: t0.elapsed(),
        }
    }
}

/// URLs are `redis://127.0.0.1:PORT`, fixed for the life of the process.
impl Nodes for Cluster {
    fn len(&self) -> usize {
        NODES
    }

    fn port(&self, i: usize) -> u16 {
        self.node(i).port
    }

    fn url(&self, i: usize) -> String {
        self.node(i).url()
    }
}

impl Nodes for ClusterGuard {
    fn len(&self) -> usize {
        self.cluster.len()
    }

    fn port(&self, i: usize) -> u16 {
        self.cluster.port(i)
    }

    fn url(&self, i: usize) -> String {
        self.cluster.url(i)
    }
}

impl Node {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn require_container(&self, state: &NodeState) -> String {
        match &state.container {
            Some(_) => self.name.clone(),
            None => panic!(
                "node {} ({}) has no container (a restart is pending or a previous \
                 harness operation failed); call Cluster::restore()",
                self.index, self.name
            ),
        }
    }

    /// Create and start a container for this node via testcontainers.
    async fn create(&self) -> Result<ContainerAsync<GenericImage>, String> {
        let (repo, tag) = split_image(&self.image);
        let port = self.port;
        let labels = [
            (LABEL_ROOT.to_owned(), "1".to_owned()),
            (LABEL_SESSION.to_owned(), session_id().to_owned()),
            (LABEL_PID.to_owned(), std::process::id().to_string()),
            (LABEL_HOST.to_owned(), host_name()),
            (
                "quorumlock.harness.profile".to_owned(),
                self.profile.name().to_owned(),
            ),
            ("quorumlock.harness.node".to_owned(), self.index.to_string()),
        ];
        GenericImage::new(repo, tag)
            .with_exposed_port(REDIS_PORT.tcp())
            .with_wait_for(WaitFor::Nothing)
            .with_cmd(self.profile.redis_args())
            .with_env_var("LD_PRELOAD", SHIM_LIB)
            .with_env_var("QUORUMLOCK_CLOCK_OFFSET_FILE", SHIM_OFFSET)
            .with_container_name(self.name.clone())
            .with_labels(labels)
            .with_startup_timeout(Duration::from_secs(60))
            .with_host_config_modifier(move |hc: &mut HostConfig| {
                // Publish on loopback only, on the fixed port.
                let mut bindings = HashMap::new();
                bindings.insert(
                    format!("{REDIS_PORT}/tcp"),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".to_owned()),
                        host_port: Some(port.to_string()),
                    }]),
                );
                hc.port_bindings = Some(bindings);
                hc.publish_all_ports = Some(false);
            })
            .start()
            .await
            .map_err(|e| format!("testcontainers failed to start the container: {e}"))
    }

    /// Remove the container (data and all) and wait until the port refuses.
    async fn remove(&self, state: &mut NodeState) {
        let via_testcontainers = match state.container.take() {
            Some(container) => container.rm().await.map_err(|e| e.to_string()),
            None => Err("no testcontainers handle".to_owned()),
        };
        if let Err(e) = via_testcontainers {
            // Fall back to the CLI; "already gone" is fine.
            match docker(&["rm", "-f", "-v", &self.name]).await {
                Ok(_) => {}
                Err(e2) if e2.contains("No such container") => {}
                Err(e2) => panic!(
                    "could not remove node {} ({}): {e}; {e2}",
                    self.index, self.name
                ),
            }
        }
        state.partitioned = false;
        self.wait_down().await;
    }

    /// Create a fresh container with the same name and fixed port. Retries for
    /// a few seconds in case the port is still being released.
    async fn recreate(&self, state: &mut NodeState) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.create().await {
                Ok(container) => {
                    state.container = Some(container);
                    state.partitioned = false;
                    // A new container starts from the image's offset file: 0.
                    state.clock_ahead = Duration::ZERO;
                    return;
                }
                Err(e) => {
                    let _ = docker(&["rm", "-f", "-v", &self.name]).await;
                    if Instant::now() > deadline {
                        panic!(
                            "could not re-create node {} ({}) on its fixed port 127.0.0.1:{}: {e}",
                            self.index, self.name, self.port
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            match ping(self.port, Duration::from_millis(500)).await {
                Ok(()) => return,
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let logs = docker(&["logs", "--tail", "30", &self.name])
            .await
            .unwrap_or_else(|e| e);
        panic!(
            "node {} ({}, {}) did not answer PING within {READY_TIMEOUT:?}: {last}\n--- docker logs ---\n{logs}",
            self.index,
            self.name,
            self.url()
        );
    }

    /// Wait until the node's port no longer answers PING (refused or closed).
    async fn wait_down(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ping(self.port, Duration::from_millis(300)).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "node {} ({}) still answers PING on {} after being taken down",
            self.index,
            self.name,
            self.url()
        );
    }

    async fn restore(&self) {
        let mut state = self.state.lock().await;
        if state.container.is_none() {
            self.recreate(&mut state).await;
        }
        match container_status(&self.name).await.as_str() {
            "running" => {}
            "paused" => {
                docker_ok(&["unpause", &self.name]).await;
            }
            "missing" => {
                state.container = None;
                self.recreate(&mut state).await;
            }
            _ => {
                docker_ok(&["start", &self.name]).await;
            }
        }
        if state.partitioned {
            docker_ok(&["network", "connect", NETWORK, &self.name]).await;
            state.partitioned = false;
        }
        self.wait_ready().await;
        if state.clock_ahead != Duration::ZERO {
            self.set_clock(Duration::ZERO).await;
            state.clock_ahead = Duration::ZERO;
        }
    }

    /// Writes the offset file of the clock shim in the container (`docker
    /// cp`: a `FROM scratch` image has no shell to `docker exec`), then, if
    /// the node answers, waits until its `TIME` shows the new clock.
    async fn set_clock(&self, ahead: Duration) {
        let dir =
            std::env::temp_dir().join(format!("quorumlock-clock-{}-n{}", session_id(), self.index));
        let file = dir.join("offset");
        let ms = ahead.as_millis().to_string();
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, &ms));
        if let Err(e) = written {
            panic!("could not write the clock offset {}: {e}", file.display());
        }
        let host_file = file.to_string_lossy().into_owned();
        let target = format!("{}:{SHIM_OFFSET}", self.name);
        docker_ok(&["cp", &host_file, &target]).await;
        let _ = std::fs::remove_dir_all(&dir);
        if ping(self.port, Duration::from_millis(300)).await.is_ok() {
            self.wait_clock(ahead).await;
        }
    }

    /// Waits until the node's `TIME` is `ahead` of this host's clock (the
    /// containers share its kernel clock, so a few ms of slack suffice).
    async fn wait_clock(&self, ahead: Duration) {
        const SLACK: Duration = Duration::from_millis(25);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut last = String::new();
        while Instant::now() < deadline {
            let before = std::time::SystemTime::now() + ahead;
            match node_time(self.port).await {
                Ok(t) => {
                    let after = std::time::SystemTime::now() + ahead;
                    if t + SLACK >= before && t <= after + SLACK {
                        return;
                    }
                    last = format!("{t:?}, expected {before:?}..{after:?}");
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!(
            "node {} ({}): its clock did not move {ahead:?} ahead within 5 s: {last}",
            self.index, self.name
        );
    }
}

// ---------------------------------------------------------------------------
// Harness runtime

fn harness_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("quorumlock-harness")
            .enable_all()
            .build()
            .expect("failed to build the quorumlock test harness's tokio runtime")
    })
}

/// Run `fut` on the harness runtime and await its result from any executor.
/// A panic inside is re-raised in the caller with its original message.
async fn on_harness<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match harness_runtime().spawn(fut).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("quorumlock harness task was cancelled: {e}"),
    }
}

async fn join_all_or_panic<T: 'static>(mut set: tokio::task::JoinSet<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(v) => out.push(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("quorumlock harness task was cancelled: {e}"),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// One-time process setup: engine check, stale cleanup, reaper, image.

/// Returns the image to use. Runs once per process, on the harness runtime.
async fn prepare() -> &'static str {
    PREPARED
        .get_or_init(|| async {
            check_engine().await;
            remove_stale_containers().await;
            spawn_reaper();
            let image = std::env::var("QUORUMLOCK_REDIS_IMAGE")
                .ok()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
            ensure_image(&image).await;
            with_clock_shim(&image).await
        })
        .await
        .as_str()
}

async fn check_engine() {
    match docker(&["version", "--format", "{{.Server.Version}}"]).await {
        Ok(v) if !v.trim().is_empty() => {}
        Ok(_) | Err(_) => {
            let detail = docker(&["info"]).await.err().unwrap_or_default();
            panic!(
                "quorumlock integration tests need a running Docker engine, and `docker version` \
                 could not reach one (is dockerd running? is DOCKER_HOST set right? can this user \
                 use /var/run/docker.sock?). Tests are never skipped silently.\n{detail}"
            );
        }
    }
}

async fn ensure_image(image: &str) {
    if docker(&["image", "inspect", image]).await.is_ok() {
        return;
    }
    if image != DEFAULT_IMAGE && docker(&["pull", image]).await.is_ok() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/build-image.sh");
    if !script.is_file() {
        panic!(
            "image {image} is missing and the build script {} does not exist",
            script.display()
        );
    }
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .env("QUORUMLOCK_REDIS_IMAGE", image)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("could not run {}: {e}", script.display()));
    if !out.status.success() {
        panic!(
            "image {image} is missing and {} failed ({}):\n{}{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if docker(&["image", "inspect", image]).await.is_err() {
        panic!(
            "{} succeeded but image {image} still does not exist",
            script.display()
        );
    }
}

/// FNV-1a: a hash that stays the same across builds, for cache names.
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Compiles `docker/clockshim.c` with gcc into
/// `target/quorumlock-clockshim/<hash of the source>/`, once: later runs
/// reuse it. Returns that directory (it holds `quorumlock-clock/`, laid
/// out as in the containers) and the hash.
async fn build_clock_shim() -> (std::path::PathBuf, u64) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = manifest.join("docker/clockshim.c");
    let code = std::fs::read(&source)
        .unwrap_or_else(|e| panic!("cannot read the clock shim {}: {e}", source.display()));
    let hash = fnv64(&[&code]);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let dir = target
        .join("quorumlock-clockshim")
        .join(format!("{hash:016x}"));
    let lib = dir.join(SHIM_DIR).join("clockshim.so");
    if lib.is_file() {
        return (dir, hash);
    }
    let made = std::fs::create_dir_all(dir.join(SHIM_DIR))
        .and_then(|()| std::fs::write(dir.join(SHIM_DIR).join("offset"), "0"));
    if let Err(e) = made {
        panic!("cannot prepare {}: {e}", dir.display());
    }
    // Built under a name of its own, then renamed: concurrent test
    // binaries never see half a library.
    let tmp = dir.join(format!("clockshim-{}.so", session_id()));
    let out = tokio::process::Command::new("gcc")
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(&tmp)
        .arg(&source)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run gcc to build the clock shim (install gcc): {e}"));
    if !out.status.success() {
        panic!(
            "gcc failed on {} ({}):\n{}",
            source.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Err(e) = std::fs::rename(&tmp, &lib) {
        panic!("cannot move the clock shim to {}: {e}", lib.display());
    }
    (dir, hash)
}

/// `image` with the clock shim added under `/quorumlock-clock/` (offset
/// file at 0): a derived image, tagged by the hashes of the base image and
/// of the shim, made once with `docker create` + `docker cp` + `docker
/// commit` (no build, no registry). The containers enable the shim through
/// `LD_PRELOAD`; it needs only the libc that the image already has.
async fn with_clock_shim(image: &str) -> String {
    let (dir, shim_hash) = build_clock_shim().await;
    let base_id = docker_ok(&["image", "inspect", "--format", "{{.Id}}", image]).await;
    let tag = format!(
        "quorumlock-redis-clockshim:{:016x}",
        fnv64(&[base_id.trim().as_bytes(), &shim_hash.to_le_bytes()])
    );
    if docker(&["image", "inspect", &tag]).await.is_ok() {
        return tag;
    }
    let scratch = format!("quorumlock-clockshim-{}", session_id());
    let labels = [
        format!("{LABEL_ROOT}=1"),
        format!("{LABEL_SESSION}={}", session_id()),
        format!("{LABEL_PID}={}", std::process::id()),
        format!("{LABEL_HOST}={}", host_name()),
    ];
    let mut create = vec!["create", "--name", &scratch];
    for l in &labels {
        create.extend(["--label", l.as_str()]);
    }
    create.push(image);
    docker_ok(&create).await;
    let from = dir.join(SHIM_DIR).to_string_lossy().into_owned();
    let made = match docker(&["cp", &from, &format!("{scratch}:/")]).await {
        Ok(_) => docker(&["commit", &scratch, &tag]).await,
        Err(e) => Err(e),
    };
    let _ = docker(&["rm", "-f", &scratch]).await;
    if let Err(e) = made {
        panic!("could not add the clock shim to {image}: {e}");
    }
    tag
}

/// The wall clock of the server on 127.0.0.1:port, by its `TIME`.
async fn node_time(port: u16) -> Result<std::time::SystemTime, String> {
    let ask = async {
        let client =
            redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        Ok(std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .unwrap_or_else(|_| Err("TIME: no reply within 1 s".to_owned()))
}

/// Remove harness containers of this host whose owning process is gone.
async fn remove_stale_containers() {
    let format = format!(
        "{{{{.ID}}}}\t{{{{.Label \"{LABEL_PID}\"}}}}\t{{{{.Label \"{LABEL_HOST}\"}}}}\t{{{{.Label \"{LABEL_SESSION}\"}}}}"
    );
    let filter = format!("label={LABEL_ROOT}=1");
    let Ok(list) = docker(&["ps", "-a", "--filter", &filter, "--format", &format]).await else {
        return;
    };
    let me = std::process::id().to_string();
    let host = host_name();
    let stale: Vec<String> = list
        .lines()
        .filter_map(|line| {
            let mut f = line.split('\t');
            let (id, pid, h, session) = (f.next()?, f.next()?, f.next()?, f.next()?);
            let owner_alive = pid != me && Path::new("/proc").join(pid).exists();
            let stale = h == host && session != session_id() && !owner_alive;
            stale.then(|| id.to_owned())
        })
        .collect();
    if !stale.is_empty() {
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(stale.iter().map(String::as_str));
        let _ = docker(&args).await;
    }
}

/// Spawn the reaper: `sh` blocks reading a pipe whose write end only this
/// process holds; at exit (any kind) it reads EOF and removes this session's
/// containers.
fn spawn_reaper() {
    let script = format!(
        "trap '' INT HUP TERM PIPE; cat >/dev/null; \
         ids=$(docker ps -aq --filter label={LABEL_SESSION}={}); \
         [ -n \"$ids\" ] && docker rm -f -v $ids >/dev/null 2>&1; exit 0",
        session_id()
    );
    match std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        // Leak the child: its stdin pipe must stay open until this process exits.
        Ok(child) => std::mem::forget(child),
        Err(e) => eprintln!(
            "quorumlock harness: could not spawn the container reaper ({e}); containers \
             labelled {LABEL_SESSION}={} will be removed by the next run",
            session_id()
        ),
    }
}

// ---------------------------------------------------------------------------
// docker CLI, ports, readiness

/// Run `docker ARGS`; Ok(stdout) on success, Err(description) otherwise.
async fn docker(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "the `docker` CLI is not installed or not on PATH".to_owned()
            } else {
                format!("could not run docker {}: {e}", args.join(" "))
            }
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`docker {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

async fn docker_ok(args: &[&str]) -> String {
    docker(args).await.unwrap_or_else(|e| panic!("{e}"))
}

/// `running`, `paused`, `exited`, `created`, ... or `missing`.
async fn container_status(name: &str) -> String {
    match docker(&["inspect", "--format", "{{.State.Status}}", name]).await {
        Ok(s) => s.trim().to_owned(),
        Err(_) => "missing".to_owned(),
    }
}

/// One PING over a fresh connection to 127.0.0.1:port. Ok only on `+PONG`
/// (a loading Redis answers `-LOADING`, which is not ready).
async fn ping(port: u16, timeout: Duration) -> Result<(), String> {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(b"PING\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = [0u8; 128];
        let mut len = 0;
        while !buf[..len].ends_with(b"\r\n") {
            let n = stream
                .read(&mut buf[len..])
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("connection closed".to_owned());
            }
            len += n;
            if len == buf.len() {
                break;
            }
        }
        if buf[..len].starts_with(b"+PONG") {
            Ok(())
        } else {
            Err(format!(
                "reply {:?}",
                String::from_utf8_lossy(&buf[..len]).trim()
            ))
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no reply within {timeout:?}")))
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Random id of this process's harness session (labels, container names).
fn session_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| format!("{:x}-{:08x}", std::process::id(), random_u64() as u32))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_owned(), tag.to_owned()),
        _ => (image.to_owned(), "latest".to_owned()),
    }
}

/// A free 127.0.0.1 port below the ephemeral range, not used by another
/// node of this process (see the module docs).
fn pick_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (15000u16, ephemeral_low.saturating_sub(1));
    let mut used = USED_PORTS.lock().expect("port registry mutex poisoned");
    if hi > lo + 1000 {
        for _ in 0..500 {
            let port = lo + (random_u64() % u64::from(hi - lo)) as u16;
            if !used.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                used.insert(port);
                return port;
            }
        }
    }
    loop {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .expect("could not bind 127.0.0.1:0 to find a free port");
        let port = listener
            .local_addr()
            .expect("local_addr of a bound listener")
            .port();
        if used.insert(port) {
            return port;
        }
    }
}

fn release_port(port: u16) {
    USED_PORTS
        .lock()
        .expect("port registry mutex poisoned")
        .remove(&port);
}
