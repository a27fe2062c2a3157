//! Outgoing: the agent's Markdown as Telegram HTML, split into messages.
//!
//! Why HTML and not MarkdownV2: MarkdownV2 makes 18 punctuation characters
//! reserved everywhere (`.`, `-`, `!`, `(` …), so one unescaped period in a
//! model's answer gets the whole message refused. In HTML only `<`, `>` and
//! `&` need escaping, and that is done for every character of text here, so
//! a model's stray `<` can never break the markup.
//!
//! What is rendered: `**bold**`/`__bold__`, `*italic*`/`_italic_`,
//! `~~strike~~`, `` `code` ``, fenced code blocks (with their language),
//! `[text](url)` for http(s)/mailto/tg URLs, headings (bold), `>` quotes,
//! and `-`/`*`/`+` bullets (`•`). Inline spans are matched within one line;
//! a delimiter without its partner stays literal text ("fall back when
//! unsure"), so the HTML is well formed by construction. A reply with no
//! markup at all goes out as plain text without `parse_mode`; and when
//! Telegram refuses the HTML anyway, the error is classified
//! [`Action::ResendPlain`](crate::error::Action::ResendPlain) and
//! [`plain_parts`] gives the same text without markup.

use crate::split::{MAX_MESSAGE_UTF16, html_visible_text, split_html, split_plain};

/// How Telegram should parse a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseMode {
    /// Telegram's HTML subset.
    Html,
}

impl ParseMode {
    /// The `parse_mode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ParseMode::Html => "HTML",
        }
    }
}

/// One message's text, ready for `sendMessage` or `editMessageText`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingText {
    /// The text (HTML when `parse_mode` says so).
    pub text: String,
    /// `None`: plain text.
    pub parse_mode: Option<ParseMode>,
}

/// A reply in Markdown as the messages to send, in order, each within
/// Telegram's 4096 units. Empty for a blank reply (Telegram refuses empty
/// texts).
pub fn render_reply(markdown: &str) -> Vec<OutgoingText> {
    render_reply_with_limit(markdown, MAX_MESSAGE_UTF16)
}

/// As [`render_reply`] with another limit (captions: 1024).
pub fn render_reply_with_limit(markdown: &str, limit: usize) -> Vec<OutgoingText> {
    let html = markdown_to_html(markdown);
    if html.contains('<') {
        split_html(&html, limit).into_iter().map(|text| OutgoingText { text, parse_mode: Some(ParseMode::Html) }).collect()
    } else {
        plain_parts(&html_visible_text(&html), limit)
    }
}

/// Plain text as messages within `limit` (the fallback when Telegram
/// refuses the HTML: pass the visible text of the refused part).
pub fn plain_parts(text: &str, limit: usize) -> Vec<OutgoingText> {
    split_plain(text, limit).into_iter().map(|text| OutgoingText { text, parse_mode: None }).collect()
}

/// The text of an in-progress streamed reply for `editMessageText`: the
/// first message's worth (the rest is sent when the reply is done).
pub fn render_preview(markdown: &str) -> Option<OutgoingText> {
    render_reply(markdown).into_iter().next()
}

/// `<`, `>`, `&` (and `"`, for attributes) as entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// Markdown as Telegram HTML (see the module docs for the subset).
pub fn markdown_to_html(markdown: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(fence) = fence(trimmed) {
            let language = trimmed[fence.len()..].trim();
            let mut code = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with(fence) {
                code.push(lines[i]);
                i += 1;
            }
            i += 1; // the closing fence (or the end)
            let body = escape(&code.join("\n"));
            let language = language.split_whitespace().next().filter(|l| l.chars().all(|c| c.is_ascii_alphanumeric() || "+-_#.".contains(c)));
            out.push(match language {
                Some(language) => format!("<pre><code class=\"language-{language}\">{body}</code></pre>"),
                None => format!("<pre>{body}</pre>"),
            });
            continue;
        }
        if trimmed.starts_with('>') {
            let mut quoted = Vec::new();
            while i < lines.len() && lines[i].trim_start().starts_with('>') {
                let inner = lines[i].trim_start()[1..].strip_prefix(' ').unwrap_or(&lines[i].trim_start()[1..]);
                quoted.push(inline(inner));
                i += 1;
            }
            out.push(format!("<blockquote>{}</blockquote>", quoted.join("\n")));
            continue;
        }
        out.push(block_line(line));
        i += 1;
    }
    out.join("\n")
}

