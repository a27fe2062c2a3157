//! What a language runtime printed before it aborted, turned into the error
//! the plugin's author meant.
//!
//! componentize-py prints the traceback of an exception that escapes the
//! exported function and then panics ("Python function threw an unexpected
//! exception"); componentize-js prints that a thrown value is not a valid
//! `tool-error` and then traps. The panic or trap alone says nothing about
//! the cause, so [`uncaught_exception`] recovers it from the captured
//! stderr. The stderr is the plugin's own text: the result is bounded and
//! made safe to show.

/// Longest exception text passed on, in bytes.
const MAX_EXCEPTION_BYTES: usize = 2048;

/// The exception behind a Python or JavaScript abort, if stderr shows one.
pub(super) fn uncaught_exception(stderr: &str) -> Option<String> {
    let text = python_exception(stderr).or_else(|| js_thrown_value(stderr))?;
    Some(crate::text::clip_for_terminal(&text, MAX_EXCEPTION_BYTES, "exception"))
}

/// `ValueError: bad input (File "/app.py", line 7, in invoke)` from the last
/// traceback on stderr: its final unindented line is the exception, its
/// last `File` line the innermost frame.
fn python_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    let mut frame = None;
    let mut exception: Option<String> = None;
    for line in stderr[start..].lines().skip(1) {
        // The Rust runtime's own panic report follows the traceback.
        if line.starts_with("thread '") || line.contains("panicked at") {
            break;
        }
        if let Some(file) = line.trim_start().strip_prefix("File ") {
            frame = Some(file.trim().to_string());
        } else if !line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
            // A multi-line message (`raise ValueError("a\nb")`) keeps going
            // on unindented lines; they belong to the same exception.
            exception = Some(match exception {
                Some(first) if !first.is_empty() => format!("{first}\n{line}"),
                _ => line.to_string(),
            });
        }
    }
    let exception = exception?;
    Some(match frame {
        Some(frame) => format!("{exception} (File {frame})"),
        None => exception,
    })
}

/// componentize-js: "invalid variant tag value `undefined` (received
/// `Error: x`) specified for `ToolError`": the function threw something
/// other than a `{tag, val}` tool error.
fn js_thrown_value(stderr: &str) -> Option<String> {
    let line = stderr.lines().find(|l| l.contains("invalid variant tag value") && l.contains("ToolError"))?;
    let received = line.split("(received `").nth(1).and_then(|rest| rest.rsplit_once("`)")).map(|(value, _)| value).unwrap_or("a value");
    Some(format!(
        "{received} (the plugin threw a value that is not a chitin tool-error; throw {{tag: \"failed\", val: \"message\"}}, or write the plugin with the chitin JS SDK, which does)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON: &str = "Traceback (most recent call last):\n  File \"/app.py\", line 7, in invoke\n    raise ValueError(\"bad thing happened\")\nValueError: bad thing happened\nthread '<unnamed>' panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1`\n";

    #[test]
    fn a_python_traceback_gives_its_exception_and_frame() {
        assert_eq!(uncaught_exception(PYTHON).unwrap(), "ValueError: bad thing happened (File \"/app.py\", line 7, in invoke)");
    }

    #[test]
    fn the_last_of_chained_tracebacks_wins() {
        let chained = format!("Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\nKeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n{PYTHON}");
        assert!(uncaught_exception(&chained).unwrap().starts_with("ValueError: bad thing happened"));
    }

    #[test]
    fn control_characters_and_floods_are_tamed() {
        let hostile = format!("Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\nError: \x1b[2J{}\n", "x".repeat(100_000));
        let text = uncaught_exception(&hostile).unwrap();
        assert!(!text.contains('\x1b') && text.len() < MAX_EXCEPTION_BYTES + 200, "{}", text.len());
    }

    #[test]
    fn a_js_throw_of_a_plain_error_is_named() {
        let stderr = "invalid variant tag value `undefined` (received `Error: bad thing happened`) specified for `ToolError`\nStack:\n  export_tool_0_1_0$invoke@initializer.js:251:17\n";
        let text = uncaught_exception(stderr).unwrap();
        assert!(text.starts_with("Error: bad thing happened (the plugin threw a value that is not a chitin tool-error"), "{text}");
    }

    #[test]
    fn a_rust_panic_is_not_an_exception() {
        assert_eq!(uncaught_exception("thread 'main' panicked at src/lib.rs:3:5:\nboom\n"), None);
    }
}
