//! The `apply_patch` patch format (the one Codex and OpenAI models are
//! trained on), parsed into file operations. Nothing here touches the disk:
//! [`crate::apply`] checks the operations against the files and writes them.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: notes/new.md
//! +every line of the new file, prefixed with +
//! *** Update File: src/app.py
//! *** Move to: src/main.py          (optional: rename as well)
//! @@ def greet():                   (optional: first find this line)
//!  context line (a space, then the line as it is)
//! -a line to remove
//! +a line to add
//! *** End of File                   (optional: the hunk ends at the end of the file)
//! *** Delete File: old.txt
//! *** End Patch
//! ```

use crate::paths::{FsError, FsResult};

/// Patch lines are numbered from 1 in errors, so the model can find them.
pub type PatchLine = usize;

/// One operation on one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Create `path` (it must not exist) with `content`.
    Add { path: String, content: String },
    /// Remove `path`.
    Delete { path: String },
    /// Change `path` hunk by hunk, and optionally rename it to `move_to`.
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
    /// Replace the one occurrence of `old` in `path` by `new` (the
    /// structured `edits` form of the tool's arguments).
    Replace {
        path: String,
        old: String,
        new: String,
    },
}

impl FileOp {
    /// The file the operation reads or creates.
    pub fn path(&self) -> &str {
        match self {
            FileOp::Add { path, .. }
            | FileOp::Delete { path }
            | FileOp::Update { path, .. }
            | FileOp::Replace { path, .. } => path,
        }
    }
}

/// A run of context, removed and added lines, found in the file in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The text after `@@`: lines to find first, in order, so that the hunk
    /// matches after them (e.g. the class, then the method the change is
    /// in: `@@ class Foo` then `@@ def bar():`).
    pub anchors: Vec<String>,
    /// The hunk's lines, without their prefix.
    pub lines: Vec<HunkLine>,
    /// `*** End of File` followed it: the hunk must end at the file's end.
    pub at_end: bool,
    /// Where the hunk starts in the patch.
    pub patch_line: PatchLine,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// ` line`: in the file before and after.
    Keep(String),
    /// `-line`: in the file before only.
    Remove(String),
    /// `+line`: in the file after only.
    Add(String),
}