/// The fence that opens a code block on this line, if any.
fn fence(line: &str) -> Option<&'static str> {
    if line.starts_with("```") {
        Some("```")
    } else if line.starts_with("~~~") {
        Some("~~~")
    } else {
        None
    }
}

/// A line outside code blocks and quotes: heading, bullet, or text.
fn block_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
        return format!("<b>{}</b>", inline(trimmed[hashes..].trim()));
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(item) = trimmed.strip_prefix(bullet) {
            return format!("{indent}• {}", inline(item));
        }
    }
    inline(line)
}

/// Inline spans of one line, everything else escaped.
fn inline(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // Backslash escapes of ASCII punctuation.
        if c == '\\' && chars.get(i + 1).is_some_and(|n| n.is_ascii_punctuation()) {
            out.push_str(&escape(&chars[i + 1].to_string()));
            i += 2;
            continue;
        }
        if c == '`' {
            let run = chars[i..].iter().take_while(|&&x| x == '`').count();
            if let Some(close) = find_run(&chars, i + run, '`', run) {
                let code: String = chars[i + run..close].iter().collect();
                let code = if code.starts_with(' ') && code.ends_with(' ') && code.trim() != "" { code[1..code.len() - 1].to_string() } else { code };
                out.push_str(&format!("<code>{}</code>", escape(&code)));
                i = close + run;
                continue;
            }
            out.push_str(&"`".repeat(run));
            i += run;
            continue;
        }
        if c == '['
            && let Some((label_end, url_end)) = link(&chars, i)
        {
            let label: String = chars[i + 1..label_end].iter().collect();
            let url: String = chars[label_end + 2..url_end].iter().collect();
            out.push_str(&format!("<a href=\"{}\">{}</a>", escape(url.trim()), inline(&label)));
            i = url_end + 1;
            continue;
        }
        let double = chars.get(i + 1) == Some(&c);
        if (c == '*' || c == '_' || c == '~') && double {
            if let Some(close) = closing(&chars, i, c, 2) {
                let inner: String = chars[i + 2..close].iter().collect();
                let tag = if c == '~' { "s" } else { "b" };
                out.push_str(&format!("<{tag}>{}</{tag}>", inline(&inner)));
                i = close + 2;
                continue;
            }
            out.push(c);
            out.push(c);
            i += 2;
            continue;
        }
        if (c == '*' || c == '_')
            && let Some(close) = closing(&chars, i, c, 1)
        {
            let inner: String = chars[i + 1..close].iter().collect();
            out.push_str(&format!("<i>{}</i>", inline(&inner)));
            i = close + 1;
            continue;
        }
        out.push_str(&escape(&c.to_string()));
        i += 1;
    }
    out
}

