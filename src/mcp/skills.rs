//! `listSkills` / `getSkill`: skills from the skills directory, as the agent may see them.
//!
//! A skill is a directory `<skills_dir>/<name>/` holding `SKILL.md` (YAML frontmatter with
//! `name`, `description`, optional `allowed-tools` and `metadata`, then the instructions
//! as Markdown), plus optional `scripts/` and `references/` trees. Only the skills
//! connected to a task (its [`TaskContext::skills`](super::TaskContext::skills)) are
//! visible to it; any other name is answered as if it did not exist for that task.
//!
//! The skills directory belongs to the operator, not to the agent, but names come from
//! the agent: a name must be a single plain path component.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest script or reference file returned.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Most script and reference files returned for one skill.
const MAX_FILES: usize = 200;
/// Most bytes of script and reference contents for one skill.
const MAX_TOTAL_BYTES: u64 = 4 * 1024 * 1024;

/// Why a skill could not be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SkillError {
    /// The name is not a plain directory name.
    #[error("invalid skill name {name:?}: use letters, digits, '.', '_' and '-' only")]
    BadName {
        /// The name as asked.
        name: String,
    },
    /// Not connected to this task (or absent: the agent cannot tell which).
    #[error("no skill named {name:?} is connected to this task")]
    NotConnected {
        /// The name as asked.
        name: String,
    },
    /// Connected, but its directory or `SKILL.md` is missing.
    #[error("skill {name:?} is connected to this task but {path} does not exist")]
    Missing {
        /// The skill.
        name: String,
        /// What is missing.
        path: PathBuf,
    },
    /// `SKILL.md` has no valid frontmatter.
    #[error("skill {name:?}: bad SKILL.md frontmatter: {reason}")]
    Frontmatter {
        /// The skill.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An I/O error.
    #[error("skill {name:?}: cannot read {path}: {source}")]
    Io {
        /// The skill.
        name: String,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// The frontmatter as written.
#[derive(Debug, Deserialize)]
struct Frontmatter {
    name: String,
    description: String,
    #[serde(default, rename = "allowed-tools")]
    allowed_tools: Option<AllowedTools>,
    #[serde(default)]
    metadata: Option<yaml_serde::Value>,
}

/// `allowed-tools` is a list, or one string of names separated by spaces or commas.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AllowedTools {
    List(Vec<String>),
    Text(String),
}

impl AllowedTools {
    fn into_list(self) -> Vec<String> {
        match self {
            AllowedTools::List(v) => v,
            AllowedTools::Text(s) => split_tools(&s),
        }
    }
}

/// Splits `Read, Grep Bash(git status:*)` on commas and spaces outside parentheses.
fn split_tools(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for ch in s.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(ch);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// What `listSkills` says about one skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SkillSummary {
    /// The skill's directory name (what `getSkill` takes).
    pub name: String,
    /// The frontmatter description.
    pub description: String,
    /// Tools the skill expects to use.
    pub allowed_tools: Vec<String>,
    /// Free-form metadata from the frontmatter (an object, possibly empty).
    pub metadata: Value,
}

/// One file of a skill's `scripts/` or `references/`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SkillFile {
    /// Path relative to the skill directory (`scripts/run.sh`).
    pub path: String,
    /// The text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Why the text is not here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// What `getSkill` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Skill {
    /// Name, description, tools, metadata.
    #[serde(flatten)]
    pub summary: SkillSummary,
    /// The Markdown after the frontmatter.
    pub instructions: String,
    /// Files under `scripts/`.
    pub scripts: Vec<SkillFile>,
    /// Files under `references/`.
    pub references: Vec<SkillFile>,
}

/// Whether `name` is a plain directory name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks that `name` may be served to a task connected to `connected`.
fn check_visible(name: &str, connected: &[String]) -> Result<(), SkillError> {
    if !valid_name(name) {
        return Err(SkillError::BadName { name: name.into() });
    }
    if !connected.iter().any(|c| c == name) {
        return Err(SkillError::NotConnected { name: name.into() });
    }
    Ok(())
}

/// Splits `SKILL.md` into frontmatter YAML and body.
fn split_frontmatter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let trimmed = line.trim_end_matches(['\n', '\r']);
        if trimmed == "---" || trimmed == "..." {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((yaml, body));
        }
        offset += line.len();
    }
    None
}

