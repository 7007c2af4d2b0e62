//! The OpenAPI document the servers serve at `/openapi.json` (and the dispatcher's Swagger UI
//! at `/docs`): the checked-in `openapi/openapi.json`, built in.
//!
//! The document is generated from the routes (`shardwise openapi`, the gateway's `openapi`
//! module, which sits above both servers); a test fails when the checked-in copy differs
//! from what the routes generate. Serving the copy keeps the servers below the module that
//! assembles the document from both of them: no import cycle.

/// The document's text.
pub const DOCUMENT: &str = include_str!("../../../openapi/openapi.json");

/// The document, parsed (for the Swagger UI).
pub fn document() -> serde_json::Value {
    serde_json::from_str(DOCUMENT).unwrap_or_default()
}
