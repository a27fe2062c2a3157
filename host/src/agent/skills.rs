//! Skills: markdown instructions the model can follow, one per directory.
//!
//! A skill lives in `<workspace>/skills/<name>/SKILL.md`:
//!
//! ```text
//! ---
//! name: weather
//! description: Look up the forecast with the fetch tool.
//! always: true
//! ---
//! <body: markdown instructions>
//! ```
//!
//! Always-on skills (`always: true`) are inlined into the system prompt;
//! the others are only listed (name, description, path) and the model reads
//! the one it needs with `read_file`, which keeps the prompt small however
//! many skills are installed.
//!
//! Skills are user-editable files, so loading is forgiving: a file without
//! front matter still works (the directory name is the name, the first
//! non-empty line the description), and a malformed one is skipped with a
//! warning naming the file — a typo in one skill must never break a turn.
//!
//! [`SkillsLoader::load`] runs on every turn (skills may be added or edited
//! between turns, by the user or by the model itself), so parsed skills are
//! cached by `(path, mtime, len)` and an unchanged file is never re-parsed.
//!
//! Plugins can write `skills/` too: files are read through [`Workspace`]
//! (no symlinks out, no special files) and capped at [`MAX_SKILL_BYTES`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_yaml_ng::Value;

use crate::workspace::Workspace;

/// A `SKILL.md` is read up to this size; the rest is cut with a note.
pub const MAX_SKILL_BYTES: usize = 256 * 1024;

/// The skills directory, relative to the workspace.
pub const SKILLS_DIR: &str = "skills";

/// The file that defines a skill, inside its directory.
pub const SKILL_FILE: &str = "SKILL.md";

/// One loaded skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// From the front matter, else the directory name.
    pub name: String,
    /// From the front matter, else the body's first non-empty line.
    pub description: String,
    /// Inline the body into every system prompt.
    pub always: bool,
    /// Absolute path of the `SKILL.md` file.
    pub path: PathBuf,
    /// The markdown after the front matter, trimmed.
    pub body: String,
}

/// What identifies one version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime: Option<SystemTime>,
    len: u64,
}

impl Stamp {
    fn of(meta: &cap_std::fs::Metadata) -> Self {
        Stamp { mtime: meta.modified().ok().map(|t| t.into_std()), len: meta.len() }
    }
}

/// Cached parse of one file version. `None` records a malformed file, so its
/// warning is logged once per version, not once per turn.
struct Cached {
    stamp: Stamp,
    skill: Option<Skill>,
}

/// Loads the skills of one workspace, caching parsed files between calls.
///
/// Cheap to share: `load` takes `&self` (the cache sits behind a mutex).
pub struct SkillsLoader {
    workspace: Workspace,
    dir: PathBuf,
    cache: Mutex<HashMap<PathBuf, Cached>>,
}

impl SkillsLoader {
    /// A loader for `<workspace>/skills`. Nothing is read until [`load`](Self::load).
    pub fn new(workspace: &Workspace) -> Self {
        SkillsLoader { dir: workspace.root().join(SKILLS_DIR), workspace: workspace.clone(), cache: Mutex::new(HashMap::new()) }
    }

    /// The skills directory (`<workspace>/skills`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every valid skill, sorted by name (ties by path, so the order is total
    /// and the prompt built from it is stable). A missing skills directory
    /// means no skills; unreadable or malformed files are skipped with a
    /// warning.
    pub fn load(&self) -> Vec<Skill> {
        let names = match self.workspace.list_dir(Path::new(SKILLS_DIR)) {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list skills directory");
                return Vec::new();
            }
        };
        if names.is_empty() {
            self.lock().clear();
            return Vec::new();
        }

        // `list_dir` sorts, so the order is stable. Hidden directories (.git,
        // editor state) are not skills. A skill directory linked elsewhere
        // inside the workspace works; one linked out is refused below.
        let files: Vec<(String, PathBuf)> = names
            .into_iter()
            .filter(|name| !name.starts_with('.'))
            .map(|name| {
                let rel = Path::new(SKILLS_DIR).join(&name).join(SKILL_FILE);
                (name, rel)
            })
            .collect();