/// Reads and parses `<dir>/SKILL.md`.
fn read_skill_md(name: &str, dir: &Path) -> Result<(SkillSummary, String), SkillError> {
    let md = dir.join("SKILL.md");
    let text = match std::fs::read_to_string(&md) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SkillError::Missing {
                name: name.into(),
                path: md,
            });
        }
        Err(source) => {
            return Err(SkillError::Io {
                name: name.into(),
                path: md,
                source,
            });
        }
    };
    let (yaml, body) = split_frontmatter(&text).ok_or_else(|| SkillError::Frontmatter {
        name: name.into(),
        reason: "SKILL.md must start with a '---' line and close the frontmatter with another"
            .into(),
    })?;
    let fm: Frontmatter = yaml_serde::from_str(yaml).map_err(|e| SkillError::Frontmatter {
        name: name.into(),
        reason: e.to_string(),
    })?;
    let metadata = match fm.metadata {
        None => Value::Object(Default::default()),
        Some(v) => serde_json::to_value(&v).map_err(|e| SkillError::Frontmatter {
            name: name.into(),
            reason: format!("metadata: {e}"),
        })?,
    };
    if fm.name != name {
        tracing::debug!(skill = name, frontmatter_name = %fm.name, "skill frontmatter name differs from its directory");
    }
    Ok((
        SkillSummary {
            name: name.into(),
            description: fm.description,
            allowed_tools: fm
                .allowed_tools
                .map(AllowedTools::into_list)
                .unwrap_or_default(),
            metadata,
        },
        body.trim_start_matches(['\n', '\r']).to_owned(),
    ))
}

/// The skill directory of a (validated) name.
fn skill_dir(skills_dir: &Path, name: &str) -> Result<PathBuf, SkillError> {
    let dir = skills_dir.join(name);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(SkillError::Missing {
            name: name.into(),
            path: dir,
        })
    }
}

/// The skills connected to a task, with the errors of those that could not be read.
pub(crate) fn list_skills(
    skills_dir: &Path,
    connected: &[String],
) -> (Vec<SkillSummary>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    let mut names: Vec<&String> = connected.iter().collect();
    names.sort();
    names.dedup();
    for name in names {
        let res = check_visible(name, connected)
            .and_then(|()| skill_dir(skills_dir, name))
            .and_then(|dir| read_skill_md(name, &dir));
        match res {
            Ok((summary, _)) => ok.push(summary),
            Err(e) => errors.push((name.clone(), e.to_string())),
        }
    }
    (ok, errors)
}

/// One connected skill in full.
pub(crate) fn get_skill(
    skills_dir: &Path,
    connected: &[String],
    name: &str,
) -> Result<Skill, SkillError> {
    check_visible(name, connected)?;
    let dir = skill_dir(skills_dir, name)?;
    let (summary, instructions) = read_skill_md(name, &dir)?;
    let mut budget = Budget {
        files: MAX_FILES,
        bytes: MAX_TOTAL_BYTES,
    };
    let scripts = collect_files(name, &dir, "scripts", &mut budget)?;
    let references = collect_files(name, &dir, "references", &mut budget)?;
    Ok(Skill {
        summary,
        instructions,
        scripts,
        references,
    })
}

struct Budget {
    files: usize,
    bytes: u64,
}

