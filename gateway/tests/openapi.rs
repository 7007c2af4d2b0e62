//! The checked-in OpenAPI document equals the one the code generates, and describes every
//! route the router serves.

use shardwise_gateway::openapi::document_json;

const CHECKED_IN: &str = include_str!("../../openapi/openapi.json");

/// The keys of a path item that are operations (others: `servers`, `parameters`, ...).
const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch", "trace"];

#[test]
fn checked_in_document_is_current() {
    let generated = document_json();
    assert!(
        generated == CHECKED_IN,
        "openapi/openapi.json is stale: regenerate it with\n  cargo run --bin shardwise -- openapi > openapi/openapi.json"
    );
}

#[test]
fn every_response_is_described_and_errors_are_problems() {
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 17);
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.contains_key("200"), "{method} {path}");
            for (status, r) in responses {
                assert!(
                    r["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{method} {path} {status}"
                );
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        r["content"]["application/problem+json"]["schema"]["$ref"],
                        "#/components/schemas/Problem",
                        "{method} {path} {status}"
                    );
                }
            }
            assert!(op["operationId"].is_string(), "{method} {path}");
        }
    }
}

#[test]
fn a_split_is_documented_as_source_positions() {
    // A chunk's start and stop are positions in the source, not element values: range(-2^63, ..)
    // split by 1 hands out {"start": 0, "stop": 1}. The schema must say so.
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let split = doc["components"]["schemas"]["Split"]["description"].as_str().unwrap();
    assert!(split.contains("element positions in the source"), "{split}");
    assert!(split.contains("not element values"), "{split}");
    let reply = &doc["components"]["schemas"]["SplitsReply"]["properties"]["splits"];
    assert!(reply.to_string().contains("positions"), "{reply}");
}

/// Every inline schema with properties, alternatives or an enum, wherever it is (inside a
/// component, a parameter, a request or a response): SDK generators name those after where
/// they sit (`ProcessingModeType1`, `ResolveResponse200`, `ProblemMissingType0`).
fn inline_schemas(v: &serde_json::Value, path: &str, found: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            let at_component =
                path.matches('/').count() == 3 && path.starts_with("/components/schemas/");
            let structured = map.contains_key("properties")
                || map.contains_key("oneOf")
                || map.contains_key("anyOf")
                || map.contains_key("enum")
                || map.get("additionalProperties").is_some_and(|a| a.is_object());
            let only_null_alternative =
                map.get("oneOf").and_then(|o| o.as_array()).is_some_and(|items| {
                    items.len() == 2
                        && items.iter().all(|i| i.get("$ref").is_some() || i["type"] == "null")
                });
            if structured && !at_component && !only_null_alternative && !path.contains("/examples")
            {
                found.push(path.to_owned());
            }
            for (k, child) in map {
                inline_schemas(child, &format!("{path}/{k}"), found);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                inline_schemas(child, &format!("{path}/{i}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_structured_schema_is_a_named_component() {
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let mut found = Vec::new();
    inline_schemas(&doc, "", &mut found);
    assert!(found.is_empty(), "inline schemas (name them): {found:#?}");
    // Neither are request or response bodies free-form inline objects.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let op = op.as_object().unwrap();
            let bodies = op
                .get("requestBody")
                .into_iter()
                .chain(op["responses"].as_object().unwrap().values());
            for body in bodies {
                if let Some(schema) = body["content"]["application/json"].get("schema") {
                    assert!(schema.get("$ref").is_some(), "{method} {path}: {schema}");
                }
            }
        }
    }
}

#[test]
fn datasets_are_one_of_named_sources_and_transforms() {
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let schemas = &doc["components"]["schemas"];
    let def = &schemas["DatasetDef"];
    assert_eq!(def["properties"]["source"]["$ref"], "#/components/schemas/DatasetSource");
    assert_eq!(
        def["properties"]["transforms"]["items"]["$ref"],
        "#/components/schemas/DatasetTransform"
    );
    assert_eq!(def["additionalProperties"], false);
    let refs = |name: &str| -> Vec<String> {
        schemas[name]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["$ref"].as_str().unwrap().trim_start_matches("#/components/schemas/").to_owned()
            })
            .collect()
    };
    assert_eq!(refs("DatasetSource"), ["RangeSource", "ListSource", "FilesSource", "SplitsSource"]);
    assert_eq!(
        refs("DatasetTransform"),
        [
            "RepeatTransform",
            "TakeTransform",
            "SkipTransform",
            "ShuffleTransform",
            "BatchTransform",
            "ShardHintTransform"
        ]
    );
    for (kind, key) in [
        ("RangeSource", "range"),
        ("ListSource", "list"),
        ("FilesSource", "files"),
        ("SplitsSource", "splits"),
        ("RepeatTransform", "repeat"),
        ("TakeTransform", "take"),
        ("SkipTransform", "skip"),
        ("ShuffleTransform", "shuffle"),
        ("BatchTransform", "batch"),
        ("ShardHintTransform", "shard_hint"),
    ] {
        let s = &schemas[kind];
        assert_eq!(s["required"], serde_json::json!([key]), "{kind}");
        assert_eq!(s["properties"].as_object().unwrap().len(), 1, "{kind}");
        assert_eq!(s["additionalProperties"], false, "{kind}");
    }
}

#[test]
fn every_operation_names_its_roles_under_the_bearer_scheme() {
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let scheme = &doc["components"]["securitySchemes"]["bearerAuth"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    let mut open = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let op = op.as_object().unwrap();
            let security = op["security"].as_array().unwrap();
            if security.is_empty() {
                open.push(path.as_str());
                assert!(op.get("x-shardwise-roles").is_none(), "{method} {path}");
                continue;
            }
            let roles = &security[0]["bearerAuth"];
            assert_eq!(roles, &op["x-shardwise-roles"], "{method} {path}");
            assert!(
                roles.as_array().unwrap().contains(&serde_json::json!("admin")),
                "{method} {path}"
            );
        }
    }
    assert_eq!(open, ["/healthz", "/readyz"]);
    let ops = &doc["paths"];
    assert_eq!(
        ops["/v1/workers/heartbeat"]["post"]["security"],
        serde_json::json!([{"bearerAuth": ["worker", "admin"]}])
    );
    assert_eq!(
        ops["/v1/cluster"]["get"]["security"],
        serde_json::json!([{"bearerAuth": ["worker", "client", "admin"]}])
    );
    assert_eq!(
        ops["/metrics"]["get"]["x-shardwise-roles"],
        serde_json::json!(["monitor", "admin"])
    );
    let forbidden =
        ops["/v1/datasets"]["post"]["responses"]["403"]["description"].as_str().unwrap();
    assert!(forbidden.contains("client role (or admin)"), "{forbidden}");
}

#[test]
fn the_element_route_is_served_by_workers() {
    let doc: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let worker_routes = ["/v1/tasks/{task_id}/elements", "/v1/worker/status"];
    for path in worker_routes {
        let item = &doc["paths"][path];
        let server = &item["servers"][0];
        assert_eq!(server["url"], "http://{worker_address}", "{path}");
        assert!(server["description"].as_str().unwrap().contains("shardwise worker"));
        assert!(server["variables"]["worker_address"]["default"].is_string());
    }
    // No other path has a server of its own: they are the dispatcher's.
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !worker_routes.contains(&path.as_str()) {
            assert!(item.get("servers").is_none(), "{path}");
        }
    }
}
