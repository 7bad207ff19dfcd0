//! Lists every file of the Python package (python/iteragpu) so the binary embeds all of them:
//! adding a workload file needs no change on the Rust side.

use std::path::Path;

fn collect(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("python/iteragpu is readable")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                collect(&path, root, out);
            }
        } else if path.extension().is_some_and(|e| e == "py") {
            let rel = path
                .strip_prefix(root)
                .expect("inside root")
                .to_string_lossy()
                .replace('\\', "/");
            out.push(rel);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    println!("cargo:rerun-if-changed=python");
    let mut files = Vec::new();
    collect(&root.join("iteragpu"), &root, &mut files);
    let mut code = String::from("pub const FILES: &[(&str, &str)] = &[\n");
    for rel in files {
        code.push_str(&format!(
            "    ({rel:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/python/{rel}\"))),\n"
        ));
    }
    code.push_str("];\n");
    let out =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("python_files.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
