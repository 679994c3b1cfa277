//! Where a task's container or swarm job may run and what it holds there: per-task
//! resources over `engine.docker`'s, and swarm placement constraints.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A task's resources, each over `engine.docker`'s when given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TaskResources {
    /// CPU limit, in CPUs (0: none).
    pub cpus: Option<f64>,
    /// Memory limit, MiB (0: none).
    pub memory_mb: Option<u64>,
    /// CPUs a swarm job reserves on its node: the swarm places it only where that much
    /// is not reserved yet (0: none).
    pub reserve_cpus: Option<f64>,
    /// Memory a swarm job reserves on its node, MiB (0: none).
    pub reserve_memory_mb: Option<u64>,
}

/// The resources in force: `base`'s (`engine.docker`'s), each overridden by `task`'s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resources {
    /// CPU limit (0: none).
    pub cpus: f64,
    /// Memory limit, MiB (0: none).
    pub memory_mb: u64,
    /// CPU reservation (0: none).
    pub reserve_cpus: f64,
    /// Memory reservation, MiB (0: none).
    pub reserve_memory_mb: u64,
}

impl Resources {
    /// `engine.docker`'s, overridden by what `task` gives.
    pub fn of(base: &crate::DockerConfig, task: Option<&TaskResources>) -> Resources {
        let t = task.copied().unwrap_or_default();
        Resources {
            cpus: t.cpus.unwrap_or(base.cpus),
            memory_mb: t.memory_mb.unwrap_or(base.memory_mb),
            reserve_cpus: t.reserve_cpus.unwrap_or(base.reserve_cpus),
            reserve_memory_mb: t.reserve_memory_mb.unwrap_or(base.reserve_memory_mb),
        }
    }

    /// Checks the numbers: finite, not negative, a reservation no larger than its limit.
    /// The error names the field (as in `engine.docker` and a task's `resources`).
    pub fn check(&self) -> Result<(), (String, String)> {
        for (name, v) in [("cpus", self.cpus), ("reserve_cpus", self.reserve_cpus)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err((name.into(), format!("{v} is not a non-negative number")));
            }
        }
        if self.cpus > 0.0 && self.reserve_cpus > self.cpus {
            return Err((
                "reserve_cpus".into(),
                format!(
                    "{} is more than the CPU limit {} (a job would reserve what it may not use)",
                    self.reserve_cpus, self.cpus
                ),
            ));
        }
        if self.memory_mb > 0 && self.reserve_memory_mb > self.memory_mb {
            return Err((
                "reserve_memory_mb".into(),
                format!(
                    "{} is more than the memory limit {} MiB",
                    self.reserve_memory_mb, self.memory_mb
                ),
            ));
        }
        Ok(())
    }
}

/// Checks one swarm placement constraint as Docker spells them: `<attribute>==<value>`
/// or `<attribute>!=<value>`, the attribute one of `node.id`, `node.hostname`,
/// `node.role`, `node.platform.os`, `node.platform.arch`, `node.labels.<label>`,
/// `engine.labels.<label>`.
pub fn check_constraint(c: &str) -> Result<(), String> {
    let (attr, value) = c
        .split_once("==")
        .or_else(|| c.split_once("!="))
        .ok_or_else(|| format!("'{c}' is not `attribute==value` or `attribute!=value`"))?;
    let attr = attr.trim();
    let known = matches!(
        attr,
        "node.id" | "node.hostname" | "node.role" | "node.platform.os" | "node.platform.arch"
    ) || ["node.labels.", "engine.labels."]
        .iter()
        .any(|p| attr.strip_prefix(p).is_some_and(|l| !l.is_empty()));
    if !known {
        return Err(format!(
            "'{c}': '{attr}' is not node.id, node.hostname, node.role, node.platform.os, node.platform.arch, node.labels.<label> or engine.labels.<label>"
        ));
    }
    if value.trim().is_empty() {
        return Err(format!("'{c}' has no value after the operator"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_are_checked_as_docker_spells_them() {
        for ok in [
            "node.labels.gpu==true",
            "node.role != manager",
            "engine.labels.zone==b",
        ] {
            assert_eq!(check_constraint(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("node.labels.gpu=true", "is not `attribute==value`"),
            ("node.colour==red", "'node.colour' is not"),
            ("node.labels.==x", "'node.labels.' is not"),
            ("node.role==", "has no value"),
        ] {
            let e = check_constraint(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn task_resources_override_the_engines_and_are_checked() {
        let base = crate::DockerConfig::default();
        let r = Resources::of(
            &base,
            Some(&TaskResources {
                memory_mb: Some(512),
                reserve_memory_mb: Some(256),
                ..TaskResources::default()
            }),
        );
        assert_eq!(
            (r.cpus, r.memory_mb, r.reserve_memory_mb),
            (base.cpus, 512, 256)
        );
        assert_eq!(r.check(), Ok(()));
        let over = Resources {
            reserve_memory_mb: 1024,
            ..r
        };
        assert_eq!(over.check().unwrap_err().0, "reserve_memory_mb");
        let nan = Resources {
            reserve_cpus: f64::NAN,
            ..r
        };
        assert_eq!(nan.check().unwrap_err().0, "reserve_cpus");
    }
}
