//! A predicted sweep's trials from one trace per configuration: the varied batch, context or
//! prompt length traced as a PyTorch symbol once (`predict/symbolic.py`), then each other value
//! made concrete from the trace (`prediction::symbolic`) and replayed, without running Python.
//!
//! Per configuration (the worker spec without the traced fields):
//! * the first value asked (at least 2: PyTorch's contiguity tests treat a size of 1 apart, so 1
//!   always takes its own run) runs the worker with its fields as symbols over the sweep's range;
//!   its own prediction comes from that run;
//! * the second value asked runs concretely, and its events are compared with the trace's made
//!   concrete at that value: equal, every later value inside the trace's range and guards comes
//!   from the trace; different, none does (each trial's notes say which and why);
//! * a value outside the range or a guard, a trace that ended abnormally, made a field concrete,
//!   or read the allocator's counters runs on its own, as without this module.
//!
//! `ITERAGPU_PREDICT_SYMBOLIC`: `auto` (or unset) traces where it pays, `1` wherever the fields
//! allow, `0` never; `check` runs every value concretely as well and refuses a difference (the
//! tests' reference). Any other value is refused, naming it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::prediction::replay::TraceEvent;
use crate::prediction::run::{Outcome, Worked, conclude, work};
use crate::prediction::symbolic::{self, Values};
use crate::progress::Progress;
use crate::schema::dimensions::Variable;
use crate::schema::prediction::Capacity;
use crate::schema::target::Target;
use crate::signals::StopRequest;
use crate::sweep::vary::{Values as Swept, Vary};
use crate::workload::plan::RunPlan;
use crate::workload::process::StartError;

/// The variable that turns one trace per configuration off (`0`) or checks it on every value
/// (`check`).
pub const ENV: &str = "ITERAGPU_PREDICT_SYMBOLIC";

/// The spec's field a varied dimension sets, when it can be traced symbolically.
fn field(variable: Variable) -> Option<&'static str> {
    match variable {
        Variable::Batch => Some("batch"),
        Variable::Context => Some("context"),
        Variable::PromptTokens => Some("prompt_tokens"),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Traced where it pays ([`SERVED_AT_LEAST`], [`LONG_SEARCH`]); the default.
    Auto,
    /// `1`: traced wherever the dimensions allow it.
    On,
    /// `check`: traced, and every value also run concretely and compared.
    Check,
}

/// A list sweep is traced when each configuration has at least this many values of 2 or more.
const SERVED_AT_LEAST: u64 = 10;

/// A frontier is traced when its range holds at least this many candidate values (its search
/// then predicts several rounds of them).
const LONG_SEARCH: u64 = 64;

/// At most this many symbolic traces per configuration: a value outside every trace's range
/// and guards starts another, until then (a branch each value takes apart runs value by value).
const MAX_TRACES: usize = 3;

/// One symbolic trace and whether a concrete run agreed with it.
struct Traced {
    worked: Worked,
    /// None: not checked yet; Some(Ok): a concrete run agreed; Some(Err): why it is not used.
    checked: Mutex<Option<Result<(), String>>>,
    /// Held while a concrete run checks it.
    checking: Mutex<()>,
}

impl Traced {
    fn new(worked: Worked) -> Arc<Traced> {
        Arc::new(Traced {
            worked,
            checked: Mutex::new(None),
            checking: Mutex::new(()),
        })
    }
}

/// One configuration's traces.
#[derive(Default)]
struct Slot {
    traces: Mutex<Vec<Arc<Traced>>>,
    /// Held while a trace runs; the count of traces tried (at MAX_TRACES: no more).
    tracing: Mutex<usize>,
    /// Held by the concrete run made while a trace is made, which checks that trace.
    beside: Mutex<()>,
}

