//! Percent-escapes (`%40` for `@`): decoded when a URL is parsed, encoded when one is built.

use super::redact::unparsed;
use crate::error::{Error, Result};

/// `text`, a part of `url`, with its percent-escapes decoded; errors show `url` redacted.
pub(super) fn percent_decode(text: &str, url: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match byte {
                Some(b) => out.push(b),
                None => {
                    return Err(Error::invalid(format!(
                        "bad percent-escape in {}",
                        unparsed(url)
                    )));
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid(format!("URL decodes to invalid UTF-8: {}", unparsed(url))))
}

/// `text` with every byte but the unreserved ones (`A-Z a-z 0-9 - _ . ~`) percent-escaped.
pub(super) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
