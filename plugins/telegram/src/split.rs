//! Splitting an outgoing text into messages of at most 4096 characters.
//!
//! Why this is subtle:
//! - Telegram's limit is "1-4096 characters after entities parsing", and it
//!   measures text in UTF-16 code units (entity offsets are UTF-16, and an
//!   emoji outside the BMP costs two). We count UTF-16 units of the *visible*
//!   text: tags cost nothing, `&lt;` costs one. UTF-16 units are never fewer
//!   than code points, so a part that fits by our count fits whichever way
//!   Telegram counts (the mock counts the same way and refuses one unit
//!   more).
//! - A part must be valid HTML on its own: the cut never falls inside a tag
//!   or an entity (both are atoms here), and never between the halves of a
//!   surrogate pair (a `char` is an atom). Tags open at the cut are closed at
//!   the end of the part and reopened, with their attributes, at the start
//!   of the next — a code block split in two is two `<pre>` blocks.
//! - Where to cut: the last paragraph break (`\n\n`) in the window, else the
//!   last line break, else the last space — each only if it leaves at least
//!   a quarter of the limit in the part (no one-line messages in front of a
//!   long paragraph) — else a hard cut at the limit (a 10 000-character
//!   word). The separator at a cut is dropped; outside `<pre>`, whitespace
//!   around the cut is trimmed too (inside, indentation is content).

/// Telegram's limit for a message text, in UTF-16 code units.
pub const MAX_MESSAGE_UTF16: usize = 4096;

/// The length Telegram measures: UTF-16 code units.
pub fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The visible length of Telegram HTML: UTF-16 units after tags are removed
/// and entities decoded.
pub fn html_visible_len(html: &str) -> usize {
    tokens(html, true).iter().map(Token::units).sum()
}

/// The visible text of Telegram HTML (tags removed, entities decoded).
pub fn html_visible_text(html: &str) -> String {
    tokens(html, true).iter().filter_map(|t| if let Token::Char { ch, .. } = t { Some(*ch) } else { None }).collect()
}

/// `html` (Telegram's HTML subset, well formed) in parts of at most `limit`
/// visible UTF-16 units, each well formed. `limit` below 2 is taken as 2
/// (one astral character must fit).
pub fn split_html(html: &str, limit: usize) -> Vec<String> {
    split(&tokens(html, true), limit)
}

/// Plain text in parts of at most `limit` UTF-16 units.
pub fn split_plain(text: &str, limit: usize) -> Vec<String> {
    split(&tokens(text, false), limit)
}

#[derive(Debug, Clone, PartialEq)]
enum Token<'a> {
    /// `<b>`, `<a href="…">`: `name` is the lowercase tag name.
    Open { raw: &'a str, name: String },
    /// `</b>`.
    Close { raw: &'a str },
    /// One visible character: itself, or an entity.
    Char { raw: &'a str, ch: char },
}

impl Token<'_> {
    fn units(&self) -> usize {
        match self {
            Token::Char { ch, .. } => ch.len_utf16(),
            _ => 0,
        }
    }

    fn raw(&self) -> &str {
        match self {
            Token::Open { raw, .. } | Token::Close { raw } | Token::Char { raw, .. } => raw,
        }
    }

    fn is_char(&self, wanted: char) -> bool {
        matches!(self, Token::Char { ch, .. } if *ch == wanted)
    }

    fn is_space(&self) -> bool {
        matches!(self, Token::Char { ch, .. } if ch.is_whitespace())
    }
}

/// Atoms of `text`; with `html`, tags and entities are atoms (a `<` that
/// starts no tag and an `&` that starts no entity are plain characters).
fn tokens(text: &str, html: bool) -> Vec<Token<'_>> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        if html && rest.starts_with('<')
            && let Some(end) = rest.find('>')
        {
            let raw = &rest[..=end];
            let inner = &raw[1..raw.len() - 1];
            if inner.starts_with('/') {
                out.push(Token::Close { raw });
            } else {
                let name = inner.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
                out.push(Token::Open { raw, name });
            }
            at += raw.len();
            continue;
        }
        if html && rest.starts_with('&')
            && let Some((raw, ch)) = entity(rest)
        {
            out.push(Token::Char { raw, ch });
            at += raw.len();
            continue;
        }
        let ch = rest.chars().next().unwrap_or_default();
        out.push(Token::Char { raw: &rest[..ch.len_utf8()], ch });
        at += ch.len_utf8();
    }
    out
}