/// The traces of one predicted sweep.
pub struct OneTrace {
    /// Each traced field's lowest and highest value in the sweep (the lowest at least 2).
    fields: BTreeMap<String, (u64, u64)>,
    mode: Mode,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

impl OneTrace {
    /// For a sweep of `base` over `vary` (each variable's values), when one of them can be traced.
    pub fn new(base: &RunPlan, vary: &[Vary], step: u64) -> anyhow::Result<Option<OneTrace>> {
        let mode = match std::env::var(ENV) {
            Err(std::env::VarError::NotPresent) => Mode::Auto,
            Ok(text) => match text.trim() {
                "auto" => Mode::Auto,
                "0" => return Ok(None),
                "1" => Mode::On,
                "check" => Mode::Check,
                _ => anyhow::bail!(
                    "{ENV}={:?} is not one of auto, 0, 1 or check: give auto (trace where it pays, the default), 0 (every value on its own), 1 (trace wherever the varied fields allow) or check (trace and also run every value on its own), or unset it",
                    crate::output::terminal_safe(&text)
                ),
            },
            Err(std::env::VarError::NotUnicode(_)) => {
                anyhow::bail!("{ENV} is not text: give auto, 0, 1 or check, or unset it")
            }
        };
        Ok(Self::for_mode(base, vary, step, mode))
    }

    fn for_mode(base: &RunPlan, vary: &[Vary], step: u64, mode: Mode) -> Option<OneTrace> {
        let spec = base.trial().spec.to_map();
        let workload = spec.get("workload").and_then(Value::as_str);
        if !matches!(workload, Some("dense" | "causal-lm"))
            || base.world_size().is_some_and(|n| n > 1)
            || spec.get("requests").is_some_and(|r| !r.is_null())
        {
            return None;
        }
        // Each traced field's range and how many of its values a trace may serve.
        let mut served = 1u64;
        let mut long_search = false;
        let fields: BTreeMap<String, (u64, u64)> = vary
            .iter()
            .filter(|v| base.uses(v.variable))
            .filter_map(|v| {
                let name = field(v.variable)?;
                spec.get(name).filter(|x| x.is_u64())?;
                let (lo, hi) = match &v.values {
                    Swept::List(list) => {
                        let at_least_2 = list.iter().copied().filter(|n| *n >= 2);
                        served = served.saturating_mul(at_least_2.clone().count() as u64);
                        (at_least_2.clone().min()?, at_least_2.max()?)
                    }
                    Swept::Range { lo, hi } => {
                        let lo = (*lo).max(2);
                        long_search |= (hi.saturating_sub(lo)) / step.max(1) + 1 >= LONG_SEARCH;
                        (lo, (*hi).max(lo))
                    }
                };
                Some((name.to_string(), (lo, hi)))
            })
            .collect();
        // A trace costs 1.5 to 4.5 of the workload's concrete runs (no reuse of fake-tensor
        // results, sympy on every size; an 8B LoRA step is the slow end), then the run that
        // checks it: by default only a sweep that asks many values of a configuration pays.
        let pays = long_search || served >= SERVED_AT_LEAST;
        (!fields.is_empty() && (mode != Mode::Auto || pays)).then(|| OneTrace {
            fields,
            mode,
            slots: Mutex::default(),
        })
    }

    /// What the series' protocol says of the traces.
    pub fn protocol(&self) -> String {
        format!(
            "; {} traced symbolically once per configuration (PyTorch symbols under the fake tensors), each other value made concrete from the trace once a concrete prediction agreed with it, every value a trace cannot serve predicted on its own, each trial's notes saying which ({ENV}=0: every value on its own)",
            self.fields
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(" and ")
        )
    }

    /// `plan`'s values of the traced fields and the key of the rest of its configuration; None
    /// when a value is below the traced range (1).
    fn place(&self, plan: &RunPlan) -> Option<(Values, String)> {
        let mut spec = plan.trial().spec.to_map();
        let mut values = Values::new();
        for (f, (lo, _)) in &self.fields {
            let v = spec.remove(f)?.as_u64()?;
            if v < *lo {
                return None;
            }
            values.insert(f.clone(), v);
        }
        Some((values, Value::Object(spec).to_string()))
    }

