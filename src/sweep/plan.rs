//! A sweep request validated once: its mode, the base measurement plan every trial varies, the
//! values (a list, a range, a grid, named loads or N processes), the emulated limit and the search
//! budget. Anything wrong is refused here, before a trial runs or a file is created.

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::cards;
use crate::measure::gpus::Gpus;
use crate::schema::alloc_conf::ALLOC_CONF;
use crate::schema::dimensions::Variable;
use crate::schema::prediction::Capacity;
use crate::schema::series::{Limit, SweepMode};
use crate::schema::target::Target;
use crate::sweep::search::Bounds;
use crate::sweep::vary::{AllocConf, Search, Values, Vary, VaryArg, grid_order};
use crate::units::Bytes;
use crate::workload::plan::{Acts, RunOptions, RunPlan, Trial};

/// A sweep as asked for, before validation (`commands/` fills it from the command line).
#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub vary: Vec<VaryArg>,
    pub search: Option<Search>,
    pub resolution: u64,
    pub max_trials: u64,
    pub memory_limit: Option<Bytes>,
    pub card: Option<String>,
    pub loads: Option<std::path::PathBuf>,
    pub processes: Option<u64>,
    /// Skip the frontier search's prediction hint.
    pub no_prediction: bool,
    /// `--predict`: every trial a prediction on data-less tensors, held against `card` or
    /// `memory_limit`.
    pub predict: bool,
    /// `--gpus`: measured trials spread over these GPUs, one per GPU at a time.
    pub gpus: Option<Gpus>,
    /// `--allow-mixed`: GPUs of different models are run on, said in the series.
    pub allow_mixed: bool,
}

/// A named reference load (`--loads`): the dimensions it sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    pub name: String,
    pub values: Vec<(Variable, u64)>,
}

/// Everything a sweep runs.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    pub mode: SweepMode,
    /// The configuration every trial starts from.
    pub base: RunPlan,
    pub vary: Vec<Vary>,
    /// `--vary alloc_conf=…`: the allocator settings compared (mode `alloc-conf`).
    pub alloc_confs: Vec<AllocConf>,
    pub loads: Vec<Load>,
    /// `--processes N`.
    pub processes: u64,
    pub limit: Option<Limit>,
    /// The frontier's resolution and trial budget (`lo`/`hi` from the range).
    pub resolution: u64,
    pub max_trials: usize,
    /// Arguments after `--` as the user wrote them (a script's, with `{name}` placeholders).
    pub script_args_template: Vec<String>,
    /// `--no-prediction`: the frontier search takes no prediction hint.
    pub no_prediction: bool,
    /// `--predict`: the trials are predictions held against `limit`, which is then the card's
    /// capacity (or `--memory-limit`), not an emulated one.
    pub predict: bool,
    /// `--predict`: the card the predictions are made for, and the capacity they apply (the
    /// card's `total_memory`, or `--memory-limit`).
    pub target: Option<(Target, Capacity)>,
    /// `--gpus`: the GPUs the measured trials spread over (named, resolved when the sweep starts).
    pub gpus: Option<Gpus>,
    pub allow_mixed: bool,
}