/// The entity at the start of `text` and the character it stands for.
fn entity(text: &str) -> Option<(&str, char)> {
    // `;` is ASCII, so its byte index is a char boundary.
    let end = text.bytes().take(12).position(|b| b == b';')?;
    let name = &text[1..end];
    let ch = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => name
            .strip_prefix("#x")
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .or_else(|| name.strip_prefix('#').and_then(|dec| dec.parse().ok()))
            .and_then(char::from_u32)?,
    };
    Some((&text[..=end], ch))
}

/// The tags open after `tokens`, starting from `stack`.
fn replay<'a>(mut stack: Vec<(&'a str, String)>, tokens: &[Token<'a>]) -> Vec<(&'a str, String)> {
    for token in tokens {
        match token {
            Token::Open { raw, name } => stack.push((raw, name.clone())),
            Token::Close { .. } => {
                stack.pop();
            }
            Token::Char { .. } => {}
        }
    }
    stack
}

fn split(tokens: &[Token<'_>], limit: usize) -> Vec<String> {
    let limit = limit.max(2);
    let mut parts = Vec::new();
    let mut open: Vec<(&str, String)> = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let in_pre = |stack: &[(&str, String)]| stack.iter().any(|(_, name)| name == "pre" || name == "code");
        if !in_pre(&open) {
            while start < tokens.len() && tokens[start].is_space() {
                start += 1;
            }
            if start == tokens.len() {
                break;
            }
        }
        // The window: as many tokens as fit in `limit` units.
        let mut units = 0;
        let mut end = start;
        while end < tokens.len() && units + tokens[end].units() <= limit {
            units += tokens[end].units();
            end += 1;
        }
        let (mut cut, next) = if end == tokens.len() { (end, end) } else { break_point(tokens, start, end, limit) };
        let mut next = next;
        // Inside a code block a blank line is content: a paragraph cut
        // there drops one newline, not both.
        if next == cut + 2 && in_pre(&replay(open.clone(), &tokens[start..cut])) {
            next = cut + 1;
        }
        // Tags opened right before the cut belong to the next part.
        while cut > start && matches!(tokens[cut - 1], Token::Open { .. }) {
            cut -= 1;
            next = next.min(cut);
        }
        // Closing tags right after a hard cut cost nothing: keep them here.
        if next == cut {
            while cut < tokens.len() && matches!(tokens[cut], Token::Close { .. }) {
                cut += 1;
            }
            next = cut;
        }
        let after = replay(open.clone(), &tokens[start..cut]);
        let mut body = &tokens[start..cut];
        if !in_pre(&after) {
            while body.last().is_some_and(Token::is_space) {
                body = &body[..body.len() - 1];
            }
        }
        if body.iter().any(|t| t.units() > 0 && !t.is_space()) {
            let mut part = String::new();
            for (raw, _) in &open {
                part.push_str(raw);
            }
            for token in body {
                part.push_str(token.raw());
            }
            for (_, name) in after.iter().rev() {
                part.push_str("</");
                part.push_str(name);
                part.push('>');
            }
            parts.push(part);
        }
        if next <= start {
            // Cannot happen (the first character always fits), but never loop.
            next = (start + 1).min(tokens.len());
        }
        open = replay(open, &tokens[start..next]);
        start = next;
    }
    parts
}

