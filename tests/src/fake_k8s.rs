//! A fake Kubernetes API server for black-box tests: pods only, the real `v1` wire format.
//!
//! [`FakeKube::start`] listens on `127.0.0.1:0` (plain HTTP/1.1, one thread per connection) and
//! serves:
//!
//! | request                                            | answer                                 |
//! |----------------------------------------------------|----------------------------------------|
//! | `GET /api/v1/pods`                                 | `PodList` of every namespace           |
//! | `GET /api/v1/namespaces/{ns}/pods`                 | `PodList` of one namespace             |
//! | `GET /api/v1/namespaces/{ns}/pods/{name}`          | one `Pod`, or a 404 `Status`           |
//! | any of the above with `watch=true` (or `1`)        | a chunked stream of watch events       |
//! | `GET /api/v1/watch/pods`, `.../watch/namespaces/{ns}/pods` | the same stream (legacy paths) |
//! | `GET /version`, `/api`, `/api/v1`                  | version and discovery documents        |
//! | anything else                                      | a 404 (or 405) `Status`                |
//!
//! Query parameters: `labelSelector` (every form [`LabelSelector`] parses: `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`), `fieldSelector` (`=`, `==` and `!=`
//! on `metadata.name`, `metadata.namespace`, `status.phase`, `status.podIP` and `spec.nodeName`),
//! `resourceVersion` (+ `resourceVersionMatch=Exact` for lists), `limit` and `continue`
//! (consistent pages, like the real server), `watch`, `timeoutSeconds`, `allowWatchBookmarks`
//! and `sendInitialEvents`. Values are percent-decoded, `+` is a space.
//!
//! The test drives the state ([`FakeKube::add_pod`], [`FakeKube::update_pod`],
//! [`FakeKube::delete_pod`]); each change bumps the resource version and is sent to the open
//! watches it concerns. A watch that starts from a resource version replays the newer changes
//! from a bounded history; one that starts from a version older than the history gets a `410
//! Expired` `ERROR` event and ends, like the real server. Faults are injected with
//! [`FakeKube::fail_next`], [`FakeKube::expire_history`], [`FakeKube::reset_watches`] and
//! [`FakeKube::reset_next`]; what arrived is read back with counters, and
//! [`FakeKube::wait_for_watchers`] blocks (on a condition variable, without polling) until the
//! code under test has a watch open.
//!
//! Where the fake is simpler than the real server: a list at a `resourceVersion` newer than the
//! current one answers `504` at once (the real server waits up to 3 s first); `continue` may be
//! combined with `resourceVersion` (which it then ignores); every pod has the same
//! `creationTimestamp`. A watch on a selector sees a pod that starts matching as `ADDED` and one
//! that stops matching as `DELETED`, as the real watch cache does.
//!
//! Not supported: writes (`POST`, `PUT`, `PATCH`, `DELETE` answer 405), other resources,
//! protobuf, TLS, `resourceVersionMatch` on watches, server-initiated periodic bookmarks (send one
//! with [`FakeKube::send_bookmark`]) and HTTP/2.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardwise_core::cluster::LabelSelector;

/// Events kept for watches that resume from a resource version, unless
/// [`FakeKube::set_history_limit`] says otherwise.
pub const DEFAULT_HISTORY_LIMIT: usize = 1000;

/// The `creationTimestamp` of every pod (the fake has no clock of its own).
const CREATED_AT: &str = "2024-01-01T00:00:00Z";
/// The `deletionTimestamp` that [`PodSpec::terminating`] sets.
const DELETING_AT: &str = "2024-01-01T00:10:00Z";
/// The image of every container.
const IMAGE: &str = "registry.invalid/shardwise/fake:latest";
/// Longest request line or header line accepted.
const MAX_LINE: u64 = 16 * 1024;
/// Most header lines accepted in one request.
const MAX_HEADERS: usize = 128;

// ---------------------------------------------------------------------------------------------
// Pods

/// The state of one fake pod: what the test controls and what the fake serializes as a `v1`
/// `Pod`. (Despite the name, it covers `metadata`, `spec` and `status`, not only `spec`.)
///
/// Built with [`PodSpec::new`] and the builder methods; the fields are public so that
/// [`FakeKube::update_pod`] can change any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels` (omitted from the JSON when empty, as the API does).
    pub labels: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` (RFC 3339): set once deletion was requested.
    pub deletion_timestamp: Option<String>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.containers`.
    pub containers: Vec<Container>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: Option<String>,
    /// `status.podIP` (and `status.podIPs`).
    pub pod_ip: Option<String>,
    /// `status.hostIP`.
    pub host_ip: Option<String>,
    /// The `Ready` condition in `status.conditions`: `"True"`/`"False"`, or no such condition
    /// when `None`.
    pub ready: Option<bool>,
}

/// One entry of `spec.containers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// `name`.
    pub name: String,
    /// `ports`.
    pub ports: Vec<ContainerPort>,
}

/// One entry of `spec.containers[].ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPort {
    /// `name` (omitted when `None`).
    pub name: Option<String>,
    /// `containerPort`.
    pub container_port: u16,
    /// `protocol` (`TCP` by default).
    pub protocol: String,
}

