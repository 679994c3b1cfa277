use serde_json::json;

use super::{AgentTools, TOOL_NAMES};

#[test]
fn tool_names_match_the_router() {
    let router = AgentTools::build_router();
    let mut names: Vec<String> = router
        .list_all()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, TOOL_NAMES);
}

#[test]
fn schemas_have_no_nullable_types_and_advertise_defaults() {
    let router = AgentTools::build_router();
    for t in router.list_all() {
        let schema = serde_json::Value::Object((*t.input_schema).clone());
        let text = schema.to_string();
        assert!(!text.contains("\"null\""), "{}: {text}", t.name);
        if t.name == "getWorkspaceFiles" {
            assert_eq!(schema["properties"]["path"]["default"], ".");
            assert_eq!(schema["properties"]["pattern"]["default"], "*");
            assert_eq!(schema["properties"]["max_bytes"]["default"], 1_000_000);
            assert!(schema.get("required").is_none_or(|r| r == &json!([])));
        }
        if t.name == "broadcastLog" {
            assert_eq!(schema["required"], json!(["message"]));
        }
    }
}