/// Where to end the part in the window `start..end`: `(cut, next)`, the
/// part being `start..cut` and the next starting at `next` (the separator
/// in between is dropped).
fn break_point(tokens: &[Token<'_>], start: usize, end: usize, limit: usize) -> (usize, usize) {
    let floor = limit / 4;
    // Visible units before each index, to apply the quarter rule.
    let mut before = Vec::with_capacity(end - start + 1);
    let mut units = 0;
    for token in &tokens[start..end] {
        before.push(units);
        units += token.units();
    }
    let units_at = |i: usize| before[i - start];
    let candidates = (start + 1..end).rev();
    let paragraph = candidates.clone().find(|&i| tokens[i].is_char('\n') && tokens[i - 1].is_char('\n') && units_at(i - 1) >= floor);
    if let Some(i) = paragraph {
        return (i - 1, i + 1);
    }
    let line = candidates.clone().find(|&i| tokens[i].is_char('\n') && units_at(i) >= floor);
    if let Some(i) = line {
        return (i, i + 1);
    }
    let space = candidates.clone().find(|&i| tokens[i].is_space() && units_at(i) >= floor);
    if let Some(i) = space {
        return (i, i + 1);
    }
    (end, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part fits, and every part is balanced HTML.
    fn check(parts: &[String], limit: usize) {
        for part in parts {
            assert!(html_visible_len(part) <= limit, "part of {} units: {part:.80}", html_visible_len(part));
            let mut depth: Vec<String> = Vec::new();
            for token in tokens(part, true) {
                match token {
                    Token::Open { name, .. } => depth.push(name),
                    Token::Close { raw } => assert_eq!(depth.pop().as_deref(), Some(&raw[2..raw.len() - 1]), "in {part:.200}"),
                    Token::Char { .. } => {}
                }
            }
            assert!(depth.is_empty(), "unclosed {depth:?}");
        }
    }

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split_html("<b>hi</b> there", 4096), ["<b>hi</b> there"]);
        assert_eq!(split_plain("x", 4096), ["x"]);
        assert!(split_plain("", 4096).is_empty());
        assert!(split_plain(" \n\n ", 4096).is_empty());
    }

    #[test]
    fn exactly_the_limit_is_one_part_one_more_is_two() {
        let text = "a".repeat(4096);
        assert_eq!(split_plain(&text, 4096), std::slice::from_ref(&text));
        let parts = split_plain(&(text.clone() + "b"), 4096);
        assert_eq!(parts, [text, "b".to_string()]);
    }

    #[test]
    fn long_paragraphs_split_at_paragraph_breaks() {
        let para = |c: &str| vec![c; 600].join(" "); // 600 words, 1199 chars
        let text = [para("aa"), para("bb"), para("cc"), para("dd"), para("ee")].join("\n\n");
        let parts = split_plain(&text, 4096);
        // Two paragraphs and their break are 3600 units; a third does not fit.
        assert_eq!(parts, [[para("aa"), para("bb")].join("\n\n"), [para("cc"), para("dd")].join("\n\n"), para("ee")]);
        assert_eq!(parts.join("\n\n"), text, "nothing lost but the separators");
    }

    #[test]
    fn a_paragraph_longer_than_the_limit_splits_at_lines_then_words() {
        let line = "word ".repeat(100).trim_end().to_string(); // 499 chars
        let lines = vec![line.clone(); 20].join("\n"); // one paragraph of 20 lines
        let parts = split_plain(&lines, 4096);
        assert!(parts.iter().all(|p| !p.starts_with('\n') && !p.ends_with('\n')));
        // 8 lines are 8 × 500 - 1 = 3999 units; a 9th does not fit.
        assert_eq!(parts.iter().map(|p| p.lines().count()).collect::<Vec<_>>(), [8, 8, 4]);
        assert_eq!(parts.join("\n"), lines);
        let words = "word ".repeat(2000); // no line breaks at all
        let parts = split_plain(&words, 4096);
        assert!(parts.iter().all(|p| p.split(' ').all(|w| w == "word")), "no word is cut");
        assert_eq!(parts.join(" "), words.trim_end());
    }

    #[test]
    fn a_10000_char_word_is_cut_hard_at_the_limit() {
        let word = "x".repeat(10_000);
        let parts = split_plain(&word, 4096);
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [4096, 4096, 1808]);
        assert_eq!(parts.concat(), word);
        // Inside bold, the tag is closed and reopened.
        let parts = split_html(&format!("<b>{word}</b>"), 4096);
        check(&parts, 4096);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.starts_with("<b>") && p.ends_with("</b>")));
    }

    #[test]
    fn multibyte_text_counts_utf16_units_and_keeps_pairs_whole() {
        // 3000 emoji are 6000 units: two parts of at most 4096 units.
        let emoji = "😀".repeat(3000);
        let parts = split_plain(&emoji, 4096);
        assert_eq!(parts.iter().map(|p| utf16_len(p)).collect::<Vec<_>>(), [4096, 1904]);
        assert_eq!(parts.concat(), emoji);
        // A BMP character outside ASCII is one unit (though 3 bytes in UTF-8).
        let cjk = "漢".repeat(4096);
        assert_eq!(split_plain(&cjk, 4096).len(), 1);
        // An odd limit: a pair never straddles the cut.
        let parts = split_plain("😀😀😀", 3);
        assert_eq!(parts, ["😀", "😀", "😀"]);
    }

    #[test]
    fn entities_count_as_one_and_are_never_cut() {
        let html = "&lt;".repeat(5000);
        let parts = split_html(&html, 4096);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], "&lt;".repeat(4096));
        assert_eq!(html_visible_len(&parts[1]), 904);
        let parts = split_html("a&amp;b", 2);
        assert_eq!(parts, ["a&amp;", "b"]);
    }

    #[test]
    fn a_split_code_block_closes_and_reopens_pre() {
        let code: Vec<String> = (0..400).map(|i| format!("    let x{i} = {i};")).collect();
        let html = format!("Intro\n\n<pre><code class=\"language-rust\">{}</code></pre>\n\nDone", code.join("\n"));
        let parts = split_html(&html, 4096);
        check(&parts, 4096);
        assert!(parts.len() >= 2, "{}", parts.len());
        for part in &parts[1..parts.len() - 1] {
            assert!(part.starts_with("<pre><code class=\"language-rust\">"), "{part:.60}");
            assert!(part.ends_with("</code></pre>"));
        }
        // Lines are cut between, never inside, and indentation is kept.
        let visible: Vec<String> = parts.iter().map(|p| html_visible_text(p)).collect();
        let lines: Vec<&str> = visible.iter().flat_map(|v| v.lines()).filter(|l| l.contains("let")).collect();
        assert_eq!(lines, code.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(visible.last().unwrap().ends_with("Done"));
    }

    #[test]
    fn blank_lines_inside_a_code_block_survive_a_split() {
        let code: Vec<String> = (0..300).map(|i| if i % 10 == 9 { String::new() } else { format!("  x{i}") }).collect();
        let parts = split_html(&format!("<pre>{}</pre>", code.join("\n")), 500);
        check(&parts, 500);
        assert!(parts.len() > 3);
        let visible: Vec<String> = parts.iter().map(|p| html_visible_text(p)).collect();
        assert_eq!(visible.join("\n"), code.join("\n"));
    }

    #[test]
    fn the_cut_never_falls_inside_a_tag() {
        // A link whose href is far longer than the limit is still one atom.
        let href = format!("https://example.com/{}", "p".repeat(5000));
        let html = format!("{} <a href=\"{href}\">link</a>", "w ".repeat(2100));
        let parts = split_html(&html, 4096);
        check(&parts, 4096);
        assert!(parts.last().unwrap().contains(&href));
    }

    #[test]
    fn tags_opened_at_the_cut_move_to_the_next_part() {
        let html = format!("{}<b>bold</b>", "a".repeat(10));
        assert_eq!(split_html(&html, 10), ["a".repeat(10), "<b>bold</b>".to_string()]);
    }
}
