#!/usr/bin/env python
"""Checks iteragpu/predict/cudnn_rnn.py's sizes against PyTorch's own code (no CUDA needed).

Run: PYTHONPATH=python $ITERAGPU_TEST_PYTHON tests/python/cudnn_rnn_sizes.py (the integration
test `cudnn_rnn_sizes_follow_pytorchs` does; exits 1 if a check fails).
(a) the weight space's layout: for every mode, bias, projection, depth and direction, the shapes
    `layer_shapes` lays out are the module's own `_flat_weights` shapes (torch/nn/modules/rnn.py),
    in order, with both biases always there (CUDNN_RNN_DOUBLE_BIAS): with biases the buffer is
    exactly the parameters' elements;
(b) the outputs of `_cudnn_rnn` (output, hy, cy) have the shapes of PyTorch's own meta kernel
    (`torch._meta_registrations._cudnn_rnn`), packed or not, batch_first or not;
(c) the same outputs have the shapes of the native CPU run of the same module;
(d) the mode numbers are `torch.backends.cudnn.rnn.get_cudnn_mode`'s;
(e) the bounds grow with what they bound (tokens, layers);
(f) the reserve bound holds at least what MIOpen keeps between its calls.
"""
import itertools
import sys
import warnings

warnings.simplefilter("ignore")

import torch
from torch._meta_registrations import _cudnn_rnn as meta_cudnn_rnn
from torch.backends.cudnn import rnn as cudnn_rnn_modes

from iteragpu.predict import cudnn_rnn

passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what} {detail}")


MODULES = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN_TANH": torch.nn.RNN, "RNN_RELU": torch.nn.RNN}

# (d)
for name, number in cudnn_rnn.MODES.items():
    check(f"mode {name}", cudnn_rnn_modes.get_cudnn_mode(name) == number)

# (a), (b), (c)
for name, bias, proj, layers, bidirectional, batch_first, packed in itertools.product(
    MODULES, (True, False), (0, 5), (1, 3), (False, True), (False, True), (False, True)
):
    if proj and name != "LSTM":
        continue
    kwargs = {"bias": bias, "num_layers": layers, "bidirectional": bidirectional, "batch_first": batch_first}
    if name == "RNN_RELU":
        kwargs["nonlinearity"] = "relu"
    if proj:
        kwargs["proj_size"] = proj
    m = MODULES[name](12, 9, **kwargs)
    mode = cudnn_rnn.MODES[name]
    label = f"{name} bias={bias} proj={proj} layers={layers} bidirectional={bidirectional}"
    shapes = cudnn_rnn.layer_shapes(mode, 12, 9, proj, layers, bidirectional)
    stride0 = (4 if bias else 2) + (1 if proj else 0)
    pick = cudnn_rnn._pick(stride0, bool(proj))
    mine = [one[k] for one in shapes for k in pick]
    theirs = [tuple(w.shape) for w in m._flat_weights]
    check(f"{label}: the module's weights in cuDNN's layout", mine == theirs, f"{mine} != {theirs}")
    numel = cudnn_rnn.weight_numel(mode, 12, 9, proj, layers, bidirectional)
    params = sum(w.numel() for w in m._flat_weights)
    g = cudnn_rnn.GATES[mode]
    dirs = 2 if bidirectional else 1
    missing = 0 if bias else layers * dirs * 2 * g * 9
    check(f"{label}: weight space = parameters (+ the absent biases)", numel == params + missing, f"{numel} != {params} + {missing}")

    seq, batch = 7, 3
    x = torch.randn((batch, seq, 12) if batch_first else (seq, batch, 12))
    out_size = proj or 9
    h0 = torch.zeros(layers * dirs, batch, out_size)
    c0 = torch.zeros(layers * dirs, batch, 9) if name == "LSTM" else None
    lengths = torch.tensor([7, 5, 2])
    if packed:
        seq_input = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first)
        data, batch_sizes = seq_input.data, [int(b) for b in seq_input.batch_sizes]
    else:
        seq_input, data, batch_sizes = x, x, []
    spec = {
        "mode": mode, "hidden": 9, "proj": proj, "layers": layers, "batch_first": batch_first and not packed,
        "dropout": 0.0, "train": True, "bidirectional": bidirectional, "batch_sizes": batch_sizes,
        "stride0": stride0, "input_size": 12,
    }
    hidden, cell, output, tokens, mini_batch = cudnn_rnn._sizes(spec, data)
    if batch_first and not packed:
        output = [output[1], output[0], output[2]]  # `output.transpose_(0, 1)` at the end of _cudnn_rnn
    meta = meta_cudnn_rnn(
        data.to("meta"), [w.to("meta") for w in m._flat_weights], stride0, None, h0.to("meta"),
        c0.to("meta") if c0 is not None else None, mode, 9, proj, layers, batch_first and not packed, 0.0, True,
        bidirectional, batch_sizes, None,
    )
    check(f"{label} packed={packed}: output as the meta kernel", list(meta[0].shape) == output, f"{list(meta[0].shape)} != {output}")
    check(f"{label} packed={packed}: hy as the meta kernel", list(meta[1].shape) == hidden)
    if c0 is not None:
        check(f"{label} packed={packed}: cy as the meta kernel", list(meta[2].shape) == cell)
    check(f"{label} packed={packed}: tokens", tokens == (sum(batch_sizes) if packed else seq * batch))
    with torch.no_grad():
        y, state = m(seq_input, (h0, c0) if c0 is not None else h0)
    y = y.data if packed else y
    check(f"{label} packed={packed}: output as the CPU run", list(y.shape) == output, f"{list(y.shape)} != {output}")
    hy = state[0] if c0 is not None else state
    check(f"{label} packed={packed}: hy as the CPU run", list(hy.shape) == hidden)

