//! The tier rule of `docs/ARCHITECTURE.md`, held against the code: the
//! tables of that file (`| tier | module | what it is for |`) are parsed,
//! every module file under `src/` is read at
//! test time, and every path it names (`use` trees and paths in the code,
//! not comments, doc links or unit tests) is checked:
//!
//! - a module imports only modules of a lower tier of the same table (the
//!   table of the folder that holds both: the crate's, or a folder's);
//! - outside a folder that has a table of its own, only its door (its
//!   `mod.rs`) is imported, never one of its parts; and no part imports
//!   its folder's door (no parent/child import pairs);
//! - every module file is documented, every documented module exists, and
//!   `src/lib.rs` declares the crate's modules in the same tiers, in
//!   groups apart by a blank line.
//!
//! A folder listed without a table (`telemetry`, `hold`, ...) is one module:
//! its files are not checked against each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root, e.g. `["node", "cluster", "route"]`.
type ModPath = Vec<String>;

/// The documented modules: each row's tier, and which rows have a table
/// of their own (folders of parts).
struct Doc {
    tiers: BTreeMap<ModPath, u32>,
    folders: BTreeSet<ModPath>,
}

fn path_of(s: &str) -> ModPath {
    s.split('/').map(str::to_owned).collect()
}

fn shown(p: &[String]) -> String {
    if p.is_empty() {
        "the crate root".to_owned()
    } else {
        p.join("/")
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tables of `text` whose header is `| tier | module | ... |`.
fn parse_doc(text: &str) -> Result<Doc, String> {
    let mut tiers = BTreeMap::new();
    let mut parents: BTreeMap<ModPath, ()> = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        if cells.len() < 4 || !line.trim().starts_with('|') {
            in_table = false;
            continue;
        }
        if cells[1] == "tier" && cells[2] == "module" {
            in_table = true;
            continue;
        }
        if !in_table || cells[1].starts_with("---") {
            continue;
        }
        let tier: u32 = cells[1]
            .parse()
            .map_err(|_| format!("a tier that is not a number: {line}"))?;
        let name = cells[2]
            .strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
            .ok_or_else(|| format!("a module not in backquotes: {line}"))?;
        let path = path_of(name);
        let mut parent = path.clone();
        parent.pop();
        parents.insert(parent, ());
        if tiers.insert(path, tier).is_some() {
            return Err(format!("`{name}` is listed twice"));
        }
    }
    let folders: BTreeSet<ModPath> = parents.into_keys().filter(|p| !p.is_empty()).collect();
    for f in &folders {
        if !tiers.contains_key(f) {
            return Err(format!(
                "a table of `{}` parts, but no row for it",
                shown(f)
            ));
        }
    }
    Ok(Doc { tiers, folders })
}

/// `code` without comments, string and character literals (each literal
/// left as an empty one), so that only code is read.
fn strip(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    let word = |j: usize| j > 0 && (b[j - 1].is_ascii_alphanumeric() || b[j - 1] == b'_');
    while i < b.len() {
        let rest = &code[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if code[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if code[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (rest.starts_with("r#") || rest.starts_with("r\"") || rest.starts_with("br"))
            && !word(i)
            && rest
                .trim_start_matches('b')
                .trim_start_matches('r')
                .starts_with(['#', '"'])
        {
            let start = rest.find('r').unwrap_or(0) + 1;
            let hashes = rest[start..].chars().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = start + hashes + 1;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if (b[i] == b'"') || (rest.starts_with("b\"") && !word(i)) {
            let mut j = i + usize::from(b[i] == b'b') + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime.
            let len = if rest[1..].starts_with('\\') {
                rest.get(3..).and_then(|r| r.find('\'')).map(|e| e + 4)
            } else {
                rest[1..]
                    .chars()
                    .next()
                    .filter(|c| rest[1 + c.len_utf8()..].starts_with('\''))
                    .map(|c| c.len_utf8() + 2)
            };
            match len {
                Some(n) => {
                    out.push_str("' '");
                    i += n;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `code` without its `#[cfg(test)] mod tests { ... }` blocks (unit tests
/// may use the test fakes) and without `pub(in path)` visibilities.
fn production(code: &str) -> String {
    let mut code = code.to_owned();
    while let Some(at) = find_test_module(&code) {
        let open = at + code[at..].find('{').unwrap_or(0);
        let mut depth = 0;
        let mut end = code.len();
        for (k, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        code.replace_range(at..end, "");
    }
    while let Some(at) = code.find("pub(in ") {
        let end = at + code[at..].find(')').unwrap_or(0) + 1;
        code.replace_range(at..end, "pub");
    }
    code
}

fn find_test_module(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(test)]") {
        let at = from + k;
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        if let Some(rest) = after.strip_prefix("mod tests") {
            if rest.trim_start().starts_with('{') {
                return Some(at);
            }
        }
        from = at + 1;
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut depth, mut start) = (0, 0);
        for (k, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), &body[start..k], out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand(&format!("{prefix}{head}"), &body[start..], out);
    } else if !tree.is_empty() {
        let tree = tree.split(" as ").next().unwrap_or(tree).trim();
        out.push(format!("{prefix}{tree}"));
    }
}

/// Every path `code` names that may lead to a module of this crate: its
/// `use` trees, and the paths in its code that start with `crate`, `self`,
/// `super` or a child module it declares.
fn paths(code: &str) -> Vec<Vec<String>> {
    let children: BTreeSet<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            let l = l.strip_prefix("pub(super) ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            name.chars().all(is_ident).then(|| name.to_owned())
        })
        .collect();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("use ") {
        let at = from + k;
        from = at + 4;
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let end = code[at..].find(';').map_or(code.len(), |e| at + e);
        let tree = code[at + 4..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        expand("", &tree, &mut found);
    }
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    for (n, &(at, c)) in chars.iter().enumerate() {
        let starts = is_ident(c) && (n == 0 || !is_ident(chars[n - 1].1));
        let after_colons = at >= 2 && code[..at].ends_with("::");
        if !starts || after_colons {
            continue;
        }
        let len = code[at..]
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(code.len() - at);
        let path = code[at..at + len].trim_end_matches(':');
        let first = path.split("::").next().unwrap_or("");
        let known = matches!(first, "crate" | "self" | "super") || children.contains(first);
        if known && path.contains("::") {
            found.push(path.to_owned());
        }
    }
    found
        .into_iter()
        .map(|p| {
            p.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|p: &Vec<String>| {
            matches!(
                p.first().map(String::as_str),
                Some("crate" | "self" | "super")
            ) || p.first().is_some_and(|f| children.contains(f))
        })
        .collect()
}

/// The module a file is, from `src/`.
fn module_of(file: &Path, src: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut p: ModPath = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if p.last().is_some_and(|l| l == "mod") {
        p.pop();
    }
    if p == ["lib"] {
        p.clear();
    }
    p
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src/ reads")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The items `src/lib.rs` re-exports (`pub use crate::m::{A, B}`), by name.
fn reexports(lib: &str) -> BTreeMap<String, ModPath> {
    let mut found = Vec::new();
    for stmt in lib.split(';') {
        let stmt: String = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(tree) = stmt.trim().strip_prefix("pub use crate::") {
            expand("", &tree.replace(' ', ""), &mut found);
        }
    }
    found
        .into_iter()
        .filter_map(|p| {
            let mut segs = path_of(&p.replace("::", "/"));
            let name = segs.pop()?;
            Some((name, segs))
        })
        .collect()
}

impl Doc {
    /// The documented module `path` falls in: the deepest row it starts
    /// with, going past a folder only where it has a table.
    fn row(&self, path: &[String]) -> Option<ModPath> {
        let mut row = None;
        for k in 1..=path.len() {
            let p = path[..k].to_vec();
            if !self.tiers.contains_key(&p) {
                break;
            }
            let folder = self.folders.contains(&p);
            row = Some(p);
            if !folder {
                break;
            }
        }
        row
    }

    /// What is wrong with `a` importing `b` (two rows), if anything.
    fn check(&self, a: &[String], b: &[String]) -> Option<String> {
        if a == b || b.starts_with(a) {
            // Itself, or a folder's door importing its own parts.
            return None;
        }
        if a.starts_with(b) {
            return Some("a part imports its own folder's door".to_owned());
        }
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let (a1, b1) = (&a[..=common], &b[..=common]);
        if b.len() > b1.len() {
            return Some(format!("reaches past the door of `{}`", shown(b1)));
        }
        let (ta, tb) = (self.tiers[a1], self.tiers[b1]);
        (tb >= ta).then(|| {
            format!(
                "`{}` is tier {ta} and `{}` tier {tb} in the table of {}",
                shown(a1),
                shown(b1),
                shown(&a[..common])
            )
        })
    }
}

/// Every violation of the tier rule in the crate's sources, against the
/// tables of `doc`, and how many arrows between two modules were read.
fn violations(doc_text: &str) -> (Vec<String>, usize) {
    let doc = match parse_doc(doc_text) {
        Ok(doc) => doc,
        Err(e) => return (vec![format!("docs/ARCHITECTURE.md: {e}")], 0),
    };
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs reads");
    let items = reexports(&strip(&lib));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    let mut arrows = 0;
    for file in files {
        let module = module_of(&file, &src);
        if module.first().is_some_and(|m| m == "bin") || module.is_empty() {
            continue;
        }
        // A module's unit tests (`x/tests.rs`) belong to it, and are not read.
        if module.len() > 1 && module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let Some(row) = doc.row(&module) else {
            wrong.push(format!(
                "src/{}: not in docs/ARCHITECTURE.md",
                shown(&module)
            ));
            continue;
        };
        if row != module && doc.folders.contains(&module[..module.len() - 1]) {
            wrong.push(format!(
                "src/{}: a part not in its folder's table",
                shown(&module)
            ));
        }
        seen.insert(row.clone());
        let text = std::fs::read_to_string(&file).expect("a source file reads");
        let mut targets = BTreeSet::new();
        for path in paths(&production(&strip(&text))) {
            let (mut base, rest) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                "self" => (module.clone(), &path[1..]),
                "super" => {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    let keep = module.len().saturating_sub(ups);
                    (module[..keep].to_vec(), &path[ups..])
                }
                _ => (module.clone(), &path[..]),
            };
            base.extend(rest.iter().cloned());
            let target = doc.row(&base).or_else(|| {
                // An item the crate root re-exports, by the module it is from.
                let (first, tail) = base.split_first()?;
                let mut from = items.get(first)?.clone();
                from.push(first.clone());
                from.extend(tail.iter().cloned());
                doc.row(&from)
            });
            if let Some(t) = target {
                targets.insert(t);
            }
        }
        arrows += targets.iter().filter(|t| **t != row).count();
        for t in targets {
            if let Some(why) = doc.check(&row, &t) {
                wrong.push(format!(
                    "src/{} imports `{}`: {why}",
                    shown(&module),
                    shown(&t)
                ));
            }
        }
    }
    for row in doc.tiers.keys() {
        if !seen.contains(row) {
            wrong.push(format!("`{}` is documented but has no file", shown(row)));
        }
    }
    wrong.extend(lib_tiers(&lib, &doc));
    (wrong, arrows)
}

/// `src/lib.rs` declares the crate's modules in the documented tiers: one
/// group (apart by blank lines) per tier, from the lowest.
fn lib_tiers(lib: &str, doc: &Doc) -> Vec<String> {
    let mut groups: Vec<Vec<String>> = vec![Vec::new()];
    for line in lib.lines() {
        // A public module (`pub mod fenced;`) counts as any other.
        let line = line.trim();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if line.is_empty() {
            if !groups.last().is_some_and(Vec::is_empty) {
                groups.push(Vec::new());
            }
        } else if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            groups.last_mut().expect("a group").push(name.to_owned());
        }
    }
    groups.retain(|g| !g.is_empty());
    let mut documented: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (path, tier) in &doc.tiers {
        if let [name] = path.as_slice() {
            documented.entry(*tier).or_default().push(name.clone());
        }
    }
    let mut want: Vec<Vec<String>> = documented.into_values().collect();
    for g in groups.iter_mut().chain(want.iter_mut()) {
        g.sort();
    }
    if groups == want {
        Vec::new()
    } else {
        vec![format!(
            "src/lib.rs declares its modules in the tiers {groups:?}, docs/ARCHITECTURE.md \
             lists {want:?}"
        )]
    }
}

#[test]
fn every_module_imports_only_lower_tiers_as_docs_architecture_lists_them() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md reads");
    let (wrong, arrows) = violations(&doc);
    assert!(
        wrong.is_empty(),
        "the tier rule of docs/ARCHITECTURE.md is broken:\n{}",
        wrong.join("\n")
    );
    // A reader that finds next to nothing would pass as well: the crate's
    // modules draw a few hundred arrows between them.
    assert!(arrows > 200, "only {arrows} arrows read");
}

/// The reader itself: comments, strings and unit tests are not code, `use`
/// trees expand, and a violation is seen.
#[test]
fn the_reader_sees_only_code() {
    let code = r##"
        //! use crate::wait;
        use crate::{a::{B, c::D}, e};
        use super::f as g;
        mod part;
        /* use crate::z; */
        fn f() { let s = "crate::y::Z"; let r = r#"crate::x"#; let c = '{'; part::go(); }
        pub(in crate::w) fn h<'a>(x: &'a str) { crate::v::call(x) }
        #[cfg(test)]
        mod tests { use crate::tests::fake; fn t() { let _ = "}"; } }
    "##;
    let mut got: Vec<String> = paths(&production(&strip(code)))
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    got.sort();
    got.dedup();
    assert_eq!(
        got,
        [
            "crate::a::B",
            "crate::a::c::D",
            "crate::e",
            "crate::v::call",
            "part::go",
            "super::f"
        ]
    );
    let doc = parse_doc(
        "| tier | module | what |\n| --- | --- | --- |\n| 1 | `a` | x |\n| 2 | `b` | y |\n\
         | 1 | `b/p` | z |\n| 2 | `b/q` | w |\n",
    )
    .expect("parses");
    let p = |s: &str| path_of(s);
    assert_eq!(doc.check(&p("b"), &p("a")), None);
    assert!(doc.check(&p("a"), &p("b")).is_some(), "upward");
    assert!(doc.check(&p("a"), &p("b/p")).is_some(), "past the door");
    assert!(
        doc.check(&p("b/p"), &p("b")).is_some(),
        "a part to its door"
    );
    assert!(
        doc.check(&p("b/p"), &p("b/q")).is_some(),
        "upward inside a folder"
    );
    assert_eq!(doc.check(&p("b/q"), &p("b/p")), None);
    assert_eq!(doc.check(&p("b"), &p("b/q")), None, "a door to its parts");
    assert_eq!(doc.row(&p("b/q/r")), Some(p("b/q")));
    assert_eq!(doc.row(&p("a/r")), Some(p("a")));
}