/// The regular files under `<dir>/<sub>`, sorted; symlinks are skipped.
fn collect_files(
    name: &str,
    dir: &Path,
    sub: &str,
    budget: &mut Budget,
) -> Result<Vec<SkillFile>, SkillError> {
    let mut out = Vec::new();
    let base = dir.join(sub);
    if !base.is_dir() {
        return Ok(out);
    }
    let mut stack = vec![PathBuf::from(sub)];
    let mut found: Vec<PathBuf> = Vec::new();
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        let rd = std::fs::read_dir(&abs).map_err(|source| SkillError::Io {
            name: name.into(),
            path: abs.clone(),
            source,
        })?;
        for ent in rd {
            let ent = ent.map_err(|source| SkillError::Io {
                name: name.into(),
                path: abs.clone(),
                source,
            })?;
            let ft = ent.file_type().map_err(|source| SkillError::Io {
                name: name.into(),
                path: ent.path(),
                source,
            })?;
            let child = rel.join(ent.file_name());
            if ft.is_dir() {
                if stack.len() + found.len() < 10 * MAX_FILES {
                    stack.push(child);
                }
            } else if ft.is_file() {
                found.push(child);
            }
        }
    }
    found.sort();
    for rel in found {
        let path = rel.to_string_lossy().into_owned();
        if budget.files == 0 {
            out.push(SkillFile {
                path,
                content: None,
                skipped: Some(format!("over {MAX_FILES} files: not read")),
            });
            continue;
        }
        budget.files -= 1;
        let abs = dir.join(&rel);
        let len = std::fs::metadata(&abs).map(|m| m.len()).unwrap_or(0);
        let skipped = if len > MAX_FILE_BYTES {
            Some(format!("{len} bytes is over {MAX_FILE_BYTES}: not read"))
        } else if len > budget.bytes {
            Some("the skill's contents budget is spent: not read".to_owned())
        } else {
            None
        };
        if let Some(reason) = skipped {
            out.push(SkillFile {
                path,
                content: None,
                skipped: Some(reason),
            });
            continue;
        }
        match std::fs::read(&abs) {
            Ok(bytes) => {
                budget.bytes = budget.bytes.saturating_sub(bytes.len() as u64);
                match String::from_utf8(bytes) {
                    Ok(text) => out.push(SkillFile {
                        path,
                        content: Some(text),
                        skipped: None,
                    }),
                    Err(_) => out.push(SkillFile {
                        path,
                        content: None,
                        skipped: Some("binary file (not UTF-8): not read".into()),
                    }),
                }
            }
            Err(e) => out.push(SkillFile {
                path,
                content: None,
                skipped: Some(format!("cannot read: {e}")),
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn write_skill(dir: &Path) {
        let s = dir.join("pdf-tools");
        std::fs::create_dir_all(s.join("scripts/lib")).unwrap();
        std::fs::create_dir_all(s.join("references")).unwrap();
        std::fs::write(
            s.join("SKILL.md"),
            "---\nname: pdf-tools\ndescription: Work with PDFs.\nallowed-tools: Read, Bash(pdftotext:*)\nmetadata:\n  version: \"1.2\"\n  owner: docs\n---\n\n# PDF tools\nRun scripts/extract.sh.\n",
        )
        .unwrap();
        std::fs::write(
            s.join("scripts/extract.sh"),
            "#!/bin/sh\npdftotext \"$1\"\n",
        )
        .unwrap();
        std::fs::write(s.join("scripts/lib/util.py"), "print(1)\n").unwrap();
        std::fs::write(s.join("references/api.md"), "API notes\n").unwrap();
    }

    #[test]
    fn frontmatter_parses_and_visibility_is_enforced() {
        let d = tempfile::tempdir().unwrap();
        write_skill(d.path());
        let connected = vec!["pdf-tools".to_owned(), "absent".to_owned()];
        let (ok, errors) = list_skills(d.path(), &connected);
        assert_eq!(
            ok,
            vec![SkillSummary {
                name: "pdf-tools".into(),
                description: "Work with PDFs.".into(),
                allowed_tools: vec!["Read".into(), "Bash(pdftotext:*)".into()],
                metadata: serde_json::json!({"version": "1.2", "owner": "docs"}),
            }]
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "absent");

        let skill = get_skill(d.path(), &connected, "pdf-tools").unwrap();
        assert_eq!(skill.instructions, "# PDF tools\nRun scripts/extract.sh.\n");
        let scripts: Vec<_> = skill.scripts.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(scripts, ["scripts/extract.sh", "scripts/lib/util.py"]);
        assert_eq!(skill.references[0].content.as_deref(), Some("API notes\n"));

        let err = get_skill(d.path(), &[], "pdf-tools").unwrap_err();
        assert!(matches!(err, SkillError::NotConnected { .. }));
        let err = get_skill(d.path(), &["../x".into()], "../x").unwrap_err();
        assert!(matches!(err, SkillError::BadName { .. }));
    }

    #[test]
    fn missing_frontmatter_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("plain")).unwrap();
        std::fs::write(d.path().join("plain/SKILL.md"), "# no frontmatter\n").unwrap();
        let err = get_skill(d.path(), &["plain".into()], "plain").unwrap_err();
        assert!(matches!(err, SkillError::Frontmatter { .. }), "{err}");
    }

    #[test]
    fn allowed_tools_as_list_or_spaces() {
        assert_eq!(
            split_tools("Read Grep Bash(git status:*)"),
            ["Read", "Grep", "Bash(git status:*)"]
        );
        let fm: Frontmatter =
            yaml_serde::from_str("name: a\ndescription: b\nallowed-tools: [Read, Write]\n")
                .unwrap();
        assert_eq!(fm.allowed_tools.unwrap().into_list(), ["Read", "Write"]);
    }
}