impl Hunk {
    /// The lines the file holds before the change.
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Keep(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    /// The lines the file holds after the change.
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Keep(t) | HunkLine::Add(t) => Some(t.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// Parses a whole patch. Every error names the patch line and says what was
/// expected there.
pub fn parse(patch: &str) -> FsResult<Vec<FileOp>> {
    let lines: Vec<&str> = patch
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    // Blank lines around the patch are not part of it.
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return Err(invalid("the patch is empty; it starts with `*** Begin Patch` and ends with `*** End Patch`"));
    };
    if lines[first].trim() != BEGIN {
        return Err(invalid(&format!(
            "patch line {}: the patch must start with `{BEGIN}`, found `{}`",
            first + 1,
            shown(lines[first])
        )));
    }
    if last == first || lines[last].trim() != END {
        return Err(invalid(&format!(
            "patch line {}: the patch must end with `{END}`, found `{}`",
            last + 1,
            shown(lines[last])
        )));
    }
    let mut ops = Vec::new();
    let mut i = first + 1;
    while i < last {
        let line = lines[i];
        let at = i + 1;
        if let Some(path) = line.strip_prefix(ADD) {
            let path = header_path(path, at)?;
            i += 1;
            let mut content = String::new();
            while i < last && !lines[i].starts_with("*** ") {
                match lines[i].strip_prefix('+') {
                    Some(text) => {
                        content.push_str(text);
                        content.push('\n');
                    }
                    None => {
                        return Err(invalid(&format!(
                            "patch line {}: in `*** Add File: {path}` every line of the new file starts with `+`, found `{}`",
                            i + 1,
                            shown(lines[i])
                        )));
                    }
                }
                i += 1;
            }
            ops.push(FileOp::Add { path, content });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: header_path(path, at)?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = header_path(path, at)?;
            i += 1;
            let mut move_to = None;
            if i < last && let Some(dest) = lines[i].strip_prefix(MOVE) {
                move_to = Some(header_path(dest, i + 1)?);
                i += 1;
            }
            let (hunks, next) = parse_hunks(&lines, i, last, &path)?;
            i = next;
            if hunks.is_empty() && move_to.is_none() {
                return Err(invalid(&format!(
                    "patch line {at}: `*** Update File: {path}` has no hunks; add `@@` hunks with ` `/`-`/`+` lines"
                )));
            }
            ops.push(FileOp::Update {
                path,
                move_to,
                hunks,
            });
        } else if line.trim().is_empty() {
            // A blank line between file sections.
            i += 1;
        } else {
            return Err(invalid(&format!(
                "patch line {at}: expected `{ADD}<path>`, `{UPDATE}<path>`, `{DELETE}<path>` or `{END}`, found `{}`",
                shown(line)
            )));
        }
    }
    if ops.is_empty() {
        return Err(invalid("the patch changes no file"));
    }
    Ok(ops)
}

/// The hunks of an `*** Update File` section starting at line `i`, and the
/// index of the line after them.
fn parse_hunks(lines: &[&str], mut i: usize, last: usize, path: &str) -> FsResult<(Vec<Hunk>, usize)> {
    let mut hunks: Vec<Hunk> = Vec::new();
    while i < last {
        let line = lines[i];
        if line.starts_with("*** ") && line.trim() != END_OF_FILE {
            break;
        }
        if let Some(rest) = line.strip_prefix("@@") {
            // `@@`, `@@ anchor`, and unified-diff style `@@ -1,3 +1,4 @@`
            // (whose numbers say nothing we trust: hunks are found by text).
            let anchor = rest.trim();
            let anchor = if anchor.is_empty() || is_unified_range(anchor) {
                None
            } else {
                Some(anchor.to_string())
            };
            match hunks.last_mut() {
                // `@@ a` right after `@@ b`: one more line to find first.
                Some(h) if h.lines.is_empty() && !h.at_end => h.anchors.extend(anchor),
                _ => hunks.push(Hunk {
                    anchors: anchor.into_iter().collect(),
                    lines: Vec::new(),
                    at_end: false,
                    patch_line: i + 1,
                }),
            }
            i += 1;
            continue;
        }
        if line.trim() == END_OF_FILE {
            match hunks.last_mut() {
                Some(h) => h.at_end = true,
                None => {
                    return Err(invalid(&format!(
                        "patch line {}: `{END_OF_FILE}` must follow a hunk of {path}",
                        i + 1
                    )));
                }
            }
            i += 1;
            continue;
        }
        let parsed = match line.chars().next() {
            Some(' ') => HunkLine::Keep(line[1..].to_string()),
            Some('-') => HunkLine::Remove(line[1..].to_string()),
            Some('+') => HunkLine::Add(line[1..].to_string()),
            // Editors and models drop the space of an empty context line.
            None => HunkLine::Keep(String::new()),
            Some(_) => {
                return Err(invalid(&format!(
                    "patch line {}: a hunk line of {path} starts with ` ` (context), `-` (remove) or `+` (add), found `{}`",
                    i + 1,
                    shown(line)
                )));
            }
        };
        if hunks.is_empty() {
            // The first hunk may leave out its `@@`.
            hunks.push(Hunk {
                anchors: Vec::new(),
                lines: Vec::new(),
                at_end: false,
                patch_line: i + 1,
            });
        }
        let hunk = hunks.last_mut().expect("pushed above");
        if hunk.at_end {
            return Err(invalid(&format!(
                "patch line {}: lines after `{END_OF_FILE}` in {path}; start a new hunk with `@@`",
                i + 1
            )));
        }
        hunk.lines.push(parsed);
        i += 1;
    }
    if let Some(h) = hunks.iter().find(|h| h.lines.is_empty()) {
        return Err(invalid(&format!(
            "patch line {}: a hunk of {path} has no lines",
            h.patch_line
        )));
    }
    Ok((hunks, i))
}

/// `-12,3 +12,4 @@` (the rest of a unified-diff hunk header).
fn is_unified_range(s: &str) -> bool {
    let s = s.trim_end_matches('@').trim();
    let mut parts = s.split_whitespace();
    let ok = |p: Option<&str>, sign: char| {
        p.and_then(|p| p.strip_prefix(sign))
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == ','))
    };
    ok(parts.next(), '-') && ok(parts.next(), '+') && parts.next().is_none()
}

fn header_path(raw: &str, at: PatchLine) -> FsResult<String> {
    let path = raw.trim();
    if path.is_empty() {
        return Err(invalid(&format!("patch line {at}: the header names no file")));
    }
    Ok(path.to_string())
}

/// A patch line as quoted in an error: cut, control characters escaped.
fn shown(line: &str) -> String {
    let mut out: String = line.chars().take(120).flat_map(char::escape_debug).collect();
    if line.chars().count() > 120 {
        out.push('…');
    }
    out
}

