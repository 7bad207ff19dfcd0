//! The interpreter a bench predicts with: `ITERAGPU_TEST_PYTHON` (else `python3`), if it imports
//! torch and transformers; otherwise the bench says so and measures nothing.

use std::process::Command;

pub fn torch_python() -> Option<String> {
    let python = std::env::var("ITERAGPU_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import torch, transformers"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!(
            "{python} cannot import torch and transformers: nothing measured (set ITERAGPU_TEST_PYTHON)"
        );
        return None;
    }
    Some(python)
}
