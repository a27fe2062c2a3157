//! Token estimates for context governance.
//!
//! Estimates run on every model request, over every message of the prompt, so
//! they must be cheap. A text is counted with a real cl100k BPE tokenizer
//! ([`count_tokens`]); a message adds a small framing overhead
//! ([`PER_MESSAGE_OVERHEAD`]), as chat APIs count it (RUNTIME.md §7).
//!
//! # The tokenizer
//!
//! [`bpe-openai`](https://crates.io/crates/bpe-openai) (GitHub's "fast BPE"),
//! `cl100k_base`. Its dictionary is prebuilt by the crate's build script from
//! data shipped inside the crate and compiled into our binary: nothing is
//! downloaded at build or run time. It is loaded once, lazily, by the first
//! count (or by [`warm_up`]), so process start pays nothing for it.
//!
//! Chosen over `tiktoken-rs` 0.12.1 (the newest; it also builds on rustc
//! 1.95). Both give identical cl100k counts on every text tried. Measured on
//! the 2-core dev machine, side by side (noisy: other builds were running;
//! `benches/tokens.rs` prints the bpe-openai figures):
//!
//! | | bpe-openai 0.3.2 | tiktoken-rs 0.12.1 |
//! | --- | --- | --- |
//! | first use (load + first count) | 40–75 ms | 130–220 ms |
//! | count, 4 KB English + code | 160–250 µs (4–6 M tokens/s) | ~480 µs (~2 M tokens/s) |
//! | count, 200-byte message | 5–11 µs | ~21 µs |
//! | 100 KB of random letters | ~22 ms | ~43 ms |
//! | resident memory after load | ~35 MB | ~27 MB |
//! | binary size added | ~15 MB (the prebuilt dictionary) | ~2 MB |
//! | added clean build, CPU time | ~185 s, of which ~110 s run its build script | ~45 s (`fancy-regex` 0.19, a second copy) |
//!
//! We only count, on many messages, and a CLI pays the load on its first
//! request: bpe-openai counts 2–4× faster and loads 3× faster, and nothing
//! at run time parses a vocabulary. Its costs are once per clean build and
//! in binary size. The build script runs unoptimised (build dependencies
//! are built at opt-level 0); with `[profile.release.package.bpe]` and
//! `[profile.release.package.aneubeck-daachorse]` at `opt-level = 3` in the
//! workspace manifest it takes ~35 s instead of ~110 s.
//!
//! # Fallbacks
//!
//! - If the tokenizer cannot be loaded (any panic while loading, or a failed
//!   sanity check), every count is bytes/4, with one `tracing::warn`.
//! - A text over [`MAX_BPE_BYTES`] (256 KiB) is estimated as bytes/4 to bound
//!   the cost of one count (BPE runs at ~10–30 MB/s here, so a capped count
//!   costs at most ~10–25 ms). For English and code bytes/4 slightly
//!   overestimates (≈4.2 bytes/token); for CJK or random data it
//!   underestimates.
//! - [`estimate_text_fast`] is bytes/4 always, for hot paths that only need
//!   a rough guess.
//!
//! # Counting only when a decision needs it
//!
//! Most token figures are compared against a limit (the input budget, the
//! consolidation threshold). A cl100k token is at least one byte, and the
//! bytes/4 fallbacks are below the byte count too, so a text's byte length
//! bounds its count from above. [`Counted`] pairs that free bound with the
//! exact count, and [`over_limit`] counts exactly only when the bounds add
//! up to more than the limit. A short conversation then never loads the
//! tokenizer: a one-shot `chitin agent -m` stays ~35 MB smaller and skips
//! its 40–75 ms load. The decisions are the same as with exact counts.

use std::panic::{self, AssertUnwindSafe};
use std::sync::LazyLock;

use bpe_openai::Tokenizer;
use serde_json::Value;

use crate::session::Message;

/// Tokens kept free besides the completion: the provider's own framing.
pub const BUDGET_SLACK: usize = 1024;

/// The input budget of a model with `context_window` tokens answering with
/// up to `max_tokens`.
pub fn input_budget(context_window: usize, max_tokens: u32) -> usize {
    context_window.saturating_sub(max_tokens as usize).saturating_sub(BUDGET_SLACK).max(1)
}

/// Framing tokens per message (role, separators), as chat APIs count them.
pub const PER_MESSAGE_OVERHEAD: usize = 4;