impl PodSpec {
    /// A `Running`, ready pod with one container named `main`, no ports, no labels and no IP.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> PodSpec {
        PodSpec {
            namespace: namespace.into(),
            name: name.into(),
            labels: BTreeMap::new(),
            deletion_timestamp: None,
            node_name: None,
            containers: vec![Container { name: "main".into(), ports: Vec::new() }],
            phase: Some("Running".into()),
            pod_ip: None,
            host_ip: None,
            ready: Some(true),
        }
    }

    /// Adds (or replaces) a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> PodSpec {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets `status.podIP`.
    pub fn ip(mut self, ip: impl Into<String>) -> PodSpec {
        self.pod_ip = Some(ip.into());
        self
    }

    /// Sets `status.hostIP`.
    pub fn host_ip(mut self, ip: impl Into<String>) -> PodSpec {
        self.host_ip = Some(ip.into());
        self
    }

    /// Sets `spec.nodeName`.
    pub fn node(mut self, node: impl Into<String>) -> PodSpec {
        self.node_name = Some(node.into());
        self
    }

    /// Sets `status.phase`.
    pub fn phase(mut self, phase: impl Into<String>) -> PodSpec {
        self.phase = Some(phase.into());
        self
    }

    /// Sets the `Ready` condition to `"True"` or `"False"`.
    pub fn ready(mut self, ready: bool) -> PodSpec {
        self.ready = Some(ready);
        self
    }

    /// Adds an unnamed TCP port to the last container.
    pub fn port(self, port: u16) -> PodSpec {
        self.add_port(None, port)
    }

    /// Adds a named TCP port to the last container.
    pub fn named_port(self, name: impl Into<String>, port: u16) -> PodSpec {
        self.add_port(Some(name.into()), port)
    }

    /// Adds a container (later ports go to it).
    pub fn container(mut self, name: impl Into<String>) -> PodSpec {
        self.containers.push(Container { name: name.into(), ports: Vec::new() });
        self
    }

    /// Sets `metadata.deletionTimestamp` to a fixed time: deletion was requested.
    pub fn terminating(mut self) -> PodSpec {
        self.deletion_timestamp = Some(DELETING_AT.into());
        self
    }

    fn add_port(mut self, name: Option<String>, port: u16) -> PodSpec {
        if self.containers.is_empty() {
            self.containers.push(Container { name: "main".into(), ports: Vec::new() });
        }
        let last = self.containers.len() - 1;
        self.containers[last].ports.push(ContainerPort {
            name,
            container_port: port,
            protocol: "TCP".into(),
        });
        self
    }

    /// The pod as the API serializes it, with `resourceVersion` `rv`. List items carry no
    /// `kind`/`apiVersion` (as in real lists); single objects and watch events do.
    fn to_json(&self, uid: &str, rv: u64, type_meta: bool) -> Value {
        let mut metadata = json!({
            "name": self.name,
            "namespace": self.namespace,
            "uid": uid,
            "resourceVersion": rv.to_string(),
            "creationTimestamp": CREATED_AT,
        });
        if !self.labels.is_empty() {
            metadata["labels"] = json!(self.labels);
        }
        if let Some(at) = &self.deletion_timestamp {
            metadata["deletionTimestamp"] = json!(at);
            metadata["deletionGracePeriodSeconds"] = json!(30);
        }
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| {
                let mut container = json!({"name": c.name, "image": IMAGE});
                if !c.ports.is_empty() {
                    let ports: Vec<Value> = c
                        .ports
                        .iter()
                        .map(|p| {
                            let mut port = json!({});
                            if let Some(name) = &p.name {
                                port["name"] = json!(name);
                            }
                            port["containerPort"] = json!(p.container_port);
                            port["protocol"] = json!(p.protocol);
                            port
                        })
                        .collect();
                    container["ports"] = Value::Array(ports);
                }
                container
            })
            .collect();
        let mut spec = json!({"containers": containers, "restartPolicy": "Always"});
        if let Some(node) = &self.node_name {
            spec["nodeName"] = json!(node);
        }
        let mut status = json!({});
        if let Some(phase) = &self.phase {
            status["phase"] = json!(phase);
        }
        if let Some(ready) = self.ready {
            let s = if ready { "True" } else { "False" };
            status["conditions"] = json!([
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": CREATED_AT},
                {"type": "Ready", "status": s, "lastProbeTime": null,
                 "lastTransitionTime": CREATED_AT},
            ]);
        }
        if let Some(ip) = &self.host_ip {
            status["hostIP"] = json!(ip);
        }
        if let Some(ip) = &self.pod_ip {
            status["podIP"] = json!(ip);
            status["podIPs"] = json!([{"ip": ip}]);
        }
        let mut pod = json!({});
        if type_meta {
            pod["kind"] = json!("Pod");
            pod["apiVersion"] = json!("v1");
        }
        pod["metadata"] = metadata;
        pod["spec"] = spec;
        pod["status"] = status;
        pod
    }
}

// ---------------------------------------------------------------------------------------------
// State

/// A pod as stored: the test's spec plus what the server assigns.
#[derive(Debug)]
struct PodRecord {
    spec: PodSpec,
    uid: String,
    /// `metadata.resourceVersion`: the version of its last change.
    rv: u64,
}

impl PodRecord {
    fn key(&self) -> (String, String) {
        (self.spec.namespace.clone(), self.spec.name.clone())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, kept in the history for watches.
#[derive(Debug)]
struct Event {
    rv: u64,
    kind: EventType,
    /// The state before (`None` for `Added`).
    prev: Option<Arc<PodRecord>>,
    /// The state after; for `Deleted`, the last state with the deletion's resource version.
    cur: Arc<PodRecord>,
}

/// An error answer that the test queued with [`FakeKube::fail_next`].
#[derive(Debug, Clone)]
struct Fault {
    code: u16,
    reason: Option<String>,
    message: Option<String>,
}

/// One open watch, as the server tracks it.
#[derive(Debug, Default)]
struct WatchSlot {
    /// [`FakeKube::reset_watches`]: close it without the terminating chunk.
    reset: bool,
    /// [`FakeKube::end_watches`]: end it cleanly.
    ended: bool,
    /// The client closed its side.
    hung_up: bool,
}

impl WatchSlot {
    fn live(&self) -> bool {
        !(self.reset || self.ended || self.hung_up)
    }
}

#[derive(Debug)]
struct State {
    /// The current resource version (of the last change).
    rv: u64,
    pods: BTreeMap<(String, String), Arc<PodRecord>>,
    /// Every change with a version above `floor`, oldest first.
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Resuming from a version below this is impossible (the history no longer has it).
    floor: u64,
    /// [`FakeKube::expire_history`]: new watches, exact lists and continue tokens from below
    /// this version are refused with 410, while open watches go on.
    expired_floor: u64,
    next_uid: u64,
    faults: VecDeque<Fault>,
    resets: usize,
    watches: HashMap<u64, WatchSlot>,
    next_watch_id: u64,
    /// Bumped by [`FakeKube::send_bookmark`].
    bookmarks: u64,
    require_token: bool,
    shutdown: bool,
    connections: u64,
    requests: u64,
    list_requests: u64,
    watch_requests: u64,
    get_requests: u64,
    last_authorization: Option<String>,
}

impl State {
    fn commit(&mut self, kind: EventType, prev: Option<Arc<PodRecord>>, spec: PodSpec) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        let uid = match &prev {
            Some(p) => p.uid.clone(),
            None => {
                self.next_uid += 1;
                format!("00000000-0000-4000-8000-{:012x}", self.next_uid)
            }
        };
        let cur = Arc::new(PodRecord { spec, uid, rv });
        match kind {
            EventType::Deleted => {
                self.pods.remove(&cur.key());
            }
            EventType::Added | EventType::Modified => {
                self.pods.insert(cur.key(), Arc::clone(&cur));
            }
        }
        self.history.push_back(Arc::new(Event { rv, kind, prev, cur }));
        self.trim_history();
        rv
    }

    fn trim_history(&mut self) {
        while self.history.len() > self.history_limit {
            if let Some(e) = self.history.pop_front() {
                self.floor = e.rv;
            }
        }
    }

    /// The oldest version a new watch or an exact list may start from.
    fn oldest_servable(&self) -> u64 {
        self.floor.max(self.expired_floor)
    }

    /// The pods as they were at version `at` (`oldest_servable() <= at <= rv`), by undoing the
    /// newer changes.
    fn snapshot(&self, at: u64) -> BTreeMap<(String, String), Arc<PodRecord>> {
        let mut pods = self.pods.clone();
        for e in self.history.iter().rev().take_while(|e| e.rv > at) {
            match (&e.kind, &e.prev) {
                (EventType::Added, _) => {
                    pods.remove(&e.cur.key());
                }
                (_, Some(prev)) => {
                    pods.insert(prev.key(), Arc::clone(prev));
                }
                (_, None) => {}
            }
        }
        pods
    }

    fn live_watchers(&self) -> usize {
        self.watches.values().filter(|w| w.live()).count()
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `state`.
    changed: Condvar,
    /// Every open connection, to close them on drop.
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// Connection and watch-hangup threads, joined on drop.
    threads: Mutex<Vec<JoinHandle<()>>>,
    token: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs `f` on the state and wakes every waiter.
    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.state());
        self.changed.notify_all();
        r
    }

