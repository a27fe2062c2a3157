//! A page's readable content: HTML to Markdown (or plain text) inside the
//! sandbox, so a hostile page is parsed where it can harm nothing.
//!
//! The document is parsed once (html5ever, through `htmd`); its `<title>`
//! is kept, and the main content is the first `<article>`, else `<main>`,
//! else the whole document. Scripts, styles, navigation, forms and embedded
//! objects are dropped: they are not what a reader reads.

use std::rc::Rc;

use htmd::{HtmlToMarkdown, Node};
use markup5ever_rcdom::NodeData;

/// Tags whose content is never part of the readable text.
const SKIPPED: &[&str] = &["script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "head", "nav", "form", "button"];

/// What a page yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The `<title>`, whitespace folded; `None` when missing or empty.
    pub title: Option<String>,
    /// The readable content.
    pub text: String,
}

/// How the content is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Markdown: headings, lists, links, emphasis, code.
    Markdown,
    /// Plain text: the Markdown with its markup removed.
    Text,
}

/// Extracts `html`'s title and main content.
pub fn html(html: &str, mode: Mode) -> Page {
    let converter = HtmlToMarkdown::builder().skip_tags(SKIPPED.to_vec()).build();
    let Ok(tree) = converter.html_to_tree(html) else {
        // html5ever recovers from any input; this is only for the signature.
        return Page { title: None, text: String::new() };
    };
    let title = find(&tree, "title").map(|t| fold_whitespace(&text_of(&t))).filter(|t| !t.is_empty());
    let main = find(&tree, "article").or_else(|| find(&tree, "main")).unwrap_or_else(|| tree.clone());
    let markdown = tidy(&converter.tree_to_markdown(&main));
    let text = match mode {
        Mode::Markdown => markdown,
        Mode::Text => tidy(&markdown_to_text(&markdown)),
    };
    Page { title, text }
}

/// The first element named `tag` in document order.
fn find(node: &Rc<Node>, tag: &str) -> Option<Rc<Node>> {
    if let NodeData::Element { name, .. } = &node.data
        && &*name.local == tag
    {
        return Some(node.clone());
    }
    node.children.borrow().iter().find_map(|child| find(child, tag))
}

/// The text under `node`.
fn text_of(node: &Rc<Node>) -> String {
    let mut out = String::new();
    if let NodeData::Text { contents } = &node.data {
        out.push_str(&contents.borrow());
    }
    for child in node.children.borrow().iter() {
        out.push_str(&text_of(child));
    }
    out
}

fn fold_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Trailing spaces cut, runs of blank lines folded to one.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// Markdown without its markup: images dropped, links as their text,
/// heading marks, emphasis and code ticks removed.
fn markdown_to_text(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for line in markdown.lines() {
        let line = line.trim_start_matches('#').trim_start_matches(' ');
        out.push_str(&strip_inline(if line.starts_with("```") { "" } else { line }));
        out.push('\n');
    }
    out
}

fn strip_inline(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let image = c == '!' && chars.get(i + 1) == Some(&'[');
        if c == '[' || image {
            let open = if image { i + 1 } else { i };
            if let Some((label_end, link_end)) = link_at(&chars, open) {
                if !image {
                    out.extend(&chars[open + 1..label_end]);
                }
                i = link_end + 1;
                continue;
            }
        }
        if matches!(c, '*' | '`' | '_') && (c != '_' || !chars.get(i + 1).is_some_and(|n| n.is_alphanumeric()) || i == 0) {
            i += 1;
            continue;
        }
        if c == '\\' && chars.get(i + 1).is_some_and(|n| n.is_ascii_punctuation()) {
            out.push(chars[i + 1]);
            i += 2;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// For `[label](target)` starting at `open`: (index of `]`, index of `)`).
fn link_at(chars: &[char], open: usize) -> Option<(usize, usize)> {
    let label_end = open + chars[open..].iter().position(|&c| c == ']')?;
    if chars.get(label_end + 1) != Some(&'(') {
        return None;
    }
    let link_end = label_end + 1 + chars[label_end + 1..].iter().position(|&c| c == ')')?;
    Some((label_end, link_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<!doctype html><html><head><title>  The
        Title </title><style>body{color:red}</style><script>alert("x")</script></head>
        <body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
        <h1>Heading</h1><p>Some <b>bold</b> text and a <a href="https://example.com/x">link</a>.</p>
        <ul><li>one</li><li>two</li></ul><img src="a.png" alt="pic"></body></html>"#;

    #[test]
    fn html_becomes_markdown_without_scripts_or_navigation() {
        let page = html(PAGE, Mode::Markdown);
        assert_eq!(page.title.as_deref(), Some("The Title"));
        let t = &page.text;
        assert!(t.contains("# Heading"), "{t}");
        assert!(t.contains("**bold**"), "{t}");
        assert!(t.contains("[link](https://example.com/x)"), "{t}");
        assert!(t.contains("*   one") || t.contains("- one") || t.contains("* one"), "{t}");
        for gone in ["alert", "color:red", "About", "The Title"] {
            assert!(!t.contains(gone), "{gone} in {t}");
        }
    }

    #[test]
    fn article_is_preferred_and_text_mode_drops_markup() {
        let doc = "<body><div>sidebar junk</div><article><h2>Story</h2><p>A <a href='/u'>linked</a> word, <i>em</i>.</p><img src=x.png alt=pic></article></body>";
        let page = html(doc, Mode::Markdown);
        assert!(!page.text.contains("sidebar"), "{}", page.text);
        assert!(page.text.contains("## Story"));
        let page = html(doc, Mode::Text);
        assert_eq!(page.text, "Story\n\nA linked word, em.");
        assert_eq!(page.title, None);
    }

    #[test]
    fn broken_html_still_yields_text() {
        let page = html("<p>unclosed <b>bold <i>both</p><div", Mode::Text);
        assert!(page.text.contains("unclosed bold both"), "{}", page.text);
        assert_eq!(html("", Mode::Markdown).text, "");
    }
}
