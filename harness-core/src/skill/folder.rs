//! A skill's folder, loaded and checked ([`Skill`]), and what an execution is granted
//! ([`SkillManifest`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::front::{self, shown};
use crate::file::FileHandle;

/// The file of a skill's folder that defines it.
pub const SKILL_FILE: &str = "SKILL.md";

/// The default [`SkillLimits::max_skill_bytes`]: 8 MiB.
pub const DEFAULT_MAX_SKILL_BYTES: u64 = 8 * 1024 * 1024;
/// The default [`SkillLimits::max_file_bytes`]: 2 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// The default [`SkillLimits::max_files`].
pub const DEFAULT_MAX_FILES: usize = 256;
/// The default [`SkillLimits::max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 8;

/// Bounds on one skill folder, checked when it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkillLimits {
    /// The most bytes of the folder's files together, `SKILL.md` included.
    pub max_skill_bytes: u64,
    /// The most bytes of one file, `SKILL.md` included.
    pub max_file_bytes: u64,
    /// The most files in the folder, `SKILL.md` included.
    pub max_files: usize,
    /// The most nested folders under the skill's folder.
    pub max_depth: usize,
}

impl Default for SkillLimits {
    fn default() -> Self {
        Self {
            max_skill_bytes: DEFAULT_MAX_SKILL_BYTES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// A skill folder (or a skill's bytes) that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("skill {what}: {reason}")]
pub struct InvalidSkill {
    what: String,
    reason: String,
}

impl InvalidSkill {
    fn new(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            reason: reason.into(),
        }
    }

    fn at(folder: &Path, reason: impl Into<String>) -> Self {
        Self::new(format!("folder `{}`", folder.display()), reason)
    }

    /// What is wrong, without the folder.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// One file of a skill's folder (other than `SKILL.md`): its path in the folder and a read
/// handle on its bytes.
#[derive(Debug, Clone)]
pub struct SkillFile {
    path: String,
    handle: FileHandle,
}

impl SkillFile {
    /// Its path relative to the skill's folder, `/`-separated, without `.` or `..`
    /// (`scripts/fill.py`).
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.handle.size()
    }

    /// Its read handle.
    #[must_use]
    pub fn handle(&self) -> &FileHandle {
        &self.handle
    }
}

/// One skill: its front matter's `name` and `description`, its body, its `SKILL.md` and its
/// other files. Cheap to clone.
#[derive(Clone)]
pub struct Skill(Arc<Inner>);

struct Inner {
    name: String,
    description: String,
    body: String,
    skill_md: FileHandle,
    files: Vec<SkillFile>,
}

impl fmt::Debug for Skill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skill")
            .field("name", &self.0.name)
            .field("files", &self.0.files.len())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Skill {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Whether `path` is a relative, `/`-separated path without empty, `.` or `..` segments,
/// backslashes or control characters.
fn is_clean_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 1024
        && !path.chars().any(|c| c.is_control() || c == '\\')
        && path
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

impl Skill {
    /// A skill from its `SKILL.md` bytes and its other files (path in the folder → bytes),
    /// checked as [`load`](Self::load) checks a folder (but no folder name to match).
    ///
    /// # Errors
    /// [`InvalidSkill`]: the front matter, a name or description out of bounds, a file path
    /// that is not clean (absolute, `..`, `.`, empty segments, backslashes), a path given
    /// twice or `SKILL.md` among the files, or sizes beyond `limits`.
    pub fn parse<P: AsRef<str>>(
        skill_md: &[u8],
        files: impl IntoIterator<Item = (P, Vec<u8>)>,
        limits: &SkillLimits,
    ) -> Result<Self, InvalidSkill> {
        let mut total = skill_md.len() as u64;
        let mut count = 1usize;
        if skill_md.len() as u64 > limits.max_file_bytes {
            return Err(InvalidSkill::new(
                "`SKILL.md`",
                format!(
                    "{} bytes, more than the {} a file may have",
                    skill_md.len(),
                    limits.max_file_bytes
                ),
            ));
        }
        let mut out: Vec<SkillFile> = Vec::new();
        for (path, bytes) in files {
            let path = path.as_ref();
            count += 1;
            if count > limits.max_files {
                return Err(InvalidSkill::new(
                    "files",
                    format!("more than {} files", limits.max_files),
                ));
            }
            if !is_clean_path(path) || path == SKILL_FILE {
                return Err(InvalidSkill::new(
                    format!("file {}", shown(path)),
                    "a file's path must be relative, `/`-separated, without `.`, `..` or empty \
                     segments, and not `SKILL.md`",
                ));
            }
            if path.split('/').count() > limits.max_depth + 1 {
                return Err(InvalidSkill::new(
                    format!("file {}", shown(path)),
                    format!("nested deeper than {} folders", limits.max_depth),
                ));
            }
            let size = bytes.len() as u64;
            if size > limits.max_file_bytes {
                return Err(InvalidSkill::new(
                    format!("file {}", shown(path)),
                    format!(
                        "{size} bytes, more than the {} a file may have",
                        limits.max_file_bytes
                    ),
                ));
            }
            total = total.saturating_add(size);
            if total > limits.max_skill_bytes {
                return Err(InvalidSkill::new(
                    "files",
                    format!(
                        "more than {} bytes together (at {})",
                        limits.max_skill_bytes,
                        shown(path)
                    ),
                ));
            }
            if out.iter().any(|f| f.path == path) {
                return Err(InvalidSkill::new(
                    format!("file {}", shown(path)),
                    "given twice",
                ));
            }
            out.push(SkillFile {
                path: path.to_owned(),
                handle: FileHandle::new(Arc::<[u8]>::from(bytes)),
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        let text = std::str::from_utf8(skill_md)
            .map_err(|_| InvalidSkill::new("`SKILL.md`", "not UTF-8"))?;
        let (front, body) =
            front::parse(text).map_err(|reason| InvalidSkill::new("`SKILL.md`", reason))?;
        Ok(Self(Arc::new(Inner {
            name: front.name,
            description: front.description,
            body: body.to_owned(),
            skill_md: FileHandle::new(Arc::<[u8]>::from(skill_md)),
            files: out,
        })))
    }

    /// Loads the skill folder `dir` (blocking file reads: call it at start-up, or from
    /// `spawn_blocking`). Its `SKILL.md`'s `name` must be the folder's name.
    ///
    /// # Errors
    /// [`InvalidSkill`] naming the folder: not a folder, no `SKILL.md`, a symbolic link or a
    /// special file in it, a path that is not UTF-8, limits passed, or what
    /// [`parse`](Self::parse) refuses.
    pub fn load(dir: &Path, limits: &SkillLimits) -> Result<Self, InvalidSkill> {
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| InvalidSkill::at(dir, format!("cannot be read: {e}")))?;
        if meta.file_type().is_symlink() {
            return Err(InvalidSkill::at(
                dir,
                "is a symbolic link: install the folder itself",
            ));
        }
        if !meta.is_dir() {
            return Err(InvalidSkill::at(dir, "is not a folder"));
        }
        let folder = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| InvalidSkill::at(dir, "its name is not UTF-8"))?;
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        walk(dir, dir, "", 0, limits, &mut files)?;
        let mut skill_md = None;
        let mut rest = Vec::with_capacity(files.len());
        let mut total = 0u64;
        for (rel, path) in files {
            let bytes = read_bounded(&path, limits.max_file_bytes)
                .map_err(|reason| InvalidSkill::at(dir, format!("file `{rel}`: {reason}")))?;
            total = total.saturating_add(bytes.len() as u64);
            if total > limits.max_skill_bytes {
                return Err(InvalidSkill::at(
                    dir,
                    format!(
                        "its files have more than {} bytes together",
                        limits.max_skill_bytes
                    ),
                ));
            }
            if rel == SKILL_FILE {
                skill_md = Some(bytes);
            } else {
                rest.push((rel, bytes));
            }
        }
        let Some(skill_md) = skill_md else {
            return Err(InvalidSkill::at(dir, "has no `SKILL.md`"));
        };
        let skill = Self::parse(&skill_md, rest, limits)
            .map_err(|e| InvalidSkill::at(dir, format!("{}: {}", e.what, e.reason)))?;
        if skill.name() != folder {
            return Err(InvalidSkill::at(
                dir,
                format!(
                    "`SKILL.md` names the skill `{}` but the folder is `{folder}`: a skill's \
                     folder has its name",
                    skill.name()
                ),
            ));
        }
        Ok(skill)
    }

    /// Its name (unique in a catalog).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its description: what it does and when to use it.
    #[must_use]
    pub fn description(&self) -> &str {
        &self.0.description
    }

    /// Its instructions: `SKILL.md` after the front matter.
    #[must_use]
    pub fn body(&self) -> &str {
        &self.0.body
    }

    /// `SKILL.md` as installed (front matter and body), for a harness that reads skill
    /// folders itself.
    #[must_use]
    pub fn skill_md(&self) -> &FileHandle {
        &self.0.skill_md
    }

    /// Its other files, by path.
    #[must_use]
    pub fn files(&self) -> &[SkillFile] {
        &self.0.files
    }

    /// Its file at `path` (not `SKILL.md`).
    #[must_use]
    pub fn file(&self, path: &str) -> Option<&SkillFile> {
        self.0
            .files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.0.files[i])
    }
}

/// Collects the regular files under `dir` (relative paths), refusing links and special files.
fn walk(
    root: &Path,
    dir: &Path,
    prefix: &str,
    depth: usize,
    limits: &SkillLimits,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), InvalidSkill> {
    if depth > limits.max_depth {
        return Err(InvalidSkill::at(
            root,
            format!(
                "`{prefix}` is nested deeper than {} folders",
                limits.max_depth
            ),
        ));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| InvalidSkill::at(root, format!("cannot list: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| InvalidSkill::at(root, format!("cannot list: {e}")))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(InvalidSkill::at(
                root,
                format!("a name under `{prefix}` is not UTF-8"),
            ));
        };
        let rel = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| InvalidSkill::at(root, format!("`{rel}`: {e}")))?;
        if kind.is_symlink() {
            return Err(InvalidSkill::at(
                root,
                format!("`{rel}` is a symbolic link: a skill's files are its own"),
            ));
        }
        if kind.is_dir() {
            walk(root, &entry.path(), &rel, depth + 1, limits, out)?;
        } else if kind.is_file() {
            if out.len() >= limits.max_files {
                return Err(InvalidSkill::at(
                    root,
                    format!("has more than {} files", limits.max_files),
                ));
            }
            if !is_clean_path(&rel) {
                return Err(InvalidSkill::at(
                    root,
                    format!("`{rel}` has a name a skill's file may not have"),
                ));
            }
            out.push((rel, entry.path()));
        } else {
            return Err(InvalidSkill::at(
                root,
                format!("`{rel}` is not a regular file or a folder"),
            ));
        }
    }
    Ok(())
}

/// Reads `path`, refusing it past `max` bytes without reading more than `max + 1`.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("more than the {max} bytes a file may have"));
    }
    Ok(bytes)
}

/// The skills granted to one execution, in the order the request asked for them; empty
/// unless the request asked for some.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkillManifest {
    skills: Vec<Skill>,
}

impl SkillManifest {
    /// A manifest of `skills` (the service builds it with [`SkillCatalog::grant`](super::SkillCatalog::grant); a test
    /// of a runtime may build one directly).
    #[must_use]
    pub fn new(skills: Vec<Skill>) -> Self {
        Self { skills }
    }

    /// Whether no skill is granted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// How many skills are granted.
    #[must_use]
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// The granted skills.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter()
    }

    /// The granted skill `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name() == name)
    }
}
