//! The checked-in OpenAPI document equals the one the code generates, and describes every
//! route the router serves.

use shardwise_gateway::openapi::document_json;

const CHECKED_IN: &str = include_str!("../../openapi/openapi.json");

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
