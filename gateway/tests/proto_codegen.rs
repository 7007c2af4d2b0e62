//! The generated protocol code checked in is what the `.proto` files generate today, for
//! every tree: TensorFlow's tf.data service messages (`core/proto/tensorflow/` ->
//! `core/src/tensorflow/proto/`, messages only: the core has no transport), its services
//! (the same files -> `gateway/src/tf/proto/`, clients and servers, over the core's messages)
//! and etcd's v3 API (`gateway/proto/etcd/` -> `gateway/src/etcd/proto/`, messages and
//! clients). This test compiles the `.proto` files with protox (a pure-Rust proto compiler, no
//! system `protoc`) and tonic-prost-build, and compares.
//!
//! After changing a `.proto` file, regenerate every tree with
//! `SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test proto_codegen`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const REGENERATE: &str = "regenerate with SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test proto_codegen";

/// One generated tree: its `.proto` files, where its code is checked in, how it is generated.
struct Tree {
    /// The directory imports are relative to, under the workspace.
    root: &'static str,
    /// The `.proto` files' directory, under `root`.
    protos: &'static str,
    /// Where the generated code is checked in, under the workspace.
    checked_in: &'static str,
    /// gRPC clients (the dispatcher calls TensorFlow's workers and etcd; the core's messages
    /// have none).
    clients: bool,
    /// gRPC servers (the dispatcher serves TensorFlow's `DispatcherService`; etcd is only
    /// called).
    servers: bool,
    /// Protobuf packages whose messages are generated elsewhere, and their Rust paths.
    extern_paths: &'static [(&'static str, &'static str)],
    /// Fully qualified fields generated as `bytes::Bytes` instead of `Vec<u8>`.
    bytes: &'static [&'static str],
}

const TREES: &[Tree] = &[
    Tree {
        root: "core/proto",
        protos: "tensorflow",
        checked_in: "core/src/tensorflow/proto",
        clients: false,
        servers: false,
        extern_paths: &[],
        // A dataset's graph is forwarded to every worker of its tasks: shared, not copied.
        bytes: &[".tensorflow.data.DatasetDef.graph"],
    },
    Tree {
        root: "core/proto",
        protos: "tensorflow",
        checked_in: "gateway/src/tf/proto",
        clients: true,
        servers: true,
        extern_paths: &[(".tensorflow", "::shardwise_core::tensorflow::proto::tensorflow")],
        bytes: &[],
    },
    Tree {
        root: "gateway/proto",
        protos: "etcd",
        checked_in: "gateway/src/etcd/proto",
        clients: true,
        servers: false,
        extern_paths: &[],
        bytes: &[],
    },
];

/// The workspace's root.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace holds the gateway")
}

/// Every `.proto` file under `dir`, sorted (so the generated output does not depend on the
/// order the file system lists them in).
fn proto_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            proto_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

/// The files of `dir`, by name.
fn read_files(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        files.insert(name, std::fs::read_to_string(&path).expect("a generated file"));
    }
    files
}

/// The files tonic-prost-build writes for `tree`, by name.
fn generate(tree: &Tree) -> BTreeMap<String, String> {
    let root = workspace().join(tree.root);
    let mut files = Vec::new();
    proto_files(&root.join(tree.protos), &mut files);
    assert!(!files.is_empty(), "no .proto files under {}/{}", tree.root, tree.protos);
    let fds = protox::compile(&files, [&root]).unwrap_or_else(|e| panic!("protox: {e:?}"));

    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("proto-codegen").join(tree.checked_in);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("codegen out dir");
    let mut config = tonic_prost_build::configure()
        .build_client(tree.clients)
        .build_server(tree.servers)
        // No `connect` constructors: callers bring their own channel.
        .build_transport(false);
    for path in tree.bytes {
        config = config.bytes(path);
    }
    for (proto, rust) in tree.extern_paths {
        config = config.extern_path(proto, rust);
    }
    config.out_dir(&out).compile_fds(fds).expect("tonic-prost-build");
    read_files(&out)
}

#[test]
fn checked_in_protocol_code_matches_the_proto_files() {
    for tree in TREES {
        let generated = generate(tree);
        let dir = workspace().join(tree.checked_in);
        if std::env::var_os("SHARDWISE_REGENERATE_PROTO").is_some() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("the checked-in directory");
            for (name, text) in &generated {
                std::fs::write(dir.join(name), text).expect("write generated file");
            }
        }
        let checked_in = read_files(&dir);
        assert_eq!(
            checked_in.keys().collect::<Vec<_>>(),
            generated.keys().collect::<Vec<_>>(),
            "{} has other files than {}/{} generates; {REGENERATE}",
            tree.checked_in,
            tree.root,
            tree.protos
        );
        for (name, text) in &generated {
            assert!(
                checked_in[name] == *text,
                "{}/{name} differs from what {}/{} generates; {REGENERATE}",
                tree.checked_in,
                tree.root,
                tree.protos
            );
        }
    }
}
