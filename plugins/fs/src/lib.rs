//! chitin-plugin-fs: file tools over the agent's workspace.
//!
//! The sandbox preopens the workspace as the WASI directory ".", so every
//! tool works on paths relative to [`ROOT`]. The logic lives in one module
//! per tool, plain functions over `std::fs` that know nothing of the SDK and
//! are tested natively; this file only declares the tools.

use std::path::Path;

use chitin_sdk::prelude::*;

pub mod apply;
pub mod docx;
pub mod edit;
pub mod extract;
pub mod find;
pub mod grep;
pub mod list;
pub mod patch;
pub mod paths;
pub mod pdf;
pub mod read;
pub mod text;
pub mod write;

use paths::FsError;

/// The workspace, as the sandbox preopens it.
const ROOT: &str = ".";

fn root() -> &'static Path {
    Path::new(ROOT)
}

impl From<FsError> for ToolError {
    fn from(err: FsError) -> Self {
        match err {
            FsError::Failed(m) => ToolError::failed(m),
            FsError::Denied(m) => ToolError::denied(m),
            FsError::InvalidArgs(m) => ToolError::invalid_args(m),
        }
    }
}

#[derive(Deserialize, ToolArgs)]
struct ReadFileArgs {
    /// Path of the file, relative to the workspace root (e.g. `src/main.rs`).
    path: String,
    /// Line to start from, 1-based (default 1). Use it to continue a long file.
    offset: Option<usize>,
    /// Maximum number of lines to return (default 2000).
    limit: Option<usize>,
}

/// Read a text file of the workspace. Lines come numbered as `   12| text`;
/// the number and `| ` are not part of the file. At most `limit` lines (2000
/// by default) are returned; when more remain, the output ends with the
/// `offset` to continue from. Lines longer than 2000 characters are cut.
/// PDF and Word (.docx) files come as their extracted text, paged the same
/// way, after a note saying so (PDF pages start with `--- page N of M ---`).
/// Other binary files and files over 10 MiB are refused (use grep on those).
#[tool(read_only, concurrency_safe)]
fn read_file(args: ReadFileArgs) -> Result<String, FsError> {
    read::read_file(root(), &args.path, args.offset, args.limit)
}

#[derive(Deserialize, ToolArgs)]
struct WriteFileArgs {
    /// Path of the file, relative to the workspace root. Missing parent
    /// directories are created.
    path: String,
    /// The complete new content of the file.
    content: String,
}

/// Create a file, or overwrite one, with the given content. Prefer edit_file
/// to change part of an existing file.
#[tool]
fn write_file(args: WriteFileArgs) -> Result<String, FsError> {
    write::write_file(root(), &args.path, &args.content)
}

#[derive(Deserialize, ToolArgs)]
struct EditFileArgs {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// The exact text to replace, including whitespace and indentation, as in
    /// the file (without read_file's line-number prefixes). It must occur
    /// exactly once unless `replace_all` is set: include enough surrounding
    /// lines to make it unique.
    old_text: String,
    /// The text to put in its place.
    new_text: String,
    /// Replace every occurrence of `old_text` instead of exactly one (default
    /// false).
    #[serde(default)]
    replace_all: bool,
}

/// Replace exact text in a file. Fails, changing nothing, when `old_text`
/// does not occur (the error shows the most similar lines of the file) or
/// occurs more than once without `replace_all` (the error gives the lines).
/// Read the file first so `old_text` matches it character for character.
#[tool]
fn edit_file(args: EditFileArgs) -> Result<String, FsError> {
    edit::edit_file(
        root(),
        &args.path,
        &args.old_text,
        &args.new_text,
        args.replace_all,
    )
}

#[derive(Deserialize, ToolArgs)]
struct ApplyPatchArgs {
    /// The patch: `*** Begin Patch`, then one section per file, then `*** End
    /// Patch`. Sections: `*** Add File: path` followed by the new file's lines,
    /// each prefixed with `+`; `*** Delete File: path`; `*** Update File: path`
    /// (optionally followed by `*** Move to: new/path`) followed by hunks. A
    /// hunk starts with `@@` (optionally `@@ line to find first`, e.g. the
    /// function's first line; several `@@` lines in a row narrow it down,
    /// e.g. the class, then the method) and has lines prefixed with ` ` (unchanged
    /// context, 3 lines before and after a change), `-` (removed) or `+`
    /// (added); `*** End of File` after a hunk anchors it at the file's end.
    /// Give either `patch` or `edits`.
    patch: Option<String>,
    /// Instead of `patch`: up to 20 edits, applied in order. `replace`
    /// replaces `old_text` (exact, occurring once) by `new_text` in the file
    /// `path`; `add` creates the new file `path` holding `new_text`.
    edits: Option<Vec<PatchEdit>>,
    /// Check the patch and report what it would change (files, +/- line
    /// counts, a short diff) without writing anything (default false).
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize, ToolArgs)]
struct PatchEdit {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// `replace` (change an existing file) or `add` (create a new file).
    action: PatchAction,
    /// For `replace`: the exact text to replace, as in the file.
    old_text: Option<String>,
    /// The replacement text (`replace`) or the new file's content (`add`).
    new_text: Option<String>,
}

