//! Classifying an [`OomReport`] by the rule of the parent module's documentation: the class, a
//! one-line reason with the numbers, and advice.

use super::*;

/// Noise floor of rule 5 when this process's memory is NVML's reading.
pub(super) const NOISE_MEASURED: u64 = 256 * MIB;
/// Noise floor of rule 5 when it is estimated from PyTorch's reserved memory.
pub(super) const NOISE_ESTIMATED: u64 = GIB;

pub(super) fn value(size: &Option<PrintedSize>) -> Option<u64> {
    size.as_ref().map(|s| s.bytes.0)
}

pub(super) fn precision(size: &Option<PrintedSize>) -> u64 {
    size.as_ref().map_or(0, |s| s.precision_bytes)
}

/// `429.50 GB = 400.00 GiB`
pub(super) fn both(bytes: u64) -> String {
    Bytes(bytes).both()
}

/// `a, b and c`
pub(super) fn join_and(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [head @ .., last] => format!("{} and {last}", head.join(", ")),
    }
}

/// `400.60GiB`, rounded up to the hundredth, as `iteragpu cards --need` takes it.
pub(super) fn gib_ceil(bytes: u64) -> String {
    let hundredths = (u128::from(bytes) * 100).div_ceil(u128::from(GIB));
    format!("{}.{:02}GiB", hundredths / 100, hundredths % 100)
}

