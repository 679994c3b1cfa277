//! Unit tests of `mcp_tools`: schemas, names, config errors naming the file and JSON path.
use super::*;
use serde_json::json;

#[test]
fn input_schemas_compile_and_check_arguments() {
    let s = InputSchema::compile(&json!({
        "type": "object",
        "properties": {"filter": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
        "required": ["filter"],
        "additionalProperties": false,
    }))
    .unwrap();
    assert_eq!(s.check(&json!({"filter": "x", "n": 2})), Ok(()));
    let errs = s
        .check(&json!({"filter": 3, "n": 0, "extra": true}))
        .unwrap_err();
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"/filter"), "{errs:?}");
    assert!(paths.contains(&"/n"), "{errs:?}");
    assert!(errs.iter().any(|e| e.message.contains("extra")), "{errs:?}");
    assert!(
        InputSchema::compile(&json!({"type": "string"}))
            .unwrap_err()
            .contains("\"type\": \"object\"")
    );
    assert!(
        InputSchema::compile(&json!({"type": "object", "properties": {"a": {"type": 3}}}))
            .unwrap_err()
            .starts_with("is not a valid JSON Schema")
    );
    // An error quotes the value it refuses, cut short.
    let long = s
        .check(&json!({"filter": "x", "n": "y".repeat(100_000)}))
        .unwrap_err();
    assert!(
        long[0].message.chars().count() <= 301,
        "{}",
        long[0].message.len()
    );
    assert!(long[0].message.ends_with('…'));
    // A remote reference is never fetched.
    let remote = InputSchema::compile(&json!({
        "type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/x.json"}}
    }));
    assert!(remote.unwrap_err().contains("not fetched"));
}

#[test]
fn names_are_checked() {
    assert!(check_name("run_tests").is_ok());
    assert!(check_name("fs-2").is_ok());
    assert!(check_name("").is_err());
    assert!(check_name("a b").unwrap_err().contains("' '"));
    assert!(check_name("a__b").unwrap_err().contains("__"));
    assert!(
        check_name("getCredential")
            .unwrap_err()
            .contains("aicli's own")
    );
    assert!(check_name(&"x".repeat(65)).is_err());
}

fn load_err(user: Value) -> String {
    match crate::AiCliConfig::from_user_json(&user.to_string(), "/home/u/aicli.json") {
        Ok(_) => panic!("accepted: {user}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn config_errors_name_the_file_and_the_json_path() {
    let sh = json!(["/bin/sh", "-c", "cat"]);
    let e = load_err(json!({"mcp_tools": {"getCredential": {"command": sh}}}));
    assert!(e.contains("/home/u/aicli.json"), "{e}");
    assert!(e.contains("mcp_tools.getCredential"), "{e}");
    assert!(e.contains("aicli's own MCP tools"), "{e}");
    let e = load_err(json!({"mcp_tools": {"t": {"description": "no command"}}}));
    assert!(
        e.contains("/home/u/aicli.json") && e.contains("mcp_tools.t.command"),
        "{e}"
    );
    let e = load_err(json!({"mcp_tools": {"t": {"command": ["/nonexistent/bin/x"]}}}));
    assert!(
        e.contains("mcp_tools.t.command[0]") && e.contains("does not exist"),
        "{e}"
    );
    let e = load_err(json!({"mcp_tools": {"t": {"command": ["no-such-program-4d1f"]}}}));
    assert!(
        e.contains("mcp_tools.t.command[0]") && e.contains("not found on PATH"),
        "{e}"
    );
    let e = load_err(json!({"mcp_tools": {"t": {"command": sh,
        "input_schema": {"type": "object", "properties": {"x": {"type": "nope"}}}}}}));
    assert!(
        e.contains("/home/u/aicli.json") && e.contains("mcp_tools.t.input_schema"),
        "{e}"
    );
    let e = load_err(json!({"mcp_tools": {"t": {"command": sh}},
        "engine": {"mcp_tools": ["t", "nope"]}}));
    assert!(
        e.contains("/home/u/aicli.json") && e.contains("engine.mcp_tools[1]"),
        "{e}"
    );
    assert!(e.contains("\"nope\"") && e.contains("(t)"), "{e}");
    let e =
        load_err(json!({"mcp_upstreams": {"u": {"command": sh, "url": "http://127.0.0.1:1/mcp"}}}));
    assert!(e.contains("mcp_upstreams.u") && e.contains("both"), "{e}");
    let e = load_err(json!({"mcp_upstreams": {"u": {"url": "ftp://x"}}}));
    assert!(e.contains("mcp_upstreams.u.url"), "{e}");
    let e = load_err(json!({"mcp_upstreams": {"u": {"command": sh, "headers": {"A": "b"}}}}));
    assert!(e.contains("mcp_upstreams.u.headers"), "{e}");
    let e = load_err(
        json!({"mcp_tools": {"u": {"command": sh}}, "mcp_upstreams": {"u": {"command": sh}}}),
    );
    assert!(e.contains("mcp_tools.u") && e.contains("upstream"), "{e}");
    let e = load_err(json!({"mcp_tools": {"t": {"command": sh, "bogus": 1}}}));
    assert!(e.contains("mcp_tools.t") && e.contains("bogus"), "{e}");
    // A good one loads, defaults filled in.
    let c = crate::AiCliConfig::from_user_json(
        &json!({"mcp_tools": {"t": {"command": sh}}, "mcp_upstreams": {"u": {"url": "http://127.0.0.1:1/mcp"}},
                "engine": {"mcp_tools": ["u"]}}).to_string(),
        "u.json",
    )
    .unwrap();
    assert_eq!(c.mcp_tools["t"].cwd, "workspace");
    assert_eq!(c.mcp_tools["t"].input_schema, json!({"type": "object"}));
    assert_eq!(c.unknown_mcp_grant(&["t".into(), "u".into()]), None);
    assert_eq!(
        c.unknown_mcp_grant(&["t".into(), "x".into()])
            .map(|(i, _)| i),
        Some(1)
    );
}