# (e)
base = cudnn_rnn.temp_space(2, 256, 0, 2, False, 100, 10, 4, 0.0)
more = cudnn_rnn.temp_space(2, 256, 0, 2, False, 200, 10, 4, 0.0)
deeper = cudnn_rnn.temp_space(2, 256, 0, 4, False, 100, 10, 4, 0.0)
check("reserve grows with the tokens", more["reserve"] == 2 * base["reserve"])
check("reserve grows with the layers", deeper["reserve"] == 2 * base["reserve"])
check("training workspace at least the inference one", base["workspace_training"] >= base["workspace_inference"] > 0)
half = cudnn_rnn.temp_space(2, 256, 0, 2, False, 100, 10, 2, 0.0)
check("fp16's reserve counted in the fp32 math type", half["reserve"] == 100 * 2 * 11 * 256 * 4 <= base["reserve"])
# LSTM: (a) 2·4h gates + 2h cell + h out = 11h per token and layer; (b) MIOpen's 7h + 6h = 13h.
check("LSTM reserve: MIOpen's reserve + workspace", base["reserve"] == 100 * 2 * 13 * 256 * 4)
check("RNN reserve: 2h gates + h out", cudnn_rnn.temp_space(0, 256, 0, 2, False, 100, 10, 4, 0.0)["reserve"] == 100 * 2 * 3 * 256 * 4)
# (f) the reserve bound holds at least what MIOpen keeps between its calls (src/rnn.cpp).
for mode, layers, bidirectional, itemsize, dropout in itertools.product(range(4), (1, 3), (False, True), (2, 4), (0.0, 0.5)):
    ours = cudnn_rnn.temp_space(mode, 128, 0, layers, bidirectional, 300, 12, itemsize, dropout)
    theirs = cudnn_rnn.miopen_space(mode, 128, layers, bidirectional, 300, itemsize, dropout)
    check(f"mode {mode} layers {layers}: reserve bound ≥ MIOpen's reserve + workspace", ours["reserve"] >= theirs["reserve"] + theirs["workspace"] > 0)
    check(f"mode {mode} layers {layers}: training workspace ≥ inference's", ours["workspace_training"] > ours["workspace_inference"] > 0)
# MIOpen's LSTM reserve (default algorithm), by hand: (6·L·N·h + L·N·h)·size per direction.
check("MIOpen LSTM reserve", cudnn_rnn.miopen_space(2, 10, 2, True, 7, 4, 0.0)["reserve"] == 2 * (6 * 2 * 7 * 10 + 2 * 7 * 10) * 4)
check("weight numel", cudnn_rnn.weight_numel(2, 200, 200, 0, 2, False) == 2 * (4 * 200 * 200 * 2 + 8 * 200) == 643_200)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
