//! The `aicli batch TASKS.json` file: a list of tasks plus batch defaults.

use std::path::{Path, PathBuf};

use aicli_providers::TaskSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A batch file. A bare JSON array of tasks is accepted too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksFile {
    /// Where the JSON Schema of this file is.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The provider for tasks that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Sessions at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<usize>,
    /// Batch budget, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// The repository the tasks run against (relative to this file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// Where tasks that name no runner run (`local`, `docker` or `swarm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<aicli_providers::RunnerKind>,
    /// The tasks.
    pub tasks: Vec<TaskSpec>,
}

impl TasksFile {
    /// Reads and parses a batch file; errors name the file and the JSON path.
    pub fn load(path: &Path) -> Result<TasksFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        TasksFile::parse(&text, &path.display().to_string())
    }

    /// Parses batch-file JSON; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<TasksFile, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{origin} is not valid JSON: {e}"))?;
        let value = match value {
            serde_json::Value::Array(tasks) => serde_json::json!({ "tasks": tasks }),
            other => other,
        };
        let file: TasksFile = serde_path_to_error::deserialize(&value)
            .map_err(|e| format!("{origin}: at {}: {}", e.path(), e.inner()))?;
        if file.tasks.is_empty() {
            return Err(format!("{origin}: at tasks: the batch has no tasks"));
        }
        // Each task is checked by the engine, once (`aicli batch` names the file and the
        // task's JSON path in its errors).
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_the_json_path() {
        let e = TasksFile::parse(r#"{"tasks": [{"prompt": "a"}, {"prompt": 3}]}"#, "t.json")
            .unwrap_err();
        assert_eq!(
            e,
            "t.json: at tasks[1].prompt: invalid type: integer `3`, expected a string"
        );
        let e = TasksFile::parse("[]", "t.json").unwrap_err();
        assert_eq!(e, "t.json: at tasks: the batch has no tasks");
        let f = TasksFile::parse(r#"[{"prompt": "a"}]"#, "t.json").unwrap();
        assert_eq!(f.tasks[0].prompt, "a");
    }
}