        let mut cache = self.lock();
        let mut present = Vec::with_capacity(files.len());
        let mut skills = Vec::with_capacity(files.len());
        for (dir_name, rel) in files {
            let meta = match self.workspace.file_metadata(&rel) {
                Ok(Some(meta)) => {
                    present.push(rel.clone());
                    meta
                }
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "skill skipped");
                    continue;
                }
            };
            let stamp = Stamp::of(&meta);
            if let Some(hit) = cache.get(&rel).filter(|c| c.stamp == stamp) {
                skills.extend(hit.skill.clone());
                continue;
            }
            let file = self.workspace.root().join(&rel);
            let skill = match self.workspace.read_capped(&rel, MAX_SKILL_BYTES) {
                // Lossy: one stray byte should not hide a whole skill.
                Ok(Some(read)) => {
                    let mut text = String::from_utf8_lossy(&read.bytes).into_owned();
                    if read.truncated {
                        text.push_str(&format!("\n\n[... truncated: the file is {} bytes, only the first {MAX_SKILL_BYTES} are read.]", read.len));
                    }
                    match parse_skill(&text, &dir_name, &file) {
                        Ok(skill) => Some(skill),
                        Err(reason) => {
                            tracing::warn!(file = %file.display(), %reason, "malformed skill; skipped");
                            None
                        }
                    }
                }
                Ok(None) => continue,
                Err(e) => {
                    // Not cached: a read error may be transient.
                    tracing::warn!(error = %e, "cannot read skill file; skipped");
                    continue;
                }
            };
            skills.extend(skill.clone());
            cache.insert(rel, Cached { stamp, skill });
        }
        // Forget deleted skills so the cache never outgrows the directory.
        cache.retain(|path, _| present.contains(path));
        drop(cache);

        skills.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.path.cmp(&b.path)));
        skills
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Cached>> {
        // A panic elsewhere while holding the lock leaves a cache that is at
        // worst stale by one entry; keep serving it rather than poisoning turns.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Parses one `SKILL.md`. `Err` carries a human-readable reason.
fn parse_skill(text: &str, dir_name: &str, path: &Path) -> Result<Skill, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = split_front_matter(text)?;
    let body = body.trim().to_string();

    let mut name = None;
    let mut description = None;
    let mut always = false;
    if let Some(front) = front {
        let value: Value = serde_yaml_ng::from_str(front).map_err(|e| format!("front matter is not valid YAML: {e}"))?;
        match value {
            // `---\n---`: empty front matter, all defaults.
            Value::Null => {}
            Value::Mapping(_) => {
                name = scalar_string(&value, "name")?;
                description = scalar_string(&value, "description")?;
                always = flag(&value, "always")?;
            }
            _ => return Err("front matter is not a mapping of keys to values".into()),
        }
    }

    let name = name.filter(|n| !n.trim().is_empty()).map(|n| n.trim().to_string()).unwrap_or_else(|| dir_name.to_string());
    let description = description
        .map(|d| one_line(&d))
        .filter(|d| !d.is_empty())
        .or_else(|| first_line(&body))
        .unwrap_or_default();
    Ok(Skill { name, description, always, path: path.to_path_buf(), body })
}

