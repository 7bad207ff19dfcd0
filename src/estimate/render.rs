//! How an estimate is shown: a table for people, `--json` for programs.

use std::fmt::Write as _;

use super::{Estimate, Term, g};
use crate::output::table::{Column, Table};
use crate::units::Bytes;

/// The human-readable table.
pub fn table(est: &Estimate) -> String {
    let mut out = String::new();
    if let Some(sv) = &est.serving {
        refusal_headline(&mut out, &sv.start);
    }
    let _ = writeln!(
        out,
        "iteragpu estimate: arithmetic before any GPU is touched"
    );
    if let Some(hub) = &est.hub {
        let _ = writeln!(out, "from the Hub: {} at commit {}", hub.repo, hub.commit);
    }
    if let Some(model) = &est.model {
        let a = &model.architecture;
        let _ = writeln!(
            out,
            "model: {} ({}), {} parameters from config.json; {} layers, hidden {}, {} attention heads, {} KV heads of {}{}",
            model.path,
            a.model_type,
            g(model.parameters),
            a.dims.num_layers,
            g(a.dims.hidden_size),
            a.dims.num_heads,
            a.dims.num_kv_heads,
            a.dims.head_dim,
            a.moe.map_or(String::new(), |m| format!(
                "; {} experts, {} active per token",
                m.experts, m.active
            )),
        );
        if let Some(per_token) = model.kv_bytes_per_token {
            let _ = writeln!(
                out,
                "KV cache per token and per sequence: {} bytes ({})",
                g(per_token),
                a.kv.description
            );
        }
    }
    if let Some(v) = &est.vision {
        let _ = writeln!(
            out,
            "vision: {} ({}), {} parameters from config.json; {}×{} ({}) → {}×{} = {} patches of {} px{} = {} tokens; {} image(s); attention {} ({})",
            v.model_type,
            v.family,
            g(v.parameters),
            v.resolution[0],
            v.resolution[1],
            v.resolution_source,
            v.grid[0],
            v.grid[1],
            g(v.patches),
            v.patch_size,
            match v.sequence - v.patches {
                0 => "",
                1 => " + CLS",
                _ => " + CLS + distillation",
            },
            g(v.sequence),
            g(v.images),
            v.attention,
            v.attention_source,
        );
    }
    if let Some(t) = &est.training {
        let _ = writeln!(
            out,
            "training: --precision {}{}, {}: {}",
            t.precision,
            if t.precision_stated {
                ""
            } else {
                " (the default, as predict and measure)"
            },
            t.optimizer,
            t.meaning,
        );
    }
    if let Some(sh) = &est.sharding {
        let _ = writeln!(
            out,
            "sharded training: {} over {} rank(s) ({} node(s) × {} GPU(s)){}; every figure below is ONE rank's GPU memory, never a total over ranks",
            sh.strategy,
            g(sh.world_size),
            g(sh.nodes),
            g(sh.gpus_per_node),
            sh.offload
                .map_or(String::new(), |o| format!(", --offload {o}")),
        );
        let _ = writeln!(
            out,
            "model states per rank: {} bytes ({}){}",
            sh.model_states_bytes.grouped(),
            sh.model_states_bytes.both(),
            sh.deepspeed.as_ref().map_or(String::new(), |d| format!(
                "; DeepSpeed's {}: {} bytes per GPU",
                d.estimator,
                d.gpu_bytes.grouped()
            )),
        );
    }
    if let Some(sv) = &est.serving {
        serving(&mut out, sv);
    }
    let _ = writeln!(out);
    let counted: Vec<&Term> = est.terms.iter().filter(|t| t.in_total).collect();
    let info: Vec<&Term> = est.terms.iter().filter(|t| !t.in_total).collect();
    let total_name = if est.serving.is_some() {
        "the instance's memory, ONE GPU"
    } else if est.sharding.is_some() {
        "preparation hypothesis, per rank"
    } else {
        "preparation hypothesis"
    };
    let mut terms = Table::new(vec![
        Column::left("term").min(4),
        Column::right("bytes").min(5).gap(2),
        Column::right("GB").min(12).gap(2),
        Column::right("GiB").min(13).gap(2),
        Column::left("kind").min(10).gap(2),
        Column::left("formula").gap(2),
    ])
    .indent(2);
    let row = |t: &mut Table, name: &str, bytes: Bytes, kind: &str, formula: &str| {
        t.row([
            name.to_string(),
            bytes.grouped(),
            format!("{:.2} GB", bytes.gb()),
            format!("{:.2} GiB", bytes.gib()),
            kind.to_string(),
            formula.to_string(),
        ]);
    };
    for t in &counted {
        row(&mut terms, &t.name, t.bytes, t.kind.as_ref(), &t.formula);
    }
    terms.rule();
    row(
        &mut terms,
        total_name,
        est.total_bytes,
        "",
        &if counted.len() == 1 {
            "the term above".to_string()
        } else {
            format!("sum of the {} terms above", counted.len())
        },
    );
    if !info.is_empty() {
        terms.text("");
        terms.text("shown for information, not in the total:");
        for t in &info {
            row(&mut terms, &t.name, t.bytes, t.kind.as_ref(), &t.formula);
        }
    }
    out.push_str(&terms.terminal());
    if let Some(stored) = &est.stored {
        let _ = writeln!(
            out,
            "\nstored format (safetensors headers, {} bytes read):",
            g(stored.bytes_read)
        );
        // The bytes under the terms' bytes.
        let mut by_dtype = Table::new(vec![
            Column::left("").min(8),
            Column::right("").min(terms.widths()[1]),
            Column::left(""),
        ])
        .indent(2);
        for (dtype, t) in &stored.by_dtype {
            let b = Bytes(t.bytes);
            by_dtype.row([
                dtype.to_string(),
                b.grouped(),
                format!(
                    "bytes  {}  ({} tensors, {} values)",
                    b.both(),
                    g(t.tensors),
                    g(t.elements)
                ),
            ]);
        }
        out.push_str(&by_dtype.terminal());
        if stored.shards.len() > 1 {
            for shard in &stored.shards {
                let _ = writeln!(
                    out,
                    "  {}: {} bytes of tensors",
                    shard.file,
                    g(shard.data_bytes)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\nleft out of this figure: {}.",
        est.left_out.join("; ")
    );
    let _ = writeln!(
        out,
        "A preparation hypothesis proves nothing about fit: only a measurement of the complete workload on the card (iteragpu measure) can."
    );
    let mut notes = est.notes.clone();
    if let Some(model) = &est.model {
        notes.extend(model.architecture.notes.iter().cloned());
    }
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The `--json` document.
pub fn json(est: &Estimate) -> String {
    serde_json::to_string_pretty(est).expect("an estimate always serializes") + "\n"
}

/// A signed byte count, grouped in thousands.
fn signed(b: i128) -> String {
    let sign = if b < 0 { "−" } else { "" };
    format!("{sign}{}", g(b.unsigned_abs()))
}

/// A predicted refusal to start, first: the engine's own words, its rule, then the largest
/// max_model_len that starts and how many requests of it fit at once.
fn refusal_headline(out: &mut String, start: &super::serving::refusal::StartCheck) {
    let Some(first) = start.refusals.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "{} would REFUSE TO START: {}",
        start.rules_of, first.message
    );
    let _ = writeln!(out, "  the engine's rule: {}", first.source);
    if let Some(len) = start.largest_max_model_len {
        let _ = writeln!(
            out,
            "  largest max_model_len that starts: {} ({}){}",
            g(len),
            start.largest_rule.as_deref().unwrap_or(""),
            start
                .max_num_seqs_at_largest
                .map_or(String::new(), |n| format!(
                    "; at {} tokens, {n} request(s) fit at once (the largest useful max_num_seqs)",
                    g(len)
                ))
        );
    }
    let _ = writeln!(out, "  to start: {}", first.fix);
    for other in &start.refusals[1..] {
        let _ = writeln!(
            out,
            "  then, once that is fixed: {} ({})",
            other.message, other.source
        );
    }
}

/// The serving plan's header: settings, then the figures as the engine's log prints them.
fn serving(out: &mut String, sv: &super::serving::ServingSummary) {
    let opt = |v: Option<u64>| v.map_or("—".to_string(), g);
    let _ = writeln!(
        out,
        "serving plan, ONE GPU: {} on {} ({} bytes = {}, {}); rules of {}: {}",
        sv.engine,
        sv.card,
        sv.device_total_bytes.grouped(),
        sv.device_total_bytes.both(),
        sv.device_total_source,
        sv.rules_of,
        sv.generation
    );
    let _ = writeln!(
        out,
        "settings: memory fraction {}, max_model_len {}, max_num_seqs {}, max_num_batched_tokens {}, TP {}, block_size {}, KV element {} byte(s)",
        sv.gpu_memory_utilization,
        g(sv.max_model_len),
        opt(sv.max_num_seqs),
        opt(sv.max_num_batched_tokens),
        sv.tensor_parallel_size,
        sv.block_size,
        sv.kv_dtype_bytes
    );
    for d in &sv.defaults {
        let _ = writeln!(out, "  default applied: {d}");
    }
    if sv.start.starts {
        let _ = writeln!(
            out,
            "{} would start: none of its refusal rules applies (TP and heads, block size, batch sizes, bfloat16, free memory, weights and profile run in memory, KV budget, one request of max_model_len)",
            sv.start.rules_of
        );
    }
    if sv.kv_budget_bytes <= 0 || sv.kv_tokens == 0 {
        // No pool, no block, no request: the headline says what the engine prints and stops on.
        let _ = writeln!(
            out,
            "KV budget {} bytes ({:.2} GiB): no room for one KV block",
            signed(sv.kv_budget_bytes),
            sv.kv_budget_bytes as f64 / crate::units::GIB as f64
        );
        return;
    }
    let _ = writeln!(
        out,
        "KV budget {} bytes ({:.2} GiB); {}KV cache size {} tokens",
        g(sv.kv_budget_bytes.max(0) as u128),
        sv.kv_budget_bytes as f64 / crate::units::GIB as f64,
        sv.num_blocks
            .map_or(String::new(), |b| format!("GPU blocks {}; ", g(b))),
        g(sv.kv_tokens)
    );
    for (len, x) in &sv.concurrency {
        let _ = writeln!(
            out,
            "  maximum concurrency for {} tokens per request: {x:.2}x",
            g(*len)
        );
    }
}