impl SweepPlan {
    /// Validates a sweep and the measurement every trial starts from (`m`).
    pub fn new(args: &SweepOptions, m: &RunOptions) -> Result<SweepPlan> {
        let mut vary: Vec<Vary> = Vec::new();
        let mut alloc_confs: Option<Vec<AllocConf>> = None;
        for v in &args.vary {
            match v {
                VaryArg::Dimension(v) => vary.push(v.clone()),
                VaryArg::AllocConf(_) if alloc_confs.is_some() => {
                    bail!("--vary alloc_conf is given twice; list every setting in one")
                }
                VaryArg::AllocConf(list) => alloc_confs = Some(list.clone()),
            }
        }
        if let Some(list) = &alloc_confs {
            if m.alloc_conf.is_some() {
                bail!(
                    "--alloc-conf and --vary alloc_conf both set the allocator; keep the --vary (it runs {})",
                    list.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
                );
            }
            if args.search.is_some() || args.loads.is_some() || args.processes.is_some() {
                bail!(
                    "--vary alloc_conf compares settings at listed values; for a frontier per setting run one sweep each with --alloc-conf SETTING"
                );
            }
            if vary.len() > 1 {
                bail!(
                    "--vary alloc_conf goes with at most one listed dimension (the A/B at each of its values)"
                );
            }
        }
        let mode = match (vary.len(), args.search, &args.loads, args.processes) {
            _ if alloc_confs.is_some() => SweepMode::AllocConf,
            (0, None, Some(_), None) => SweepMode::Loads,
            (0, None, None, Some(_)) => SweepMode::Processes,
            (1, Some(Search::Frontier), None, None) => SweepMode::Frontier,
            (1, None, None, None) => SweepMode::List,
            (2, None, None, None) => SweepMode::Grid,
            (0, _, None, None) => {
                bail!("nothing to sweep: give --vary NAME=VALUES, --loads FILE or --processes N")
            }
            (2, Some(_), _, _) => {
                bail!("--search frontier varies one dimension; give a single --vary")
            }
            (n, _, _, _) if n > 2 => bail!(
                "at most two --vary options (a grid); adjacent trials must differ by one variable"
            ),
            _ => {
                bail!("combine --vary with --search frontier, or use --loads or --processes alone")
            }
        };
        if vary.len() == 2 && vary[0].variable == vary[1].variable {
            bail!(
                "--vary {} is given twice; a grid needs two different dimensions",
                vary[0].variable
            );
        }
        // A dimension is either fixed or varied: a fixed value the trials would overwrite is
        // refused, naming both.
        for v in &vary {
            if let Some(w) = m
                .written
                .iter()
                .find(|w| w.acts == Acts::Dimension(v.variable))
            {
                let values = match &v.values {
                    Values::List(list) => list
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    Values::Range { lo, hi } => format!("{lo}..{hi}"),
                };
                bail!(
                    "{} is fixed and --vary {}={values} varies it: each trial would take the varied value; drop {} or the --vary",
                    w.flag,
                    v.variable,
                    w.flag
                );
            }
        }
        for v in &vary {
            match (&v.values, mode) {
                (Values::Range { .. }, SweepMode::Frontier)
                | (Values::List(_), SweepMode::List | SweepMode::Grid | SweepMode::AllocConf) => {}
                (Values::List(_), SweepMode::Frontier) => bail!(
                    "--search frontier needs a range: --vary {}=LO..HI",
                    v.variable
                ),
                (Values::Range { .. }, _) => bail!(
                    "--vary {}=LO..HI is a range: add --search frontier, or list the values",
                    v.variable
                ),
                _ => {}
            }
        }
        check_trial_count(&vary)?;
        // A script, or a command line as typed (`-- torchrun … train.py`).
        let script = m.script.is_some() || !m.script_args.is_empty();
        if script && mode != SweepMode::Loads {
            // A script only sees what its arguments say: each varied dimension must appear there.
            for v in &vary {
                let placeholder = format!("{{{}}}", v.variable);
                if !m.script_args.iter().any(|a| a.contains(&placeholder)) {
                    bail!(
                        "--vary {0} with a script: the script never receives the value; write {{{0}}} in its arguments, e.g. -- --{0} {{{0}}}",
                        v.variable
                    );
                }
            }
        }
        if args.predict {
            refuse_for_prediction(args, m, mode)?;
        }
        if args.gpus.is_some() {
            refuse_for_gpus(args, m)?;
        }
        if args.no_prediction && mode != SweepMode::Frontier {
            bail!(
                "--no-prediction applies to --search frontier (its hint); drop it (sweep trials are measured, not predicted)"
            );
        }
        if m.timeline {
            bail!(
                "--timeline records one run's allocations; measure the configuration you want to see with `iteragpu measure … --timeline` (a sweep keeps the live allocations' frames for its out-of-memory post-mortems)"
            );
        }
        let limit = limit(args)?;
        // Validate the base configuration before anything runs (bad input exits 1).
        let base = if args.predict {
            RunPlan::for_predicted_sweep(m)?
        } else {
            RunPlan::new(m)?
        };
        crate::prediction::kv_estimates(&base)?;
        let target = if args.predict {
            Some(prediction_target(args, &base)?)
        } else {
            None
        };
        let loads = match &args.loads {
            Some(path) => read_loads(path)?,
            None => Vec::new(),
        };
        // A varied dimension the workload never reads would make every trial the same.
        let varied = vary
            .iter()
            .map(|v| v.variable)
            .chain(loads.iter().flat_map(|l| l.values.iter().map(|(v, _)| *v)));
        for variable in varied {
            if !base.uses(variable) && !script {
                bail!(
                    "{variable} has no effect on {}: varying it would run the same workload again; vary one of {}",
                    base.describe(),
                    Variable::ALL
                        .iter()
                        .copied()
                        .filter(|v| base.uses(*v))
                        .map(Variable::name)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        Ok(SweepPlan {
            mode,
            base,
            vary,
            alloc_confs: alloc_confs.unwrap_or_default(),
            loads,
            processes: args.processes.unwrap_or(1),
            limit,
            resolution: args.resolution,
            max_trials: args.max_trials as usize,
            script_args_template: m.script_args.clone(),
            no_prediction: args.no_prediction,
            predict: args.predict,
            target,
            gpus: args.gpus.clone(),
            allow_mixed: args.allow_mixed,
        })
    }

    /// The frontier's bounds (mode `frontier` only).
    pub fn bounds(&self) -> Option<(Variable, Bounds)> {
        let v = self.vary.first()?;
        let Values::Range { lo, hi } = v.values else {
            return None;
        };
        Some((
            v.variable,
            Bounds {
                lo,
                hi,
                resolution: self.resolution,
                max_trials: self.max_trials,
            },
        ))
    }
}

/// One trial of a sweep, whoever runs it: the plan, its varied values as the series records
/// them, its load's name, and the emulated limit a measured trial runs under.
#[derive(Clone, Debug)]
pub struct Cell {
    pub plan: RunPlan,
    pub values: Map<String, Value>,
    pub load: Option<String>,
    pub memory_limit: Option<u64>,
}

impl Cell {
    /// The trial a worker runs: its output kept off the terminal, under the emulated limit.
    pub fn trial(&self) -> Trial {
        let mut trial = self.plan.trial();
        trial.forward_output = false;
        if self.memory_limit.is_some() {
            trial.spec.memory_limit_bytes = self.memory_limit;
        }
        trial
    }
}

/// A sweep's cells in the order they run, each planned when it is reached.
pub type Cells<'a> = Box<dyn ExactSizeIterator<Item = Result<Cell>> + 'a>;

impl SweepPlan {
    /// The cells of every mode but the frontier (whose search picks them, [`Self::cell_at`]), in
    /// order: a grid or an A/B walked so that neighbours differ by one variable.
    pub fn cells(&self) -> Result<Cells<'_>> {
        let base = &self.base;
        Ok(match self.mode {
            SweepMode::List => {
                let v = &self.vary[0];
                let Values::List(values) = &v.values else {
                    bail!("internal: a list sweep without a list")
                };
                Box::new(values.iter().map(|&x| self.cell_at(v.variable, x)))
            }
            SweepMode::Grid => {
                let (a, b) = (&self.vary[0], &self.vary[1]);
                let (Values::List(outer), Values::List(inner)) = (&a.values, &b.values) else {
                    bail!("internal: a grid without two lists")
                };
                Box::new(grid_order(outer, inner).into_iter().map(|(x, y)| {
                    let mut values = one_value(a.variable, x);
                    values.insert(b.variable.name().to_string(), json!(y));
                    Ok(self.cell(base.with(a.variable, x)?.with(b.variable, y)?, values, None))
                }))
            }
            SweepMode::Processes => Box::new((0..self.processes as usize).map(|i| {
                let mut values = Map::new();
                values.insert("process".into(), json!(i));
                Ok(self.cell(base.clone(), values, None))
            })),
            SweepMode::Loads => Box::new(self.loads.iter().map(|load| {
                let mut p = base.clone();
                let mut values = Map::new();
                for &(variable, n) in &load.values {
                    p = p.with(variable, n)?;
                    values.insert(variable.name().to_string(), json!(n));
                }
                Ok(self.cell(p, values, Some(load.name.clone())))
            })),
            SweepMode::AllocConf => {
                // The settings outside, the listed values inside.
                let settings: Vec<u64> = (0..self.alloc_confs.len() as u64).collect();
                let (variable, list) = match self.vary.first() {
                    Some(Vary {
                        variable,
                        values: Values::List(list),
                    }) => (Some(*variable), list.clone()),
                    Some(_) => bail!("internal: an allocator A/B over a range"),
                    None => (None, vec![0]),
                };
                Box::new(grid_order(&settings, &list).into_iter().map(move |(s, x)| {
                    let setting = self.alloc_confs[s as usize];
                    let mut p = base.with_alloc_conf(setting);
                    let mut values = Map::new();
                    values.insert(ALLOC_CONF.into(), json!(setting.name()));
                    if let Some(variable) = variable {
                        p = p.with(variable, x)?;
                        values.insert(variable.name().to_string(), json!(x));
                    }
                    Ok(self.cell(p, values, None))
                }))
            }
            SweepMode::Frontier => bail!("internal: a frontier's search picks its cells"),
        })
    }

    /// The cell with `variable` at `value` (a list's, or the one a frontier search picks).
    pub fn cell_at(&self, variable: Variable, value: u64) -> Result<Cell> {
        Ok(self.cell(
            self.base.with(variable, value)?,
            one_value(variable, value),
            None,
        ))
    }

    fn cell(&self, plan: RunPlan, values: Map<String, Value>, load: Option<String>) -> Cell {
        Cell {
            plan,
            values,
            load,
            memory_limit: self.limit.as_ref().filter(|l| l.emulated).map(|l| l.bytes),
        }
    }
}

fn one_value(variable: Variable, v: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(variable.name().to_string(), json!(v));
    m
}

/// The most trials a sweep plans: each is a process that runs (or predicts) the workload, seconds
/// at the least, so 100,000 is days of work already; a larger list or grid is refused before
/// anything is planned (a 1000 × 1000 grid took 4.5 GB to plan).
pub const MAX_TRIALS: u128 = 100_000;

/// Refuses a list or grid of more than [`MAX_TRIALS`] trials, naming the count and the fix.
fn check_trial_count(vary: &[Vary]) -> Result<()> {
    let lists: Vec<(&Vary, u128)> = vary
        .iter()
        .filter_map(|v| match &v.values {
            Values::List(list) => Some((v, list.len() as u128)),
            Values::Range { .. } => None,
        })
        .collect();
    let trials: u128 = lists.iter().map(|(_, n)| *n).product();
    if lists.is_empty() || trials <= MAX_TRIALS {
        return Ok(());
    }
    let what = lists
        .iter()
        .map(|(v, n)| format!("{n} values of {}", v.variable))
        .collect::<Vec<_>>()
        .join(" × ");
    bail!(
        "--vary makes {} trials ({what}), above the {} a sweep plans (each trial runs or predicts the workload in its own process): vary fewer values, or find the largest value that fits with --search frontier (a bisection: a few trials)",
        crate::units::group_thousands(trials),
        crate::units::group_thousands(MAX_TRIALS)
    )
}

/// What `--gpus` cannot go with, refused with the fix before anything runs: each trial has one
/// GPU of its own, which the workload sees as `cuda:0`.
fn refuse_for_gpus(args: &SweepOptions, m: &RunOptions) -> Result<()> {
    if args.predict {
        bail!(
            "--gpus spreads measured trials over this machine's GPUs, and --predict predicts on the CPU: drop one"
        );
    }
    if m.nproc_per_node.is_some() || m.nnodes.is_some() {
        bail!(
            "--gpus gives each trial one GPU, and --nproc-per-node/--nnodes run each trial on several under torchrun: drop --gpus (torchrun's trials run one after the other on the GPUs --device lists)"
        );
    }
    if !m.device.is_empty() && m.device != ["cuda:0"] {
        bail!(
            "--gpus gives each trial one GPU, which the workload sees as cuda:0, and --device {} names others: drop --device (list the GPUs in --gpus instead)",
            m.device.join(",")
        );
    }
    Ok(())
}

/// What `--predict` cannot do, refused with the fix before anything runs.
fn refuse_for_prediction(args: &SweepOptions, m: &RunOptions, mode: SweepMode) -> Result<()> {
    if args.card.is_none() && args.memory_limit.is_none() {
        bail!(
            "sweep --predict needs the capacity its predictions are held against: give --card NAME (a card of `iteragpu cards`, e.g. --card \"A100 40GB\") or --memory-limit BYTES (a custom capacity, e.g. 24GB)"
        );
    }
    match mode {
        SweepMode::Processes => bail!(
            "--processes with --predict: a prediction is deterministic, N processes would predict the same figures N times; run `iteragpu predict` once"
        ),
        SweepMode::AllocConf => bail!(
            "--vary alloc_conf with --predict is not supported: predict each setting with `iteragpu sweep --predict … --alloc-conf SETTING`, one sweep each"
        ),
        _ => {}
    }
    if args.no_prediction {
        bail!(
            "--no-prediction with --predict: every trial is a prediction; drop --no-prediction (or --predict, to measure)"
        );
    }
    if m.nproc_per_node.is_some() {
        bail!(
            "sweep --predict runs no torchrun job: drop --nproc-per-node (predict one rank's job with `iteragpu predict --world-size N`)"
        );
    }
    if m.device.len() > 1 {
        bail!(
            "sweep --predict follows one device; --device {} lists {}: give one",
            m.device.join(","),
            m.device.len()
        );
    }
    Ok(())
}

fn limit(args: &SweepOptions) -> Result<Option<Limit>> {
    if args.predict {
        return predicted_capacity(args).map(Some);
    }
    if let (Some(b), Some(name)) = (&args.memory_limit, &args.card) {
        bail!(
            "--memory-limit {} and --card {name} both set the emulated capacity of a measured sweep: give one (with --predict, --card names the card and --memory-limit its capacity)",
            b.grouped()
        );
    }
    let method = "torch.cuda.set_per_process_memory_fraction((limit − memory outside PyTorch's allocator measured in the same process) ÷ total_memory)".to_string();
    Ok(match (&args.memory_limit, &args.card) {
        (Some(b), _) => Some(Limit {
            bytes: b.get(),
            source: format!("--memory-limit {}", b.grouped()),
            emulated: true,
            method,
        }),
        (None, Some(name)) => {
            let card = cards::find(name).map_err(anyhow::Error::msg)?;
            let (cap, source) = card.device_capacity();
            Some(Limit {
                bytes: cap.get(),
                source: format!("--card {} ({})", card.name, source.label()),
                emulated: true,
                method,
            })
        }
        (None, None) => None,
    })
}

/// The capacity a predicted series is held against: the card's `total_memory` or
/// `--memory-limit`, against the predicted driver's view (peak reserved + memory outside the
/// allocator).
fn predicted_capacity(args: &SweepOptions) -> Result<Limit> {
    let method = "predicted to fit when the highest predicted driver's view (peak reserved + the target's memory outside PyTorch's allocator) is at most the capacity; no GPU involved".to_string();
    Ok(match (&args.memory_limit, &args.card) {
        (Some(b), card) => Limit {
            bytes: b.get(),
            source: match card {
                Some(name) => format!("--memory-limit {} on --card {name}", b.grouped()),
                None => format!("--memory-limit {}", b.grouped()),
            },
            emulated: false,
            method,
        },
        (None, Some(name)) => {
            let card = cards::find(name).map_err(anyhow::Error::msg)?;
            let (cap, source) = card.device_capacity();
            Limit {
                bytes: cap.get(),
                source: format!("--card {} ({})", card.name, source.label()),
                emulated: false,
                method,
            }
        }
        (None, None) => bail!("internal: a predicted sweep without a capacity"),
    })
}

/// The card `--predict` predicts for (the catalog's `--card`, else the default card) and the
/// capacity each prediction applies (`prediction::oom::capacity`, as `predict --memory-limit`
/// applies it: a memory fraction of that card).
fn prediction_target(args: &SweepOptions, base: &RunPlan) -> Result<(Target, Capacity)> {
    let backend = base.allocator_backend();
    let target = Target::named(args.card.as_deref(), &backend)?;
    let capacity = crate::prediction::oom::capacity(&target, args.memory_limit)?;
    Ok((target, capacity))
}

/// `{"loads": [{"name": "usual", "batch": 1, "context": 512}, …]}`.
fn read_loads(path: &std::path::Path) -> Result<Vec<Load>> {
    // Checked before it is opened: a FIFO would block the open (and every signal) until a writer
    // came. A list of named loads is small: 16 MiB is far above any real one.
    let bytes = crate::model::files::read_capped(path, 16 << 20, "--loads file")
        .map_err(|e| anyhow::anyhow!("--loads: {e}"))?;
    let text = String::from_utf8(bytes)
        .with_context(|| format!("cannot read --loads {}: not UTF-8 text", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "--loads {} is not valid JSON (line {}, column {}): {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    let Some(loads) = doc.get("loads").and_then(Value::as_array) else {
        bail!(
            "--loads {}: expected {{\"loads\": [{{\"name\": \"usual\", \"batch\": 1, \"context\": 512}}, …]}}",
            path.display()
        );
    };
    if loads.len() as u128 > MAX_TRIALS {
        bail!(
            "--loads {} lists {} loads, above the {} trials a sweep plans: give fewer loads",
            path.display(),
            crate::units::group_thousands(loads.len() as u128),
            crate::units::group_thousands(MAX_TRIALS)
        );
    }
    let mut out = Vec::new();
    for (i, load) in loads.iter().enumerate() {
        let name = load
            .get("name")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| format!("load {}", i + 1));
        let mut values = Vec::new();
        for (k, v) in load.as_object().into_iter().flatten() {
            if k == "name" {
                continue;
            }
            let Some(n) = v.as_u64().filter(|n| *n > 0) else {
                bail!(
                    "--loads {}: `{k}` of load `{name}` must be a whole number > 0",
                    path.display()
                );
            };
            values.push((Variable::parse(k).map_err(anyhow::Error::msg)?, n));
        }
        out.push(Load { name, values });
    }
    if out.is_empty() {
        bail!(
            "--loads {}: the list of loads is empty; give at least one, e.g. {{\"loads\": [{{\"name\": \"usual\", \"batch\": 1}}]}}",
            path.display()
        );
    }
    Ok(out)
}
