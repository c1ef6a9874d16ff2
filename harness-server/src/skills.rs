//! `[skills]`: the skill folders the operator installs, who may use each, and what is
//! blocked; and which skills each adapter instance offers (`skills = [...]` in its table).
//!
//! ```toml
//! [skills]
//! dirs = ["/srv/skills"]      # every folder in these holding a SKILL.md is a skill
//! blocked = ["shell-admin"]   # refused SKILL_BLOCKED on every instance
//!
//! [skills.principals]         # who may use a skill; left out: every caller
//! pdf-forms = ["alice", "billing-service"]
//!
//! [openai]
//! skills = ["pdf-forms"]      # what this instance offers; left out: every installed skill
//! ```
//!
//! # What happens when...
//!
//! - **the server starts**: every folder of each `dirs` entry is loaded as a skill (its
//!   `SKILL.md` front matter `name` must be the folder's name; sizes, files and depth are
//!   bounded; a symbolic link refuses the folder), and the start fails naming the folder and
//!   what is wrong. A name installed twice, a `principals` or instance entry naming no
//!   installed skill, and an invalid principal refuse the start too, naming them. Files (not
//!   folders) and hidden entries (`.git`) of a `dirs` entry are ignored.
//! - **a start request asks for skills** (`"skills": ["pdf-forms"]`): before anything runs,
//!   a blocked name is refused `403 SKILL_BLOCKED`; a name the instance does not offer, or
//!   offers to other principals only, `404 SKILL_NOT_FOUND` (the two are the same answer, so
//!   a caller learns nothing of skills it may not use); an instance whose adapter does not
//!   take skills, `422 CAPABILITY_UNSUPPORTED` (before the names are looked at).
//!
//! Decisions where the spec is silent:
//! - A blocked name is refused whether or not it is installed: the block list says nothing
//!   about what is installed.
//! - Folders are read once, at start: an operator who edits a skill restarts the server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use harness_core::error::HarnessError;
use harness_core::id::CallerId;
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};
use serde::Deserialize;

use crate::config::invalid;

/// `[skills]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SkillsConfig {
    /// Folders whose sub-folders are skills.
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
    /// Names refused `SKILL_BLOCKED` on every instance.
    #[serde(default)]
    pub blocked: Vec<String>,
    /// Who may use a skill, by skill name; a skill not listed is every caller's.
    #[serde(default)]
    pub principals: BTreeMap<String, Vec<String>>,
}

impl SkillsConfig {
    /// Resolves relative `dirs` against `base`.
    pub(crate) fn resolve(&mut self, base: &Path) {
        for dir in &mut self.dirs {
            if dir.is_relative() {
                *dir = base.join(&*dir);
            }
        }
    }

    /// Loads every installed skill (blocking reads: at start-up).
    ///
    /// # Errors
    /// `configuration`, naming the folder or the entry and what is wrong.
    pub fn load(&self) -> Result<Installed, HarnessError> {
        let mut skills: BTreeMap<String, Skill> = BTreeMap::new();
        for dir in &self.dirs {
            let entries = std::fs::read_dir(dir).map_err(|e| {
                invalid(format!(
                    "`skills.dirs`: cannot list `{}`: {e}",
                    dir.display()
                ))
            })?;
            let mut folders: Vec<PathBuf> = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| {
                    invalid(format!(
                        "`skills.dirs`: cannot list `{}`: {e}",
                        dir.display()
                    ))
                })?;
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                let kind = entry.file_type().map_err(|e| {
                    invalid(format!("`skills.dirs`: `{}`: {e}", entry.path().display()))
                })?;
                if !hidden && (kind.is_dir() || kind.is_symlink()) {
                    folders.push(entry.path());
                }
            }
            folders.sort();
            for folder in folders {
                let skill = Skill::load(&folder, &SkillLimits::default())
                    .map_err(|e| invalid(format!("`skills.dirs`: {e}")))?;
                if skills.contains_key(skill.name()) {
                    return Err(invalid(format!(
                        "`skills.dirs`: skill `{}` is installed twice (again at `{}`): each \
                         name once",
                        skill.name(),
                        folder.display()
                    )));
                }
                skills.insert(skill.name().to_owned(), skill);
            }
        }
        let mut principals = BTreeMap::new();
        for (name, list) in &self.principals {
            if !skills.contains_key(name) {
                return Err(invalid(format!(
                    "`skills.principals` names `{name}`, which no folder of `skills.dirs` \
                     installs"
                )));
            }
            let callers = list
                .iter()
                .map(|p| {
                    p.parse::<CallerId>().map_err(|e| {
                        invalid(format!(
                            "`skills.principals.{name}`: `{p}` is not a principal: {e}"
                        ))
                    })
                })
                .collect::<Result<BTreeSet<_>, _>>()?;
            principals.insert(name.clone(), callers);
        }
        Ok(Installed {
            skills,
            principals,
            blocked: self.blocked.clone(),
        })
    }
}

/// The installed skills, ready to make each instance's catalog.
#[derive(Debug, Clone, Default)]
pub struct Installed {
    skills: BTreeMap<String, Skill>,
    principals: BTreeMap<String, BTreeSet<CallerId>>,
    blocked: Vec<String>,
}

impl Installed {
    /// The catalog of an instance offering `offered` (every installed skill when `None`).
    ///
    /// # Errors
    /// `configuration` when `offered` names a skill not installed.
    pub fn catalog(
        &self,
        instance: &str,
        offered: Option<&[String]>,
    ) -> Result<Arc<SkillCatalog>, HarnessError> {
        let names: Vec<&String> = match offered {
            Some(list) => list.iter().collect(),
            None => self.skills.keys().collect(),
        };
        let mut catalog = SkillCatalog::new();
        for name in names {
            let Some(skill) = self.skills.get(name) else {
                return Err(invalid(format!(
                    "`[{instance}]` offers skill `{name}`, which no folder of `skills.dirs` \
                     installs"
                )));
            };
            catalog = match self.principals.get(name) {
                Some(callers) => catalog.offer_to(skill.clone(), callers.iter().cloned()),
                None => catalog.offer(skill.clone()),
            };
        }
        for name in &self.blocked {
            catalog = catalog.block(name.clone());
        }
        Ok(Arc::new(catalog))
    }
}