    /// Waits until `done` holds or `timeout` passes; whether it holds.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.state();
        loop {
            if done(&st) {
                return true;
            }
            st = match deadline {
                None => self.changed.wait(st).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    self.changed
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        let handle = std::thread::spawn(f);
        let mut threads = lock(&self.threads);
        threads.retain(|h| !h.is_finished());
        threads.push(handle);
    }
}

// ---------------------------------------------------------------------------------------------
// The server

/// A fake Kubernetes API server on `127.0.0.1`, stopped on drop (the listener closes, open
/// connections and watches are cut, every thread is joined).
pub struct FakeKube {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for FakeKube {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.state();
        f.debug_struct("FakeKube")
            .field("addr", &self.addr)
            .field("resource_version", &st.rv)
            .field("pods", &st.pods.len())
            .field("watchers", &st.live_watchers())
            .finish_non_exhaustive()
    }
}

impl FakeKube {
    /// Starts a server with no pods at resource version 1, on an ephemeral port.
    pub fn start() -> FakeKube {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        let addr = listener.local_addr().expect("fake API server address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: 1,
                pods: BTreeMap::new(),
                history: VecDeque::new(),
                history_limit: DEFAULT_HISTORY_LIMIT,
                floor: 1,
                expired_floor: 0,
                next_uid: 0,
                faults: VecDeque::new(),
                resets: 0,
                watches: HashMap::new(),
                next_watch_id: 0,
                bookmarks: 0,
                require_token: false,
                shutdown: false,
                connections: 0,
                requests: 0,
                list_requests: 0,
                watch_requests: 0,
                get_requests: 0,
                last_authorization: None,
            }),
            changed: Condvar::new(),
            conns: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            token: format!("fake-kube-token-{}", addr.port()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept_loop(&shared, &listener))
        };
        FakeKube { addr, shared, acceptor: Some(acceptor) }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A `--cluster-config` for a dispatcher watching this API: pods `w-0`, `w-1`, ... in
    /// namespace `ml` labelled `job-name=tf`, at `ips` port 8470, resolved as TensorFlow job
    /// `worker`. Writes the kubeconfig and the config into `dir`; returns
    /// `(KUBECONFIG path, --cluster-config path, the config's JSON)`.
    pub fn tf_worker_cluster(&self, dir: &Path, ips: &[&str]) -> (PathBuf, PathBuf, Value) {
        for (i, ip) in ips.iter().enumerate() {
            self.add_pod(
                PodSpec::new("ml", format!("w-{i}")).label("job-name", "tf").ip(*ip).port(8470),
            );
        }
        let request = json!({
            "resolver": {"kubernetes": {
                "job_to_label_mapping": {"worker": ["job-name=tf"]}, "namespace": "ml"}},
            "task_type": "worker", "task_id": 0
        });
        let cluster = dir.join("cluster.json");
        std::fs::write(&cluster, request.to_string())
            .unwrap_or_else(|e| panic!("write {}: {e}", cluster.display()));
        (self.kubeconfig(dir), cluster, request)
    }

