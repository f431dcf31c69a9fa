//! How the command shows what holders wrote and how long is left, for `status` and `list`.

use std::time::Duration;

use fencelock::HolderDescription;

/// A holder's fields for a terminal. Any participant writes them: control characters (ANSI or
/// OSC escapes that would drive the operator's terminal) are shown escaped.
pub fn describe(h: &HolderDescription) -> String {
    let mut parts = Vec::new();
    if let Some(host) = &h.host {
        parts.push(format!("host {}", printable(host)));
    }
    if let Some(pid) = h.pid {
        parts.push(format!("pid {pid}"));
    }
    if let Some(lang) = &h.language {
        parts.push(printable(lang));
    }
    if let Some(text) = &h.text {
        parts.push(format!("{text:?}"));
    }
    parts.join(", ")
}

/// `text` with control characters escaped (`\u{1b}`), other characters as they are.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
            if c.is_control() {
                Box::new(c.escape_unicode())
            } else {
                Box::new(std::iter::once(c))
            }
        })
        .collect()
}

pub fn human(d: Duration) -> String {
    if d >= Duration::from_secs(120) {
        format!("{}m{}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
