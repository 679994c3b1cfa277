//! The pages' icons: small SVG files of this server's own (`/static/icons/NAME.svg`),
//! drawn in the text's colour through CSS masks. No glyph a font may lack (Debian's
//! Chromium has no emoji font: ⏸ and ⏹ were empty boxes there), no inline style or
//! script (the CSP allows neither).
//!
//! In the markup an icon is `span.i.i-NAME` ([`icon`]); an element of class `st` with a
//! `data-state` shows its state's icon before its text, so the script that updates a
//! state only sets the attribute.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

/// Each icon: its name and its path in a 16×16 box (even-odd filled).
const ICONS: &[(&str, &str)] = &[
    ("check", "M6.2 11.6 2.6 8 1.2 9.4l5 5 9-9L13.8 4z"),
    (
        "cross",
        "M3.4 2 2 3.4 6.6 8 2 12.6 3.4 14 8 9.4l4.6 4.6 1.4-1.4L9.4 8 14 3.4 12.6 2 8 6.6z",
    ),
    ("pause", "M3 2h4v12H3zM9 2h4v12H9z"),
    ("stop", "M3 3h10v10H3z"),
    ("play", "M4 2v12l10-6z"),
    (
        "wait",
        "M2 8a1.5 1.5 0 1 0 3 0 1.5 1.5 0 1 0-3 0M6.5 8a1.5 1.5 0 1 0 3 0 1.5 1.5 0 1 0-3 0M11 8a1.5 1.5 0 1 0 3 0 1.5 1.5 0 1 0-3 0",
    ),
    ("land", "M7 1h2v7h3l-4 4-4-4h3zM1 12h2v1h10v-1h2v3H1z"),
    ("discard", "M5 1h6v2h4v2H1V3h4zM2 6h12l-1 9H3z"),
    ("warn", "M8 1 0 15h16zM7 6h2v4H7zm0 5h2v2H7z"),
    ("overlap", "M0 8l4-4v3h8V4l4 4-4 4V9H4v3z"),
];

/// The icon of each task state.
const STATES: &[(&str, &str)] = &[
    ("queued", "wait"),
    ("running", "play"),
    ("succeeded", "check"),
    ("failed", "cross"),
    ("blocked", "pause"),
    ("interrupted", "stop"),
    ("parked", "wait"),
];

/// The icon of task state `state` (its name in records).
pub(super) fn of_state(state: crate::record::TaskState) -> &'static str {
    STATES
        .iter()
        .find(|(s, _)| *s == state.as_str())
        .map_or("wait", |(_, i)| i)
}

/// `GET /static/icons/NAME.svg`.
pub(super) async fn serve(Path(file): Path<String>) -> Response {
    let Some(d) = file
        .strip_suffix(".svg")
        .and_then(|n| ICONS.iter().find(|(name, _)| *name == n))
        .map(|(_, d)| d)
    else {
        return (StatusCode::NOT_FOUND, "no such icon").into_response();
    };
    let svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><path fill-rule="evenodd" d="{d}"/></svg>"#
    );
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        svg,
    )
        .into_response()
}

/// The icon `name` (one of [`ICONS`]), hidden from screen readers: its words stand beside
/// it.
pub(super) fn icon(name: &str) -> Markup {
    debug_assert!(ICONS.iter().any(|(n, _)| *n == name), "no icon {name}");
    html! { span class={ "i i-" (name) } aria-hidden="true" {} }
}

/// The icons' style: one rule for their shape, one per icon and per state.
pub(super) fn css() -> String {
    let mut css = String::from(
        ".i, .st::before { content: \"\"; display: inline-block; width: 0.95em; height: 0.95em; margin-right: 0.3em; vertical-align: -0.12em; background-color: currentColor; -webkit-mask: no-repeat center / contain; mask: no-repeat center / contain; }\n",
    );
    for (name, _) in ICONS {
        let mut selectors = vec![format!(".i-{name}")];
        for (state, _) in STATES.iter().filter(|(_, i)| i == name) {
            selectors.push(format!(".st[data-state=\"{state}\"]::before"));
        }
        css.push_str(&format!(
            "{} {{ -webkit-mask-image: url(/static/icons/{name}.svg); mask-image: url(/static/icons/{name}.svg); }}\n",
            selectors.join(", ")
        ));
    }
    css
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state has an icon that exists, and the style names each icon's file.
    #[test]
    fn every_state_has_an_icon() {
        for (state, icon) in STATES {
            assert!(ICONS.iter().any(|(n, _)| n == icon), "{state}: {icon}");
        }
        use crate::record::TaskState::*;
        for s in [Queued, Running, Succeeded, Failed, Blocked, Interrupted, Parked] {
            assert!(STATES.iter().any(|(n, _)| *n == s.as_str()), "{s:?}");
        }
        assert_eq!(of_state(Blocked), "pause");
        let css = css();
        for (name, _) in ICONS {
            assert!(css.contains(&format!("url(/static/icons/{name}.svg)")));
        }
        assert!(css.contains(".st[data-state=\"blocked\"]::before"));
    }
}