    /// The bearer token written into [`FakeKube::kubeconfig`].
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Writes `DIR/kubeconfig-PORT.yaml` (one cluster at [`FakeKube::url`], one user with
    /// [`FakeKube::token`], one context with namespace `default`, selected as
    /// `current-context`) and returns its path: point `KUBECONFIG` at it.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join(format!("kubeconfig-{}.yaml", self.addr.port()));
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: fake-kube\n  cluster:\n    server: \"{url}\"\n\
             users:\n\
             - name: fake-kube\n  user:\n    token: \"{token}\"\n\
             contexts:\n\
             - name: fake-kube\n  context:\n    cluster: fake-kube\n    user: fake-kube\n    \
             namespace: default\n\
             current-context: fake-kube\n\
             preferences: {{}}\n",
            url = self.url(),
            token = self.token(),
        );
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("write kubeconfig {}: {e}", path.display()));
        path
    }

    // --- state --------------------------------------------------------------------------------

    /// Creates a pod (an `ADDED` event) and returns the new resource version. Panics if the
    /// pod exists.
    pub fn add_pod(&self, pod: PodSpec) -> u64 {
        let key = (pod.namespace.clone(), pod.name.clone());
        let rv = self.shared.update(|st| {
            (!st.pods.contains_key(&key)).then(|| st.commit(EventType::Added, None, pod))
        });
        rv.unwrap_or_else(|| panic!("fake kube: pod {}/{} already exists", key.0, key.1))
    }

    /// Changes a pod with `change` (a `MODIFIED` event, even when nothing changed) and returns
    /// the new resource version. Panics if the pod does not exist or `change` renames it.
    pub fn update_pod(
        &self,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut PodSpec),
    ) -> u64 {
        let key = (namespace.to_owned(), name.to_owned());
        let mut spec = match self.shared.state().pods.get(&key) {
            Some(p) => p.spec.clone(),
            None => panic!("fake kube: no pod {namespace}/{name} to update"),
        };
        change(&mut spec);
        assert!(
            spec.namespace == namespace && spec.name == name,
            "fake kube: update_pod cannot rename {namespace}/{name}"
        );
        let rv = self.shared.update(|st| {
            let prev = st.pods.get(&key).cloned()?;
            Some(st.commit(EventType::Modified, Some(prev), spec))
        });
        rv.unwrap_or_else(|| panic!("fake kube: pod {namespace}/{name} vanished during update"))
    }

    /// Sets `metadata.deletionTimestamp` (a `MODIFIED` event: graceful deletion has begun) and
    /// returns the new resource version.
    pub fn terminate_pod(&self, namespace: &str, name: &str) -> u64 {
        self.update_pod(namespace, name, |p| p.deletion_timestamp = Some(DELETING_AT.into()))
    }

    /// Removes a pod (a `DELETED` event carrying its last state) and returns the new resource
    /// version. Panics if the pod does not exist.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> u64 {
        let key = (namespace.to_owned(), name.to_owned());
        let rv = self.shared.update(|st| {
            let prev = st.pods.get(&key).cloned()?;
            let spec = prev.spec.clone();
            Some(st.commit(EventType::Deleted, Some(prev), spec))
        });
        rv.unwrap_or_else(|| panic!("fake kube: no pod {namespace}/{name} to delete"))
    }

    /// A pod's current state.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodSpec> {
        let key = (namespace.to_owned(), name.to_owned());
        self.shared.state().pods.get(&key).map(|p| p.spec.clone())
    }

    /// A pod exactly as `GET /api/v1/namespaces/{ns}/pods/{name}` returns it.
    pub fn pod_json(&self, namespace: &str, name: &str) -> Option<Value> {
        let key = (namespace.to_owned(), name.to_owned());
        self.shared.state().pods.get(&key).map(|p| p.spec.to_json(&p.uid, p.rv, true))
    }

    /// The current resource version (that of the last change; 1 before any).
    pub fn resource_version(&self) -> u64 {
        self.shared.state().rv
    }

    // --- faults -------------------------------------------------------------------------------

    /// The next `n` requests (of any kind) answer HTTP `code` with a `Status` body whose reason
    /// and message are the real server's for that code (`403` → `Forbidden` with an RBAC
    /// message, `410` → `Expired`, `500` → `InternalError`, `429` → `TooManyRequests` with
    /// `Retry-After`, ...). Queued after any faults already pending.
    pub fn fail_next(&self, n: usize, code: u16) {
        self.queue_faults(n, Fault { code, reason: None, message: None });
    }

    /// Like [`FakeKube::fail_next`] with the given `reason` (e.g. `Gone`) and `message`.
    pub fn fail_next_with(&self, n: usize, code: u16, reason: &str, message: &str) {
        let fault =
            Fault { code, reason: Some(reason.to_owned()), message: Some(message.to_owned()) };
        self.queue_faults(n, fault);
    }

    /// Drops every queued fault (of [`FakeKube::fail_next`] and friends).
    pub fn clear_faults(&self) {
        self.shared.update(|st| st.faults.clear());
    }

    fn queue_faults(&self, n: usize, fault: Fault) {
        self.shared.update(|st| st.faults.extend(std::iter::repeat_n(fault, n)));
    }

    /// Forgets the history: from now on a watch (or an exact list, or a continue token) from a
    /// version older than the current one gets `410 Expired`. Watches already open go on.
    pub fn expire_history(&self) {
        self.shared.update(|st| st.expired_floor = st.rv);
    }

    /// Keeps at most `n` events of history (1000 by default); older ones are dropped now and as
    /// new ones come. An open watch that falls behind the history gets a `410` `ERROR` event.
    pub fn set_history_limit(&self, n: usize) {
        self.shared.update(|st| {
            st.history_limit = n;
            st.trim_history();
        });
    }

    /// Closes every open watch connection abruptly (TCP close without the terminating chunk).
    /// They stop counting as watchers at once.
    pub fn reset_watches(&self) {
        self.shared.update(|st| st.watches.values_mut().for_each(|w| w.reset = true));
    }

    /// Ends every open watch cleanly (the terminating chunk, as when `timeoutSeconds` runs
    /// out). They stop counting as watchers at once.
    pub fn end_watches(&self) {
        self.shared.update(|st| st.watches.values_mut().for_each(|w| w.ended = true));
    }

    /// Accepts the next `n` connections and closes them at once, before reading anything.
    pub fn reset_next(&self, n: usize) {
        self.shared.update(|st| st.resets += n);
    }

    /// Sends a `BOOKMARK` event at the current resource version to every open watch that asked
    /// for bookmarks (`allowWatchBookmarks=true`).
    pub fn send_bookmark(&self) {
        self.shared.update(|st| st.bookmarks += 1);
    }

    /// When on, requests without `Authorization: Bearer <token()>` answer `401 Unauthorized`.
    pub fn require_token(&self, on: bool) {
        self.shared.update(|st| st.require_token = on);
    }

    // --- observations -------------------------------------------------------------------------

    /// Connections accepted (including those [`FakeKube::reset_next`] closed).
    pub fn connections(&self) -> u64 {
        self.shared.state().connections
    }

    /// Requests read, of any kind.
    pub fn requests(&self) -> u64 {
        self.shared.state().requests
    }

    /// `GET` pod-collection requests without `watch` (failed ones included).
    pub fn list_requests(&self) -> u64 {
        self.shared.state().list_requests
    }

    /// Watch requests (failed ones included).
    pub fn watch_requests(&self) -> u64 {
        self.shared.state().watch_requests
    }

    /// `GET` requests for one pod by name.
    pub fn get_requests(&self) -> u64 {
        self.shared.state().get_requests
    }

    /// The `Authorization` header of the last request that had one.
    pub fn last_authorization(&self) -> Option<String> {
        self.shared.state().last_authorization.clone()
    }

    /// Watches open now (streaming, not reset, ended or hung up by the client).
    pub fn watchers(&self) -> usize {
        self.shared.state().live_watchers()
    }

    /// Blocks until at least `n` watches are open, or `timeout` passes; whether they are. A
    /// counted watch has already taken its starting point, so every later change reaches it.
    pub fn wait_for_watchers(&self, n: usize, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |st| st.live_watchers() >= n)
    }

    /// Blocks until at most `n` watches are open (e.g. until the client hung up), or `timeout`
    /// passes; whether they are.
    pub fn wait_for_watchers_at_most(&self, n: usize, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |st| st.live_watchers() <= n)
    }

    /// Blocks until at least `n` watch requests arrived, or `timeout` passes; whether they did.
    pub fn wait_for_watch_requests(&self, n: u64, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |st| st.watch_requests >= n)
    }

    /// Blocks until at least `n` list requests arrived, or `timeout` passes; whether they did.
    pub fn wait_for_list_requests(&self, n: u64, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |st| st.list_requests >= n)
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.shared.update(|st| st.shutdown = true);
        // Wake the acceptor; it sees `shutdown` and returns, closing the listener.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (_, conn) in lock(&self.shared.conns).drain() {
            let _ = conn.shutdown(Shutdown::Both);
        }
        loop {
            let threads = std::mem::take(&mut *lock(&self.shared.threads));
            if threads.is_empty() {
                break;
            }
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut next_conn = 0u64;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let reset = shared.update(|st| {
            if st.shutdown {
                return None;
            }
            st.connections += 1;
            Some(if st.resets > 0 {
                st.resets -= 1;
                true
            } else {
                false
            })
        });
        match reset {
            None => return,
            Some(true) => {
                let _ = stream.shutdown(Shutdown::Both);
                continue;
            }
            Some(false) => {}
        }
        next_conn += 1;
        let id = next_conn;
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.conns).insert(id, clone);
        }
        let conn_shared = Arc::clone(shared);
        shared.spawn(move || {
            let _ = serve_connection(&conn_shared, stream);
            lock(&conn_shared.conns).remove(&id);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    http10: bool,
    /// Lower-cased names.
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn keep_alive(&self) -> bool {
        match self.header("connection").map(str::to_ascii_lowercase) {
            Some(c) if c.split(',').any(|t| t.trim() == "close") => false,
            Some(c) if c.split(',').any(|t| t.trim() == "keep-alive") => true,
            _ => !self.http10,
        }
    }
}

#[derive(Debug)]
enum ReadError {
    /// The client closed the connection (or it failed) between requests.
    Closed,
    /// Not HTTP/1.x: answer 400 and close.
    Malformed(String),
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        ReadError::Closed
    }
}

