//! Skills (the contract's `SkillManifest`): operator-installed folders in the Agent Skills
//! format (<https://agentskills.io>) — a `SKILL.md` whose YAML front matter gives a `name` and
//! a `description`, its markdown body, and the folder's other files — granted per execution.
//!
//! - [`Skill`]: one skill, loaded once ([`Skill::load`] from a folder, or [`Skill::parse`]
//!   from bytes), its files behind read handles ([`FileHandle`](crate::file::FileHandle)).
//! - [`SkillCatalog`]: what the operator offers a service: the installed skills, who may use
//!   each, and a block list.
//! - [`SkillManifest`]: what one execution was granted, in
//!   [`RuntimeContext::skills`](crate::adapter::RuntimeContext::skills).
//! - [`disclosure`]: progressive disclosure for a model loop (a listing for its instructions,
//!   and the `skills.load` and `skills.read` tools).
//!
//! # What happens when...
//!
//! - **the operator installs a folder**: [`Skill::load`] reads it once, whole, within
//!   [`SkillLimits`] (the folder's bytes, each file's, the number of files, the depth);
//!   `SKILL.md` must open with a front matter block whose `name` is the folder's name
//!   (lowercase letters, digits and single hyphens, at most [`MAX_NAME_CHARS`]) and whose
//!   `description` is at most [`MAX_DESCRIPTION_CHARS`]; a symbolic link anywhere in the
//!   folder, a file that is not a regular file, or a path that is not UTF-8 refuses the
//!   folder, naming it and what is wrong.
//! - **a request asks for skills** (`"skills": ["pdf-forms"]`): before anything runs (and
//!   before any event), the service's [`SkillCatalog`] grants them for the request's caller
//!   ([`SkillCatalog::grant`]), or the request is refused: `SKILL_BLOCKED` for a name on the
//!   operator's block list, `SKILL_NOT_FOUND` for any other name the caller cannot see. An
//!   adapter whose `skills` capability is not usable refuses such a request
//!   `CAPABILITY_UNSUPPORTED`, before the names are looked at.
//! - **a runtime delivers them**: it gets a [`SkillManifest`]: names, descriptions, bodies,
//!   and files as read handles, never host paths. How the harness sees them is the adapter's
//!   (a model loop by [`disclosure`], an ACP agent by files written in its workspace).
//!
//! Decisions where the spec is silent:
//! - A folder is read whole when it is loaded and kept in memory (it is bounded by
//!   [`SkillLimits`]): what an execution is granted cannot change under it, and no host path
//!   is kept. An operator who edits a skill restarts the service.
//! - The front matter parser is a strict subset of YAML, not a YAML library: top-level
//!   `key: value` lines, values plain or quoted (`"..."` with `\"`, `\\` and `\n` escapes, or
//!   `'...'` with `''`), or a `|`/`>` block of indented lines. `name` and `description` are
//!   read; other keys (`license`, `compatibility`, `metadata`, `allowed-tools`, and any
//!   other) are skipped with their indented lines. A key given twice, a line that is not
//!   `key: value`, or a missing closing `---` is refused. Nothing recurses, so hostile input
//!   costs at most one pass over its (bounded) bytes.
//! - What a refusal reveals: `SKILL_BLOCKED` says only that the name is blocked on this
//!   service (whether or not such a skill is installed); `SKILL_NOT_FOUND` is the same for a
//!   skill never installed, one not offered on this service, and one restricted to other
//!   principals, so a caller learns nothing about skills it may not use.
//! - Asking twice for a skill grants it once; the manifest keeps the request's order.
//!
//! ```
//! use harness_core::skill::{Skill, SkillCatalog, SkillLimits};
//! use harness_core::id::CallerId;
//!
//! let md = "---\nname: pdf-forms\ndescription: Fill PDF forms. Use when a form must be filled.\n---\n# PDF forms\nRun `fill.py`.\n";
//! let skill = Skill::parse(md.as_bytes(), [("scripts/fill.py", b"print(1)".to_vec())], &SkillLimits::default()).unwrap();
//! assert_eq!(skill.name(), "pdf-forms");
//! assert_eq!(skill.body(), "# PDF forms\nRun `fill.py`.\n");
//!
//! let alice: CallerId = "alice".parse().unwrap();
//! let catalog = SkillCatalog::new().offer_to(skill, [alice.clone()]).block("shell");
//! let granted = catalog.grant(&alice, &["pdf-forms".to_owned()]).unwrap();
//! assert_eq!(granted.get("pdf-forms").unwrap().files()[0].path(), "scripts/fill.py");
//! // Restricted to others: indistinguishable from a missing one.
//! let err = catalog.grant(&CallerId::ANONYMOUS, &["pdf-forms".to_owned()]).unwrap_err();
//! assert_eq!(err.code().as_str(), "SKILL_NOT_FOUND");
//! let err = catalog.grant(&alice, &["shell".to_owned()]).unwrap_err();
//! assert_eq!(err.code().as_str(), "SKILL_BLOCKED");
//! ```

mod catalog;
pub mod disclosure;
mod folder;
mod front;

pub use self::catalog::SkillCatalog;
pub use self::folder::{
    DEFAULT_MAX_DEPTH, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILES, DEFAULT_MAX_SKILL_BYTES,
    InvalidSkill, SKILL_FILE, Skill, SkillFile, SkillLimits, SkillManifest,
};
pub use self::front::{FrontMatter, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, is_valid_name};

#[cfg(test)]
mod tests;