/// Texts longer than this (in bytes) are estimated as bytes/4, not counted.
pub const MAX_BPE_BYTES: usize = 256 * 1024;

/// The cl100k tokenizer, or `None` if it could not be loaded.
static CL100K: LazyLock<Option<&'static Tokenizer>> = LazyLock::new(load);

/// Set once the tokenizer has been loaded (or failed to load).
static LOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether exact counts are already paid for: the tokenizer is loaded.
pub fn is_loaded() -> bool {
    LOADED.load(std::sync::atomic::Ordering::Relaxed)
}

fn load() -> Option<&'static Tokenizer> {
    LOADED.store(true, std::sync::atomic::Ordering::Relaxed);
    // `cl100k_base` panics if its embedded dictionary is unusable; the
    // default panic hook still prints that panic once.
    let loaded = panic::catch_unwind(bpe_openai::cl100k_base)
        .map_err(|_| "loading the dictionary panicked".to_string())
        .and_then(|tok| match count_with(tok, "hello world") {
            2 => Ok(tok),
            n => Err(format!("sanity check failed (\"hello world\" = {n} tokens, expected 2)")),
        });
    match loaded {
        Ok(tok) => Some(tok),
        Err(why) => {
            tracing::warn!("cl100k tokenizer unavailable ({why}); token estimates fall back to bytes/4");
            None
        }
    }
}

fn count_with(tok: &Tokenizer, text: &str) -> usize {
    // A tokenizer bug must not take a turn down: a panic is a bytes/4 guess.
    panic::catch_unwind(AssertUnwindSafe(|| tok.count(text))).unwrap_or_else(|_| estimate_text_fast(text))
}

/// Token count of `tokenizer` (or bytes/4 without one) under the size cap.
fn count_or_estimate(tokenizer: Option<&Tokenizer>, text: &str) -> usize {
    match tokenizer {
        _ if text.is_empty() => 0,
        Some(tok) if text.len() <= MAX_BPE_BYTES => count_with(tok, text),
        _ => estimate_text_fast(text),
    }
}

/// Loads the tokenizer now rather than on the first count (e.g. from a
/// background thread at start-up). Returns whether BPE counts are in use.
pub fn warm_up() -> bool {
    CL100K.is_some()
}

/// cl100k token count of a text (special-token markers count as plain text).
/// Bytes/4 for a text over [`MAX_BPE_BYTES`], or if the tokenizer is unavailable.
pub fn count_tokens(text: &str) -> usize {
    if text.is_empty() {
        return 0; // without loading the tokenizer
    }
    count_or_estimate(*CL100K, text)
}

/// Bytes/4, rounded up: a rough guess that costs nothing.
pub fn estimate_text_fast(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Tokens of a text.
pub fn estimate_text(text: &str) -> usize {
    if text.len() < LONG_TEXT_BYTES {
        return count_tokens(text);
    }
    // Long texts recur: every turn builds the same system prompt again (a new
    // string, so the per-message memo cannot help). Remember them by hash.
    let key = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(text, &mut hasher);
        std::hash::Hasher::finish(&hasher)
    };
    if let Some(tokens) = LONG_TEXTS.lock().map(|m| m.get(&key).copied()).ok().flatten() {
        return tokens;
    }
    let tokens = count_tokens(text);
    if let Ok(mut memo) = LONG_TEXTS.lock() {
        if memo.len() >= LONG_TEXTS_KEPT {
            memo.clear();
        }
        memo.insert(key, tokens);
    }
    tokens
}

/// Texts at least this long are remembered by [`estimate_text`].
const LONG_TEXT_BYTES: usize = 1024;

/// How many long-text counts are kept before the memo starts over.
const LONG_TEXTS_KEPT: usize = 4096;

static LONG_TEXTS: LazyLock<std::sync::Mutex<std::collections::HashMap<u64, usize>>> = LazyLock::new(Default::default);

/// Tokens of one message, tool calls included.
pub fn estimate_message(message: &Message) -> usize {
    let size = message.counted_size();
    if let Some(tokens) = message.token_memo().get(size) {
        return tokens;
    }
    let tokens = count_message(message);
    message.token_memo().set(size, tokens);
    tokens
}

fn count_message(message: &Message) -> usize {
    message_with(message, estimate_text)
}

