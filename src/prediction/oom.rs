//! The simulated card: the capacity a prediction applies (the card's `total_memory`, or
//! `--memory-limit`, less the memory outside PyTorch's allocator) and, when the replay refuses a
//! request, the predicted out-of-memory with the post-mortem a measured one gets: the figures
//! PyTorch's message would print, from the replayed allocator, classified by the same rule
//! (`explain::oom::classify`).

use crate::explain::oom::{
    AllocatorHint, Diagnosis, LimitKind, OomClass, OomFormat, OomReport, OomRule, Platform,
    PostMortem, PrintedSize, classify,
};
use crate::prediction::replay::Refused;
use crate::schema::prediction::{Capacity, PredictedOom, PredictedPhase};
use crate::schema::target::Target;
use crate::units::Bytes;

/// A `--memory-limit` the target cannot take.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error(
        "--memory-limit {limit} is more than {card}'s total_memory ({total}): a limit emulates a smaller card; lower it, or choose a larger --card"
    )]
    AboveCard {
        limit: String,
        card: String,
        total: String,
    },
    #[error(
        "--memory-limit {limit} leaves nothing to PyTorch's allocator: the memory outside it is {context} on this target ({origin}); give more than that"
    )]
    BelowContext {
        limit: String,
        context: String,
        origin: String,
    },
}

/// The capacity a prediction for `target` applies: `--memory-limit` when given (a memory
/// fraction, as `sweep --memory-limit` applies it on the card), else the card's `total_memory`.
pub fn capacity(target: &Target, memory_limit: Option<Bytes>) -> Result<Capacity, LimitError> {
    let Some(limit) = memory_limit else {
        return Ok(of_card(target));
    };
    if limit.get() > target.total_memory {
        return Err(LimitError::AboveCard {
            limit: limit.both(),
            card: target.name.clone(),
            total: Bytes(target.total_memory).both(),
        });
    }
    if limit.get() <= target.context_bytes {
        return Err(LimitError::BelowContext {
            limit: limit.both(),
            context: Bytes(target.context_bytes).both(),
            origin: target.context_source.clone(),
        });
    }
    Ok(Capacity {
        device_bytes: limit.get(),
        source: format!("--memory-limit {} on {}", limit.grouped(), target.name),
        allocator_bytes: limit.get() - target.context_bytes,
        memory_fraction: true,
    })
}

/// The card's whole `total_memory`, less the memory outside the allocator.
pub fn of_card(target: &Target) -> Capacity {
    Capacity {
        device_bytes: target.total_memory,
        source: format!(
            "{}'s total_memory ({})",
            target.name, target.total_memory_source
        ),
        allocator_bytes: target.total_memory.saturating_sub(target.context_bytes),
        memory_fraction: false,
    }
}

/// PyTorch's `format_size`: exact up to 1024 bytes, then KiB, MiB, GiB with two decimals.
fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    let b = bytes as f64;
    if bytes <= KIB {
        format!("{bytes} bytes")
    } else if bytes <= KIB << 10 {
        format!("{:.2} KiB", b / KIB as f64)
    } else if bytes <= KIB << 20 {
        format!("{:.2} MiB", b / (KIB << 10) as f64)
    } else {
        format!("{:.2} GiB", b / (KIB << 20) as f64)
    }
}

/// A figure of the replayed allocator: exact, written as PyTorch would print it.
fn exact(bytes: u64) -> PrintedSize {
    PrintedSize {
        bytes: Bytes(bytes),
        precision_bytes: 0,
        text: format_size(bytes),
    }
}