    /// The prediction `ask` wants from its configuration's trace (made on the way when none
    /// covers its values yet), or None when it must run on its own, as without traces.
    pub fn predict(&self, ask: &Ask) -> Option<Result<Outcome, StartError>> {
        let (values, key) = self.place(ask.plan)?;
        let slot = lock(&self.slots).entry(key).or_default().clone();
        let covered = match slot.covering(&values) {
            Ok(t) => t,
            Err(_) => {
                let mut tried = match slot.tracing.try_lock() {
                    Ok(tried) => tried,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    // Another value is being traced: this one runs concretely, and checks that
                    // trace if it covers this value once it ends.
                    Err(std::sync::TryLockError::WouldBlock) => {
                        let beside = slot.beside.try_lock().ok();
                        let outcome = self.check(ask, &slot, &values, None);
                        drop(beside);
                        return Some(outcome);
                    }
                };
                match slot.covering(&values) {
                    Ok(t) => t,
                    Err(why) if *tried >= MAX_TRACES => {
                        drop(tried);
                        return Some(ask.alone(Some(why)));
                    }
                    Err(why) => {
                        *tried += 1;
                        let why = (*tried > 1).then_some(why);
                        return Some(self.trace(ask, &slot, &values, &mut tried, why));
                    }
                }
            }
        };
        if trace_hints(covered.worked.traced().1) == values {
            return Some(Ok(self.made_concrete(ask, &covered.worked, &values)));
        }
        // One check at a time per trace: a value that finds one running waits for its verdict
        // (a replay then) rather than run a concrete prediction of its own beside it.
        // The run made beside the trace, when there is one, checks it first.
        drop(lock(&slot.beside));
        let checking = match covered.checking.try_lock() {
            // `check` runs every value both ways: nothing to wait for.
            _ if self.mode == Mode::Check => None,
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                drop(lock(&covered.checking));
                covered.checking.try_lock().ok()
            }
        };
        let checked = lock(&covered.checked).clone();
        match checked {
            Some(Ok(())) if self.mode != Mode::Check => {
                Some(Ok(self.made_concrete(ask, &covered.worked, &values)))
            }
            Some(Err(why)) => Some(ask.alone(Some(why))),
            _ => {
                let outcome = self.check(ask, &slot, &values, Some(covered.clone()));
                drop(checking);
                Some(outcome)
            }
        }
    }

    /// Traces `ask`'s configuration with its values as the hint; its own prediction from it.
    fn trace(
        &self,
        ask: &Ask,
        slot: &Slot,
        values: &Values,
        tried: &mut usize,
        again: Option<String>,
    ) -> Result<Outcome, StartError> {
        ask.progress
            .set_stage("tracing the varied dimensions symbolically (one trace for every value)");
        let request = serde_json::to_string(&self.fields).unwrap_or_default();
        let w = match ask.work(Some(&request))? {
            Err(outcome) => return Ok(outcome),
            Ok(w) => w,
        };
        let Some(domain) = w.traced().1 else {
            *tried = MAX_TRACES;
            if w.interrupted() {
                // Ctrl-C or SIGTERM: this value's prediction, stopped there. (A trace that ran
                // past the timeout, slower than a concrete run, gives way to one.)
                return Ok(ask.conclude(&w, w.traced().2));
            }
            // A run that did not end normally: this value's own run says why.
            return ask.alone(Some(
                "its symbolic trace did not run to its end (this run on its own says what happened)"
                    .into(),
            ));
        };
        if !domain.pinned.is_empty() {
            // Another trace would make the same field concrete at the same place.
            *tried = MAX_TRACES;
        }
        if domain.fields.is_empty() {
            // Nothing was traced (this torch cannot): a run of its own values all the same.
            let why = domain.pinned.join("; ");
            let outcome = noted(
                ask.conclude(&w, w.traced().2),
                format!(
                    "one symbolic trace for every value of the sweep was not made ({why}): each value is predicted on its own"
                ),
            );
            // Kept for the reason the other values give.
            lock(&slot.traces).push(Traced::new(w));
            return Ok(outcome);
        }
        let mut outcome = self.made_concrete(ask, &w, values);
        if let Some(why) = again {
            outcome = noted(
                outcome,
                format!(
                    "a new symbolic trace of its configuration, the earlier one not holding here: {why}"
                ),
            );
        }
        lock(&slot.traces).push(Traced::new(w));
        Ok(outcome)
    }

