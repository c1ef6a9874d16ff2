//! The kernel imports only downwards: no circle of files, and every module's imports go to a
//! lower layer of the table in the crate's docs ("Layers").
//!
//! The check reads `src/` with `syn`. A file *imports* another when it names an item (in a
//! `use`, or in a `crate::`/`super::`/`self::` path anywhere in its code) that the other file
//! defines; a name reached through a re-export (`pub use`, globs included) counts against the
//! file that defines it, so a facade `mod.rs` that only re-exports its parts is not a circle.
//! Test code (`#[cfg(test)]` items and `tests.rs` files) may import anything, as may doc
//! comments and doc-only imports (`#[cfg(doc)]`); paths inside macro invocations are not seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The layers, bottom first: a module may import from the layers below its own, and within
/// itself. Keep in step with the crate docs' "Layers".
const LAYERS: &[&[&str]] = &[
    &[
        "error",
        "time",
        "id",
        "extensions",
        "json_schema",
        "trace",
        "program",
        "boxed",
        "state",
        "wire",
    ],
    &["session", "telemetry"],
    &["action", "artifact", "capability", "health", "limits"],
    &["event", "manifest", "context"],
    &["log", "tool", "store", "registry", "file"],
    &["skill"],
    &["adapter", "lifecycle"],
    &["service", "schema", "__private"],
];

type ModPath = Vec<String>;

/// One parsed source file.
#[derive(Default)]
struct File {
    /// Items it defines (inline modules' items count as the file's).
    defines: BTreeSet<String>,
    /// Every path it names: `use` trees flattened, and expression/type paths.
    names: Vec<ModPath>,
    /// The subset of `names` it re-exports (`pub use` / `pub(crate) use`).
    reexports: Vec<ModPath>,
}

struct Crate {
    files: BTreeMap<ModPath, File>,
}

/// Whether an item is test code or there for the docs only (`#[cfg(test)]`, `#[cfg(doc)]`):
/// neither is an import of the code.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test") || m.path().is_ident("doc"))
    })
}

fn flatten(tree: &syn::UseTree, prefix: &mut ModPath, out: &mut Vec<ModPath>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            if n.ident != "self" {
                path.push(n.ident.to_string());
            }
            out.push(path);
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push(path);
        }
        syn::UseTree::Glob(_) => {
            let mut path = prefix.clone();
            path.push("*".to_owned());
            out.push(path);
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// Collects a file's definitions, names and re-exports, skipping test items.
#[derive(Default)]
struct Collector {
    file: File,
    /// How deep inside inline modules the visitor is: their `super` and `self` are not the
    /// file's.
    inline: usize,
}

impl Collector {
    /// `path` as the file's module would write it; `None` when it stays inside the file.
    fn as_file_path(&self, mut path: ModPath) -> Option<ModPath> {
        if self.inline == 0 || path.first().is_some_and(|s| s == "crate") {
            return Some(path);
        }
        if path.first().is_some_and(|s| s == "self") {
            return None;
        }
        let supers = path.iter().take_while(|s| *s == "super").count();
        if supers < self.inline {
            return None;
        }
        path.drain(..self.inline);
        if path.first().is_some_and(|s| s != "super") {
            path.insert(0, "self".to_owned());
        }
        Some(path)
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test(attrs) {
            return;
        }
        let defined = match item {
            syn::Item::Const(i) => Some(&i.ident),
            syn::Item::Enum(i) => Some(&i.ident),
            syn::Item::Fn(i) => Some(&i.sig.ident),
            syn::Item::Static(i) => Some(&i.ident),
            syn::Item::Struct(i) => Some(&i.ident),
            syn::Item::Trait(i) => Some(&i.ident),
            syn::Item::Type(i) => Some(&i.ident),
            syn::Item::Macro(i) => i.ident.as_ref(),
            syn::Item::Mod(i) if i.content.is_some() => Some(&i.ident),
            _ => None,
        };
        if let Some(ident) = defined {
            self.file.defines.insert(ident.to_string());
        }
        if let syn::Item::Use(u) = item {
            let mut paths = Vec::new();
            flatten(&u.tree, &mut Vec::new(), &mut paths);
            let paths: Vec<_> = paths
                .into_iter()
                .filter_map(|p| self.as_file_path(p))
                .collect();
            if !matches!(u.vis, syn::Visibility::Inherited) && self.inline == 0 {
                self.file.reexports.extend(paths.iter().cloned());
            }
            self.file.names.extend(paths);
            return;
        }
        let inline = matches!(item, syn::Item::Mod(m) if m.content.is_some());
        self.inline += usize::from(inline);
        syn::visit::visit_item(self, item);
        self.inline -= usize::from(inline);
    }

    // `pub(super)` names no item.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: ModPath = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if matches!(
            segments.first().map(String::as_str),
            Some("crate" | "super" | "self")
        ) && let Some(p) = self.as_file_path(segments)
        {
            self.file.names.push(p);
        }
        syn::visit::visit_path(self, path);
    }
}

fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

impl Crate {
    fn read(src: &Path) -> Self {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let files = paths
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                let ast = syn::parse_file(&text)
                    .unwrap_or_else(|e| panic!("{} does not parse: {e}", p.display()));
                let mut c = Collector::default();
                c.visit_file(&ast);
                (module_path(src, p), c.file)
            })
            .collect();
        Self { files }
    }

    /// `path` as written in the file of module `at`, from the crate root; `None` for paths
    /// outside the crate.
    fn absolute(&self, at: &ModPath, path: &ModPath) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some(at.iter().chain(rest).cloned().collect()),
            "super" => {
                let mut base = at.clone();
                let mut rest = path.as_slice();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                Some(base.into_iter().chain(rest.iter().cloned()).collect())
            }
            // `use child::Item` from the module that declares `child`.
            _ => {
                let mut child = at.clone();
                child.push(first.clone());
                self.files
                    .contains_key(&child)
                    .then(|| at.iter().chain(path).cloned().collect())
            }
        }
    }

    /// The file that defines what the crate-absolute `path` names, following re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 {
            return None;
        }
        let k = (0..=path.len())
            .rev()
            .find(|&k| self.files.contains_key(&path[..k]))?;
        let module = path[..k].to_vec();
        let Some(name) = path.get(k).filter(|n| *n != "*") else {
            return Some(module);
        };
        let file = &self.files[&module];
        if file.defines.contains(name) {
            return Some(module);
        }
        for re in &file.reexports {
            if re.last() == Some(name)
                && let Some(abs) = self.absolute(&module, re)
                && abs.as_slice() != path
            {
                return self.resolve(&abs, depth + 1);
            }
        }
        for re in &file.reexports {
            if re.last().is_some_and(|s| s == "*")
                && let Some(mut abs) = self.absolute(&module, &re[..re.len() - 1].to_vec())
            {
                abs.push(name.clone());
                if let Some(found) = self.resolve(&abs, depth + 1)
                    && self.files[&found].defines.contains(name)
                {
                    return Some(found);
                }
            }
        }
        Some(module)
    }

    /// Each file's imports: the files it names items of, with the names.
    fn imports(&self) -> BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> {
        let mut edges: BTreeMap<_, BTreeMap<_, BTreeSet<_>>> = BTreeMap::new();
        for (at, file) in &self.files {
            for name in &file.names {
                let Some(abs) = self.absolute(at, name) else {
                    continue;
                };
                let Some(to) = self.resolve(&abs, 0) else {
                    continue;
                };
                if &to != at && !to.is_empty() {
                    edges
                        .entry(at.clone())
                        .or_default()
                        .entry(to)
                        .or_default()
                        .insert(name.join("::"));
                }
            }
        }
        edges
    }
}