/// Splits `---\n<yaml>\n---\n<body>` into `(Some(yaml), body)`; text that does
/// not open with `---` has no front matter. An opening fence that is never
/// closed is an error: treating the YAML as body would inline it silently.
fn split_front_matter(text: &str) -> Result<(Option<&str>, &str), String> {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else { return Ok((None, text)) };
    if first.trim_end() != "---" {
        return Ok((None, text));
    }
    let start = first.len();
    let mut offset = start;
    for line in lines {
        let fence = line.trim_end();
        if fence == "---" || fence == "..." {
            return Ok((Some(&text[start..offset]), &text[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err("front matter opened with `---` is never closed".into())
}

/// `key` as a string: absent or null is `None`; a number or bool is taken as
/// written (`name: 2048` is a fine name); anything else is an error.
fn scalar_string(map: &Value, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

/// `key` as a flag: absent or null is false; `"true"`/`"false"` strings are
/// accepted because hand-written YAML often quotes them.
fn flag(map: &Value, key: &str) -> Result<bool, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(_) => Err(format!("`{key}` must be true or false")),
    }
}

/// The first non-empty line of the body, without markdown heading marks
/// (a body usually opens with `# Title`), as a fallback description.
fn first_line(body: &str) -> Option<String> {
    body.lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Collapses whitespace (including newlines of a YAML block scalar) so a
/// description fits on one list line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};

    fn write_skill(ws: &Path, dir: &str, text: &str) -> PathBuf {
        let d = ws.join(SKILLS_DIR).join(dir);
        fs::create_dir_all(&d).unwrap();
        let f = d.join(SKILL_FILE);
        fs::write(&f, text).unwrap();
        f
    }

    #[test]
    fn missing_dir_means_no_skills() {
        let ws = tempfile::tempdir().unwrap();
        assert!(SkillsLoader::new(&Workspace::open(ws.path()).unwrap()).load().is_empty());
    }

    #[test]
    fn front_matter_is_parsed_and_sorted_by_name() {
        let ws = tempfile::tempdir().unwrap();
        write_skill(ws.path(), "b-dir", "---\nname: zeta\ndescription: Last one.\nalways: true\n---\n\n# Zeta\nDo Z.\n");
        write_skill(ws.path(), "a-dir", "---\nname: alpha\ndescription: >\n  Folded\n  text.\n---\nDo A.");
        let skills = SkillsLoader::new(&Workspace::open(ws.path()).unwrap()).load();
        assert_eq!(skills.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["alpha", "zeta"]);
        assert_eq!(skills[0].description, "Folded text.");
        assert!(!skills[0].always);
        assert_eq!(skills[0].body, "Do A.");
        assert!(skills[1].always);
        assert_eq!(skills[1].body, "# Zeta\nDo Z.");
        assert_eq!(skills[1].path, ws.path().join("skills/b-dir/SKILL.md"));
    }

    #[test]
    fn no_front_matter_uses_dir_name_and_first_line() {
        let ws = tempfile::tempdir().unwrap();
        write_skill(ws.path(), "notes", "\n\n# Take notes in notes.md\n\nMore.\n");
        let skills = SkillsLoader::new(&Workspace::open(ws.path()).unwrap()).load();
        assert_eq!(skills.len(), 1);
        assert_eq!(skills[0].name, "notes");
        assert_eq!(skills[0].description, "Take notes in notes.md");
        assert!(!skills[0].always);
    }

    #[test]
    fn crlf_bom_quoted_flag_and_empty_front_matter() {
        let ws = tempfile::tempdir().unwrap();
        write_skill(ws.path(), "win", "\u{feff}---\r\ndescription: From Windows\r\nalways: \"true\"\r\n---\r\nBody\r\n");
        write_skill(ws.path(), "empty", "---\n---\nJust a body.\n");
        let skills = SkillsLoader::new(&Workspace::open(ws.path()).unwrap()).load();
        assert_eq!(skills.len(), 2);
        assert_eq!((skills[0].name.as_str(), skills[0].description.as_str()), ("empty", "Just a body."));
        assert_eq!((skills[1].name.as_str(), skills[1].description.as_str()), ("win", "From Windows"));
        assert!(skills[1].always);
        assert_eq!(skills[1].body, "Body");
    }

    #[test]
    fn malformed_skills_are_skipped_not_fatal() {
        let ws = tempfile::tempdir().unwrap();
        write_skill(ws.path(), "good", "---\nname: good\ndescription: fine\n---\nok");
        write_skill(ws.path(), "bad-yaml", "---\nname: [unclosed\n---\nbody");
        write_skill(ws.path(), "unclosed", "---\nname: x\nbody without a closing fence");
        write_skill(ws.path(), "list", "---\n- a\n- b\n---\nbody");
        write_skill(ws.path(), "bad-flag", "---\nalways: sometimes\n---\nbody");
        // A directory without SKILL.md and a hidden one are ignored.
        fs::create_dir_all(ws.path().join("skills/empty-dir")).unwrap();
        write_skill(ws.path(), ".hidden", "---\nname: hidden\n---\n");
        let names: Vec<_> = SkillsLoader::new(&Workspace::open(ws.path()).unwrap()).load().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["good"]);
    }

    #[test]
    fn unchanged_files_come_from_the_cache() {
        let ws = tempfile::tempdir().unwrap();
        let file = write_skill(ws.path(), "c", "---\ndescription: one\n---\nbody");
        let loader = SkillsLoader::new(&Workspace::open(ws.path()).unwrap());
        assert_eq!(loader.load()[0].description, "one");

        // Same length, same mtime: the loader must not re-read the file, so
        // the old description proves the cache was used.
        let mtime = fs::metadata(&file).unwrap().modified().unwrap();
        fs::write(&file, "---\ndescription: two\n---\nbody").unwrap();
        File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        assert_eq!(loader.load()[0].description, "one");

        // A different length is a new version.
        fs::write(&file, "---\ndescription: three!\n---\nbody").unwrap();
        assert_eq!(loader.load()[0].description, "three!");

        // Deleted skills disappear (and leave the cache).
        fs::remove_file(&file).unwrap();
        assert!(loader.load().is_empty());
        assert!(loader.lock().is_empty());
    }
}
