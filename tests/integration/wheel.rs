//! `pip install` of the wheel (maturin, `bindings = "bin"`): in a fresh virtual environment, the
//! `iteragpu` command runs the guide's estimate, names that environment's interpreter as the one its
//! workers use, and the installed `iteragpu` package records a notebook result (with the fake
//! torch) and lets a script's phase markers run without a recorder. The wheel comes from
//! ITERAGPU_WHEEL (`.ci/run` builds it and prints its size), else it is built here with maturin
//! from the CI interpreter's environment.

use crate::common::{fixture, read_json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The wheel to install; its test is `#[ignore = "needs the wheel …"]` and fails under
/// `--include-ignored` when there is neither ITERAGPU_WHEEL nor a maturin to build one.
fn wheel() -> PathBuf {
    static WHEEL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = WHEEL.get_or_init(|| {
        if let Some(w) = std::env::var_os("ITERAGPU_WHEEL") {
            return Ok(PathBuf::from(w));
        }
        let python = std::env::var("ITERAGPU_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let maturin = Path::new(&python)
            .parent()
            .map(|bin| bin.join("maturin"))
            .filter(|m| m.is_file())
            .ok_or_else(|| format!("no maturin beside {python} (.ci/run installs it)"))?;
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let out = root.join("target/wheel-test");
        let _ = std::fs::remove_dir_all(&out);
        // Its own target folder: the one of `cargo test` is locked while the tests run.
        let run = Command::new(&maturin)
            .args(["build", "--release", "--out"])
            .arg(&out)
            .env("CARGO_TARGET_DIR", root.join("target/wheel"))
            .current_dir(&root)
            .output()
            .map_err(|e| format!("{}: {e}", maturin.display()))?;
        if !run.status.success() {
            return Err(format!(
                "maturin build failed: {}",
                String::from_utf8_lossy(&run.stderr)
            ));
        }
        std::fs::read_dir(&out)
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| "maturin wrote no wheel".to_string())
    });
    match built {
        Ok(w) => w.clone(),
        Err(why) => panic!("the installed wheel cannot be checked: {why}"),
    }
}

/// A fresh virtual environment with the wheel installed (no network: the wheel has no
/// dependencies).
fn install(dir: &Path, wheel: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--no-index", "--no-deps", "--quiet"])
        .arg(wheel)
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    venv
}

#[test]
#[ignore = "needs the wheel (ITERAGPU_WHEEL, built by .ci/run, or maturin beside ITERAGPU_TEST_PYTHON)"]
fn pip_install_gives_the_command_and_the_package() {
    let wheel = wheel();
    let dir = tempfile::tempdir().unwrap();
    let venv = install(dir.path(), &wheel);
    let bin = venv.join("bin/iteragpu");
    assert!(bin.is_file(), "the command is on the environment's PATH");

    // The guide's estimate.
    let est = Command::new(&bin)
        .args(["estimate", "--parameters", "7000000000", "--bits", "16"])
        .args(["--reserve-gib", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&est.stdout);
    assert!(
        est.status.success() && text.contains("14,000,000,000"),
        "{text}"
    );

    // Its workers run with this environment's interpreter, without --python.
    let env = Command::new(&bin)
        .args(["environment", "--json"])
        .env_remove("ITERAGPU_PYTHON")
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&env.stdout).unwrap();
    let executable = doc["python"]["python"]["executable"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        executable.starts_with(venv.to_str().unwrap()),
        "{executable} is not the environment's ({})",
        venv.display()
    );

    // The installed package records a notebook's result (fake torch: not a GPU measurement).
    let out = dir.path().join("nb.json");
    let code = format!(
        "import iteragpu, torch\nassert 'site-packages' in iteragpu.__file__, iteragpu.__file__\nwith iteragpu.Recorder(output={:?}) as rec:\n    iteragpu.describe(model='nb', batch=2)\n    with iteragpu.phase('load'):\n        w = torch.zeros(1000, 1000, device='cuda:0')\n",
        out.display().to_string()
    );
    let nb = Command::new(venv.join("bin/python"))
        .args(["-c", &code])
        .env("PYTHONPATH", fixture("../fake_torch"))
        .output()
        .unwrap();
    assert!(
        nb.status.success(),
        "{}",
        String::from_utf8_lossy(&nb.stderr)
    );
    let result = read_json(&out);
    assert_eq!(result["schema"], "iteragpu.measure/1");
    assert_eq!(result["phases"][0]["name"], "load");
    assert_eq!(
        result["phases"][0]["devices"][0]["peak_allocated_bytes"],
        4_000_256
    );

    // A script's markers: nothing recorded under plain python (said once), every phase under
    // `iteragpu measure --script` (the embedded package).
    let script = dir.path().join("job.py");
    std::fs::write(
        &script,
        "import iteragpu\nfor step in range(3):\n    with iteragpu.phase('step', step=step):\n        pass\nprint('done')\n",
    )
    .unwrap();
    let plain = Command::new(venv.join("bin/python"))
        .arg(&script)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(plain.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "done\n");
    assert_eq!(
        stderr.matches("no recorder is active").count(),
        1,
        "{stderr}"
    );
    let measured = dir.path().join("job.json");
    let run = Command::new(&bin)
        .args(["measure", "--script"])
        .arg(&script)
        .arg("--output")
        .arg(&measured)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let doc = read_json(&measured);
    assert_eq!(doc["phases"].as_array().unwrap().len(), 3);

    // The lab notebook's first cell finds the command beside its kernel's Python.
    let nb: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("notebooks/iteragpu-lab.ipynb"),
        )
        .unwrap(),
    )
    .unwrap();
    let first: String = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell_type"] == "code")
        .unwrap()["source"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let cell = Command::new(venv.join("bin/python"))
        .args(["-c", &format!("{first}\nprint('BIN', BIN)")])
        .env_remove("ITERAGPU_BIN")
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&cell.stdout);
    assert!(
        printed.contains(&format!("BIN {}", bin.display())),
        "{printed}{}",
        String::from_utf8_lossy(&cell.stderr)
    );
}
