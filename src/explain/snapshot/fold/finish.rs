//! The end of the fold: the summary made from what the folder kept, each string, frame and
//! phase name made once and shared.

use super::*;
use crate::explain::snapshot::pickle;

impl Folder {
    pub(crate) fn finish(mut self, run: Run) -> Result<SnapshotSummary, SnapshotError> {
        match self.root {
            None => {
                return Err(SnapshotError::NotASnapshot(format!(
                    "the pickle holds a {}, not the snapshot dictionary",
                    run.top
                )));
            }
            Some(Kind::Dict) if !self.saw_segments && !self.saw_traces => {
                return Err(SnapshotError::NotASnapshot(
                    "its dictionary has neither \"segments\" nor \"device_traces\"".into(),
                ));
            }
            // A list of anything but segments (`[1, 2, 3]`) is not an empty snapshot.
            _ if self.stray_segments > 0 && self.devices.values().all(|a| !a.seen_segments) => {
                return Err(SnapshotError::NotASnapshot(format!(
                    "its list of segments holds {} item(s) that are not segment dictionaries (each with \"total_size\" and \"blocks\") and no segment",
                    self.stray_segments
                )));
            }
            _ => {}
        }
        let strings = &run.strings;
        let mut made = Made::default();
        let mut devices = Vec::new();
        let mut history_recorded = false;
        let device_accs = std::mem::take(&mut self.devices);
        for (device, acc) in device_accs {
            let entries = acc.replay.as_ref().map_or(0, |r| r.entries);
            if !acc.seen_segments && entries == 0 {
                continue;
            }
            history_recorded |= entries > 0;
            let t = &acc.totals;
            let segments = SegmentMap {
                segments: t.segments,
                reserved_bytes: t.reserved,
                allocated_bytes: t.allocated,
                active_bytes: t.active,
                requested_bytes: acc.requested,
                inactive_bytes: t.inactive,
                inactive_split_bytes: t.inactive_split,
                largest_inactive_block_bytes: t.largest_inactive,
                largest_segments: {
                    let mut kept = acc.largest_segments.clone();
                    keep_largest_segments(&mut kept);
                    kept
                },
                pools: acc
                    .pools
                    .iter()
                    .map(|((pool_id, kind), p)| PoolSummary {
                        pool_id: *pool_id,
                        segment_type: segment_type_word(*kind).to_string(),
                        segments: p.segments,
                        expandable_segments: p.expandable,
                        reserved_bytes: p.reserved,
                        allocated_bytes: p.allocated,
                        active_bytes: p.active,
                        inactive_bytes: p.inactive,
                        inactive_split_bytes: p.inactive_split,
                        largest_inactive_block_bytes: p.largest_inactive,
                    })
                    .collect(),
            };
            let largest_blocks_at_end = acc
                .top_blocks
                .iter()
                .map(|b| Allocation {
                    address: b.address,
                    size_bytes: b.size,
                    allocated_at: None,
                    phase: None,
                    user_frame: self.user_frame(&mut made, b.stack, strings),
                    stack_top: self.stack_top(&mut made, b.stack, strings),
                })
                .collect();
            let trace = match acc.replay {
                Some(mut replay) if replay.entries > 0 => {
                    replay.end();
                    if replay.untracked {
                        self.count(
                            "device traces past 4,194,304 allocations and segments alive at once, all devices together (the newest were not ranked)",
                        );
                    }
                    Some(self.trace_summary(&mut made, &replay, &segments, strings))
                }
                _ => None,
            };
            devices.push(DeviceSummary {
                device,
                segments,
                largest_blocks_at_end,
                trace,
            });
        }
        let mut notes: Vec<String> = self
            .counts
            .iter()
            .map(|(what, n)| format!("{n} × {what}"))
            .collect();
        // What the reader's budgets left out, each said when it happened.
        let left_out = [
            (
                run.strings.refused,
                "strings beyond the interning bound were read but not kept".to_string(),
            ),
            (
                run.built_dropped,
                "items of generic values (allocator settings, unknown keys) beyond the bound were dropped".into(),
            ),
            (
                run.memo_refused,
                "memoized objects beyond the memo's bound were not kept (fetching them again gave nothing)".into(),
            ),
            (
                run.tuples_dropped,
                format!("tuples of more than {} items were not kept", pickle::MAX_TUPLE_ITEMS),
            ),
            (
                run.texts_cut,
                format!("strings that were not interned were cut to {} bytes", pickle::MAX_TEXT_BYTES),
            ),
        ];
        notes.extend(
            left_out
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}")),
        );
        let mut summary = SnapshotSummary {
            frames: Vec::new(),
            pickle_protocol: run.protocol,
            bytes_read: run.bytes_read,
            history_recorded,
            devices,
            allocator_settings: self.settings.take(),
            notes,
            annotations: std::mem::take(&mut self.annotations),
        };
        summary.index_frames();
        Ok(summary)
    }

    /// A frame, made once (its strings cut to `MAX_STRING_CHARS`, each made once) and shared by
    /// every allocation that shows it.
    fn frame(&self, made: &mut Made, id: u32, strings: &Strings) -> Option<Frame> {
        if let Some(frame) = made.frames.get(&id) {
            return Some(frame.clone());
        }
        let rec = self.frames.get(id as usize)?;
        let frame = Frame {
            filename: made.string(rec.filename, strings),
            line: rec.line,
            name: made.string(rec.name, strings),
        };
        made.frames.insert(id, frame.clone());
        Some(frame)
    }

    fn user_frame(&self, made: &mut Made, stack: Option<u32>, strings: &Strings) -> Option<Frame> {
        let rec = self.stacks.get(stack? as usize)?;
        self.frame(made, rec.user?, strings)
    }

    fn stack_top(&self, made: &mut Made, stack: Option<u32>, strings: &Strings) -> Vec<Frame> {
        let Some(rec) = stack.and_then(|s| self.stacks.get(s as usize)) else {
            return Vec::new();
        };
        rec.top[..usize::from(rec.n).min(STACK_TOP_FRAMES)]
            .iter()
            .filter_map(|&f| self.frame(made, f, strings))
            .collect()
    }

    fn phase_name(&self, key: u32) -> (String, Option<u64>) {
        match key {
            KEY_BEFORE => (BEFORE_FIRST_PHASE.to_string(), None),
            KEY_BETWEEN => (BETWEEN_PHASES.to_string(), None),
            k => match self.markers.get((k - 2) as usize) {
                Some((index, name)) => (name.clone(), Some(*index)),
                None => (String::new(), None),
            },
        }
    }

    /// A phase's name as its allocations show it: made once, shared.
    fn phase_label(&self, made: &mut Made, key: u32) -> Arc<str> {
        made.phases
            .entry(key)
            .or_insert_with(|| self.phase_name(key).0.into())
            .clone()
    }

    fn trace_summary(
        &self,
        made: &mut Made,
        r: &Replay,
        segments: &SegmentMap,
        strings: &Strings,
    ) -> TraceSummary {
        // Anchor the relative replay to the segments at the end of the snapshot.
        let mut base_alloc = i128::from(segments.active_bytes) - r.alloc;
        let mut base_reserved = i128::from(segments.reserved_bytes) - r.reserved;
        let mut inconsistent = false;
        if base_alloc + r.min_alloc < 0 {
            base_alloc = -r.min_alloc;
            inconsistent = true;
        }
        if base_reserved + r.min_reserved < 0 {
            base_reserved = -r.min_reserved;
            inconsistent = true;
        }
        let abs = |x: i128, base: i128| -> u64 { (x + base).clamp(0, i128::from(u64::MAX)) as u64 };
        let before_alloc = abs(0, base_alloc);
        let before_reserved = abs(0, base_reserved);
        let full = self
            .options
            .max_entries
            .is_some_and(|m| m > 0 && r.entries >= m);
        let mut reasons = Vec::new();
        if full {
            reasons.push(format!(
                "it holds {} entries, the max_entries given to _record_memory_history: the oldest were dropped",
                Bytes(r.entries).grouped()
            ));
        }
        if r.frees_without_alloc > 0 {
            reasons.push(format!(
                "it frees {} it never saw allocated",
                counted(r.frees_without_alloc, "allocation")
            ));
        }
        if r.segment_frees_without_alloc > 0 {
            reasons.push(format!(
                "it frees {} it never saw allocated",
                counted(r.segment_frees_without_alloc, "segment")
            ));
        }
        if before_alloc > 0 {
            reasons.push(format!(
                "{} bytes were already allocated at its first entry",
                Bytes(before_alloc).grouped()
            ));
        }
        if before_reserved > 0 {
            reasons.push(format!(
                "{} bytes were already reserved at its first entry",
                Bytes(before_reserved).grouped()
            ));
        }
        let truncated = !reasons.is_empty();
        let mut reason = truncated.then(|| {
            format!(
                "the trace's first entries are missing (dropped by max_entries, or made before recording began): {}",
                reasons.join("; ")
            )
        });
        if inconsistent {
            let note = "the segments at the end do not hold what the trace leaves allocated; levels are shifted so that none is negative";
            reason = Some(match reason {
                Some(r) => format!("{r}; {note}"),
                None => note.to_string(),
            });
        }
        let mut actions = BTreeMap::new();
        for (i, word) in ACTIONS.iter().enumerate() {
            if r.actions[i] > 0 {
                actions.insert(<&str>::from(*word).to_string(), r.actions[i]);
            }
        }
        for (name, n) in &r.other_actions {
            actions.insert(name.clone(), *n);
        }
        let phases = r
            .phases
            .iter()
            .map(|p| {
                let (name, index) = self.phase_name(p.key);
                PhaseSummary {
                    name,
                    index,
                    entries: p.entries,
                    first_event: p.first_event,
                    last_event: p.last_event,
                    start_time_us: p.start_time,
                    end_time_us: p.end_time,
                    allocations: p.allocations,
                    allocated_total_bytes: p.allocated_total,
                    frees: p.frees,
                    freed_total_bytes: p.freed_total,
                    start_allocated_bytes: abs(p.start_alloc, base_alloc),
                    end_allocated_bytes: abs(p.end_alloc, base_alloc),
                    start_reserved_bytes: abs(p.start_reserved, base_reserved),
                    end_reserved_bytes: abs(p.end_reserved, base_reserved),
                    peak_allocated_bytes: abs(p.peak_alloc, base_alloc),
                    peak_allocated_at: p.peak_alloc_at,
                    peak_reserved_bytes: abs(p.peak_reserved, base_reserved),
                    peak_reserved_at: p.peak_reserved_at,
                    largest_at_peak: p
                        .top
                        .iter()
                        .map(|t| Allocation {
                            address: t.address,
                            size_bytes: t.size,
                            allocated_at: Some(TracePoint {
                                event: Some(t.event),
                                time_us: t.time,
                            }),
                            phase: r
                                .phases
                                .get(t.phase as usize)
                                .map(|owner| self.phase_label(made, owner.key)),
                            user_frame: self.user_frame(made, t.stack, strings),
                            stack_top: self.stack_top(made, t.stack, strings),
                        })
                        .collect(),
                    ooms: p
                        .ooms
                        .iter()
                        .map(|o| OomEvent {
                            at: o.at,
                            requested_bytes: o.requested,
                            device_free_bytes: o.device_free,
                        })
                        .collect(),
                }
            })
            .collect();
        let mut series = r.series.points.clone();
        if let Some(p) = r.series.current {
            series.push(p);
        }
        TraceSummary {
            entries: r.entries,
            actions,
            first_time_us: r.first_time,
            last_time_us: r.last_time,
            history: HistoryCoverage {
                truncated,
                reason,
                allocated_before_first_entry_bytes: before_alloc,
                reserved_before_first_entry_bytes: before_reserved,
                frees_without_alloc: r.frees_without_alloc,
                segment_frees_without_alloc: r.segment_frees_without_alloc,
            },
            peak_allocated_bytes: abs(r.peak_alloc, base_alloc),
            peak_allocated_at: r.peak_alloc_at,
            peak_reserved_bytes: abs(r.peak_reserved, base_reserved),
            peak_reserved_at: r.peak_reserved_at,
            end_allocated_bytes: abs(r.alloc, base_alloc),
            end_reserved_bytes: abs(r.reserved, base_reserved),
            phases,
            series: series
                .iter()
                .map(|p| SeriesPoint {
                    event: p.event,
                    time_us: p.time,
                    allocated_bytes: abs(p.alloc, base_alloc),
                    reserved_bytes: abs(p.reserved, base_reserved),
                })
                .collect(),
            series_stride: r.series.stride,
        }
    }
}

/// What the summary shows, made once each and shared (an allocation's frames are references to
/// these, not copies).
#[derive(Default)]
struct Made {
    strings: FxHashMap<u32, Arc<str>>,
    frames: FxHashMap<u32, Frame>,
    phases: FxHashMap<u32, Arc<str>>,
}

impl Made {
    fn string(&mut self, id: Option<u32>, strings: &Strings) -> Arc<str> {
        // No string: "" (no interned string has this id).
        let id = id.unwrap_or(u32::MAX);
        self.strings
            .entry(id)
            .or_insert_with(|| cut(strings.get(id)).into())
            .clone()
    }
}

/// `1 allocation`, `12,345 allocations`.
fn counted(n: u64, what: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {what}{s}", Bytes(n).grouped())
}
