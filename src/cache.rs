//! Where aicli's cache of pinned CLIs is.
//!
//! The cache is an npm prefix, `<cache>/npm` (`$AICLI_CLI_CACHE` names it directly), so
//! the binaries are `<cache>/npm/node_modules/.bin/<binary_name>`. Binary discovery looks
//! there after a provider's `binary_path` and `PATH` ([`search_path_with_cache`]).
//! `<cache>` is `$AICLI_CACHE_DIR`, else `$XDG_CACHE_HOME/aicli`, else
//! `~/.cache/aicli`. `aicli install` fills it.

use std::path::{Path, PathBuf};

/// aicli's cache directory: `$AICLI_CACHE_DIR`, else `$XDG_CACHE_HOME/aicli`, else
/// `$HOME/.cache/aicli`.
pub fn cache_dir() -> PathBuf {
    cache_dir_from(|k| std::env::var_os(k))
}

fn cache_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("AICLI_CACHE_DIR")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("aicli")))
        .unwrap_or_else(|| set("HOME").unwrap_or_default().join(".cache/aicli"))
}

/// The npm prefix the CLIs are installed into: `$AICLI_CLI_CACHE`, else
/// `<cache_dir>/npm`.
pub fn cli_cache_dir() -> PathBuf {
    match std::env::var_os("AICLI_CLI_CACHE") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => cache_dir().join("npm"),
    }
}

/// The npm prefix, inside `cache` (a [`cli_cache_dir`]), of the packages installed with
/// `--omit=optional` ([`aicli_providers::ProviderConfig::npm_omit_optional`]): their own,
/// so that installing them never removes the other CLIs' optional native packages.
pub fn slim_prefix(cache: &Path) -> PathBuf {
    cache.join("slim")
}

/// Both executable directories of the cache: the CLIs', then the slim prefix's.
pub fn cli_bin_dirs() -> [PathBuf; 2] {
    let cache = cli_cache_dir();
    [
        cache.join("node_modules/.bin"),
        slim_prefix(&cache).join("node_modules/.bin"),
    ]
}

/// `path` with aicli's cache of CLIs appended: the search path of binary discovery
/// (after a provider's `binary_path`, before its npx fallback).
pub fn search_path_with_cache(path: &str) -> String {
    let bins: Vec<String> = cli_bin_dirs()
        .iter()
        .map(|b| b.display().to_string())
        .collect();
    if path.is_empty() {
        bins.join(":")
    } else {
        format!("{path}:{}", bins.join(":"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn the_cache_dir_follows_aicli_then_xdg_then_home() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(
            cache_dir_from(vars(&[("AICLI_CACHE_DIR", "/a"), ("HOME", "/h")])),
            PathBuf::from("/a")
        );
        assert_eq!(
            cache_dir_from(vars(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            PathBuf::from("/x/aicli")
        );
        assert_eq!(
            cache_dir_from(vars(&[("AICLI_CACHE_DIR", ""), ("HOME", "/h")])),
            PathBuf::from("/h/.cache/aicli")
        );
    }
}