/// One line without its CRLF; `None` at end of stream.
fn read_line(r: &mut impl BufRead) -> Result<Option<String>, ReadError> {
    let mut buf = Vec::new();
    let n = r.take(MAX_LINE).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if n as u64 >= MAX_LINE {
            ReadError::Malformed("line too long".into())
        } else {
            ReadError::Closed
        });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map(Some).map_err(|_| ReadError::Malformed("non-UTF-8 line".into()))
}

fn read_request(r: &mut impl BufRead) -> Result<Request, ReadError> {
    let line = loop {
        match read_line(r)? {
            None => return Err(ReadError::Closed),
            Some(l) if l.is_empty() => continue,
            Some(l) => break l,
        }
    };
    let parts: Vec<&str> = line.split_whitespace().collect();
    let [method, target, version] = parts[..] else {
        return Err(ReadError::Malformed(format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(ReadError::Malformed(format!("unsupported version {version:?}")));
    }
    let mut headers = Vec::new();
    loop {
        let Some(h) = read_line(r)? else { return Err(ReadError::Closed) };
        if h.is_empty() {
            break;
        }
        if headers.len() >= MAX_HEADERS {
            return Err(ReadError::Malformed("too many headers".into()));
        }
        let Some((name, value)) = h.split_once(':') else {
            return Err(ReadError::Malformed(format!("bad header line {h:?}")));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    // Absolute form (`http://host/path`) becomes origin form.
    let target = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect();
    let req = Request {
        method: method.to_owned(),
        path: percent_decode(path, false),
        query,
        http10: version == "HTTP/1.0",
        headers,
    };
    skip_body(r, &req)?;
    Ok(req)
}

/// Reads and discards a request body (`Content-Length` or chunked).
fn skip_body(r: &mut impl BufRead, req: &Request) -> Result<(), ReadError> {
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let Some(size) = read_line(r)? else { return Err(ReadError::Closed) };
            let size = size.split(';').next().unwrap_or("").trim();
            let n = u64::from_str_radix(size, 16)
                .map_err(|_| ReadError::Malformed(format!("bad chunk size {size:?}")))?;
            if n == 0 {
                // Trailers, up to the empty line.
                while read_line(r)?.is_some_and(|l| !l.is_empty()) {}
                return Ok(());
            }
            io::copy(&mut r.take(n), &mut io::sink())?;
            read_line(r)?;
        }
    }
    if let Some(len) = req.header("content-length") {
        let n: u64 =
            len.parse().map_err(|_| ReadError::Malformed(format!("bad Content-Length {len:?}")))?;
        if io::copy(&mut r.take(n), &mut io::sink())? < n {
            return Err(ReadError::Closed);
        }
    }
    Ok(())
}

fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

/// A complete (non-streaming) answer.
#[derive(Debug)]
struct Reply {
    code: u16,
    body: Value,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply { code: 200, body, headers: Vec::new() }
    }

    fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Reply {
        let mut headers = Vec::new();
        if code == 429 || code == 504 {
            headers.push(("Retry-After", "1".to_owned()));
        }
        Reply { code, body: status_json(code, reason, message, details), headers }
    }

    fn bad_request(message: &str) -> Reply {
        Reply::status(400, "BadRequest", message, None)
    }
}

/// A Kubernetes `Status` (failure) object.
fn status_json(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut v = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    v["code"] = json!(code);
    v
}

fn write_reply(w: &mut impl Write, reply: &Reply, keep_alive: bool) -> io::Result<()> {
    let body = serde_json::to_vec(&reply.body).unwrap_or_default();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n\
         Content-Length: {}\r\n",
        reply.code,
        reason_phrase(reply.code),
        body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    w.write_all(&out)?;
    w.flush()
}

/// Appends one chunk holding `event` and a newline.
fn push_event_chunk(out: &mut Vec<u8>, event: &Value) {
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    out.extend_from_slice(format!("{:x}\r\n", line.len()).as_bytes());
    out.extend_from_slice(&line);
    out.extend_from_slice(b"\r\n");
}

fn serve_connection(shared: &Arc<Shared>, stream: TcpStream) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let req = match read_request(&mut reader) {
            Ok(req) => req,
            Err(ReadError::Closed) => return Ok(()),
            Err(ReadError::Malformed(why)) => {
                let reply = Reply::bad_request(&format!("malformed HTTP request: {why}"));
                return write_reply(&mut writer, &reply, false);
            }
        };
        if shared.state().shutdown {
            return Ok(());
        }
        let keep_alive = req.keep_alive();
        match handle(shared, &req) {
            Outcome::Reply(reply) => {
                write_reply(&mut writer, &reply, keep_alive)?;
                if !keep_alive {
                    let _ = writer.shutdown(Shutdown::Both);
                    return Ok(());
                }
            }
            Outcome::Watch(plan) => {
                run_watch(shared, writer, reader, plan);
                return Ok(());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Routing and requests

#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// Pods of one namespace or of all; `name` for one pod; `watch_path` for `/watch/` paths.
    Pods {
        namespace: Option<String>,
        name: Option<String>,
        watch_path: bool,
    },
    Version,
    ApiVersions,
    ApiResources,
    NotFound,
}

fn route(path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let pods = |namespace: Option<&str>, name: Option<&str>, watch_path: bool| Route::Pods {
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        watch_path,
    };
    match segs[..] {
        ["version"] => Route::Version,
        ["api"] => Route::ApiVersions,
        ["api", "v1"] => Route::ApiResources,
        ["api", "v1", "pods"] => pods(None, None, false),
        ["api", "v1", "namespaces", ns, "pods"] => pods(Some(ns), None, false),
        ["api", "v1", "namespaces", ns, "pods", name] => pods(Some(ns), Some(name), false),
        ["api", "v1", "watch", "pods"] => pods(None, None, true),
        ["api", "v1", "watch", "namespaces", ns, "pods"] => pods(Some(ns), None, true),
        ["api", "v1", "watch", "namespaces", ns, "pods", name] => pods(Some(ns), Some(name), true),
        _ => Route::NotFound,
    }
}

#[derive(Debug)]
enum Outcome {
    Reply(Reply),
    Watch(WatchPlan),
}

/// What the request is, for the counters and for default fault messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    List,
    Watch,
    Get,
    Other,
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Some(false),
        _ => None,
    }
}

