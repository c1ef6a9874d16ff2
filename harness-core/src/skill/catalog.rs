//! [`SkillCatalog`]: the skills a service offers, to whom, and what it blocks.

use std::collections::{BTreeMap, BTreeSet};

use super::folder::{Skill, SkillManifest};
use super::front::shown;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::CallerId;

/// The skills a service offers: each installed skill, for everyone or for named principals,
/// and names the operator blocks. See the [module docs](super) for what a refusal reveals.
#[derive(Debug, Clone, Default)]
pub struct SkillCatalog {
    skills: BTreeMap<String, Offered>,
    blocked: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct Offered {
    skill: Skill,
    /// `None`: every caller.
    principals: Option<BTreeSet<CallerId>>,
}

impl SkillCatalog {
    /// A catalog that offers nothing.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers `skill` to every caller (replacing a skill of the same name).
    #[must_use]
    pub fn offer(mut self, skill: Skill) -> Self {
        self.skills.insert(
            skill.name().to_owned(),
            Offered {
                skill,
                principals: None,
            },
        );
        self
    }

    /// Offers `skill` to `principals` only: to any other caller it is as if it did not exist.
    #[must_use]
    pub fn offer_to(
        mut self,
        skill: Skill,
        principals: impl IntoIterator<Item = CallerId>,
    ) -> Self {
        self.skills.insert(
            skill.name().to_owned(),
            Offered {
                skill,
                principals: Some(principals.into_iter().collect()),
            },
        );
        self
    }

    /// Blocks `name`: a request asking for it is refused `SKILL_BLOCKED`, offered or not.
    #[must_use]
    pub fn block(mut self, name: impl Into<String>) -> Self {
        self.blocked.insert(name.into());
        self
    }

    /// Whether nothing is offered or blocked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty() && self.blocked.is_empty()
    }

    /// The skills `caller` may use.
    pub fn visible<'a>(&'a self, caller: &'a CallerId) -> impl Iterator<Item = &'a Skill> {
        self.skills
            .iter()
            .filter(move |(name, o)| {
                !self.blocked.contains(*name)
                    && o.principals.as_ref().is_none_or(|p| p.contains(caller))
            })
            .map(|(_, o)| &o.skill)
    }

    /// The skills `names` granted to `caller`, in the order asked (once each).
    ///
    /// # Errors
    /// `configuration`: `SKILL_BLOCKED` for the first blocked name, else `SKILL_NOT_FOUND`
    /// for the first name `caller` cannot see (not offered, or offered to others only).
    pub fn grant(
        &self,
        caller: &CallerId,
        names: &[String],
    ) -> Result<SkillManifest, HarnessError> {
        if let Some(name) = names.iter().find(|n| self.blocked.contains(*n)) {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "skill {} is blocked by the operator of this service: leave it out of \
                     `skills`",
                    shown(name)
                ),
            )
            .with_code(ErrorCode::SKILL_BLOCKED));
        }
        let mut granted: Vec<Skill> = Vec::with_capacity(names.len().min(self.skills.len()));
        for name in names {
            let found = self
                .skills
                .get(name)
                .filter(|o| o.principals.as_ref().is_none_or(|p| p.contains(caller)));
            let Some(offered) = found else {
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "no skill {} is offered to this caller here: ask for one of the \
                         skills this service offers",
                        shown(name)
                    ),
                )
                .with_code(ErrorCode::SKILL_NOT_FOUND));
            };
            if !granted.iter().any(|s| s.name() == name) {
                granted.push(offered.skill.clone());
            }
        }
        Ok(SkillManifest::new(granted))
    }
}
