//! The generated code of `shardwise_gateway::tf::proto` (checked in under `src/tf/proto/`) is
//! what `proto/` generates today: this test compiles the `.proto` files with protox (a
//! pure-Rust proto compiler, no system `protoc`) and tonic-prost-build, and compares.
//!
//! After changing a `.proto` file, regenerate with
//! `SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test tf_proto_codegen`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// The files tonic-prost-build writes for `proto/`, by name.
fn generate() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut files = Vec::new();
    proto_files(&root, &mut files);
    assert!(!files.is_empty(), "no .proto files under {}", root.display());
    let fds = protox::compile(&files, [&root]).unwrap_or_else(|e| panic!("protox: {e:?}"));

    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tf-proto-codegen");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("codegen out dir");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `connect` constructors: callers bring their own channel.
        .build_transport(false)
        // A dataset's graph is forwarded to every worker of its tasks: shared, not copied.
        .bytes(".tensorflow.data.DatasetDef.graph")
        .out_dir(&out)
        .compile_fds(fds)
        .expect("tonic-prost-build");

    let mut generated = BTreeMap::new();
    for entry in std::fs::read_dir(&out).expect("read codegen out dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        generated.insert(name, std::fs::read_to_string(&path).expect("generated file"));
    }
    generated
}

#[test]
fn checked_in_protocol_code_matches_the_proto_files() {
    let generated = generate();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tf/proto");
    if std::env::var_os("SHARDWISE_REGENERATE_PROTO").is_some() {
        std::fs::create_dir_all(&dir).expect("src/tf/proto");
        for (name, text) in &generated {
            std::fs::write(dir.join(name), text).expect("write generated file");
        }
    }
    let mut checked_in = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("read src/tf/proto") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        checked_in.insert(name, std::fs::read_to_string(&path).expect("checked-in file"));
    }
    assert_eq!(
        checked_in.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "src/tf/proto/ has other files than proto/ generates; regenerate with \
         SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test tf_proto_codegen"
    );
    for (name, text) in &generated {
        assert!(
            checked_in[name] == *text,
            "src/tf/proto/{name} differs from what proto/ generates; regenerate with \
             SHARDWISE_REGENERATE_PROTO=1 cargo test -p shardwise-gateway --test tf_proto_codegen"
        );
    }
}
