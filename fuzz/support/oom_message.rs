//! The out-of-memory message parser and classifier, on whatever text: shared by the fuzz target
//! `oom_message` and the proptest in tests/integration/snapshot.rs. Parsing and classifying must
//! never panic nor take long, `diagnose` must equal `parse` then `classify`, and the post-mortem
//! must come back unchanged from its JSON.

use iteragpu::explain::oom::{PostMortem, classify, diagnose, parse};

/// Parses and classifies `data` read as UTF-8 (invalid bytes replaced); an inconsistency is an
/// `Err`.
pub fn run(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let parsed = parse(&text);
    let diagnosed = diagnose(&text);
    let Some(report) = parsed else {
        return match diagnosed {
            None => Ok(()),
            Some(_) => Err("diagnose found a message that parse did not".into()),
        };
    };
    let diagnosis = classify(&report);
    let expected = PostMortem { report, diagnosis };
    if diagnosed.as_ref() != Some(&expected) {
        return Err("diagnose differs from parse then classify".into());
    }
    let json = serde_json::to_string(&expected).map_err(|e| e.to_string())?;
    let back: PostMortem = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    if back != expected {
        return Err("the post-mortem changed through its JSON".into());
    }
    Ok(())
}