/// A message's tokens with its texts (content, call names and arguments)
/// measured by `text`, plus the framing: one formula for the count and for
/// its byte bound, so the bound holds part by part.
fn message_with(message: &Message, text: impl Fn(&str) -> usize) -> usize {
    let calls: usize =
        message.tool_calls.iter().map(|c| text(&c.function.name) + text(&c.function.arguments) + PER_MESSAGE_OVERHEAD).sum();
    PER_MESSAGE_OVERHEAD + text(message.text()) + calls
}

/// An upper bound of [`estimate_message`] that never loads the tokenizer:
/// the byte count (see the module docs), or the count itself when the
/// message was counted before.
pub fn message_bound(message: &Message) -> usize {
    let size = message.counted_size();
    if let Some(tokens) = message.token_memo().get(size) {
        return tokens;
    }
    message_with(message, str::len)
}

/// Something whose token count is costly: a free upper bound, and the
/// exact count on demand.
pub trait Counted {
    /// At least [`Counted::exact`]; must not load the tokenizer.
    fn bound(&self) -> usize;
    /// The count.
    fn exact(&self) -> usize;
}

/// A count already known.
impl Counted for usize {
    fn bound(&self) -> usize {
        *self
    }
    fn exact(&self) -> usize {
        *self
    }
}

/// A message, by [`message_bound`] and [`estimate_message`].
impl Counted for Message {
    fn bound(&self) -> usize {
        message_bound(self)
    }
    fn exact(&self) -> usize {
        estimate_message(self)
    }
}

/// Whether `extra` plus the messages' tokens exceed `limit`, counting
/// exactly only when the bounds do.
pub fn over_limit<'a>(messages: impl IntoIterator<Item = &'a Message> + Clone, extra: &dyn Counted, limit: usize) -> bool {
    let bound = extra.bound().saturating_add(messages.clone().into_iter().map(message_bound).sum());
    bound > limit && extra.exact() + messages.into_iter().map(estimate_message).sum::<usize>() > limit
}

/// Tokens of a conversation plus the tool definitions sent with it.
pub fn estimate_request(messages: &[Message], tools: &[Value]) -> usize {
    messages.iter().map(estimate_message).sum::<usize>() + estimate_tools(tools)
}

/// Tokens of tool definitions.
pub fn estimate_tools(tools: &[Value]) -> usize {
    tools.iter().map(|t| estimate_text(&t.to_string())).sum()
}

