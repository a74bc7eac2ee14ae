//! The crate is read bottom-up (see `src/lib.rs`): every module imports only the
//! layers below its own, and stages never import one another. This test reads the
//! sources and fails, naming the file and the import, when one does.

use std::{collections::BTreeSet, fs, path::Path};

/// Top-level modules of `src/` and their layer.
const LAYERS: &[(&str, u8)] = &[
    ("ground", 1),
    ("budget", 2),
    ("metrics", 2),
    ("timeline", 2),
    ("runtime", 3),
    ("assemble", 4),
    ("ingest", 4),
    ("prepare_msm", 4),
    ("prove_gpu", 4),
    ("stage_pcie", 4),
    ("synthesize", 4),
    ("verify", 4),
    ("services", 5),
    ("tracker", 5),
    ("config", 6),
    ("topology", 6),
    ("engine", 6),
    ("sizing", 6),
];
const WIRING: u8 = 6;

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The top-level modules named by `crate::…` paths in `src`, outside `#[cfg(test)]`.
fn imports(src: &str) -> BTreeSet<String> {
    let src = src.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::…, b, c::{…}}`: the names at depth 0.
            let (mut depth, mut name, mut at_start) = (0usize, String::new(), true);
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(std::mem::take(&mut name));
                        at_start = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && at_start {
                    if ch.is_ascii_lowercase() || ch == '_' {
                        name.push(ch);
                    } else if !name.is_empty() {
                        at_start = false;
                    }
                }
            }
            out.insert(name);
        } else {
            let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            out.insert(name);
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn modules_import_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_str().unwrap().trim_end_matches(".rs").to_string();
        if top == "lib" {
            continue;
        }
        let own = layer(&top).unwrap_or_else(|| panic!("{}: module `{top}` has no layer in this test", rel.display()));
        checked += 1;
        for m in imports(&fs::read_to_string(f).unwrap()) {
            let Some(l) = layer(&m) else { continue };
            let upward = l > own;
            let sibling = m != top && l == own && own != WIRING;
            if upward || sibling {
                bad.push(format!("{} (layer {own}) imports crate::{m} (layer {l})", rel.display()));
            }
        }
    }
    assert!(checked > 20, "only {checked} files read from {}", src.display());
    assert!(bad.is_empty(), "imports against the layering of src/lib.rs:\n{}", bad.join("\n"));
}

#[test]
fn the_parser_sees_grouped_and_plain_imports() {
    let src = "use crate::{ground::{A, B}, runtime::Stage};\nfn f() { crate::services::x(); }\n\
               #[cfg(test)]\nmod tests { use crate::engine; }";
    let got: Vec<_> = imports(src).into_iter().collect();
    assert_eq!(got, ["ground", "runtime", "services"]);
}