fn show(m: &ModPath) -> String {
    if m.is_empty() {
        "lib.rs".to_owned()
    } else {
        m.join("/")
    }
}

/// Strongly connected components with more than one file (Tarjan, iterative enough for ~50).
fn circles(edges: &BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>) -> Vec<Vec<ModPath>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>,
        index: HashMap<ModPath, usize>,
        low: HashMap<ModPath, usize>,
        stack: Vec<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &ModPath) {
            let i = self.index.len();
            self.index.insert(v.clone(), i);
            self.low.insert(v.clone(), i);
            self.stack.push(v.clone());
            for w in self.edges.get(v).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    let done = &w == v;
                    component.push(w);
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

fn kernel() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn no_file_of_the_kernel_imports_itself_in_a_circle() {
    let krate = kernel();
    let edges = krate.imports();
    let found = circles(&edges);
    let mut report = String::new();
    for component in &found {
        let members: BTreeSet<_> = component.iter().collect();
        writeln!(report, "a circle of {} files:", component.len()).unwrap();
        for from in &members {
            for (to, names) in &edges[*from] {
                if members.contains(to) {
                    let names: Vec<_> = names.iter().map(String::as_str).collect();
                    writeln!(
                        report,
                        "  {} -> {} ({})",
                        show(from),
                        show(to),
                        names.join(", ")
                    )
                    .unwrap();
                }
            }
        }
    }
    assert!(found.is_empty(), "{report}");
}

#[test]
fn every_module_imports_only_from_the_layers_below_it() {
    let krate = kernel();
    let layer_of: HashMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, mods)| mods.iter().map(move |m| (*m, i)))
        .collect();
    let mut report = String::new();
    for module in krate.files.keys().filter_map(|m| m.first()) {
        assert!(
            layer_of.contains_key(module.as_str()),
            "`{module}` is in no layer: add it to LAYERS and to the crate docs' \"Layers\""
        );
    }
    for (from, targets) in krate.imports() {
        let (Some(a), false) = (from.first(), from.is_empty()) else {
            continue;
        };
        for (to, names) in targets {
            let Some(b) = to.first() else { continue };
            if a != b && layer_of[b.as_str()] >= layer_of[a.as_str()] {
                let names: Vec<_> = names.iter().map(String::as_str).collect();
                writeln!(
                    report,
                    "{} (layer {}) imports {} (layer {}): {}",
                    show(&from),
                    layer_of[a.as_str()],
                    show(&to),
                    layer_of[b.as_str()],
                    names.join(", ")
                )
                .unwrap();
            }
        }
    }
    assert!(report.is_empty(), "imports that do not go down:\n{report}");
}

/// The checker sees what it must: a circle planted between two real files is found, through
/// a re-export, a glob and an expression path.
#[test]
fn the_checker_finds_a_planted_circle() {
    let mut krate = kernel();
    let event = vec!["event".to_owned()];
    let service = vec!["service".to_owned()];
    // event -> service through the `AdapterService` re-export of `service/mod.rs` (defined
    // there) and service -> event already exists.
    krate.files.get_mut(&event).unwrap().names.push(
        ["crate", "service", "AdapterService", "new"]
            .map(String::from)
            .to_vec(),
    );
    let found = circles(&krate.imports());
    assert!(
        found
            .iter()
            .any(|c| c.contains(&event) && c.contains(&service)),
        "planted circle not found: {found:?}"
    );
    // A name reached through a glob re-export resolves to the file that defines it.
    let abs = ["action", "ActionRequest"].map(String::from).to_vec();
    assert_eq!(
        krate.resolve(&abs, 0),
        Some(["action", "request"].map(String::from).to_vec())
    );
    let abs = ["adapter", "ResumeDecision"].map(String::from).to_vec();
    assert_eq!(
        krate.resolve(&abs, 0),
        Some(["action", "resume"].map(String::from).to_vec())
    );
}