/// Classifies a report by the rule of the module documentation; never panics.
pub fn classify(report: &OomReport) -> Diagnosis {
    let r = report.tried_to_allocate.bytes.0;
    let a = value(&report.allocated_by_pytorch);
    let u = value(&report.reserved_but_unallocated);
    let reserved = value(&report.reserved_by_pytorch);
    let t = value(&report.total_capacity);
    let l = value(&report.allowed);
    let f = value(&report.free);

    // This process: NVML's reading, a listed process taken to be it, or PyTorch's reserved.
    let listed = report.this_process_in_use.as_ref().map(|p| p.bytes.0);
    let candidate = if report.this_process_listed {
        None
    } else {
        reserved.and_then(|res| {
            let floor = res.saturating_sub(precision(&report.reserved_by_pytorch));
            report
                .other_processes
                .iter()
                .filter_map(|p| p.in_use.as_ref().map(|s| (p.pid, s.bytes.0)))
                .filter(|(_, used)| *used >= floor)
                .min_by_key(|(_, used)| *used)
        })
    };
    // The cudaMallocAsync message has no cache figure: its live allocations are the estimate.
    let estimate = match report.format {
        OomFormat::CudaMallocAsync => reserved.or(a),
        _ => reserved,
    };
    let (p, p_source) = match (listed, candidate, estimate) {
        (Some(p), _, _) => (Some(p), Some(ProcessSource::Nvml)),
        (None, Some((pid, p)), _) => (Some(p), Some(ProcessSource::ListedPid(pid))),
        (None, None, Some(estimate)) => (Some(estimate), Some(ProcessSource::Estimated)),
        _ => (None, None),
    };
    let measured = matches!(
        p_source,
        Some(ProcessSource::Nvml | ProcessSource::ListedPid(_))
    );
    let n = match (p, reserved) {
        (Some(p), Some(res)) if measured => Some(p.saturating_sub(res)),
        _ => None,
    };
    let others: Vec<&ProcessUsage> = report
        .other_processes
        .iter()
        .filter(|p| !matches!(p_source, Some(ProcessSource::ListedPid(pid)) if pid == p.pid))
        .collect();

    let a0 = a.unwrap_or(0);
    let need_card = a0.saturating_add(r).saturating_add(n.unwrap_or(0));
    let need_limit = a0.saturating_add(r);
    let shortfall = match (l, reserved) {
        (Some(l), Some(res)) if res.saturating_add(r) > l && need_limit <= l => {
            Some(res.saturating_add(r) - l)
        }
        _ => f.map(|f| r.saturating_sub(f)),
    };
    let held = match (t, p, f) {
        (Some(t), Some(p), Some(f)) => Some(t.saturating_sub(p).saturating_sub(f)),
        _ => None,
    };
    let mut figures = Figures {
        need: None,
        limit: None,
        limit_kind: None,
        this_process: p.map(Bytes),
        this_process_source: p_source,
        non_pytorch: n.map(Bytes),
        reserved_unallocated: u.map(Bytes),
        shortfall: shortfall.map(Bytes),
        held_elsewhere: held.map(Bytes),
    };
    let against = |kind: LimitKind, figures: &mut Figures| {
        let (need, limit) = match kind {
            LimitKind::Card => (need_card, t),
            LimitKind::MemoryFraction => (need_limit, l),
        };
        figures.need = Some(Bytes(need));
        figures.limit = limit.map(Bytes);
        figures.limit_kind = Some(kind);
    };
    let ctx = Context {
        report,
        a,
        n,
        p_source,
        others: &others,
    };

    // 0. A message whose every figure is zero (a driver that could not read them) decides nothing.
    let zeros = r == 0
        && [a, u, reserved, t, l, f]
            .iter()
            .all(|v| v.is_none_or(|v| v == 0));
    if zeros && !report.request_is_lower_bound {
        return unknown(
            OomRule::MissingFigures,
            "every figure of the message is zero (the request, the capacity, the free and the allocated memory): nothing can be classified from it".into(),
            figures,
        );
    }
    // 1. Capacity, certain.
    if report.request_is_lower_bound {
        return ctx.capacity(OomRule::OverCapacity, None, figures);
    }
    let over_limit = l.is_some_and(|l| need_limit > l);
    let over_card = t.is_some_and(|t| need_card > t);
    if over_limit || over_card {
        // Both exceeded: the smaller limit binds.
        let kind = match (over_limit, over_card) {
            (true, true) if t < l => LimitKind::Card,
            (true, _) => LimitKind::MemoryFraction,
            _ => LimitKind::Card,
        };
        against(kind, &mut figures);
        return ctx.capacity(OomRule::OverCapacity, Some(kind), figures);
    }
    // Default figures: against the binding limit.
    match (t, l) {
        (_, Some(l)) if t.is_none_or(|t| l <= t) => {
            against(LimitKind::MemoryFraction, &mut figures)
        }
        (Some(_), _) => against(LimitKind::Card, &mut figures),
        _ => {}
    }
    // 2. Fragmentation: the cache alone would hold the request (an empty request and an empty
    // cache say nothing: a message of zeros is not fragmentation).
    if let Some(u) = u
        && r > 0
        && u >= r
    {
        return ctx.fragmentation(OomRule::CacheCoversRequest, figures);
    }
    // 3. Capacity, within rounding.
    if a.is_some() {
        let slack = report
            .tried_to_allocate
            .precision_bytes
            .saturating_add(precision(&report.allocated_by_pytorch));
        let near = |need: u64, limit: Option<u64>, limit_precision: u64| {
            limit.is_some_and(|limit| {
                let tolerance = (limit / 100)
                    .saturating_add(slack)
                    .saturating_add(limit_precision);
                need.saturating_add(tolerance) >= limit
            })
        };
        let near_limit = near(need_limit, l, precision(&report.allowed));
        let near_card = near(need_card, t, precision(&report.total_capacity));
        if near_limit || near_card {
            let kind = if near_limit {
                LimitKind::MemoryFraction
            } else {
                LimitKind::Card
            };
            against(kind, &mut figures);
            return ctx.capacity(OomRule::NearCapacity, Some(kind), figures);
        }
    }
    // 4. The fraction limit refused it because the cache counts against it.
    if let (Some(l), Some(res)) = (l, reserved)
        && res.saturating_add(r) > l
    {
        against(LimitKind::MemoryFraction, &mut figures);
        return ctx.fragmentation(OomRule::FractionLimitCache, figures);
    }
    // 5. Another process: only when the free memory lacked something (a shortfall) and memory
    // held elsewhere covers it; when the free memory covered the request, what capped this
    // process is a limit (rule 8 says which), never another process.
    if let (Some(held), Some(short)) = (held, f.map(|f| r.saturating_sub(f))) {
        let noise = if measured {
            NOISE_MEASURED
        } else {
            NOISE_ESTIMATED
        };
        if short > 0 && held >= noise && held >= short {
            figures.shortfall = Some(Bytes(short));
            return ctx.another_process(held, short, figures);
        }
    }
    // 6. Fragmentation: the cache would cover what the free memory lacked.
    if let (Some(u), Some(short)) = (u, shortfall)
        && u > 0
        && short > 0
        && u >= short
    {
        return ctx.fragmentation(OomRule::CacheCoversShortfall, figures);
    }
    // 7, 8. Unknown.
    let missing: Vec<&str> = [
        (t.is_none() && l.is_none(), "the card's total capacity"),
        (a.is_none(), "the memory allocated by PyTorch"),
        (
            u.is_none(),
            "the memory reserved by PyTorch but unallocated",
        ),
        (f.is_none(), "the free memory"),
    ]
    .into_iter()
    .filter_map(|(lacking, what)| lacking.then_some(what))
    .collect();
    let (rule, reason) = if missing.is_empty() && shortfall == Some(0) && l.is_none() {
        (
            OomRule::NoRuleFits,
            format!(
                "the device had {} free, more than the request ({}), so something other than the card capped this process: a memory fraction (`torch.cuda.set_per_process_memory_fraction`, printed as `allowed` only by PyTorch 1.8–2.0 and 2.5+) or another limit; check the run's settings",
                both(f.unwrap_or(0)),
                both(r)
            ),
        )
    } else if missing.is_empty() {
        (
            OomRule::NoRuleFits,
            format!(
                "no rule fits: the request ({}) and live allocations ({}) stay well under the limit, the cached pieces ({}) are smaller than the free memory's shortfall ({}), and the memory held elsewhere ({}) does not cover it",
                both(r),
                both(a0),
                both(u.unwrap_or(0)),
                both(shortfall.unwrap_or(0)),
                both(held.unwrap_or(0)),
            ),
        )
    } else {
        let backend = if report.format == OomFormat::CudaMallocAsync {
            " (the cudaMallocAsync backend prints no cache figure)"
        } else {
            ""
        };
        (
            OomRule::MissingFigures,
            format!(
                "cannot tell why the request ({}) failed: the message lacks {}{}",
                both(r),
                join_and(&missing),
                backend
            ),
        )
    };
    unknown(rule, reason, figures)
}

