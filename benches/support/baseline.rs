//! The previous release beside this one, on the same machine and in the same run: set
//! `ITERAGPU_BENCH_BASELINE` to its binary (built from its commit: `git worktree add /tmp/prev
//! COMMIT && cargo build --release --manifest-path /tmp/prev/Cargo.toml`), and each case also runs
//! with it; the bench prints both figures and their ratio. Unset, it says so and prints one figure.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// The variable that names the previous release's binary.
pub const ENV: &str = "ITERAGPU_BENCH_BASELINE";

/// The previous release's binary, when the variable names an executable file; else why not.
pub fn binary() -> Result<PathBuf, String> {
    let Some(path) = std::env::var_os(ENV) else {
        return Err(format!(
            "no previous release to compare with (set {ENV} to its binary)"
        ));
    };
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{ENV}={} is not a file: no previous release compared",
            path.display()
        ))
    }
}

/// `this / previous`, as the bench prints it ("0.62×": this release takes 62% of the time).
pub fn ratio(this: f64, previous: Option<f64>) -> String {
    match previous {
        Some(p) if p > 0.0 => format!("{:.2}× of {p:.1} s", this / p),
        _ => "-".into(),
    }
}

/// The seconds `run` takes with the previous release's binary (`None` without one). Each bench
/// runs it first, then this release: `run(binary, out)` writes to `out` with `.previous.json`.
pub fn seconds(
    previous: &Result<PathBuf, String>,
    out: &Path,
    run: impl FnOnce(&Path, &Path),
) -> Option<f64> {
    let binary = previous.as_ref().ok()?;
    let began = Instant::now();
    run(binary, &out.with_extension("previous.json"));
    Some(began.elapsed().as_secs_f64())
}