fn handle(shared: &Arc<Shared>, req: &Request) -> Outcome {
    let route = route(&req.path);
    let watch_param = req.param("watch").map(parse_bool);
    let verb = match (&route, req.method.as_str()) {
        (Route::Pods { watch_path: true, .. }, "GET") => Verb::Watch,
        (Route::Pods { .. }, "GET") if watch_param == Some(Some(true)) => Verb::Watch,
        (Route::Pods { name: Some(_), .. }, "GET") => Verb::Get,
        (Route::Pods { name: None, .. }, "GET") => Verb::List,
        _ => Verb::Other,
    };
    let authorization = req.header("authorization").map(str::to_owned);
    let (fault, require_token) = shared.update(|st| {
        st.requests += 1;
        match verb {
            Verb::List => st.list_requests += 1,
            Verb::Watch => st.watch_requests += 1,
            Verb::Get => st.get_requests += 1,
            Verb::Other => {}
        }
        if authorization.is_some() {
            st.last_authorization.clone_from(&authorization);
        }
        (st.faults.pop_front(), st.require_token)
    });
    if let Some(fault) = fault {
        return Outcome::Reply(fault_reply(&fault, verb, &route));
    }
    if require_token && authorization.as_deref() != Some(&format!("Bearer {}", shared.token)) {
        return Outcome::Reply(Reply::status(401, "Unauthorized", "Unauthorized", None));
    }
    if route != Route::NotFound && req.method != "GET" {
        return Outcome::Reply(Reply::status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        ));
    }
    let Route::Pods { namespace, name, .. } = route else {
        return Outcome::Reply(match route {
            Route::Version => Reply::ok(json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-shardwise-fake",
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": CREATED_AT, "goVersion": "go1.24.0", "compiler": "gc",
                "platform": "linux/amd64",
            })),
            Route::ApiVersions => Reply::ok(json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": "127.0.0.1:443"}],
            })),
            Route::ApiResources => Reply::ok(json!({
                "kind": "APIResourceList", "groupVersion": "v1",
                "resources": [{"name": "pods", "singularName": "pod", "namespaced": true,
                               "kind": "Pod", "verbs": ["get", "list", "watch"],
                               "shortNames": ["po"]}],
            })),
            _ => Reply::status(
                404,
                "NotFound",
                "the server could not find the requested resource",
                Some(json!({})),
            ),
        });
    };
    if watch_param == Some(None) {
        let v = req.param("watch").unwrap_or("");
        return Outcome::Reply(Reply::bad_request(&format!(
            "invalid value for watch: {v:?} is not a boolean"
        )));
    }
    let mut filter = match Filter::parse(namespace, req) {
        Ok(f) => f,
        Err(message) => return Outcome::Reply(Reply::bad_request(&message)),
    };
    match (verb, name) {
        (Verb::Watch, name) => {
            if let Some(name) = name {
                filter.fields.push(FieldReq { field: Field::Name, equal: true, value: name });
            }
            start_watch(shared, req, filter)
        }
        (_, Some(name)) => Outcome::Reply(get_pod(shared, filter.namespace.as_deref(), &name)),
        (_, None) => Outcome::Reply(list_pods(shared, req, &filter)),
    }
}

fn fault_reply(fault: &Fault, verb: Verb, route: &Route) -> Reply {
    let verb_name = match verb {
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Get => "get",
        Verb::Other => "access",
    };
    let scope = match route {
        Route::Pods { namespace: Some(ns), .. } => format!("in the namespace \"{ns}\""),
        _ => "at the cluster scope".to_owned(),
    };
    let (reason, message) = match fault.code {
        400 => ("BadRequest", "the server rejected our request for an unknown reason".into()),
        401 => ("Unauthorized", "Unauthorized".into()),
        403 => (
            "Forbidden",
            format!(
                "pods is forbidden: User \"system:serviceaccount:default:shardwise\" cannot \
                 {verb_name} resource \"pods\" in API group \"\" {scope}"
            ),
        ),
        404 => ("NotFound", "the server could not find the requested resource".into()),
        409 => ("Conflict", "the object has been modified; please apply your changes".into()),
        410 => ("Expired", "too old resource version: 1 (2)".into()),
        429 => ("TooManyRequests", "Too many requests, please try again later.".into()),
        500 => ("InternalError", "Internal error occurred: injected failure".into()),
        503 => {
            ("ServiceUnavailable", "the server is currently unable to handle the request".into())
        }
        504 => {
            ("Timeout", "the server was unable to return a response in the time allotted".into())
        }
        _ => ("", "injected failure".into()),
    };
    let reason = fault.reason.as_deref().unwrap_or(reason);
    let message = fault.message.clone().unwrap_or(message);
    let details = match fault.code {
        403 => Some(json!({"kind": "pods"})),
        429 | 504 => Some(json!({"retryAfterSeconds": 1})),
        _ => None,
    };
    Reply::status(fault.code, reason, &message, details)
}

// ---------------------------------------------------------------------------------------------
// Selectors

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
    Phase,
    PodIp,
    NodeName,
}

#[derive(Debug, Clone)]
struct FieldReq {
    field: Field,
    equal: bool,
    value: String,
}

/// Which pods a request is about.
#[derive(Debug, Clone)]
struct Filter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: Vec<FieldReq>,
}