/// The next run of exactly `len` `delimiter`s at or after `from`.
fn find_run(chars: &[char], from: usize, delimiter: char, len: usize) -> Option<usize> {
    let mut i = from;
    while i < chars.len() {
        if chars[i] == delimiter {
            let run = chars[i..].iter().take_while(|&&x| x == delimiter).count();
            if run == len {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// Where the emphasis opened at `open` (a run of `len` `delimiter`s) closes,
/// by CommonMark's flanking rules simplified: the opener is followed by a
/// non-space, the closer preceded by one, and `_` must not touch a word on
/// its outer side (`snake_case_name` stays as it is).
fn closing(chars: &[char], open: usize, delimiter: char, len: usize) -> Option<usize> {
    let after_open = *chars.get(open + len)?;
    if after_open.is_whitespace() || after_open == delimiter {
        return None;
    }
    if delimiter == '_' && open > 0 && chars[open - 1].is_alphanumeric() {
        return None;
    }
    let mut i = open + len + 1;
    while i + len <= chars.len() {
        let run = chars[i..].iter().take_while(|&&x| x == delimiter).count();
        if run == 0 {
            i += 1;
            continue;
        }
        let before_ok = !chars[i - 1].is_whitespace();
        let after_ok = delimiter != '_' || chars.get(i + run).is_none_or(|c| !c.is_alphanumeric());
        if run == len && before_ok && after_ok {
            return Some(i);
        }
        // `***` closing `**` and `*` together: the outer closer is the end
        // of the run, when the run ends a word.
        if run > len && before_ok && chars.get(i + run).is_none_or(|c| !c.is_alphanumeric()) {
            return Some(i + run - len);
        }
        i += run;
    }
    None
}

/// A `[label](url)` at `open`: (index of `]`, index of `)`), when the URL
/// has a scheme Telegram links.
fn link(chars: &[char], open: usize) -> Option<(usize, usize)> {
    let label_end = (open + 1..chars.len()).find(|&j| chars[j] == ']')?;
    if chars.get(label_end + 1) != Some(&'(') || label_end == open + 1 {
        return None;
    }
    let url_end = (label_end + 2..chars.len()).find(|&j| chars[j] == ')')?;
    let url: String = chars[label_end + 2..url_end].iter().collect();
    let url = url.trim();
    let allowed = ["http://", "https://", "mailto:", "tg://"].iter().any(|s| url.starts_with(s));
    (allowed && !url.contains(char::is_whitespace)).then_some((label_end, url_end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::html_visible_len;

    #[test]
    fn text_is_escaped_everywhere() {
        assert_eq!(markdown_to_html("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
        assert_eq!(markdown_to_html("**<script>**"), "<b>&lt;script&gt;</b>");
        assert_eq!(markdown_to_html("`<b>`"), "<code>&lt;b&gt;</code>");
        assert_eq!(markdown_to_html("```\n<i>&\n```"), "<pre>&lt;i&gt;&amp;</pre>");
    }

    #[test]
    fn inline_spans() {
        assert_eq!(markdown_to_html("**bold** and __bold__"), "<b>bold</b> and <b>bold</b>");
        assert_eq!(markdown_to_html("*it* and _it_"), "<i>it</i> and <i>it</i>");
        assert_eq!(markdown_to_html("~~gone~~"), "<s>gone</s>");
        assert_eq!(markdown_to_html("**bold *and it***"), "<b>bold <i>and it</i></b>");
        assert_eq!(markdown_to_html("use `a*b*c` here"), "use <code>a*b*c</code> here");
        assert_eq!(markdown_to_html("``a ` b``"), "<code>a ` b</code>");
        assert_eq!(
            markdown_to_html("see [the docs](https://core.telegram.org/bots/api?a=1&b=\"2\")"),
            "see <a href=\"https://core.telegram.org/bots/api?a=1&amp;b=&quot;2&quot;\">the docs</a>"
        );
        assert_eq!(markdown_to_html("[**b**](http://x.y)"), "<a href=\"http://x.y\"><b>b</b></a>");
    }

    #[test]
    fn unsure_markup_stays_literal() {
        assert_eq!(markdown_to_html("2 * 3 * 4"), "2 * 3 * 4");
        assert_eq!(markdown_to_html("**not closed"), "**not closed");
        assert_eq!(markdown_to_html("snake_case_name and __init__.py"), "snake_case_name and <b>init</b>.py");
        assert_eq!(markdown_to_html("a_b_c"), "a_b_c");
        assert_eq!(markdown_to_html("`unclosed"), "`unclosed");
        assert_eq!(markdown_to_html("[x](javascript:alert(1))"), "[x](javascript:alert(1))");
        assert_eq!(markdown_to_html("\\*literal\\*"), "*literal*");
        // A span does not run across lines.
        assert_eq!(markdown_to_html("**a\nb**"), "**a\nb**");
    }

    #[test]
    fn blocks() {
        assert_eq!(markdown_to_html("# Title\n## Sub *x*"), "<b>Title</b>\n<b>Sub <i>x</i></b>");
        assert_eq!(markdown_to_html("- one\n* two\n  + three\n1. four"), "• one\n• two\n  • three\n1. four");
        assert_eq!(markdown_to_html("> quoted **b**\n> more\nafter"), "<blockquote>quoted <b>b</b>\nmore</blockquote>\nafter");
        assert_eq!(
            markdown_to_html("```rust\nfn main() {\n    println!(\"*\");\n}\n```\nafter"),
            "<pre><code class=\"language-rust\">fn main() {\n    println!(&quot;*&quot;);\n}</code></pre>\nafter"
        );
        // An unclosed fence runs to the end.
        assert_eq!(markdown_to_html("```\ncode"), "<pre>code</pre>");
        // A strange language tag is dropped, not put in an attribute.
        assert_eq!(markdown_to_html("```a\"b\nx\n```"), "<pre>x</pre>");
        assert_eq!(markdown_to_html("para one\n\npara two"), "para one\n\npara two");
    }

    #[test]
    fn replies_without_markup_go_out_plain() {
        let parts = render_reply("Hello & welcome <3");
        assert_eq!(parts, [OutgoingText { text: "Hello & welcome <3".into(), parse_mode: None }]);
        let parts = render_reply("**Hi**");
        assert_eq!(parts, [OutgoingText { text: "<b>Hi</b>".into(), parse_mode: Some(ParseMode::Html) }]);
        assert!(render_reply("").is_empty());
        assert!(render_reply("  \n ").is_empty());
    }

    #[test]
    fn a_long_reply_splits_within_the_limit_after_rendering() {
        // 3000 `&` become 3000 `&amp;` (15 000 bytes) but count 3000: one part.
        let parts = render_reply(&format!("**{}**", "&".repeat(3000)));
        assert_eq!(parts.len(), 1);
        let code = (0..600).map(|i| format!("line {i} <tag>")).collect::<Vec<_>>().join("\n");
        let markdown = format!("# Report\n\nSome **intro**.\n\n```text\n{code}\n```\n\nThe end.");
        let parts = render_reply(&markdown);
        assert!(parts.len() >= 2);
        for part in &parts {
            assert_eq!(part.parse_mode, Some(ParseMode::Html));
            assert!(html_visible_len(&part.text) <= MAX_MESSAGE_UTF16);
        }
        assert!(parts[1].text.starts_with("<pre><code class=\"language-text\">"), "{:.80}", parts[1].text);
        assert!(render_preview(&markdown).unwrap().text.starts_with("<b>Report</b>"));
    }
}

#[cfg(test)]
mod fuzz {
    //! Generated replies (a fixed-seed generator, so a failure reproduces):
    //! whatever the mix of markup, text and lengths, every part fits, is
    //! balanced HTML, and no visible character is lost or duplicated.
    use super::*;
    use crate::split::{html_visible_len, html_visible_text};

    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) as usize) % n
        }
    }

    const PIECES: &[&str] = &[
        "word ", "longerword ", "😀", "漢字 ", "& ", "<tag> ", "**bold** ", "*it* ", "`code` ", "\n", "\n\n",
        "\n```rust\nlet x = 1;\n    indented();\n```\n", "[link](https://example.com/a?b=c&d=e) ", "> quote\n", "- item\n",
        "# Head\n", "LONG", "snake_case ", "** ", "_",
    ];

    fn balanced(part: &str) -> bool {
        let mut stack = Vec::new();
        let mut rest = part;
        while let Some(open) = rest.find('<') {
            let Some(close) = rest[open..].find('>') else { return false };
            let tag = &rest[open + 1..open + close];
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop() != Some(name.to_string()) {
                    return false;
                }
            } else {
                stack.push(tag.split_whitespace().next().unwrap_or_default().to_string());
            }
            rest = &rest[open + close + 1..];
        }
        stack.is_empty()
    }

    #[test]
    fn generated_replies_split_into_valid_parts_losing_nothing() {
        let mut rng = Lcg(0x5eed);
        for round in 0..200 {
            let target = 200 + rng.next(14_000);
            let mut markdown = String::new();
            while markdown.len() < target {
                match PIECES[rng.next(PIECES.len())] {
                    "LONG" => markdown.push_str(&"x".repeat(700)),
                    piece => markdown.push_str(piece),
                }
            }
            let limit = if round % 3 == 0 { 500 } else { MAX_MESSAGE_UTF16 };
            let parts = render_reply_with_limit(&markdown, limit);
            let html = markdown_to_html(&markdown);
            let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            let mut joined = String::new();
            for part in &parts {
                let visible = match part.parse_mode {
                    Some(ParseMode::Html) => {
                        assert!(balanced(&part.text), "round {round}: unbalanced part {:.120}", part.text);
                        assert!(html_visible_len(&part.text) <= limit, "round {round}: too long");
                        html_visible_text(&part.text)
                    }
                    None => {
                        assert!(part.text.encode_utf16().count() <= limit);
                        part.text.clone()
                    }
                };
                assert!(!visible.trim().is_empty(), "round {round}: an empty part");
                joined.push_str(&visible);
            }
            assert_eq!(squash(&joined), squash(&html_visible_text(&html)), "round {round}: text lost or duplicated");
        }
    }
}