#[derive(Deserialize, ToolArgs)]
#[serde(rename_all = "lowercase")]
enum PatchAction {
    Replace,
    Add,
}

/// Change several files in one call: add, update (by context hunks), move
/// and delete files. All or nothing: every hunk is checked against the
/// current files first; if one does not match, nothing is written and the
/// error names the file and hunk and shows the most similar lines. Use
/// `dry_run` to preview. Read the files first so the context lines match.
#[tool]
fn apply_patch(args: ApplyPatchArgs) -> Result<String, FsError> {
    let ops = match (args.patch, args.edits) {
        (Some(patch), None) => patch::parse(&patch)?,
        (None, Some(edits)) => apply::edits_to_ops(
            edits
                .into_iter()
                .map(|e| apply::Edit {
                    path: e.path,
                    action: match e.action {
                        PatchAction::Replace => apply::EditAction::Replace,
                        PatchAction::Add => apply::EditAction::Add,
                    },
                    old_text: e.old_text,
                    new_text: e.new_text,
                })
                .collect(),
        )?,
        (Some(_), Some(_)) => {
            return Err(FsError::InvalidArgs(
                "give either `patch` or `edits`, not both".into(),
            ));
        }
        (None, None) => {
            return Err(FsError::InvalidArgs(
                "give `patch` (the *** Begin Patch format) or `edits` (a list of replace/add edits)".into(),
            ));
        }
    };
    apply::apply_patch(root(), ops, args.dry_run)
}

#[derive(Deserialize, ToolArgs)]
struct ListDirArgs {
    /// Directory to list, relative to the workspace root (default `.`, the
    /// root itself).
    path: Option<String>,
    /// List the whole tree below the directory, not just its entries (default
    /// false).
    #[serde(default)]
    recursive: bool,
    /// Maximum number of entries to return (default 500).
    max_entries: Option<usize>,
}

/// List a directory of the workspace: one path per line, relative to the
/// workspace root, sorted, directories ending in `/`. `.git`, `target` and
/// `node_modules` are not entered (name one as `path` to look inside).
#[tool(read_only, concurrency_safe)]
fn list_dir(args: ListDirArgs) -> Result<String, FsError> {
    let path = args.path.as_deref().unwrap_or(ROOT);
    list::list_dir(root(), path, args.recursive, args.max_entries)
}

#[derive(Deserialize, ToolArgs)]
struct FindFilesArgs {
    /// Glob matched against file paths relative to `path`: `*` and `?` stay
    /// within one directory, `**` spans directories, `{a,b}` gives
    /// alternatives. E.g. `**/*.rs`, `src/**/test_*.py`, `*.{toml,json}`.
    pattern: String,
    /// Directory to search in, relative to the workspace root (default `.`).
    path: Option<String>,
    /// Maximum number of paths to return (default 200).
    max_results: Option<usize>,
}

/// Find files by name with a glob pattern. Returns matching file paths
/// relative to the workspace root, sorted, one per line. `.git`, `target` and
/// `node_modules` are not searched unless given as `path`.
#[tool(read_only, concurrency_safe)]
fn find_files(args: FindFilesArgs) -> Result<String, FsError> {
    let path = args.path.as_deref().unwrap_or(ROOT);
    find::find_files(root(), &args.pattern, path, args.max_results)
}

#[derive(Deserialize, ToolArgs)]
struct GrepArgs {
    /// Regular expression (Rust regex syntax, like ripgrep's) searched for in
    /// each line, e.g. `fn\s+main` or `TODO|FIXME`.
    pattern: String,
    /// File or directory to search, relative to the workspace root (default
    /// `.`).
    path: Option<String>,
    /// Only search files whose name matches this glob, e.g. `*.rs` or
    /// `*.{ts,tsx}`; with a `/` it is matched against the path below `path`.
    glob: Option<String>,
    /// Match letters regardless of case (default false).
    #[serde(default)]
    case_insensitive: bool,
    /// Maximum number of matching lines to return (default 100).
    max_results: Option<usize>,
}

/// Search file contents with a regular expression. Returns `path:line: text`
/// for each matching line, paths relative to the workspace root. Binary files
/// and `.git`, `target` and `node_modules` are skipped.
#[tool(read_only, concurrency_safe)]
fn grep(args: GrepArgs) -> Result<String, FsError> {
    grep::grep(
        root(),
        &grep::GrepArgs {
            pattern: &args.pattern,
            path: args.path.as_deref().unwrap_or(ROOT),
            glob: args.glob.as_deref(),
            case_insensitive: args.case_insensitive,
            max_results: args.max_results,
        },
    )
}

plugin! {
    name: "fs",
    description: "Read, write, edit and search files in the workspace",
    workspace: "read-write",
    network: [],
    tools: [read_file, write_file, edit_file, apply_patch, list_dir, find_files, grep],
}
