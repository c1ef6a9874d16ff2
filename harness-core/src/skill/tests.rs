use std::path::{Path, PathBuf};

use super::*;

fn md(front: &str, body: &str) -> String {
    format!("---\n{front}\n---\n{body}")
}

fn parse(text: &str) -> Result<Skill, InvalidSkill> {
    Skill::parse(
        text.as_bytes(),
        Vec::<(String, Vec<u8>)>::new(),
        &SkillLimits::default(),
    )
}

#[test]
fn front_matter_forms() {
    let s = parse(&md(
        "# a comment\nname: pdf-forms\nlicense: MIT\nmetadata:\n  author: x\n  version: \"1\"\nallowed-tools:\n  - Read\ndescription: >\n  Fill forms.\n  Use for PDFs.",
        "body\n",
    ))
    .unwrap();
    assert_eq!(s.description(), "Fill forms. Use for PDFs.");
    assert_eq!(s.body(), "body\n");
    let s = parse(&md("name: 'a'\ndescription: \"say \\\"hi\\\"\" ", "")).unwrap();
    assert_eq!((s.name(), s.description()), ("a", "say \"hi\""));
    let s = parse("\u{feff}---\r\nname: a # note\r\ndescription: d\r\n---\r\nx").unwrap();
    assert_eq!((s.name(), s.description(), s.body()), ("a", "d", "x"));
}

#[test]
fn front_matter_refusals_name_what_is_wrong() {
    let long = "x".repeat(MAX_DESCRIPTION_CHARS + 1);
    for (text, says) in [
        ("no front matter".to_owned(), "must open with"),
        ("---\nname: a\ndescription: d\n".to_owned(), "no closing"),
        (md("name: a", ""), "no `description`"),
        (md("description: d", ""), "no `name`"),
        (
            md("name: Bad_Name\ndescription: d", ""),
            "is not a skill name",
        ),
        (
            md(&format!("name: {}\ndescription: d", "a".repeat(65)), ""),
            "not a skill name",
        ),
        (md("name: a\nname: b\ndescription: d", ""), "given twice"),
        (
            md("name: a\ndescription: d\njunk", ""),
            "not a `key: value`",
        ),
        (md("name: a\ndescription: \"open", ""), "must close"),
        (md("name: a\ndescription: a: b", ""), "quote it"),
        (
            md(&format!("name: a\ndescription: {long}"), ""),
            "1025 characters",
        ),
        (md("name: a\ndescription: \"\"", ""), "is empty"),
    ] {
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(says), "{text:?}: {err}");
    }
}

#[test]
fn hostile_front_matter_is_bounded() {
    // A megabyte of nested lines, colons and quotes: refused or parsed, in one pass.
    let mut text = String::from("---\nname: a\ndescription: |\n");
    for _ in 0..100_000 {
        text.push_str("  : [ { \" ' \\\n");
    }
    text.push_str("---\n");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("at most 1024"), "{err}");
    assert!(parse(&"-".repeat(3_000_000)).is_err());
    assert!(
        Skill::parse(
            &[0xff, 0xfe],
            Vec::<(String, Vec<u8>)>::new(),
            &SkillLimits::default()
        )
        .is_err()
    );
}

#[test]
fn file_paths_must_be_clean() {
    let text = md("name: a\ndescription: d", "");
    for bad in [
        "../x",
        "/etc/passwd",
        "a//b",
        "./a",
        "a\\b",
        "SKILL.md",
        "a/\u{7}",
    ] {
        let err =
            Skill::parse(text.as_bytes(), [(bad, vec![1])], &SkillLimits::default()).unwrap_err();
        assert!(err.to_string().contains("relative"), "{bad}: {err}");
    }
    let limits = SkillLimits {
        max_file_bytes: 40,
        ..SkillLimits::default()
    };
    let err = Skill::parse(text.as_bytes(), [("big", vec![0; 41])], &limits).unwrap_err();
    assert!(err.to_string().contains("41 bytes"), "{err}");
}

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn folder(name: &str) -> Dir {
    let root = std::env::temp_dir().join(format!(
        "harness-skill-{}-{}",
        std::process::id(),
        crate::id::ExecutionId::generate()
    ));
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        md(&format!("name: {name}\ndescription: Test."), "Do it.\n"),
    )
    .unwrap();
    std::fs::write(dir.join("scripts/run.sh"), "echo hi\n").unwrap();
    Dir(root)
}

