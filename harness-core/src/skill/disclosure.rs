//! Progressive disclosure of granted skills, for a runtime that runs its own model loop and
//! whose provider has no skills of its own: the names and descriptions up front
//! ([`listing`], for the model's instructions), the rest on demand through two tools the
//! runtime runs itself ([`tools`]):
//!
//! - [`LOAD`] (`skills.load`, `{"name": ...}`): the skill's body and the list of its files
//!   (path and size);
//! - [`READ`] (`skills.read`, `{"name": ..., "path": ...}`): one of its files, as text (at
//!   most [`MAX_READ_BYTES`]; a file that is not UTF-8 text is a failure saying so).
//!
//! A name or path the manifest does not hold is a tool failure naming it, never anything
//! outside the granted skills.
//!
//! ```
//! use harness_core::skill::{disclosure, Skill, SkillLimits, SkillManifest};
//! use harness_core::id::{ExecutionId, ToolCallId};
//! use harness_core::tool::{ToolCallContext, ToolOutcome};
//! use serde_json::json;
//!
//! let md = b"---\nname: haiku\ndescription: Write haiku. Use for any poem.\n---\nFive, seven, five.\n";
//! let manifest = SkillManifest::new(vec![Skill::parse(md, [("ex.txt", b"old pond".to_vec())], &SkillLimits::default()).unwrap()]);
//! assert!(disclosure::listing(&manifest).unwrap().contains("- haiku: Write haiku."));
//! let tools = disclosure::tools(&manifest);
//! let ctx = || ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let ToolOutcome::Success(loaded) = rt.block_on(tools[0].invoke(json!({"name": "haiku"}), ctx())) else { panic!() };
//! assert_eq!(loaded["body"], "Five, seven, five.\n");
//! let ToolOutcome::Success(read) = rt.block_on(tools[1].invoke(json!({"name": "haiku", "path": "ex.txt"}), ctx())) else { panic!() };
//! assert_eq!(read["text"], "old pond");
//! assert!(!rt.block_on(tools[1].invoke(json!({"name": "haiku", "path": "../etc/passwd"}), ctx())).is_success());
//! ```

use std::sync::Arc;

use serde_json::{Value, json};

use super::folder::SkillManifest;
use super::front::shown;
use crate::boxed::BoxFuture;
use crate::tool::{
    PortableTool, ToolAnnotations, ToolCallContext, ToolDescriptor, ToolHandle, ToolId, ToolOutcome,
};

/// The id of the tool that loads a skill's body.
pub const LOAD: &str = "skills.load";
/// The id of the tool that reads one of a skill's files.
pub const READ: &str = "skills.read";
/// The most bytes [`READ`] returns.
pub const MAX_READ_BYTES: u64 = 256 * 1024;

/// The instructions that list the granted skills (name and description each) and say how
/// to load one; `None` when none is granted.
#[must_use]
pub fn listing(manifest: &SkillManifest) -> Option<String> {
    if manifest.is_empty() {
        return None;
    }
    let mut out = format!(
        "You have skills: instructions and files for particular tasks. When a task matches a \
         skill's description, call `{LOAD}` with its name to get its instructions and the \
         list of its files, and `{READ}` to read one of its files.\n\nSkills:\n"
    );
    for skill in manifest.iter() {
        out.push_str("- ");
        out.push_str(skill.name());
        out.push_str(": ");
        out.push_str(&skill.description().replace('\n', " "));
        out.push('\n');
    }
    Some(out)
}

/// The two tools over `manifest` ([`LOAD`], then [`READ`]); none when it is empty.
#[must_use]
pub fn tools(manifest: &SkillManifest) -> Vec<ToolHandle> {
    if manifest.is_empty() {
        return Vec::new();
    }
    let names: Vec<&str> = manifest.iter().map(|s| s.name()).collect();
    let annotations = ToolAnnotations {
        idempotent: true,
        side_effects: false,
    };
    let descriptor = |id: &str, description: &str, schema: Value| {
        ToolDescriptor::new(
            id.parse::<ToolId>().expect("a valid id"),
            description,
            schema,
        )
        .expect("a valid schema")
        .with_annotations(annotations)
    };
    let load = descriptor(
        LOAD,
        "Load a skill: its instructions, and the list of its files.",
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names, "description": "The skill's name."}},
            "required": ["name"],
            "additionalProperties": false
        }),
    );
    let read = descriptor(
        READ,
        "Read one file of a skill, as text.",
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names, "description": "The skill's name."},
                "path": {"type": "string", "description": "The file's path, as skills.load lists it."}
            },
            "required": ["name", "path"],
            "additionalProperties": false
        }),
    );
    vec![
        ToolHandle::new(Arc::new(SkillTool {
            descriptor: load,
            manifest: manifest.clone(),
            read: false,
        })),
        ToolHandle::new(Arc::new(SkillTool {
            descriptor: read,
            manifest: manifest.clone(),
            read: true,
        })),
    ]
}

struct SkillTool {
    descriptor: ToolDescriptor,
    manifest: SkillManifest,
    read: bool,
}

impl PortableTool for SkillTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            let name = arguments["name"].as_str().unwrap_or_default();
            let Some(skill) = self.manifest.get(name) else {
                return ToolOutcome::failure(format!("no skill {} is granted", shown(name)));
            };
            if !self.read {
                let files: Vec<Value> = skill
                    .files()
                    .iter()
                    .map(|f| json!({"path": f.path(), "bytes": f.size()}))
                    .collect();
                return ToolOutcome::Success(json!({
                    "name": skill.name(),
                    "body": skill.body(),
                    "files": files,
                }));
            }
            let path = arguments["path"].as_str().unwrap_or_default();
            let Some(file) = skill.file(path) else {
                return ToolOutcome::failure(format!(
                    "skill `{name}` has no file {}: its files are those skills.load lists",
                    shown(path)
                ));
            };
            if file.size() > MAX_READ_BYTES {
                return ToolOutcome::failure(format!(
                    "`{path}` has {} bytes, more than the {MAX_READ_BYTES} skills.read returns",
                    file.size()
                ));
            }
            match file.handle().read().await {
                Ok(bytes) => match std::str::from_utf8(&bytes) {
                    Ok(text) => ToolOutcome::Success(json!({"path": path, "text": text})),
                    Err(_) => ToolOutcome::failure(format!(
                        "`{path}` is not UTF-8 text ({} bytes): it cannot be read here",
                        bytes.len()
                    )),
                },
                Err(e) => ToolOutcome::failure(format!("`{path}` cannot be read: {}", e.message())),
            }
        })
    }
}
