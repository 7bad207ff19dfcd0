//! `iteragpu predict`: arguments → a validated plan, a target card and the `--like` file →
//! the workload's own code on data-less CUDA tensors in a CPU worker → the versions compared →
//! the prediction file (never overwritten; written too when the timeout or a signal stopped the
//! worker, with the phases so far) → the table or the JSON.

use std::io::Write;

use super::{options, progress};
use crate::cli::PredictArgs;
use crate::exit::{CliError, ExitStatus};
use crate::output::{self, Saved};
use crate::prediction::run::{Outcome, predict_within};
use crate::schema::target::Target;
use crate::schema::versions;
use crate::signals;
use crate::workload::plan::RunPlan;

pub fn run(args: &PredictArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let stop = signals::stop_request();
    let workload = options::predict(args)?;
    let plan = RunPlan::for_prediction(&workload, args.world_size)?;
    let m = &args.run;
    if plan.devices.len() > 1 {
        refuse!(
            "predict follows one device; --device {} lists {}: give one (several devices are measured apart, never one pool)",
            plan.devices.join(","),
            plan.devices.len()
        );
    }
    // Read and checked before anything runs: a file of another kind is refused here.
    let like = args
        .like
        .as_deref()
        .map(crate::prediction::like::load)
        .transpose()?;
    let backend = plan.allocator_backend();
    let (target, note) = match (&args.card, workload.device.first()) {
        (Some(card), _) => (Target::named(Some(card), &backend)?, None),
        (None, Some(device)) => (
            Target::of_device(&plan.python, device, &backend, Some(stop))?,
            None,
        ),
        (None, None) => (
            Target::named(None, &backend)?,
            Some("no --card given: predicted for the catalog's H200 (choose another with --card NAME)".to_string()),
        ),
    };
    // The card's memory, or --memory-limit checked against it, before anything runs.
    let capacity = crate::prediction::oom::capacity(&target, args.memory_limit)
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    // Where the prediction goes: the path given, a new name when none is given (said), or only
    // standard output for `-`.
    let destination = match m.output.as_deref() {
        Some(p) if p.as_os_str() == "-" => None,
        Some(p) => Some(p.to_path_buf()),
        None => Some(output::new_name(
            &format!("prediction-{}", plan.trial().workload),
            "json",
        )),
    };
    if let Some(path) = &destination {
        output::check_new(path)?;
    }
    let to_stdout = destination.is_none();
    let display = progress::spinner(m.json || to_stdout, "starting the predicting worker");
    let outcome = predict_within(&plan, &target, &capacity, stop, &*display);
    display.finish();
    let mut doc = match outcome? {
        Outcome::Predicted(doc) => doc,
        Outcome::Unavailable(reason) => {
            return Err(CliError::missing_runtime(format!(
                "nothing predicted: {reason}"
            )));
        }
    };
    doc.notes.extend(plan.precision_note());
    doc.notes.extend(plan.requests_note());
    doc.notes.extend(plan.packed().map(|p| p.note()));
    doc.notes.extend(note);
    match &like {
        Some(like) => {
            let compared = like.compare(&doc.assumptions);
            for w in compared.warnings() {
                crate::say!("warning: {w}");
            }
            doc.like = Some(compared);
        }
        None => doc.notes.push(versions::unchecked_note(
            doc.assumptions.torch_version.as_deref(),
            doc.assumptions.transformers_version.as_deref(),
        )),
    }
    let json = serde_json::to_string_pretty(&*doc)? + "\n";
    let Some(path) = destination else {
        // `--output -`: the document on standard output, nothing else there.
        if let Err(e) = out.write_all(json.as_bytes()).and_then(|()| out.flush()) {
            return Err(CliError::bad_input(format!(
                "cannot write the prediction to standard output ({})",
                output::reason(&e)
            )));
        }
        return Ok(status_of(&doc));
    };
    if m.output.is_none() {
        crate::say!(
            "prediction written to {} (no --output given)",
            path.display()
        );
    }
    let saved = output::save_result(&path, json.as_bytes())?;
    let text = if m.json {
        json
    } else {
        crate::prediction::render::table(&doc, saved.path())
    };
    super::print_saved(out, &text, "prediction", saved.path());
    if let Saved::Elsewhere { path, why } = saved {
        refuse!(
            "{why}; the prediction was saved to {} instead",
            path.display()
        );
    }
    Ok(status_of(&doc))
}

/// The exit status a prediction ends with.
fn status_of(doc: &crate::schema::prediction::PredictionDoc) -> ExitStatus {
    // Stopped by the timeout or a signal: the phases so far are kept, as `measure` keeps them.
    // Out of the card's memory: a result kept, with `measure`'s status for an out-of-memory.
    // A workload that raises is bad input for a prediction (nothing ran on a GPU).
    if doc.stopped() || doc.status == crate::schema::prediction::PredictionStatus::OutOfMemory {
        ExitStatus::WorkloadFailed
    } else if doc.status == crate::schema::prediction::PredictionStatus::Failed {
        // The Hub out of reach for a Hub id in the script: the network's failure, as for --model.
        if doc.hub.iter().any(|h| h.network_failure) {
            ExitStatus::Network
        } else {
            ExitStatus::BadInput
        }
    } else {
        ExitStatus::Ok
    }
}
