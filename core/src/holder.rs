//! The holder description stored with a lock: who holds it, for people and `status`.

use serde::{Deserialize, Serialize};

/// Stored as JSON in the backend; every field is optional when read back, so descriptions
/// written by other versions or languages still parse.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderDescription {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl HolderDescription {
    pub fn of_this_process(language: &str, text: Option<&str>) -> Self {
        HolderDescription {
            host: hostname().clone(),
            pid: Some(crate::runtime::process_id()),
            language: Some(language.to_string()),
            text: text.map(str::to_string),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// Parses a stored description; text that is not ours is kept as `text`.
    pub fn parse(stored: &str) -> Self {
        serde_json::from_str(stored).unwrap_or_else(|_| HolderDescription {
            text: Some(stored.to_string()),
            ..Default::default()
        })
    }
}

/// Read once: a holder description is made for every acquisition.
fn hostname() -> &'static Option<String> {
    static HOSTNAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HOSTNAME.get_or_init(read_hostname)
}

fn read_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_foreign_text() {
        let d = HolderDescription::of_this_process("rust", Some("nightly \"batch\""));
        assert_eq!(HolderDescription::parse(&d.to_json()), d);
        assert_eq!(
            HolderDescription::parse("plain").text.as_deref(),
            Some("plain")
        );
    }
}
