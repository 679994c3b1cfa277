//! The committed schemas under `schemas/` are exactly what the code generates.

use std::path::Path;

#[test]
fn committed_schemas_match_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let out = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_aicli"))
        .args(["schema", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "aicli schema: {run:?}");
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".schema.json"))
            .collect();
        v.sort();
        v
    };
    let generated = names(out.path());
    assert!(generated.len() >= 7, "aicli schema wrote {generated:?}");
    assert_eq!(
        names(&dir),
        generated,
        "schemas/ holds other files than `aicli schema` writes"
    );
    let mut stale = Vec::new();
    for name in &generated {
        let want = std::fs::read_to_string(out.path().join(name)).unwrap();
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
