//! The frontier's hint: a process runner that also predicts each plan's peak on fake CUDA
//! tensors. It lives in the sweep, the one layer above both runners, so `measure` and
//! `prediction` never import each other.

use std::path::Path;

use crate::measure::build::TrialOutcome;
use crate::measure::trial::{ProcessRunner, TrialRunner};
use crate::prediction::run::{Outcome, predict};
use crate::progress::{NoProgress, Progress};
use crate::schema::target::Target;
use crate::signals::{Stop, StopRequest};
use crate::workload::plan::{MeasurePlan, Trial};
use crate::workload::process::StartError;

/// Runs trials as `ProcessRunner` does and answers `predicted_peak` with a prediction.
pub struct PredictingRunner {
    runner: ProcessRunner,
    stop: &'static StopRequest,
    /// The card predictions are made for, read from the first device for one allocator backend.
    target: Option<(String, Option<Target>)>,
}

impl PredictingRunner {
    /// `stop` is set by the signal handlers; trials and predictions stop on it.
    pub fn new(stop: &'static StopRequest) -> PredictingRunner {
        PredictingRunner {
            runner: ProcessRunner::new(stop),
            stop,
            target: None,
        }
    }
}

impl TrialRunner for PredictingRunner {
    fn run(&mut self, trial: &Trial, progress: &dyn Progress) -> Result<TrialOutcome, StartError> {
        self.runner.run(trial, progress)
    }

    fn device_total(&mut self, python: &Path, device: &str) -> Option<u64> {
        self.runner.device_total(python, device)
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.runner.stop_requested()
    }

    fn predicted_peak(&mut self, plan: &MeasurePlan) -> Option<u64> {
        let device = plan.devices.first()?;
        let backend = plan.allocator_backend();
        if self.target.as_ref().is_none_or(|(b, _)| *b != backend) {
            let target = Target::of_device(&plan.python, device, &backend, Some(self.stop)).ok();
            self.target = Some((backend, target));
        }
        let target = self.target.clone().and_then(|(_, t)| t)?;
        match predict(plan, &target, self.stop, &NoProgress).ok()? {
            // A prediction stopped by a signal or the timeout holds only its first phases.
            Outcome::Predicted(doc) if !doc.stopped() => doc.max_peak_reserved(),
            _ => None,
        }
    }
}