#[test]
fn a_folder_loads_whole_and_checked() {
    let d = folder("tester");
    let dir = d.0.join("tester");
    let skill = Skill::load(&dir, &SkillLimits::default()).unwrap();
    assert_eq!(skill.files().len(), 1);
    assert_eq!(skill.file("scripts/run.sh").unwrap().size(), 8);
    assert!(skill.file("SKILL.md").is_none());

    // The folder's name is the skill's.
    let other = d.0.join("other");
    std::fs::rename(&dir, &other).unwrap();
    let err = Skill::load(&other, &SkillLimits::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("folder is `other`") && err.contains(&*other.to_string_lossy()),
        "{err}"
    );
    std::fs::rename(&other, &dir).unwrap();

    // A symbolic link anywhere is refused.
    std::os::unix::fs::symlink("/etc/passwd", dir.join("scripts/passwd")).unwrap();
    let err = Skill::load(&dir, &SkillLimits::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("scripts/passwd` is a symbolic link"), "{err}");
    std::fs::remove_file(dir.join("scripts/passwd")).unwrap();

    let limits = SkillLimits {
        max_files: 1,
        ..SkillLimits::default()
    };
    let err = Skill::load(&dir, &limits).unwrap_err().to_string();
    assert!(err.contains("more than 1 files"), "{err}");
    let limits = SkillLimits {
        max_skill_bytes: 20,
        ..SkillLimits::default()
    };
    let err = Skill::load(&dir, &limits).unwrap_err().to_string();
    assert!(err.contains("more than 20 bytes together"), "{err}");
    let err = Skill::load(Path::new("/nonexistent/skill"), &SkillLimits::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/nonexistent/skill") && err.contains("cannot be read"),
        "{err}"
    );
}

#[test]
fn grants_reveal_nothing_of_skills_the_caller_may_not_use() {
    let skill = |n: &str| parse(&md(&format!("name: {n}\ndescription: d"), "")).unwrap();
    let alice: crate::id::CallerId = "alice".parse().unwrap();
    let catalog = SkillCatalog::new()
        .offer(skill("open"))
        .offer_to(skill("private"), [alice.clone()])
        .offer(skill("gone"))
        .block("gone")
        .block("never-installed");
    let bob: crate::id::CallerId = "bob".parse().unwrap();
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let m = catalog
        .grant(&alice, &names(&["private", "open", "private"]))
        .unwrap();
    assert_eq!(
        m.iter().map(Skill::name).collect::<Vec<_>>(),
        ["private", "open"]
    );
    let hidden = catalog.grant(&bob, &names(&["private"])).unwrap_err();
    let missing = catalog.grant(&bob, &names(&["nope"])).unwrap_err();
    assert_eq!(hidden.code(), missing.code());
    assert_eq!(hidden.code().as_str(), "SKILL_NOT_FOUND");
    assert_eq!(
        hidden.message().replace("private", "X"),
        missing.message().replace("nope", "X")
    );
    let blocked = catalog
        .grant(&alice, &names(&["open", "gone"]))
        .unwrap_err();
    let never = catalog
        .grant(&alice, &names(&["never-installed"]))
        .unwrap_err();
    assert_eq!(blocked.code().as_str(), "SKILL_BLOCKED");
    assert_eq!(
        blocked.message().replace("gone", "X"),
        never.message().replace("never-installed", "X")
    );
    assert_eq!(
        catalog.visible(&bob).map(Skill::name).collect::<Vec<_>>(),
        ["open"]
    );
}