/// The report PyTorch 2.5+ would print at the refused request (`GPU 0 has a total capacity of
/// … of which … is free. Including non-PyTorch memory, this process has … [… allowed;] Of the
/// allocated memory …`), every figure exact, and its classification.
pub fn post_mortem(r: &Refused, capacity: &Capacity, target: &Target) -> PostMortem {
    let context = target.context_bytes;
    let total = if capacity.memory_fraction {
        target.total_memory
    } else {
        capacity.device_bytes
    };
    let report = OomReport {
        format: OomFormat::OfWhichFree,
        platform: Platform::Cuda,
        device: Some(0),
        tried_to_allocate: exact(r.growth),
        request_is_lower_bound: false,
        total_capacity: Some(exact(total)),
        free: Some(exact(
            total.saturating_sub(context).saturating_sub(r.reserved),
        )),
        this_process_listed: true,
        this_process_in_use: Some(exact(r.reserved.saturating_add(context))),
        other_processes: Vec::new(),
        allowed: capacity
            .memory_fraction
            .then(|| exact(capacity.allocator_bytes)),
        allocated_by_pytorch: Some(exact(r.allocated)),
        reserved_by_pytorch: Some(exact(r.reserved)),
        reserved_but_unallocated: Some(exact(r.reserved.saturating_sub(r.allocated))),
        private_pools: None,
        hint: Some(AllocatorHint::ExpandableSegments),
    };
    let diagnosis = classify(&report);
    PostMortem { report, diagnosis }
}

/// The document's record of a refused request; `unlimited` the phases replayed without the
/// capacity.
pub fn predicted(
    r: &Refused,
    capacity: &Capacity,
    target: &Target,
    unlimited: &[PredictedPhase],
) -> PredictedOom {
    let predicted = || unlimited.iter().filter(|p| p.status.has_figures());
    let mut post_mortem = post_mortem(r, capacity, target);
    let run_peak = predicted()
        .filter_map(|p| p.peak_allocated_bytes.map(|b| (b, p.name.as_str())))
        .max_by_key(|(b, _)| *b);
    if let Some((peak, phase)) = run_peak {
        whole_run(&mut post_mortem.diagnosis, peak, phase, capacity);
    }
    PredictedOom {
        phase: r.phase.as_ref().map(|(name, _)| name.clone()),
        phase_index: r.phase.as_ref().map(|(_, index)| *index),
        requested_bytes: r.alloc.bytes,
        segment_bytes: r.growth,
        category: r.alloc.category,
        module: r.alloc.module.clone(),
        shape: r.alloc.shape.clone(),
        dtype: r.alloc.dtype.clone(),
        file: r.alloc.file.clone(),
        line: r.alloc.line,
        allocated_bytes: r.allocated,
        reserved_bytes: r.reserved,
        reserved_unallocated_bytes: r.reserved.saturating_sub(r.allocated),
        released_bytes: r.released,
        free_bytes: capacity
            .device_bytes
            .saturating_sub(target.context_bytes)
            .saturating_sub(r.reserved),
        alive: r.alive.clone(),
        unlimited_peak_reserved_bytes: predicted().filter_map(|p| p.peak_reserved_bytes).max(),
        unlimited_driver_view_bytes: predicted().filter_map(|p| p.driver_view_bytes).max(),
        post_mortem,
    }
}

