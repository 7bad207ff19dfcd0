"""Writes the memory-snapshot fixtures of tests/fixtures/snapshots/ with CPython's own pickler.

Run from the repository root: python3 tools/snapshot_fixtures.py

The structure is what torch.cuda.memory._snapshot() returns (PyTorch 2.5+ keys), with PyTorch's
sharing: key strings and action names are shared objects; frame dicts are shared between stacks;
a block's frame list is the very list of its alloc entry (one traceback), as is the free_completed
entry's; per-entry strings (user_metadata markers, compile_context) and pool-id tuples are new
objects each time. src/explain/snapshot/tests.rs builds the same tree with the Rust pickle writer
and checks that both give the same bytes, then checks the summary of these files.

The timeline (device 0, 2 MiB segments S1 and S2):
  (before the first phase)  segment_alloc S1
  model_load                alloc A 1 MiB, alloc B 512 KiB
  (between phases)          alloc T 256 KiB, freed (iteragpu's own recorder frame)
  forward                   segment_alloc S2, alloc C 256 KiB freed, alloc D 1.5 MiB, an oom,
                            B freed
  warm_forward              N times: alloc X 256 KiB, freed
At the end: S1 holds A and 1 MiB inactive, S2 holds D and 512 KiB inactive.
"""

import pathlib
import pickle

MIB = 1 << 20
BASE = 0x7F3A00000000
S1, S2 = BASE, BASE + 2 * MIB
T0 = 1_700_000_000_000_000


def fresh(text):
    """A new str object with this text (PyTorch converts each std::string anew; CPython would
    share a literal). Strings of 0 or 1 character are shared singletons in CPython anyway."""
    return (text + "#")[:-1]


def frame(filename, line, name):
    return {"name": fresh(name), "filename": fresh(filename), "line": line}


def build(n_warm):
    frames = {
        "malloc": frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1234, "c10::cuda::CUDACachingAllocator::malloc"),
        "linear": frame("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"),
        "ctx": frame("/usr/lib/python3.11/contextlib.py", 81, "inner"),
        "build": frame("/home/u/model.py", 12, "build"),
        "forward": frame("/home/u/model.py", 30, "forward"),
        "main": frame("/home/u/run.py", 40, "main"),
        "recorder": frame("/tmp/iteragpu-python-x1/iteragpu/recorder.py", 150, "phase"),
    }

    def stack(*names):
        return [frames[n] for n in names]

    clock = [T0]

    def entry(action, addr, size, meta, stack_list):
        clock[0] += 10
        return {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": 0,
            "time_us": clock[0],
            "compile_context": fresh("N/A"),
            "user_metadata": meta,
            "frames": stack_list,
        }

    m0, m1, m2 = "iteragpu phase 0 model_load", "iteragpu phase 1 forward", "iteragpu phase 2 warm_forward"
    st_a = stack("malloc", "linear", "ctx", "build", "main")
    st_b = stack("malloc", "linear", "build", "main")
    st_t = stack("malloc", "recorder", "main")
    st_c = stack("malloc", "linear", "forward", "main")
    st_d = stack("malloc", "forward", "main")
    a, b, t, c, d, x = S1, S1 + MIB, S1 + MIB + MIB // 2, S2, S2, S1 + MIB

    trace = [
        entry("segment_alloc", S1, 2 * MIB, "", st_a),
        entry("alloc", a, MIB, fresh(m0), st_a),
        entry("alloc", b, MIB // 2, fresh(m0), st_b),
        entry("alloc", t, MIB // 4, "", st_t),
        entry("free_requested", t, MIB // 4, "", stack("recorder", "main")),
        entry("free_completed", t, MIB // 4, "", st_t),
        entry("segment_alloc", S2, 2 * MIB, fresh(m1), st_c),
        entry("alloc", c, MIB // 4, fresh(m1), st_c),
        entry("free_requested", c, MIB // 4, fresh(m1), stack("forward", "main")),
        entry("free_completed", c, MIB // 4, fresh(m1), st_c),
        entry("alloc", d, 3 * MIB // 2, fresh(m1), st_d),
    ]
    clock[0] += 10
    trace.append(
        {
            "action": "oom",
            "device_free": 1000,
            "size": 8 << 30,
            "stream": 0,
            "time_us": clock[0],
            "compile_context": fresh("N/A"),
            "user_metadata": fresh(m1),
            "frames": stack("forward", "main"),
        }
    )
    trace.append(entry("free_requested", b, MIB // 2, fresh(m1), stack("main")))
    trace.append(entry("free_completed", b, MIB // 2, fresh(m1), st_b))
    for _ in range(n_warm):
        st_x = stack("malloc", "linear", "forward", "main")
        trace.append(entry("alloc", x, MIB // 4, fresh(m2), st_x))
        trace.append(entry("free_requested", x, MIB // 4, fresh(m2), stack("forward", "main")))
        trace.append(entry("free_completed", x, MIB // 4, fresh(m2), st_x))

    empty_frames = []
    segments = [
        {
            "device": 0,
            "address": S1,
            "total_size": 2 * MIB,
            "allocated_size": MIB,
            "active_size": MIB,
            "requested_size": MIB - 100,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": tuple([0, 0]),
            "is_expandable": False,
            "blocks": [
                {"address": a, "size": MIB, "requested_size": MIB - 100, "state": "active_allocated", "frames": st_a},
                {"address": S1 + MIB, "size": MIB, "requested_size": 0, "state": "inactive", "frames": empty_frames},
            ],
            "frames": st_a,
        },
        {
            "device": 0,
            "address": S2,
            "total_size": 2 * MIB,
            "allocated_size": 3 * MIB // 2,
            "active_size": 3 * MIB // 2,
            "requested_size": 3 * MIB // 2 - 1000,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": tuple([0, 0]),
            "is_expandable": False,
            "blocks": [
                {"address": d, "size": 3 * MIB // 2, "requested_size": 3 * MIB // 2 - 1000, "state": "active_allocated", "frames": st_d},
                {"address": S2 + 3 * MIB // 2, "size": MIB // 2, "requested_size": 0, "state": "inactive", "frames": empty_frames},
            ],
            "frames": st_c,
        },
    ]
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": fresh("expandable_segments:False"),
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {fresh("16"): 0, fresh("32"): 0},
    }
    return {"segments": segments, "device_traces": [trace], "allocator_settings": settings}


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "snapshots"
    out.mkdir(parents=True, exist_ok=True)
    # Protocol 4 (Python ≤ 3.13's default) past 1,000 entries (two APPENDS batches, 64 KiB
    # frames); protocol 2 (BINPUT/LONG_BINPUT) past 256 memo entries.
    (out / "phases-p4.pickle").write_bytes(pickle.dumps(build(340), protocol=4))
    (out / "phases-p2.pickle").write_bytes(pickle.dumps(build(40), protocol=2))


if __name__ == "__main__":
    main()
