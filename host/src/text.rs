//! Text a plugin (or the model) controls, made safe to show and to keep.
//!
//! Two dangers, two helpers:
//! - **Terminal control.** A progress line or an error that reaches a
//!   terminal raw can set the window title, write the clipboard (OSC 52),
//!   move the cursor to rewrite earlier lines, or hide text. [`for_terminal`]
//!   replaces every control character except newline and tab (C0, DEL, C1),
//!   and the bidirectional overrides that reorder what is shown, by a visible
//!   escape (`\x1b`, `\u{202e}`), so nothing is lost and nothing is obeyed.
//! - **Size.** [`clip`] cuts a text to a byte budget at a character boundary
//!   and says, in the text, how much was cut, so a reader (person or model)
//!   knows it is not the whole.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for characters a terminal would act on rather than print, and for
/// the invisible reordering controls (Trojan Source).
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if c.is_control() => true, // C0, DEL, C1
        '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every control character but `\n` and `\t` written as a
/// visible escape. Borrows when there is nothing to escape (the common case).
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// `text` cut to at most `max_bytes` (plus a short marker naming what was
/// cut), at a character boundary. `what` names the text in the marker
/// ("error", "progress").
pub fn clip<'a>(text: &'a str, max_bytes: usize, what: &str) -> Cow<'a, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… [{what} cut: {} bytes in all, {} shown]", &text[..end], text.len(), end))
}

/// [`clip`] then [`for_terminal`]: one line of plugin text for display.
pub fn clip_for_terminal(text: &str, max_bytes: usize, what: &str) -> String {
    for_terminal(&clip(text, max_bytes, what)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        let hostile = "ok\x1b]0;owned\x07\x1b]52;c;cGF3bmVk\x07\r\x1b[2A\u{9b}31m\u{202e}txt.exe\u{7f}";
        let shown = for_terminal(hostile);
        assert!(!shown.chars().any(is_unsafe), "{shown}");
        assert_eq!(
            shown,
            "ok\\x1b]0;owned\\x07\\x1b]52;c;cGF3bmVk\\x07\\x0d\\x1b[2A\\x9b31m\\u{202e}txt.exe\\x7f"
        );
    }

    #[test]
    fn keeps_plain_text_and_layout() {
        let text = "line one\n\tindented — ünïcödé ✓";
        assert!(matches!(for_terminal(text), Cow::Borrowed(_)));
    }

    #[test]
    fn clip_marks_the_cut_at_a_char_boundary() {
        let text = "é".repeat(100); // 200 bytes
        let clipped = clip(&text, 11, "error");
        assert!(clipped.starts_with(&"é".repeat(5)), "{clipped}");
        assert!(clipped.ends_with("[error cut: 200 bytes in all, 10 shown]"), "{clipped}");
        assert!(matches!(clip("short", 11, "error"), Cow::Borrowed("short")));
    }
}