/// What a message cannot know and a prediction does: the whole run's peak of live tensors with
/// unlimited memory. When it exceeds what the allocator may hold, the run cannot fit whatever
/// the cache held at the refused request: a fragmentation (or unknown) verdict from that moment
/// alone would send the user to allocator settings that cannot help, so it becomes capacity.
fn whole_run(d: &mut Diagnosis, peak_allocated: u64, phase: &str, capacity: &Capacity) {
    let limit = capacity.allocator_bytes;
    if d.class == OomClass::Capacity || peak_allocated <= limit {
        return;
    }
    let moment = format!("{} ({})", d.class.label(), d.reason);
    d.class = OomClass::Capacity;
    d.rule = OomRule::WholeRunOverCapacity;
    d.reason = format!(
        "with unlimited memory the run's live tensors would peak at {} (phase {phase}), more than the {} PyTorch's allocator may hold here ({}): no allocator setting makes it fit; at the refused request alone it read as {moment}",
        Bytes(peak_allocated).both(),
        Bytes(limit).both(),
        capacity.source
    );
    d.figures.need = Some(Bytes(peak_allocated));
    d.figures.limit = Some(Bytes(limit));
    d.figures.limit_kind = Some(if capacity.memory_fraction {
        LimitKind::MemoryFraction
    } else {
        LimitKind::Card
    });
    d.advice = vec![
        "Find the frontier at a smaller load without a GPU: `iteragpu sweep --predict --card NAME --vary DIM=LO..HI --search frontier` gives the largest batch, context or other dimension predicted to fit.".to_string(),
        format!(
            "Reduce the dimension that drives the peak (batch, context or sequence length, width), or its bytes per element (dtype, quantization, activation checkpointing), until the live tensors fall under {}.",
            Bytes(limit).both()
        ),
        "Or a larger card: `iteragpu cards --from PRED.json` ranks the cards for the peak with unlimited memory.".to_string(),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::allocator::Backend;
    use crate::explain::oom::{OomClass, OomRule};
    use crate::prediction::replay::tests::{alloc, end, start};
    use crate::prediction::replay::{TraceEvent, replay, replay_within};
    use crate::schema::prediction::PhaseStatus;
    use crate::schema::trace::{Alloc, Category};

    const MIB: u64 = 1 << 20;

    /// A card of `device` bytes with 1 MiB outside the allocator.
    fn card(device: u64) -> (Target, Capacity) {
        let mut target = Target::named(Some("A100 40GB"), "native").unwrap();
        target.total_memory = device;
        target.context_bytes = MIB;
        let capacity = capacity(&target, None).unwrap();
        (target, capacity)
    }

    /// Two 12 MiB activations in their own 12 MiB segments, the first freed and its segment
    /// still cached, then a request.
    fn events(last: u64) -> Vec<TraceEvent> {
        vec![
            start("load", 0),
            alloc(0, 40 * MIB, Category::Parameter, "m"),
            end(0),
            start("forward", 1),
            alloc(1, 12 * MIB, Category::Activation, "m.a"),
            alloc(2, 12 * MIB, Category::Activation, "m.b"),
            TraceEvent::Free(1),
            alloc(3, last, Category::Temporary, "m.c"),
            end(1),
            start("backward", 2),
            end(2),
        ]
    }

    /// The card holds 40 + 12 + 12 MiB: a 16 MiB request needs a new segment, the cached 12 MiB
    /// one is released, and still the request does not fit: capacity. The phase that ran it
    /// stops there, the next one is not reached, and the allocation is named with its line.
    #[test]
    fn a_request_beyond_the_card_is_capacity() {
        let (target, cap) = card(65 * MIB);
        let r = replay_within(
            &events(16 * MIB),
            target.context_bytes,
            Backend::Native,
            Some(cap.allocator_bytes),
        );
        let refused = r.refused.as_ref().expect("refused");
        assert_eq!(refused.released, 12 * MIB, "the cached segment released");
        assert_eq!((refused.allocated, refused.reserved), (52 * MIB, 52 * MIB));
        let status: Vec<PhaseStatus> = r.phases.iter().map(|p| p.status).collect();
        assert_eq!(
            status,
            [
                PhaseStatus::Predicted,
                PhaseStatus::OutOfMemory,
                PhaseStatus::NotReached
            ]
        );
        assert_eq!(r.phases[1].peak_allocated_bytes, Some(64 * MIB));
        assert_eq!(r.phases[1].end_reserved_bytes, Some(52 * MIB));
        assert_eq!(r.phases[2].peak_allocated_bytes, None);
        let oom = predicted(
            refused,
            &cap,
            &target,
            &replay(&events(16 * MIB), MIB, Backend::Native).phases,
        );
        assert_eq!(oom.unlimited_peak_reserved_bytes, Some(80 * MIB));
        assert_eq!(oom.unlimited_driver_view_bytes, Some(81 * MIB));
        assert_eq!(oom.phase.as_deref(), Some("forward"));
        assert_eq!(
            (oom.requested_bytes, oom.segment_bytes),
            (16 * MIB, 16 * MIB)
        );
        assert_eq!(oom.category, Category::Temporary);
        assert_eq!(oom.module.as_deref(), Some("m.c"));
        assert_eq!(
            (oom.file.as_deref(), oom.line),
            (Some("train.py"), Some(13))
        );
        assert_eq!(oom.free_bytes, 12 * MIB);
        assert_eq!(oom.alive.by_category["activation"], 12 * MIB);
        let d = &oom.post_mortem.diagnosis;
        assert_eq!(
            (d.class, d.rule),
            (OomClass::Capacity, OomRule::OverCapacity)
        );
    }

    /// The same card with the 12 MiB freed inside a segment that still holds a live block: the
    /// free piece cannot be released, and a 12 MiB request fails though 12 MiB are free in
    /// PyTorch's cache: fragmentation.
    #[test]
    fn a_request_the_cached_pieces_would_hold_is_fragmentation() {
        let (target, cap) = card(65 * MIB);
        // One 24 MiB segment (a 24 MiB storage freed, then two 12 MiB ones split from it)…
        let events = vec![
            start("load", 0),
            alloc(0, 40 * MIB, Category::Parameter, "m"),
            end(0),
            start("forward", 1),
            alloc(1, 24 * MIB, Category::Temporary, "m.x"),
            TraceEvent::Free(1),
            alloc(2, 12 * MIB, Category::Activation, "m.a"),
            alloc(3, 10 * MIB, Category::Activation, "m.b"),
            TraceEvent::Free(2),
            // … whose free 12 MiB piece does not fit 13 MiB, with no room for a new segment.
            alloc(4, 13 * MIB, Category::Temporary, "m.c"),
            end(1),
        ];
        let r = replay_within(&events, MIB, Backend::Native, Some(cap.allocator_bytes));
        let refused = r.refused.expect("refused");
        assert_eq!(refused.released, 0, "no segment is wholly free");
        let oom = predicted(&refused, &cap, &target, &[]);
        assert_eq!(oom.unlimited_peak_reserved_bytes, None);
        assert_eq!(oom.reserved_unallocated_bytes, 14 * MIB);
        let d = &oom.post_mortem.diagnosis;
        assert_eq!(d.class, OomClass::Fragmentation, "{}", d.reason);
        assert_eq!(d.rule, OomRule::CacheCoversRequest);
    }

    /// The same refused request in pieces is fragmentation only while the whole run would fit:
    /// when the run's live tensors, replayed without a limit, exceed what the allocator may hold
    /// (64 MiB here), no allocator setting saves it, and the prediction says capacity.
    #[test]
    fn pieces_are_capacity_when_the_whole_run_exceeds_the_card() {
        let (target, cap) = card(65 * MIB);
        let mut events = vec![
            start("load", 0),
            alloc(0, 40 * MIB, Category::Parameter, "m"),
            end(0),
            start("forward", 1),
            alloc(1, 24 * MIB, Category::Temporary, "m.x"),
            TraceEvent::Free(1),
            alloc(2, 12 * MIB, Category::Activation, "m.a"),
            alloc(3, 10 * MIB, Category::Activation, "m.b"),
            TraceEvent::Free(2),
            alloc(4, 13 * MIB, Category::Temporary, "m.c"),
            end(1),
        ];
        let refused = replay_within(&events, MIB, Backend::Native, Some(cap.allocator_bytes))
            .refused
            .expect("refused");
        // 63 MiB live at most without a limit: it would fit unfragmented.
        let fits = replay(&events, MIB, Backend::Native).phases;
        let d = predicted(&refused, &cap, &target, &fits)
            .post_mortem
            .diagnosis;
        assert_eq!(d.class, OomClass::Fragmentation, "{}", d.reason);
        // A later phase holding 20 MiB more: over the 64 MiB the card allows.
        events.extend([
            start("backward", 2),
            alloc(5, 20 * MIB, Category::Gradient, "m"),
            end(2),
        ]);
        let over = replay(&events, MIB, Backend::Native).phases;
        let d = predicted(&refused, &cap, &target, &over)
            .post_mortem
            .diagnosis;
        assert_eq!(
            (d.class, d.rule),
            (OomClass::Capacity, OomRule::WholeRunOverCapacity),
            "{}",
            d.reason
        );
        let run_peak = over.iter().filter_map(|p| p.peak_allocated_bytes).max();
        assert!(run_peak > Some(64 * MIB));
        assert_eq!(d.figures.need.map(|b| b.0), run_peak);
        assert_eq!(d.figures.limit, Some(Bytes(64 * MIB)));
        assert!(d.reason.contains("phase backward"), "{}", d.reason);
        assert!(d.reason.contains("read as fragmentation"), "{}", d.reason);
        french_advice_follows_the_english(&d);
    }

    /// The fiche's French advice for a predicted whole run over the capacity is the English
    /// one's: the same commands (a predicted sweep, cards from the prediction), never a
    /// measured sweep or `cards --need`, and the same limit.
    fn french_advice_follows_the_english(d: &Diagnosis) {
        use crate::report::catalog::ledger::oom_advice;
        use crate::report::format::{Lang, Style, Units};
        let en = oom_advice(d, Style::new(Lang::En, Units::Gib));
        let fr = oom_advice(d, Style::new(Lang::Fr, Units::Gib));
        assert_eq!(en, d.advice);
        assert_eq!(fr.len(), en.len(), "{fr:?}");
        let command = |line: &str| line.split('`').nth(1).map(str::to_owned);
        for (e, f) in en.iter().zip(&fr) {
            assert_eq!(
                command(e).map(|c| c.replace("NAME", "NOM").replace("LO..HI", "MIN..MAX")),
                command(f),
                "{e} / {f}"
            );
        }
        assert!(fr[0].contains("sweep --predict --card NOM"), "{}", fr[0]);
        assert!(fr[2].contains("cards --from PRED.json"), "{}", fr[2]);
        assert!(
            fr[1].contains("64\u{a0}Mio") || fr[1].contains("0,06\u{a0}Gio"),
            "{}",
            fr[1]
        );
        assert!(
            !fr.iter()
                .any(|a| a.contains("--need") || a.contains("sweep --vary")),
            "{fr:?}"
        );
    }

    /// Above the peak nothing changes: the same phases, byte for byte, as without a capacity.
    #[test]
    fn a_capacity_above_the_peak_changes_nothing() {
        let events = events(16 * MIB);
        let free = replay(&events, MIB, Backend::Native);
        let peak = free
            .phases
            .iter()
            .filter_map(|p| p.peak_reserved_bytes)
            .max();
        for backend in [
            Backend::Native,
            Backend::ExpandableSegments,
            Backend::MallocAsync,
        ] {
            let free = replay(&events, MIB, backend);
            let peak = free
                .phases
                .iter()
                .filter_map(|p| p.peak_reserved_bytes)
                .max();
            let within = replay_within(&events, MIB, backend, peak);
            assert!(within.refused.is_none());
            assert_eq!(
                serde_json::to_value(&within.phases).unwrap(),
                serde_json::to_value(&free.phases).unwrap()
            );
        }
        // A byte less: PyTorch releases the cached 12 MiB segment and serves the request.
        let r = replay_within(&events, MIB, Backend::Native, peak.map(|p| p - 1));
        assert!(r.refused.is_none());
        assert_eq!(r.phases[1].peak_reserved_bytes, Some(68 * MIB));
        let r = replay_within(&events, MIB, Backend::Native, Some(68 * MIB - 1));
        assert_eq!(r.refused.map(|r| r.released), Some(12 * MIB));
    }

    /// `--memory-limit` is a memory fraction on the card: PyTorch's `allowed`; a limit above
    /// the card or within its context is refused with the figures.
    #[test]
    fn a_memory_limit_is_a_fraction_of_the_card() {
        let target = Target::named(Some("A100 40GB"), "native").unwrap();
        let cap = capacity(&target, Some(Bytes(8 << 30))).unwrap();
        assert!(cap.memory_fraction);
        assert_eq!(cap.allocator_bytes, (8 << 30) - target.context_bytes);
        assert!(
            cap.source
                .starts_with("--memory-limit 8,589,934,592 on A100")
        );
        let above = capacity(&target, Some(Bytes(target.total_memory + 1))).unwrap_err();
        assert!(above.to_string().contains("more than A100"), "{above}");
        let below = capacity(&target, Some(Bytes(MIB))).unwrap_err();
        assert!(below.to_string().contains("leaves nothing"), "{below}");
        let refused = Refused {
            alloc: Alloc {
                id: 0,
                bytes: 2 << 30,
                category: Category::Activation,
                module: None,
                shape: vec![],
                dtype: "uint8".into(),
                tainted: false,
                file: None,
                line: None,
                managed: false,
                exprs: None,
            },
            phase: None,
            growth: 2 << 30,
            released: 0,
            allocated: 7 << 30,
            reserved: 7 << 30,
            alive: Default::default(),
            tainted: false,
        };
        let pm = post_mortem(&refused, &cap, &target);
        assert_eq!(
            pm.report.allowed.as_ref().unwrap().bytes.0,
            cap.allocator_bytes
        );
        assert_eq!(pm.report.tried_to_allocate.text, "2.00 GiB");
        assert_eq!(pm.diagnosis.class, OomClass::Capacity);
    }
}
