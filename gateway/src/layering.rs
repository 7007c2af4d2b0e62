//! The gateway's modules by role use each other in one direction only (see the crate docs):
//! checked from the sources, so a new `crate::` path that closes a cycle fails here. What is a
//! crate of its own (the journal, `shardwise-journal`; the client, `shardwise-client`; the HTTP
//! kit, `shardwise-http`; the worker, `shardwise-worker`) Cargo keeps apart without this test;
//! the tests below keep their manifests off the frameworks they must not need. Also checked
//! from the sources: no hand-written file of the core or of any crate under `gateway/` grows
//! past [`MAX_FILE_LINES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level module a source file belongs to (`http/front.rs` -> `http`).
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
    first.unwrap_or_default().trim_end_matches(".rs").to_owned()
}

/// The crates this one re-exports at its root (`pub use shardwise_http as http;`): a
/// `crate::http::` path names that crate, which cannot use this one (Cargo has no cycles).
const REEXPORTED_CRATES: &[&str] = &["client", "http", "worker"];

/// The top-level modules a file names through `crate::`, its unit tests included: a test that
/// needs two roles at once belongs with the crate's integration tests (`gateway/tests`). The
/// re-exported crates are left out.
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String =
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && !REEXPORTED_CRATES.contains(&name.as_str()) {
            out.insert(name);
        }
    }
    out
}

fn walk(dir: &Path, root: &Path, graph: &mut BTreeMap<String, BTreeSet<String>>) {
    for entry in std::fs::read_dir(dir).expect("the sources") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            walk(&path, root, graph);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            let module = module_of(rel);
            if module == "lib" || module == "main" || module == "layering" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            let used: Vec<String> = uses(&text).into_iter().filter(|m| *m != module).collect();
            graph.entry(module).or_default().extend(used);
        }
    }
}

#[test]
fn modules_have_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    walk(&root, &root, &mut graph);
    // The documented direction, exactly: a new edge is a decision to write down here.
    let allowed: &[(&str, &[&str])] = &[
        ("tf", &[]),
        ("etcd", &[]),
        ("kubernetes", &[]),
        ("dispatcher", &["kubernetes", "tf", "etcd"]),
        ("openapi", &["dispatcher"]),
    ];
    for (module, used) in &graph {
        let Some((_, ok)) = allowed.iter().find(|(m, _)| m == module) else {
            panic!("module {module} is not in the layering table");
        };
        for u in used {
            assert!(ok.contains(&u.as_str()), "{module} uses {u}, against the layering");
        }
    }
    // And the table itself has no cycle (each module only uses modules listed before it).
    for (i, (_, used)) in allowed.iter().enumerate() {
        for u in *used {
            let at = allowed.iter().position(|(m, _)| m == u).expect("listed");
            assert!(at < i, "{u} must come before its users");
        }
    }
}

/// The `[dependencies]` of a crate's manifest: each name and the rest of its line.
fn dependencies(text: &str) -> BTreeMap<String, String> {
    let mut deps = BTreeMap::new();
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]" && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.']).next().unwrap_or_default().trim();
            deps.insert(name.to_owned(), line.to_owned());
        }
    }
    deps
}

/// The journal crate stays off the IO frameworks: its manifest names the core and plain
/// libraries only, so no tokio, HTTP or gateway code can reach it.
#[test]
fn the_journal_crate_depends_on_the_core_only() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("journal").join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("the journal's manifest");
    let deps = dependencies(&text);
    let allowed = ["shardwise-core", "thiserror", "serde_json"];
    assert!(deps.contains_key("shardwise-core"), "{deps:?}");
    for d in deps.keys() {
        assert!(allowed.contains(&d.as_str()), "shardwise-journal depends on {d}");
    }
    assert!(!text.contains("[target"), "no platform-specific dependencies either");
}

