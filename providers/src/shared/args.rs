//! Merging a provider's configured defaults with a task's own: arguments, environment,
//! tool lists; and option values that could be taken for options.

use std::collections::BTreeMap;

use crate::config::ProviderConfig;
use crate::task::TaskSpec;

/// The config's extra arguments, then the task's.
pub fn extra_args(config: &ProviderConfig, task: &TaskSpec) -> Vec<String> {
    config
        .extra_args
        .iter()
        .chain(&task.extra_args)
        .cloned()
        .collect()
}

/// The config's environment with the task's over it.
pub fn env(config: &ProviderConfig, task: &TaskSpec) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    env.extend(task.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// The config's allowed tools, then the task's, each once (empty names dropped).
pub fn allowed_tools(config: &ProviderConfig, task: &TaskSpec) -> Vec<String> {
    unique([&config.allowed_tools, &task.allowed_tools])
}

/// The config's disallowed tools, then the task's, each once (empty names dropped).
pub fn disallowed_tools(config: &ProviderConfig, task: &TaskSpec) -> Vec<String> {
    unique([&config.disallowed_tools, &task.disallowed_tools])
}

/// The items of the lists in order, each once, empty ones dropped.
pub fn unique<'a>(lists: impl IntoIterator<Item = &'a Vec<String>>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in lists.into_iter().flatten() {
        if !item.is_empty() && !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

/// An option and its value as arguments: `[flag, value]`, or `flag=value` when the
/// value starts with `-` (an option parser would take `-x` after a flag for another
/// option).
pub fn opt(flag: &str, value: &str) -> Vec<String> {
    if value.starts_with('-') {
        vec![format!("{flag}={value}")]
    } else {
        vec![flag.to_owned(), value.to_owned()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_merge_config_first_and_once() {
        let mut c = ProviderConfig::new("p", "b");
        c.allowed_tools = vec!["Bash".into(), "".into(), "Read".into()];
        c.env.insert("A".into(), "config".into());
        c.extra_args = vec!["--x".into()];
        let mut t = TaskSpec::new("p");
        t.allowed_tools = vec!["Read".into(), "Edit".into()];
        t.env.insert("A".into(), "task".into());
        t.extra_args = vec!["--y".into()];
        assert_eq!(allowed_tools(&c, &t), ["Bash", "Read", "Edit"]);
        assert_eq!(env(&c, &t)["A"], "task");
        assert_eq!(extra_args(&c, &t), ["--x", "--y"]);
    }

    #[test]
    fn a_value_that_starts_with_a_dash_is_joined_to_its_flag() {
        assert_eq!(opt("--model", "opus"), ["--model", "opus"]);
        assert_eq!(
            opt("--append-system-prompt", "-be brief"),
            ["--append-system-prompt=-be brief"]
        );
    }
}