fn invalid(message: &str) -> FsError {
    FsError::InvalidArgs(message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(s: &str) -> HunkLine {
        HunkLine::Keep(s.into())
    }
    fn rm(s: &str) -> HunkLine {
        HunkLine::Remove(s.into())
    }
    fn add(s: &str) -> HunkLine {
        HunkLine::Add(s.into())
    }

    #[test]
    fn parses_every_operation() {
        let patch = "\n*** Begin Patch\r\n\
*** Add File: notes/new.md\n\
+# Title\n\
+\n\
+body\n\
*** Update File: src/app.py\n\
*** Move to: src/main.py\n\
@@ def greet():\n\
-    print(\"hi\")\n\
+    print(\"hello\")\n\
\n\
\x20return\n\
@@ -10,2 +10,2 @@\n\
\x20x = 1\n\
+y = 2\n\
*** End of File\n\
*** Delete File: old.txt\n\
*** End Patch\n";
        let ops = parse(patch).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            FileOp::Add {
                path: "notes/new.md".into(),
                content: "# Title\n\nbody\n".into()
            }
        );
        let FileOp::Update { path, move_to, hunks } = &ops[1] else {
            panic!("{:?}", ops[1])
        };
        assert_eq!(path, "src/app.py");
        assert_eq!(move_to.as_deref(), Some("src/main.py"));
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].anchors, ["def greet():"]);
        assert_eq!(
            hunks[0].lines,
            [rm("    print(\"hi\")"), add("    print(\"hello\")"), keep(""), keep("return")]
        );
        assert!(!hunks[0].at_end);
        assert!(hunks[1].anchors.is_empty(), "a unified-diff range is not an anchor");
        assert_eq!(hunks[1].lines, [keep("x = 1"), add("y = 2")]);
        assert!(hunks[1].at_end);
        assert_eq!(hunks[0].old_lines(), ["    print(\"hi\")", "", "return"]);
        assert_eq!(hunks[0].new_lines(), ["    print(\"hello\")", "", "return"]);
        assert_eq!(ops[2], FileOp::Delete { path: "old.txt".into() });
    }

    #[test]
    fn first_hunk_may_omit_its_header() {
        let ops = parse("*** Begin Patch\n*** Update File: a\n a\n-b\n+c\n*** End Patch").unwrap();
        let FileOp::Update { hunks, .. } = &ops[0] else { panic!() };
        assert_eq!(hunks[0].lines, [keep("a"), rm("b"), add("c")]);
    }

    #[test]
    fn errors_name_the_line() {
        let err = |p: &str| parse(p).unwrap_err().to_string();
        assert!(err("").contains("the patch is empty"));
        assert!(err("hello\n*** End Patch").starts_with("patch line 1: the patch must start with `*** Begin Patch`"));
        assert!(err("*** Begin Patch\n*** Delete File: a").contains("must end with `*** End Patch`"));
        assert!(err("*** Begin Patch\n*** End Patch").contains("changes no file"));
        let e = err("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch");
        assert_eq!(
            e,
            "patch line 3: in `*** Add File: a` every line of the new file starts with `+`, found `no plus`"
        );
        let e = err("*** Begin Patch\n*** Update File: a\n@@\n x\n?bad\n*** End Patch");
        assert!(e.starts_with("patch line 5: a hunk line of a starts with"), "{e}");
        let e = err("*** Begin Patch\n*** Update File: a\n*** End Patch");
        assert!(e.contains("has no hunks"), "{e}");
        let e = err("*** Begin Patch\n*** Frobnicate File: a\n*** End Patch");
        assert!(e.starts_with("patch line 2: expected `*** Add File: <path>`"), "{e}");
        let e = err("*** Begin Patch\n*** Delete File:   \n*** End Patch");
        assert!(e.contains("names no file"), "{e}");
        let e = err("*** Begin Patch\n*** Update File: a\n@@ x\n y\n@@ z\n*** End Patch");
        assert!(e.contains("patch line 5: a hunk of a has no lines"), "{e}");
        let e = err("*** Begin Patch\n*** Update File: a\n x\n*** End of File\n+y\n*** End Patch");
        assert!(e.contains("lines after `*** End of File`"), "{e}");
        // Control characters in a quoted line are escaped.
        let e = err("*** Begin Patch\n\u{1b}[31m\n*** End Patch");
        assert!(e.contains("\\u{1b}[31m"), "{e}");
    }

    #[test]
    fn consecutive_headers_are_nested_anchors() {
        let ops = parse("*** Begin Patch\n*** Update File: a\n@@ class Foo\n@@     def bar():\n-x\n+y\n@@ z\n-1\n*** End Patch").unwrap();
        let FileOp::Update { hunks, .. } = &ops[0] else { panic!() };
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].anchors, ["class Foo", "def bar():"]);
        assert_eq!(hunks[0].patch_line, 3);
        assert_eq!(hunks[1].anchors, ["z"]);
    }

    #[test]
    fn move_without_hunks_is_a_rename() {
        let ops = parse("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch").unwrap();
        assert_eq!(
            ops,
            [FileOp::Update {
                path: "a".into(),
                move_to: Some("b".into()),
                hunks: vec![]
            }]
        );
    }
}