/// An upper bound of [`estimate_tools`]: the definitions' JSON byte length.
pub fn tools_bound(tools: &[Value]) -> usize {
    tools.iter().map(|t| t.to_string().len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ToolCall;

    const SAMPLE: &str = "The agent host runs each tool inside a sandboxed WebAssembly component.\n\
        fn main() {\n    let budget = spec.context_window * 85 / 100;\n    println!(\"{budget}\");\n}\n\
        {\"role\": \"tool\", \"content\": \"Found 12 matches in src/agent/runner.rs\"}\n";

    #[test]
    fn the_tokenizer_loads() {
        assert!(warm_up(), "the bundled cl100k dictionary must load");
    }

    #[test]
    fn known_cl100k_counts() {
        // Checked against tiktoken-rs 0.12.1 `cl100k_base().encode_ordinary`.
        let cases = [
            ("hello world", 2),
            ("Hello, world!", 4),
            (" ", 1),
            ("The quick brown fox jumps over the lazy dog.", 10),
            ("fn main() { println!(\"hi\"); }", 9),
            ("日本語のテキスト", 8),
            ("a\n\n\nb", 3),
            ("   x  ", 3),
            (&"a".repeat(64), 8),
            (&"x".repeat(4000), 500),
            ("<|endoftext|>", 7),
        ];
        for (text, tokens) in cases {
            assert_eq!(count_tokens(text), tokens, "{text:?}");
            assert_eq!(estimate_text(text), tokens, "{text:?}");
        }
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text_fast(""), 0);
        assert_eq!(count_or_estimate(None, ""), 0);
    }

    #[test]
    fn fallback_is_bytes_over_four() {
        assert_eq!(estimate_text_fast("a"), 1);
        assert_eq!(estimate_text_fast("abcd"), 1);
        assert_eq!(estimate_text_fast("abcde"), 2);
        assert_eq!(estimate_text_fast("日本"), 2); // 6 bytes
        // Without a tokenizer every count is bytes/4.
        for text in ["hello world", SAMPLE, "日本語のテキスト"] {
            assert_eq!(count_or_estimate(None, text), estimate_text_fast(text));
        }
    }

    #[test]
    fn very_long_texts_are_estimated_not_counted() {
        let at_cap = "x".repeat(MAX_BPE_BYTES);
        assert_eq!(count_tokens(&at_cap), MAX_BPE_BYTES / 8, "counted: 8 x's per token");
        let over = "x".repeat(MAX_BPE_BYTES + 1);
        assert_eq!(count_tokens(&over), estimate_text_fast(&over));
    }

    #[test]
    fn english_and_code_are_about_four_bytes_per_token() {
        let tokens = count_tokens(SAMPLE);
        let ratio = SAMPLE.len() as f64 / tokens as f64;
        assert!((2.5..6.0).contains(&ratio), "{tokens} tokens, {ratio:.2} bytes/token");
    }

    #[test]
    fn counts_grow_with_the_text() {
        // Repeating a text repeats its tokens, up to merges at the seams.
        let one = count_tokens(SAMPLE);
        let mut previous = 0;
        for n in 1..=8 {
            let count = count_tokens(&SAMPLE.repeat(n));
            assert!(count > previous, "{n} copies: {count} after {previous}");
            assert!(count.abs_diff(n * one) <= n, "{n} copies: {count} vs {}", n * one);
            previous = count;
        }
        // One more character can merge the last tokens into fewer, so
        // a longer prefix may have a token or two fewer, never more than
        // that; and cutting a text in two costs a few tokens at most.
        let whole = count_tokens(SAMPLE);
        let mut previous = 0;
        for (i, _) in SAMPLE.char_indices().skip(1) {
            let (head, tail) = SAMPLE.split_at(i);
            let count = count_tokens(head);
            assert!(count + 2 >= previous, "prefix of {i} bytes: {count} after {previous}");
            let halves = count + count_tokens(tail);
            assert!(whole <= halves && halves <= whole + 3, "cut at {i}: {halves} vs {whole}");
            previous = count;
        }
    }

    #[test]
    fn messages_add_framing_and_calls() {
        let text = "what is in notes.txt?";
        assert_eq!(estimate_message(&Message::user(text)), PER_MESSAGE_OVERHEAD + count_tokens(text));
        let (name, args) = ("read_file", "{\"path\":\"notes.txt\"}");
        let call = Message::assistant_calls(None, vec![ToolCall::new("c1", name, args)]);
        assert_eq!(estimate_message(&call), 2 * PER_MESSAGE_OVERHEAD + count_tokens(name) + count_tokens(args));
        let tool = serde_json::json!({"type": "function", "function": {"name": "read_file"}});
        assert_eq!(estimate_tools(std::slice::from_ref(&tool)), count_tokens(&tool.to_string()));
        let tools = [tool];
        assert_eq!(
            estimate_request(&[Message::user(text), call.clone()], &tools),
            estimate_message(&Message::user(text)) + estimate_message(&call) + estimate_tools(&tools)
        );
    }

    fn samples() -> Vec<Message> {
        vec![
            Message::user(SAMPLE),
            Message::user("日本語のテキスト 🦀🦀 émoji"),
            Message::assistant(""),
            Message::assistant_calls(Some("calling".into()), vec![ToolCall::new("c1", "read_file", r#"{"path":"src/main.rs"}"#)]),
            Message::tool_result("c1", "read_file", "x".repeat(3000)),
            Message::system("a".repeat(MAX_BPE_BYTES + 10)),
        ]
    }

    #[test]
    fn the_byte_bound_is_never_below_the_count() {
        for message in samples() {
            // Bound first: an uncounted message has no remembered count.
            let bound = message_bound(&message);
            assert!(bound >= estimate_message(&message), "{bound} < {} for {:?}", estimate_message(&message), message.role);
        }
        let tools = vec![serde_json::json!({"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}})];
        assert!(tools_bound(&tools) >= estimate_tools(&tools));
    }

    #[test]
    fn over_limit_decides_as_exact_counts_do() {
        let exact: usize = samples().iter().map(estimate_message).sum::<usize>() + 100;
        for limit in [0, 1, exact / 2, exact - 1, exact, exact + 1, exact * 10] {
            // Fresh messages: nothing remembered, so the bound path runs.
            assert_eq!(over_limit(&samples(), &100, limit), exact > limit, "limit {limit}");
        }
    }
}