/// An unknown class, with the reason and what to do to find out.
pub(super) fn unknown(rule: OomRule, reason: String, figures: Figures) -> Diagnosis {
    Diagnosis {
        class: OomClass::Unknown,
        rule,
        reason,
        advice: vec![
            "Measure the workload phase by phase in a fresh process (`iteragpu measure`): the phase that reaches the peak, and PyTorch's allocated and reserved memory there, decide the class.".into(),
            "`iteragpu environment` shows the card's free memory and the processes on it.".into(),
        ],
        figures,
    }
}

/// What the advice and reasons need besides the figures.
pub(super) struct Context<'a> {
    pub(super) report: &'a OomReport,
    pub(super) a: Option<u64>,
    pub(super) n: Option<u64>,
    pub(super) p_source: Option<ProcessSource>,
    pub(super) others: &'a [&'a ProcessUsage],
}

impl Context<'_> {
    pub(super) fn capacity(
        &self,
        rule: OomRule,
        kind: Option<LimitKind>,
        figures: Figures,
    ) -> Diagnosis {
        let report = self.report;
        let r = report.tried_to_allocate.bytes.0;
        let need = figures.need.map_or(r, |b| b.0);
        // Near the limit, the need would find the same card: ask for the request on top of it.
        let card_need = match (rule, figures.limit) {
            (OomRule::NearCapacity, Some(limit)) => limit.0.saturating_add(r).max(need),
            _ => need,
        };
        let mut advice = vec![
            "Find the frontier at a smaller load: `iteragpu sweep --vary DIM=LO..HI --search frontier` gives the largest batch, context or other dimension that fits.".to_string(),
            format!(
                "Reduce the dimension that drives the peak (batch, context or sequence length, width), or its bytes per element (dtype, quantization, activation checkpointing), until the need falls under {}.",
                figures.limit.map_or("the card's capacity".to_string(), |l| both(l.0))
            ),
            format!(
                "Or a larger card: `iteragpu cards --need {}` lists the cards that hold {} (at least: later allocations may need more).",
                gib_ceil(card_need),
                both(card_need)
            ),
        ];
        let reason = if report.request_is_lower_bound {
            advice.insert(
                0,
                "A request over 1 EB is almost always a wrong shape (an overflowed or mistaken dimension): check the tensor being created before anything else.".into(),
            );
            "the request is more than 1 EB (1,152,921,504,606,846,976 bytes): no card holds it"
                .to_string()
        } else {
            let parts = self.need_parts(kind == Some(LimitKind::Card));
            let limit = figures.limit.map_or(0, |b| b.0);
            let limit_text = match kind {
                Some(LimitKind::MemoryFraction) => {
                    let total = report
                        .total_capacity
                        .as_ref()
                        .map(|t| format!("; the card has {}", both(t.bytes.0)))
                        .unwrap_or_default();
                    let fraction = format!(
                        "The limit is a memory fraction set with `torch.cuda.set_per_process_memory_fraction`{total}: raise the fraction if the card is yours."
                    );
                    // A larger card helps only if this card cannot hold the need either.
                    let card_holds = report
                        .total_capacity
                        .as_ref()
                        .is_some_and(|t| self.need_on_card() <= t.bytes.0);
                    if card_holds {
                        advice[2] = fraction;
                    } else {
                        advice.push(fraction);
                    }
                    format!("the memory-fraction limit of {}", both(limit))
                }
                _ => format!("the card's total capacity of {}", both(limit)),
            };
            let verb = if rule == OomRule::NearCapacity {
                "is within rounding of"
            } else {
                "exceeds"
            };
            format!("{parts} = {}, which {verb} {limit_text}", both(need))
        };
        Diagnosis {
            class: OomClass::Capacity,
            rule,
            reason,
            advice,
            figures,
        }
    }

    /// A + R + N: what this process needs on the card.
    pub(super) fn need_on_card(&self) -> u64 {
        self.a
            .unwrap_or(0)
            .saturating_add(self.report.tried_to_allocate.bytes.0)
            .saturating_add(self.n.unwrap_or(0))
    }

    /// `the request (…) + PyTorch's live allocations (…) + this process's non-PyTorch memory (…)`
    pub(super) fn need_parts(&self, with_non_pytorch: bool) -> String {
        let mut parts = vec![format!(
            "the request ({})",
            both(self.report.tried_to_allocate.bytes.0)
        )];
        if let Some(a) = self.a {
            parts.push(format!("PyTorch's live allocations ({})", both(a)));
        }
        if with_non_pytorch && let Some(n) = self.n {
            let whose = match self.p_source {
                Some(ProcessSource::ListedPid(pid)) => {
                    format!("this process's (taken to be process {pid})")
                }
                _ => "this process's".to_string(),
            };
            parts.push(format!("{whose} non-PyTorch memory ({})", both(n)));
        }
        parts.join(" + ")
    }

    pub(super) fn fragmentation(&self, rule: OomRule, figures: Figures) -> Diagnosis {
        let report = self.report;
        let r = report.tried_to_allocate.bytes.0;
        let u = figures.reserved_unallocated.map_or(0, |b| b.0);
        let reason = match rule {
            OomRule::CacheCoversRequest => format!(
                "PyTorch holds {} reserved but unallocated, at least the request's {}, yet no cached block fits it: the memory is there, in pieces",
                both(u),
                both(r)
            ),
            OomRule::FractionLimitCache => format!(
                "the memory-fraction limit of {} is reached by PyTorch's reserved memory plus the request, although its live allocations plus the request ({}) fit: {} of cached pieces count against the limit",
                figures.limit.map_or_else(|| "?".into(), |l| both(l.0)),
                both(figures.need.map_or(r, |b| b.0)),
                both(u)
            ),
            _ => format!(
                "the free memory ({}) lacks {} for the request ({}), and PyTorch holds {} reserved but unallocated: the missing memory is there, in pieces",
                both(value(&report.free).unwrap_or(0)),
                both(figures.shortfall.map_or(0, |b| b.0)),
                both(r),
                both(u)
            ),
        };
        let mut expandable = "Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before the process starts: segments then grow and shrink by pages, so freed memory serves any size.".to_string();
        if matches!(report.format, OomFormat::Cached | OomFormat::Reserved) {
            expandable.push_str(" Expandable segments first shipped in torch 2.1 and this message's format is older: upgrade, or try `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N` (blocks over N MiB are then never split).");
        }
        if report.platform == Platform::Hip {
            expandable.push_str(
                " On ROCm builds that print `PYTORCH_HIP_ALLOC_CONF`, set that variable instead.",
            );
        }
        let mut advice = vec![
            expandable,
            "Check it with an A/B in fresh processes: `iteragpu sweep --vary alloc_conf=default,expandable_segments`.".to_string(),
            "Call `torch.cuda.empty_cache()` between phases (after loading, between evaluation and training) so the previous phase's cached blocks go back to the driver before the next one allocates other sizes.".to_string(),
        ];
        if let Some(private) = &report.private_pools
            && private.bytes.0 > 0
        {
            advice.push(format!(
                "{} sits free in private pools (CUDA Graphs): release the graphs you no longer replay.",
                both(private.bytes.0)
            ));
        }
        Diagnosis {
            class: OomClass::Fragmentation,
            rule,
            reason,
            advice,
            figures,
        }
    }

    pub(super) fn another_process(&self, held: u64, short: u64, figures: Figures) -> Diagnosis {
        let report = self.report;
        let named: Vec<String> = self
            .others
            .iter()
            .map(|p| match &p.in_use {
                Some(size) => format!("process {} ({})", p.pid, both(size.bytes.0)),
                None => format!("process {} (usage not available)", p.pid),
            })
            .collect();
        let whom = if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        };
        let this = match self.p_source {
            Some(ProcessSource::Nvml) => "this process uses",
            Some(ProcessSource::ListedPid(_)) => {
                "this process (taken to be the listed one that covers PyTorch's reserved memory) uses"
            }
            _ => "PyTorch holds",
        };
        let reason = format!(
            "the card has {} free of {} while {this} {}: {} is held elsewhere{whom}, more than the {} the request ({}) lacked",
            both(value(&report.free).unwrap_or(0)),
            both(value(&report.total_capacity).unwrap_or(0)),
            both(figures.this_process.map_or(0, |b| b.0)),
            both(held),
            both(short),
            both(report.tried_to_allocate.bytes.0),
        );
        let mut advice = vec![
            format!(
                "Free the device: stop or wait for {}, or run on another GPU (`CUDA_VISIBLE_DEVICES`).",
                if named.is_empty() {
                    "the other work on the card".to_string()
                } else {
                    named.join(", ")
                }
            ),
            "`iteragpu environment` lists the processes on the card, with their memory."
                .to_string(),
        ];
        match self.p_source {
            Some(ProcessSource::ListedPid(pid)) => advice.push(format!(
                "PyTorch did not recognize itself among NVML's processes (inside a container NVML shows host PIDs): process {pid} was taken to be this one."
            )),
            Some(ProcessSource::Estimated) => {
                advice.push(
                    "The message lists no memory for this process (ROCm, or NVML unavailable): part of the held memory may be this process's own CUDA context and library workspaces."
                        .into(),
                );
                if report.format == OomFormat::CudaMallocAsync {
                    advice.push(
                        "With the cudaMallocAsync backend the pool may also keep freed blocks of this process: compare with what `iteragpu environment` shows for it."
                            .into(),
                    );
                }
            }
            _ => {}
        }
        Diagnosis {
            class: OomClass::AnotherProcess,
            rule: OomRule::HeldElsewhere,
            reason,
            advice,
            figures,
        }
    }
}