impl Filter {
    fn parse(namespace: Option<String>, req: &Request) -> Result<Filter, String> {
        let labels = LabelSelector::parse(req.param("labelSelector").unwrap_or(""))
            .map_err(|e| format!("unable to parse requirement: {}", e.detail()))?;
        let mut fields = Vec::new();
        for term in req.param("fieldSelector").unwrap_or("").split(',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (key, equal, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{term}'; can't understand '{term}'"));
            };
            let field = match key.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                "status.phase" => Field::Phase,
                "status.podIP" => Field::PodIp,
                "spec.nodeName" => Field::NodeName,
                other => return Err(format!("field label not supported: {other}")),
            };
            fields.push(FieldReq { field, equal, value: value.trim().to_owned() });
        }
        Ok(Filter { namespace, labels, fields })
    }

    fn matches(&self, pod: &PodSpec) -> bool {
        if self.namespace.as_ref().is_some_and(|ns| *ns != pod.namespace) {
            return false;
        }
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        self.labels.matches(&pod.labels)
            && self.fields.iter().all(|f| {
                let actual = match f.field {
                    Field::Name => pod.name.clone(),
                    Field::Namespace => pod.namespace.clone(),
                    Field::Phase => opt(&pod.phase),
                    Field::PodIp => opt(&pod.pod_ip),
                    Field::NodeName => opt(&pod.node_name),
                };
                (actual == f.value) == f.equal
            })
    }

    fn is_everything(&self) -> bool {
        self.labels.is_everything() && self.fields.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// Get and list

fn get_pod(shared: &Shared, namespace: Option<&str>, name: &str) -> Reply {
    let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
    match shared.state().pods.get(&key) {
        Some(p) => Reply::ok(p.spec.to_json(&p.uid, p.rv, true)),
        None => Reply::status(
            404,
            "NotFound",
            &format!("pods \"{name}\" not found"),
            Some(json!({"name": name, "kind": "pods"})),
        ),
    }
}

fn hex_encode(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// `continue` tokens: the list's version and the last key returned, hex-encoded.
fn continue_token(rv: u64, key: &(String, String)) -> String {
    hex_encode(&format!("{rv}/{}/{}", key.0, key.1))
}

fn parse_continue(token: &str) -> Option<(u64, (String, String))> {
    let text = hex_decode(token)?;
    let mut parts = text.splitn(3, '/');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_owned(), parts.next()?.to_owned())))
}

fn list_pods(shared: &Shared, req: &Request, filter: &Filter) -> Reply {
    let limit = match req.param("limit").filter(|l| !l.is_empty()) {
        None => 0,
        Some(l) => match l.parse::<i64>() {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            Err(_) => return Reply::bad_request(&format!("invalid limit {l:?}")),
        },
    };
    let cont = match req.param("continue").filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => match parse_continue(c) {
            Some(c) => Some(c),
            None => {
                return Reply::bad_request(&format!(
                    "continue key is not valid: illegal base64 data at input byte 0: {c:?}"
                ));
            }
        },
    };
    let requested = match req.param("resourceVersion").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return Reply::status(
                    422,
                    "Invalid",
                    &format!("resourceVersion: Invalid value: {v:?}: must be an integer"),
                    None,
                );
            }
        },
    };
    let exact = req.param("resourceVersionMatch") == Some("Exact");
    let st = shared.state();
    let (at, after) = match (&cont, requested) {
        (Some((rv, key)), _) => {
            if *rv < st.oldest_servable() {
                return Reply::status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter, or use \
                     the continue token in this response to retrieve the remainder of the \
                     results. Continuing with the provided token results in an inconsistent \
                     list - objects that were created, modified, or deleted between the time \
                     the first chunk was returned and now may show up in the list.",
                    None,
                );
            }
            (*rv, Some(key.clone()))
        }
        (None, Some(n)) if n > st.rv => {
            return Reply::status(
                504,
                "Timeout",
                &format!("Too large resource version: {n}, current: {}", st.rv),
                Some(json!({"causes": [{"reason": "ResourceVersionTooLarge",
                                         "message": "Too large resource version"}],
                            "retryAfterSeconds": 1})),
            );
        }
        (None, Some(n)) if exact && n > 0 => {
            if n < st.oldest_servable() {
                return Reply::status(
                    410,
                    "Expired",
                    &format!("too old resource version: {n} ({})", st.oldest_servable()),
                    None,
                );
            }
            (n, None)
        }
        _ => (st.rv, None),
    };
    let pods = if at == st.rv { st.pods.clone() } else { st.snapshot(at) };
    drop(st);
    let mut matching = pods
        .iter()
        .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
        .filter(|(_, p)| filter.matches(&p.spec))
        .peekable();
    let mut items = Vec::new();
    let mut last = None;
    while let Some((key, pod)) = matching.next_if(|_| limit == 0 || items.len() < limit) {
        items.push(pod.spec.to_json(&pod.uid, pod.rv, false));
        last = Some(key);
    }
    let remaining = matching.count();
    let mut metadata = json!({"resourceVersion": at.to_string()});
    if remaining > 0
        && let Some(key) = last
    {
        metadata["continue"] = json!(continue_token(at, key));
        if filter.is_everything() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    Reply::ok(json!({"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}))
}

// ---------------------------------------------------------------------------------------------
// Watch

/// A registered watch, ready to stream.
#[derive(Debug)]
struct WatchPlan {
    id: u64,
    filter: Filter,
    /// Changes above this version are still to be sent.
    cursor: u64,
    /// Events to send first (synthetic `ADDED`s, a bookmark, or the `410` error).
    initial: Vec<Value>,
    /// The stream ends after `initial` (the `410` case; not registered).
    finished: bool,
    deadline: Option<Instant>,
    bookmarks: bool,
    bookmarks_seen: u64,
}

fn bookmark_event(rv: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": metadata}})
}

fn expired_event(requested: u64, oldest: u64) -> Value {
    json!({"type": "ERROR", "object": status_json(
        410, "Expired", &format!("too old resource version: {requested} ({oldest})"), None)})
}

fn start_watch(shared: &Shared, req: &Request, filter: Filter) -> Outcome {
    let deadline = match req.param("timeoutSeconds").filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => match t.parse::<u64>() {
            Ok(0) => None,
            Ok(secs) => Instant::now().checked_add(Duration::from_secs(secs)),
            Err(_) => {
                return Outcome::Reply(Reply::bad_request(&format!(
                    "invalid value for timeoutSeconds: {t:?}"
                )));
            }
        },
    };
    let bookmarks = req.param("allowWatchBookmarks").and_then(parse_bool).unwrap_or(false);
    let initial_events = req.param("sendInitialEvents").and_then(parse_bool).unwrap_or(false);
    let requested = match req.param("resourceVersion").filter(|v| !v.is_empty() && *v != "0") {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return Outcome::Reply(Reply::status(
                    422,
                    "Invalid",
                    &format!("resourceVersion: Invalid value: {v:?}: must be an integer"),
                    None,
                ));
            }
        },
    };
    let plan = shared.update(|st| {
        let mut plan = WatchPlan {
            id: 0,
            filter,
            cursor: st.rv,
            initial: Vec::new(),
            finished: false,
            deadline,
            bookmarks,
            bookmarks_seen: st.bookmarks,
        };
        match requested {
            Some(n) if !initial_events => {
                if n < st.oldest_servable() {
                    plan.initial.push(expired_event(n, st.oldest_servable()));
                    plan.finished = true;
                    return plan;
                }
                plan.cursor = n;
            }
            // No version, "0", or sendInitialEvents: the current state as ADDED, then changes.
            _ => {
                for p in st.pods.values().filter(|p| plan.filter.matches(&p.spec)) {
                    let pod = p.spec.to_json(&p.uid, p.rv, true);
                    plan.initial.push(json!({"type": "ADDED", "object": pod}));
                }
                if initial_events && bookmarks {
                    plan.initial.push(bookmark_event(st.rv, true));
                }
            }
        }
        st.next_watch_id += 1;
        plan.id = st.next_watch_id;
        st.watches.insert(plan.id, WatchSlot::default());
        plan
    });
    Outcome::Watch(plan)
}

