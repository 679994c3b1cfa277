//! Where `getCredential` finds values: a JSON file of name -> value, then the
//! environment. Values are never logged and never printed by `Debug`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// The environment `getCredential` reads.
#[derive(Clone, Default)]
pub enum EnvLookup {
    /// The server process's own environment (the default).
    #[default]
    Process,
    /// A fixed set of variables (tests, or a caller that prepared them).
    Map(BTreeMap<String, String>),
    /// No environment: only the credentials file.
    None,
}

impl fmt::Debug for EnvLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvLookup::Process => f.write_str("Process"),
            EnvLookup::Map(m) => f
                .debug_tuple("Map")
                .field(&m.keys().collect::<Vec<_>>())
                .finish(),
            EnvLookup::None => f.write_str("None"),
        }
    }
}

/// Where credential values come from. The file (a JSON object of name -> string) is read
/// at each lookup, so a rotated value is picked up without a restart; it wins over the
/// environment.
#[derive(Debug, Clone, Default)]
pub struct CredentialSource {
    /// The environment to fall back on.
    pub env: EnvLookup,
    /// `EngineConfig.credentials_file`, when set.
    pub file: Option<PathBuf>,
}

/// Why a lookup found no value (never carries the value).
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Neither the file nor the environment has the name.
    #[error("no value for credential {name:?} in the credentials file or the environment")]
    NotFound {
        /// The credential's name.
        name: String,
    },
    /// The credentials file cannot be read or is not a JSON object of strings.
    #[error("credentials file {path} is unusable: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong (never a value).
        reason: String,
    },
}

impl CredentialSource {
    /// The value of `name`. The caller has already checked the allowlist.
    pub fn lookup(&self, name: &str) -> Result<String, CredentialError> {
        if let Some(path) = &self.file {
            match std::fs::read(path) {
                Ok(bytes) => {
                    // Parse to a map of JSON values so a bad entry's error cannot quote a value.
                    let map: BTreeMap<String, serde_json::Value> =
                        serde_json::from_slice(&bytes).map_err(|e| CredentialError::File {
                            path: path.clone(),
                            reason: format!(
                                "not a JSON object (line {}, column {})",
                                e.line(),
                                e.column()
                            ),
                        })?;
                    match map.get(name) {
                        Some(serde_json::Value::String(v)) => return Ok(v.clone()),
                        Some(_) => {
                            return Err(CredentialError::File {
                                path: path.clone(),
                                reason: format!("the value of {name:?} is not a string"),
                            });
                        }
                        None => {}
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(CredentialError::File {
                        path: path.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        let from_env = match &self.env {
            EnvLookup::Process => std::env::var(name).ok(),
            EnvLookup::Map(m) => m.get(name).cloned(),
            EnvLookup::None => None,
        };
        from_env.ok_or_else(|| CredentialError::NotFound { name: name.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_wins_over_env_and_debug_hides_values() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("creds.json");
        std::fs::write(&f, r#"{"API_KEY": "from-file", "N": 3}"#).unwrap();
        let src = CredentialSource {
            env: EnvLookup::Map(BTreeMap::from([
                ("API_KEY".into(), "from-env".into()),
                ("OTHER".into(), "env-only".into()),
            ])),
            file: Some(f),
        };
        assert_eq!(src.lookup("API_KEY").unwrap(), "from-file");
        assert_eq!(src.lookup("OTHER").unwrap(), "env-only");
        assert!(matches!(
            src.lookup("NOPE"),
            Err(CredentialError::NotFound { .. })
        ));
        assert!(matches!(src.lookup("N"), Err(CredentialError::File { .. })));
        let dbg = format!("{src:?}");
        assert!(
            !dbg.contains("from-env") && !dbg.contains("env-only"),
            "{dbg}"
        );
    }
}
