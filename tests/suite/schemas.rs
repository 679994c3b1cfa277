//! The committed schemas under `schemas/` are exactly what the code generates.

use std::path::Path;

#[test]
fn committed_schemas_match_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let mut stale = Vec::new();
    for (name, schema) in aicli::schema::all() {
        let want = aicli::schema::render(&schema);
        let have = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if have != want {
            stale.push(format!(
                "schemas/{name}:\n{}",
                pretty_assertions::StrComparison::new(&have, &want)
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\n\nThe schemas above are stale. Regenerate them with:\n  cargo run -q -- schema --out schemas",
        stale.join("\n")
    );
}

#[test]
fn the_default_config_names_its_schema_and_validates_against_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("ai_cli_providers.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["$schema"], "./schemas/ai_cli_providers.schema.json");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("schemas/ai_cli_providers.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&cfg)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    // And a wrong type is caught by the schema too.
    let mut bad = cfg.clone();
    bad["providers"]["claude"]["max_turns"] = serde_json::json!("many");
    assert!(!validator.is_valid(&bad));
}
