//! The core stays sans-IO: its manifest names plain libraries only (no async runtime, no
//! network, files or TLS stack, no gRPC or HTTP framework), the optional ones behind the
//! features that need them, and its sources forbid unsafe code.

use std::collections::BTreeMap;
use std::path::Path;

/// The `[dependencies]` of a manifest: each name and the rest of its line.
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

#[test]
fn the_cores_dependencies_do_no_io() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("the core's manifest");
    let deps = dependencies(&text);
    // Always there: data, errors, checksums, and `futures` for the runtime-agnostic drivers.
    let plain = ["serde", "serde_json", "thiserror", "crc32c", "base64", "futures", "async-trait"];
    // Only with a feature: schemas (`openapi`), TensorFlow's messages and SHA-256
    // (`tensorflow`).
    let optional = [("utoipa", "openapi"), ("prost", "tensorflow"), ("ring", "tensorflow")];
    for (name, line) in &deps {
        if let Some((_, feature)) = optional.iter().find(|(dep, _)| dep == name) {
            assert!(
                line.replace(' ', "").contains("optional=true"),
                "shardwise-core depends on {name} unconditionally: {line}"
            );
            let features = text.split("[features]").nth(1).unwrap_or_default();
            let declared = features
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{feature} =")))
                .unwrap_or_else(|| panic!("no feature {feature}"));
            assert!(declared.contains(&format!("\"dep:{name}\"")), "{name} not behind {feature}");
            continue;
        }
        assert!(plain.contains(&name.as_str()), "shardwise-core depends on {name}");
    }
    for io in ["tokio", "tonic", "axum", "hyper", "reqwest", "rustix", "rustls", "kube", "http"] {
        assert!(!deps.contains_key(io), "shardwise-core depends on {io}");
    }
    // Off by default: a default feature would bring the optional ones to every user.
    let features = text.split("[features]").nth(1).unwrap_or_default();
    let features = features.split("\n[").next().unwrap_or_default();
    assert!(!features.lines().any(|l| l.trim_start().starts_with("default")), "{features}");
    assert!(!text.contains("[target"), "no platform-specific dependencies either");
}

#[test]
fn the_core_forbids_unsafe_code() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("lib.rs");
    let text = std::fs::read_to_string(&lib).expect("the core's lib.rs");
    assert!(text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]"), "lib.rs: {lib:?}");
}
