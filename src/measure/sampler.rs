//! The driver's view, side by side with PyTorch's: a thread samples NVML every few milliseconds
//! while the worker runs (device used memory and the worker's own memory) and keeps each phase's
//! peak and sample count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

use crate::environment::nvml;

/// Peaks seen on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    pub samples: u64,
    pub device_used: Option<u64>,
    pub process_used: Option<u64>,
}

impl Peak {
    fn add(&mut self, device_used: Option<u64>, process_used: Option<u64>) {
        self.samples += 1;
        self.device_used = self.device_used.max(device_used);
        self.process_used = self.process_used.max(process_used);
    }
}

#[derive(Default)]
struct State {
    /// The phases open now (nested markers: an outer phase sees its inner ones' samples too).
    current: Vec<u64>,
    phases: BTreeMap<u64, Vec<Peak>>,
    overall: Vec<Peak>,
    samples: u64,
}

/// A running sampler.
pub struct Sampler {
    nvml: Arc<Nvml>,
    indices: Vec<u32>,
    pid: u32,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    started: Instant,
}

/// Sampling period aimed at; the achieved rate is reported with the result.
pub const PERIOD: Duration = Duration::from_millis(5);

impl Sampler {
    pub fn start(nvml: Arc<Nvml>, indices: Vec<u32>, pid: u32) -> Sampler {
        let state = Arc::new(Mutex::new(State {
            overall: vec![Peak::default(); indices.len()],
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (nvml, indices, state, stop) = (
                Arc::clone(&nvml),
                indices.clone(),
                Arc::clone(&state),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let readings: Vec<(Option<u64>, Option<u64>)> = indices
                        .iter()
                        .map(|i| nvml::sample(&nvml, *i, pid))
                        .collect();
                    {
                        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                        s.samples += 1;
                        for (peak, (d, p)) in s.overall.iter_mut().zip(&readings) {
                            peak.add(*d, *p);
                        }
                        let n = readings.len();
                        for current in s.current.clone() {
                            let entry = s
                                .phases
                                .entry(current)
                                .or_insert_with(|| vec![Peak::default(); n]);
                            for (peak, (d, p)) in entry.iter_mut().zip(&readings) {
                                peak.add(*d, *p);
                            }
                        }
                    }
                    std::thread::sleep(PERIOD);
                }
            })
        };
        Sampler {
            nvml,
            indices,
            pid,
            state,
            stop,
            thread: Some(thread),
            started: Instant::now(),
        }
    }

    /// A phase began (as seen by the CLI when its event arrived).
    pub fn enter(&self, index: u64) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .current
            .push(index);
    }

    /// A phase ended: its peaks, plus an immediate reading of the worker's memory per device.
    pub fn leave(&self, index: u64) -> (Vec<Peak>, Vec<Option<u64>>) {
        let now: Vec<Option<u64>> = self
            .indices
            .iter()
            .map(|i| nvml::sample(&self.nvml, *i, self.pid).1)
            .collect();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.current.retain(|open| *open != index);
        let peaks = s
            .phases
            .get(&index)
            .cloned()
            .unwrap_or_else(|| vec![Peak::default(); self.indices.len()]);
        (peaks, now)
    }

    /// Stops sampling; returns the run's overall peaks and the achieved sampling interval.
    pub fn finish(mut self) -> (Vec<Peak>, Option<f64>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let interval =
            (s.samples > 0).then(|| self.started.elapsed().as_secs_f64() * 1e3 / s.samples as f64);
        (s.overall.clone(), interval)
    }

    pub fn indices(&self) -> &[u32] {
        &self.indices
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
