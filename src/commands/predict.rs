//! `iteragpu predict`: arguments → a validated plan, a target card and the `--like` file →
//! the workload's own code on data-less CUDA tensors in a CPU worker → the versions compared →
//! the prediction file (never overwritten; written too when the timeout or a signal stopped the
//! worker, with the phases so far) → the table or the JSON.

use anyhow::{Result, bail};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::PredictArgs;
use crate::measure::plan::MeasurePlan;
use crate::measure::worker_process::StartError;
use crate::output::{self, Saved};
use crate::prediction::run::{Outcome, predict};
use crate::prediction::target::Target;
use crate::prediction::versions;
use crate::{exit, signals};

pub fn run(args: &PredictArgs, out: &mut dyn Write) -> Result<u8> {
    let stop = signals::stop_request();
    let m = &args.workload;
    if m.no_prediction {
        bail!("--no-prediction has no effect on predict; drop it");
    }
    if m.timeline || m.no_history {
        bail!(
            "--timeline and --no-history set what the GPU's allocator records; a prediction has no allocator to record (use them with measure)"
        );
    }
    let plan = MeasurePlan::for_prediction(m, args.world_size)?;
    if plan.devices.len() > 1 {
        bail!(
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
    let (target, note) = match (&args.card, m.device.first()) {
        (Some(card), _) => (Target::named(Some(card), &backend).map_err(anyhow::Error::msg)?, None),
        (None, Some(device)) => (
            Target::of_device(&plan.python, device, &backend, Some(stop))
                .map_err(anyhow::Error::msg)?,
            None,
        ),
        (None, None) => (
            Target::named(None, &backend).map_err(anyhow::Error::msg)?,
            Some("no --card given: predicted for the catalog's H200 (choose another with --card NAME)".to_string()),
        ),
    };
    output::check_new(&m.output)?;
    let bar = (std::io::stderr().is_terminal() && !m.json).then(|| {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed} {prefix}")
                .expect("valid template"),
        );
        bar.set_prefix("starting the predicting worker");
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let outcome = predict(&plan, &target, stop, bar.as_ref());
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let mut doc = match outcome {
        Ok(Outcome::Predicted(doc)) => doc,
        Ok(Outcome::Unavailable(reason)) => {
            eprintln!("error: nothing predicted: {reason}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e @ StartError::Interpreter { .. }) => {
            eprintln!("error: {e}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e) => return Err(e.into()),
    };
    doc.notes.extend(note);
    match &like {
        Some(like) => {
            let compared = like.compare(&doc.assumptions);
            for w in compared.warnings() {
                eprintln!("warning: {w}");
            }
            doc.like = Some(compared);
        }
        None => doc.notes.push(versions::unchecked_note(
            doc.assumptions.torch_version.as_deref(),
            doc.assumptions.transformers_version.as_deref(),
        )),
    }
    let saved = output::save_result(&m.output, &serde_json::to_vec_pretty(&doc)?)?;
    let text = if m.json {
        serde_json::to_string_pretty(&*doc)? + "\n"
    } else {
        crate::prediction::render::table(&doc, saved.path())
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!(
            "warning: cannot write to standard output ({}); the prediction is in {}",
            output::reason(&e),
            saved.path().display()
        );
    }
    if let Saved::Elsewhere { path, why } = saved {
        eprintln!(
            "error: {why}; the prediction was saved to {} instead",
            path.display()
        );
        return Ok(exit::BAD_INPUT);
    }
    // Stopped by the timeout or a signal: the phases so far are kept, as `measure` keeps them.
    // A workload that raises is bad input for a prediction (nothing ran on a GPU).
    Ok(if doc.stopped() {
        exit::WORKLOAD_FAILED
    } else if doc.status == "failed" {
        exit::BAD_INPUT
    } else {
        exit::OK
    })
}