    /// `ask` run concretely and held against `covered` (or the trace that covers its values
    /// once the run ends) made concrete at `values`: the verdict is kept for that trace.
    fn check(
        &self,
        ask: &Ask,
        slot: &Slot,
        values: &Values,
        covered: Option<Arc<Traced>>,
    ) -> Result<Outcome, StartError> {
        let w = match ask.work(None)? {
            Err(outcome) => return Ok(outcome),
            Ok(w) => w,
        };
        if covered.is_none() {
            // The trace made beside this run: its end is waited for, to check it here.
            drop(lock(&slot.tracing));
        }
        let covered = match covered.map_or_else(|| slot.covering(values), Ok) {
            Ok(covered) => covered,
            Err(why) => {
                return Ok(noted(
                    ask.conclude(&w, w.traced().2),
                    format!(
                        "predicted on its own while its configuration was traced symbolically, not from that trace: {why}"
                    ),
                ));
            }
        };
        let trace = &covered.worked;
        let (exprs, domain, events) = trace.traced();
        let verdict = match domain.map(|d| symbolic::instantiate(events, exprs, d, values)) {
            Some(Ok(made)) => agree(&made, w.traced().2),
            Some(Err(why)) => Err(why),
            None => Err("no trace".into()),
        };
        {
            let mut checked = lock(&covered.checked);
            // A difference is kept whatever another check said.
            if checked.is_none() || verdict.is_err() {
                *checked = Some(verdict.clone().map_err(|why| {
                    format!(
                        "a concrete run at {} differed from the trace made concrete there ({why})",
                        show(values)
                    )
                }));
            }
        }
        if let (Mode::Check, Err(why)) = (self.mode, &verdict) {
            return Ok(Outcome::Unavailable(format!(
                "{ENV}=check: the trace made concrete at {} differs from the concrete run ({why})",
                show(values)
            )));
        }
        let mut outcome = ask.conclude(&w, w.traced().2);
        if verdict.is_ok() {
            outcome = noted(
                outcome,
                format!(
                    "predicted on its own to check its sweep's symbolic trace at {}: the trace made concrete at {} gave the same events",
                    show(&trace_hints(domain)),
                    show(values)
                ),
            );
        }
        Ok(outcome)
    }

    /// `ask`'s prediction from `trace` made concrete at `values`.
    fn made_concrete(&self, ask: &Ask, trace: &Worked, values: &Values) -> Outcome {
        let (exprs, domain, events) = trace.traced();
        let made = domain.ok_or_else(|| "no trace".to_string()).and_then(|d| {
            if trace_hints(Some(d)) == *values {
                // Its own values: whatever the trace holds for beyond them.
                symbolic::instantiate(events, exprs, &hint_only(d), values)
            } else {
                symbolic::instantiate(events, exprs, d, values)
            }
        });
        match made {
            Ok(made) => noted(
                ask.conclude(trace, &made),
                format!(
                    "predicted from its sweep's symbolic trace at {} (one run of the workload with {} as PyTorch symbols, made concrete at {}; {ENV}=0 runs every value)",
                    show(&trace_hints(domain)),
                    self.fields
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" and "),
                    show(values)
                ),
            ),
            Err(why) => Outcome::Unavailable(format!(
                "internal: the symbolic trace could not be made concrete ({why})"
            )),
        }
    }
}

/// What one trial asks: its plan, the card and capacity it is held against, and where to run.
pub struct Ask<'a> {
    pub plan: &'a RunPlan,
    pub target: &'a Target,
    pub capacity: &'a Capacity,
    pub stop: &'a StopRequest,
    pub progress: &'a dyn Progress,
    pub server: Option<&'a crate::prediction::fork_server::Shared>,
}

