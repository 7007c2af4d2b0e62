//! The generated protocol code checked in under `src/` is what `proto/` generates today, for
//! both trees: TensorFlow's tf.data service (`proto/tensorflow/` -> `src/tf/proto/`, clients
//! and servers) and etcd's v3 API (`proto/etcd/` -> `src/etcd/proto/`, clients only). This test
//! compiles the `.proto` files with protox (a pure-Rust proto compiler, no system `protoc`) and
//! tonic-prost-build, and compares.
//!
//! After changing a `.proto` file, regenerate both trees with
//! `SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test proto_codegen`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const REGENERATE: &str = "regenerate with SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test proto_codegen";

/// One generated tree: its `.proto` files, where its code is checked in, how it is generated.
struct Tree {
    /// Under `proto/` (imports are relative to `proto/`).
    protos: &'static str,
    /// Under the crate root.
    checked_in: &'static str,
    /// Servers too (the dispatcher serves TensorFlow's protocol; etcd is only called).
    servers: bool,
    /// Fully qualified fields generated as `bytes::Bytes` instead of `Vec<u8>`.
    bytes: &'static [&'static str],
}

const TREES: &[Tree] = &[
    Tree {
        protos: "tensorflow",
        checked_in: "src/tf/proto",
        servers: true,
        // A dataset's graph is forwarded to every worker of its tasks: shared, not copied.
        bytes: &[".tensorflow.data.DatasetDef.graph"],
    },
    Tree { protos: "etcd", checked_in: "src/etcd/proto", servers: false, bytes: &[] },
];

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut files = Vec::new();
    proto_files(&root.join(tree.protos), &mut files);
    assert!(!files.is_empty(), "no .proto files under proto/{}", tree.protos);
    let fds = protox::compile(&files, [&root]).unwrap_or_else(|e| panic!("protox: {e:?}"));

    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("proto-codegen").join(tree.protos);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("codegen out dir");
    let mut config = tonic_prost_build::configure()
        .build_client(true)
        .build_server(tree.servers)
        // No `connect` constructors: callers bring their own channel.
        .build_transport(false);
    for path in tree.bytes {
        config = config.bytes(path);
    }
    config.out_dir(&out).compile_fds(fds).expect("tonic-prost-build");
    read_files(&out)
}

#[test]
fn checked_in_protocol_code_matches_the_proto_files() {
    for tree in TREES {
        let generated = generate(tree);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(tree.checked_in);
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
            "{} has other files than proto/{} generates; {REGENERATE}",
            tree.checked_in,
            tree.protos
        );
        for (name, text) in &generated {
            assert!(
                checked_in[name] == *text,
                "{}/{name} differs from what proto/{} generates; {REGENERATE}",
                tree.checked_in,
                tree.protos
            );
        }
    }
}
