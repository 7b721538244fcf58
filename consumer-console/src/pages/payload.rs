//! Bytes shown safely: JSON pretty-printed, other text as text, anything
//! else as a hex dump. Everything goes through the template's escaping, so
//! a payload holding HTML or a script is shown, never run.

use maud::{Markup, html};

/// The payload, or a header's value, as a block.
pub(crate) fn block(bytes: &[u8]) -> Markup {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes)
        && let Ok(pretty) = serde_json::to_string_pretty(&value)
    {
        return html! { pre.payload data-format="json" { (pretty) } };
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => html! { pre.payload data-format="text" { (text) } },
        Err(_) => html! { pre.payload data-format="hex" { (hex_dump(bytes)) } },
    }
}

/// A header's value on one line: its text, or its bytes in hex.
pub(crate) fn inline(bytes: &[u8]) -> Markup {
    match std::str::from_utf8(bytes) {
        Ok(text) => html! { code { (text) } },
        Err(_) => html! {
            code.binary title="not text: its bytes in hex" {
                (bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
            }
        },
    }
}

/// Offset, 16 bytes in hex, and their printable ASCII, per line.
fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("{:08x}  {:<47}  {ascii}\n", i * 16, hex.join(" ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_a_payload_is_escaped() {
        let shown = block(b"<script>alert(1)</script><b>bold</b>").into_string();
        assert!(!shown.contains("<script>"), "{shown}");
        assert!(
            shown.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{shown}"
        );
        let json = block(br#"{"html":"<img src=x onerror=alert(1)>"}"#).into_string();
        assert!(!json.contains("<img"), "{json}");
        assert!(json.contains("data-format=\"json\""), "{json}");
    }

    #[test]
    fn binary_is_a_hex_dump() {
        let shown = block(&[0xff, 0x00, b'<', b'a']).into_string();
        assert!(shown.contains("ff 00 3c 61"), "{shown}");
        assert!(shown.contains("..&lt;a"), "{shown}");
        assert_eq!(
            inline(&[0xff, 0x01]).into_string(),
            "<code class=\"binary\" title=\"not text: its bytes in hex\">ff 01</code>"
        );
    }
}