/// The watch event `e` makes for a watch with `filter`, if any: a pod that starts matching is
/// `ADDED`, one that stops matching is `DELETED` (as the real watch cache does).
fn event_for(filter: &Filter, e: &Event) -> Option<Value> {
    let cur_matches = filter.matches(&e.cur.spec);
    let prev_matches = e.prev.as_ref().is_some_and(|p| filter.matches(&p.spec));
    let (kind, record) = match e.kind {
        EventType::Added => (cur_matches.then_some("ADDED")?, &e.cur),
        EventType::Deleted => (cur_matches.then_some("DELETED")?, &e.cur),
        EventType::Modified => match (prev_matches, cur_matches) {
            (true, true) => ("MODIFIED", &e.cur),
            (false, true) => ("ADDED", &e.cur),
            (true, false) => ("DELETED", e.prev.as_ref()?),
            (false, false) => return None,
        },
    };
    Some(json!({"type": kind, "object": record.spec.to_json(&record.uid, e.rv, true)}))
}

enum Step {
    Events(Vec<Arc<Event>>),
    Bookmark(u64),
    Expired(u64, u64),
    End,
    Abort,
}

/// How a watch stream finished.
enum Finish {
    /// With the terminating chunk.
    Clean,
    /// Cut: no terminating chunk.
    Abrupt,
}

fn run_watch(
    shared: &Arc<Shared>,
    mut out: TcpStream,
    reader: BufReader<TcpStream>,
    plan: WatchPlan,
) {
    let id = plan.id;
    if !plan.finished {
        // Notice a client that goes away while the watch is idle.
        let detector_shared = Arc::clone(shared);
        shared.spawn(move || {
            let mut reader = reader;
            let mut buf = [0u8; 512];
            while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
            detector_shared.update(|st| {
                if let Some(w) = st.watches.get_mut(&id) {
                    w.hung_up = true;
                }
            });
        });
    }
    let finish = stream_watch(shared, &mut out, plan);
    shared.update(|st| st.watches.remove(&id));
    if let Finish::Clean = finish {
        let _ = out.write_all(b"0\r\n\r\n").and_then(|()| out.flush());
    }
    let _ = out.shutdown(Shutdown::Both);
}

fn stream_watch(shared: &Shared, out: &mut TcpStream, plan: WatchPlan) -> Finish {
    let mut buf = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                    Cache-Control: no-cache, private\r\nTransfer-Encoding: chunked\r\n\
                    Connection: close\r\n\r\n"
        .to_vec();
    for event in &plan.initial {
        push_event_chunk(&mut buf, event);
    }
    if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
        return Finish::Abrupt;
    }
    if plan.finished {
        return Finish::Clean;
    }
    let mut cursor = plan.cursor;
    let mut bookmarks_seen = plan.bookmarks_seen;
    loop {
        let step = {
            let mut st = shared.state();
            loop {
                let Some(slot) = st.watches.get(&plan.id) else { break Step::Abort };
                if st.shutdown || slot.reset || slot.hung_up {
                    break Step::Abort;
                }
                if cursor < st.floor {
                    break Step::Expired(cursor, st.floor);
                }
                if st.rv > cursor {
                    let start = st.history.partition_point(|e| e.rv <= cursor);
                    let events = st.history.range(start..).cloned().collect();
                    cursor = st.rv;
                    break Step::Events(events);
                }
                if st.bookmarks > bookmarks_seen {
                    bookmarks_seen = st.bookmarks;
                    if plan.bookmarks {
                        break Step::Bookmark(cursor);
                    }
                }
                if slot.ended {
                    break Step::End;
                }
                st = match plan.deadline {
                    None => shared.changed.wait(st).unwrap_or_else(PoisonError::into_inner),
                    Some(deadline) => {
                        let now = Instant::now();
                        if now >= deadline {
                            break Step::End;
                        }
                        shared
                            .changed
                            .wait_timeout(st, deadline - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                };
            }
        };
        let mut buf = Vec::new();
        match step {
            Step::Events(events) => {
                for e in &events {
                    if let Some(event) = event_for(&plan.filter, e) {
                        push_event_chunk(&mut buf, &event);
                    }
                }
            }
            Step::Bookmark(rv) => push_event_chunk(&mut buf, &bookmark_event(rv, false)),
            Step::Expired(requested, oldest) => {
                push_event_chunk(&mut buf, &expired_event(requested, oldest));
                let _ = out.write_all(&buf);
                return Finish::Clean;
            }
            Step::End => return Finish::Clean,
            Step::Abort => return Finish::Abrupt,
        }
        if !buf.is_empty() && out.write_all(&buf).and_then(|()| out.flush()).is_err() {
            return Finish::Abrupt;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("app+in+%28a%2Cb%29", true), "app in (a,b)");
        assert_eq!(percent_decode("a%3Db", true), "a=b");
        assert_eq!(percent_decode("100%", true), "100%");
        assert_eq!(percent_decode("%zz+", false), "%zz+");
        assert_eq!(percent_decode("%41", true), "A");
    }

    #[test]
    fn continue_tokens_round_trip() {
        let key = ("ml".to_owned(), "w-0".to_owned());
        assert_eq!(parse_continue(&continue_token(7, &key)), Some((7, key)));
        assert_eq!(parse_continue("zz"), None);
    }
}