impl Ask<'_> {
    fn work(&self, symbolic: Option<&str>) -> Result<Result<Worked, Outcome>, StartError> {
        work(
            self.plan,
            self.target,
            self.capacity,
            self.stop,
            self.progress,
            self.server,
            None,
            symbolic,
        )
    }

    fn conclude(&self, w: &Worked, events: &[TraceEvent]) -> Outcome {
        conclude(self.plan, self.target, self.capacity, self.stop, w, events)
    }

    /// The plan predicted on its own (as without traces), with why no trace served it.
    fn alone(&self, why: Option<String>) -> Result<Outcome, StartError> {
        let outcome = crate::prediction::run::predict_served(
            self.plan,
            self.target,
            self.capacity,
            self.stop,
            self.progress,
            self.server,
        )?;
        Ok(match why {
            Some(why) => noted(
                outcome,
                format!("predicted on its own, not from its sweep's symbolic trace: {why}"),
            ),
            None => outcome,
        })
    }
}

impl Slot {
    /// The first trace that holds for `values`, or why none does.
    fn covering(&self, values: &Values) -> Result<Arc<Traced>, String> {
        let mut why = String::from("no symbolic trace");
        for t in lock(&self.traces).iter() {
            match usable(&t.worked, values) {
                None => return Ok(t.clone()),
                Some(w) => why = w,
            }
        }
        Err(why)
    }
}

/// `outcome` with `note` among its prediction's notes (an outcome without one unchanged).
fn noted(mut outcome: Outcome, note: String) -> Outcome {
    if let Outcome::Predicted(doc) = &mut outcome {
        doc.notes.push(note);
    }
    outcome
}

/// `mutex` locked, whatever a panicking holder left.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A domain that holds for its hint alone, whatever its guards and pins say (the traced run is
/// that value's own run).
fn hint_only(d: &crate::schema::trace::Domain) -> crate::schema::trace::Domain {
    let mut d = d.clone();
    d.guards.clear();
    d.pinned.clear();
    for r in d.fields.values_mut() {
        (r.lo, r.hi) = (Some(r.hint), Some(r.hint));
    }
    d
}

fn trace_hints(d: Option<&crate::schema::trace::Domain>) -> Values {
    d.map(|d| d.fields.iter().map(|(f, r)| (f.clone(), r.hint)).collect())
        .unwrap_or_default()
}

/// Why `trace` cannot give `values`, or None.
fn usable(trace: &Worked, values: &Values) -> Option<String> {
    let (_, domain, events) = trace.traced();
    let domain = domain?;
    if trace.queried() {
        return Some("the workload read the allocator's counters, whose answers hold for the traced values only".into());
    }
    if events
        .iter()
        .any(|e| matches!(e, TraceEvent::Unpredictable(_)))
    {
        return Some("an op the fake tensors could not follow".into());
    }
    symbolic::outside(domain, values)
}

/// Whether two event streams are the same run, but for the times the phases took (`*_s`).
fn agree(made: &[TraceEvent], concrete: &[TraceEvent]) -> Result<(), String> {
    if made.len() != concrete.len() {
        return Err(format!("{} events against {}", made.len(), concrete.len()));
    }
    match made
        .iter()
        .zip(concrete)
        .position(|(a, b)| untimed(a) != untimed(b))
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "event {i} differs: {:?} against {:?}",
            made[i], concrete[i]
        )),
    }
}

/// `e` without the phases' durations, which differ between any two runs.
fn untimed(e: &TraceEvent) -> std::borrow::Cow<'_, TraceEvent> {
    let strip = |inputs: &serde_json::Map<String, Value>| {
        Ok::<_, std::convert::Infallible>(
            inputs
                .iter()
                .filter(|(k, v)| !(k.ends_with("_s") && v.is_f64()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    match symbolic::with_inputs(e, strip) {
        Ok(Some(phase)) => std::borrow::Cow::Owned(phase),
        _ => std::borrow::Cow::Borrowed(e),
    }
}

fn show(values: &Values) -> String {
    values
        .iter()
        .map(|(f, v)| format!("{f}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