/// The client crate is what a training program depends on: the core, one async runtime, one
/// HTTP client and one TLS stack, and none of the servers' frameworks. axum (a problem as an
/// answer) and utoipa (its schema) only as optional dependencies behind features of their own,
/// off by default; tonic, kube, clap and the gateway never.
#[test]
fn the_client_crate_leaves_the_servers_out() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("client").join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("the client's manifest");
    let deps = dependencies(&text);
    let never = ["axum", "utoipa", "tonic", "kube", "k8s-openapi", "clap", "shardwise-gateway"];
    let optional = [("axum", "axum"), ("utoipa", "openapi")];
    let allowed = [
        "shardwise-core",
        "serde",
        "serde_json",
        "thiserror",
        "futures",
        "tokio",
        "tracing",
        "reqwest",
        "rustls",
        "rustls-native-certs",
        // Record batches of columnar datasets, decoded from Arrow IPC streams.
        "arrow-array",
        "arrow-schema",
        "arrow-ipc",
    ];
    assert!(deps.contains_key("shardwise-core") && deps.contains_key("reqwest"), "{deps:?}");
    for (name, line) in &deps {
        let behind = optional.iter().find(|(dep, _)| dep == name).map(|(_, feature)| *feature);
        if let Some(feature) = behind {
            assert!(
                line.replace(' ', "").contains("optional=true"),
                "shardwise-client depends on {name} unconditionally: {line}"
            );
            let declared = format!("{feature} = [\"dep:{name}\"]");
            assert!(text.contains(&declared), "{name} must be behind `{declared}`");
            continue;
        }
        let framework = never.iter().any(|n| n == name || name.starts_with(&format!("{n}-")));
        assert!(!framework, "shardwise-client must not depend on {name}");
        assert!(allowed.contains(&name.as_str()), "shardwise-client depends on {name}");
    }
    // Off by default: no default feature turns the optional ones on.
    let features = text.split("[features]").nth(1).unwrap_or_default();
    let features = features.split("\n[").next().unwrap_or_default();
    assert!(
        !features.lines().any(|l| l.trim_start().starts_with("default")),
        "shardwise-client has no default features:{features}"
    );
    assert!(!text.contains("[target"), "no platform-specific dependencies either");
}

/// The normal dependencies of the crate at `gateway/<dir>` whose names contain one of `never`
/// (`tonic` also finds `tonic-prost`, `etcd` any etcd client).
fn forbidden_dependencies(dir: &str, never: &[&str]) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("the crate's manifest");
    assert!(!text.contains("[target"), "{dir}: no platform-specific dependencies");
    let deps = dependencies(&text);
    assert!(deps.contains_key("shardwise-core"), "{dir}: {deps:?}");
    deps.into_keys().filter(|name| never.iter().any(|n| name.contains(n))).collect()
}

/// The worker runs tasks and serves elements over the HTTP kit: no gRPC (tonic, prost), no
/// Kubernetes client, no etcd, no journal, and nothing of the gateway (the dispatcher).
#[test]
fn the_worker_crate_leaves_grpc_kubernetes_etcd_and_the_journal_out() {
    // prost is allowed: it decodes the `tf.train.Example` records of TFRecord files (no gRPC).
    let never = ["tonic", "kube", "k8s-openapi", "etcd", "shardwise-journal", "shardwise-gateway"];
    let found = forbidden_dependencies("worker", &never);
    assert!(found.is_empty(), "shardwise-worker must not depend on {found:?}");
}

/// The HTTP kit is what every server is built on: no gRPC stack (the dispatcher hands it its
/// gRPC service), no Kubernetes client, no command line parser, and no server of its own.
#[test]
fn the_http_crate_leaves_grpc_kubernetes_and_clap_out() {
    let never = [
        "tonic",
        "prost",
        "kube",
        "k8s-openapi",
        "clap",
        "etcd",
        "shardwise-journal",
        "shardwise-worker",
        "shardwise-gateway",
    ];
    let found = forbidden_dependencies("http", &never);
    assert!(found.is_empty(), "shardwise-http must not depend on {found:?}");
}

/// The most lines a hand-written source file may have: a longer one is split into a directory
/// module by concern (its tests by the feature they test).
const MAX_FILE_LINES: usize = 1_000;

/// Every `.rs` file under `dir`, leaving out generated code (`proto/` directories) and build
/// outputs.
fn hand_written(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            let name = path.file_name().unwrap_or_default();
            if name != "proto" && name != "target" {
                hand_written(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_of_the_core_or_the_gateway_is_over_the_line_limit() {
    let gateway = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = gateway.parent().expect("the workspace holds the gateway");
    let mut files = Vec::new();
    hand_written(&workspace.join("core").join("src"), &mut files);
    hand_written(gateway, &mut files);
    // The walk saw the sources (a wrong root would find nothing and pass).
    let known = [
        "core/src/lib.rs",
        "gateway/src/lib.rs",
        "gateway/journal/src/lib.rs",
        "gateway/client/src/lib.rs",
        "gateway/http/src/lib.rs",
        "gateway/worker/src/lib.rs",
    ];
    for known in known {
        assert!(files.contains(&workspace.join(known)), "{known} not found");
    }
    let mut long = Vec::new();
    for file in &files {
        let lines = std::fs::read_to_string(file).expect("a source file").lines().count();
        if lines > MAX_FILE_LINES {
            let rel = file.strip_prefix(workspace).unwrap_or(file);
            long.push(format!("{} ({lines} lines)", rel.display()));
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines, split into a directory module by concern: {}",
        long.join(", ")
    );
}
