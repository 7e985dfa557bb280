"""What a training step of the capstone GPT does besides attention, per attention backend.

The capstone's ``"triton"`` backend (the course's FlashAttention kernels) against
``"sdpa"`` (``F.scaled_dot_product_attention``), counted rather than timed, so that it
means something on a CPU, where the kernels run in Triton's interpreter:

1. **Launches** (``--tables launches``): one whole training step of the modern recipe
   (forward, loss, backward, gradient clipping, AdamW) at a tiny shape, every Triton
   kernel launch counted by kernel (the forward, the backward's preprocessing pass
   ``D = rowsum(dO * O)``, the dK/dV and the dQ kernels) with its number of programs.
2. **Tensor operations** (``--tables ops``): the same step under a
   ``TorchDispatchMode`` that sees every ATen operation: counts and bytes by kind
   (views, allocations, zero-fills, copies and casts, arithmetic), and the operations
   one backend runs and the other does not. Bytes of an operation are those of its
   tensor inputs and outputs (views and allocations move none).
3. **Around the attention, at the GPU shapes** (``--tables bytes``): one layer's
   attention as the capstone calls it (q, k, v split from the joint projection,
   attention, heads concatenated for ``o_proj``; and the backward), at the capstone
   size and at d 512 x 8 layers x T 1024, batch 16, with the Triton kernels replaced
   by no-ops: every ATen operation around the kernels is real, so its bytes are the
   real ones. Counted at batch 1 and multiplied by 16 (each is linear in the batch).
   16-bit tensors (fp16 stands in for bf16, which the interpreter refuses).
4. **Grids** (``--tables grids``): programs per launch at those shapes for every tile
   size the GPU may use (how much of the GPU one launch can fill).
5. **Host time** (``--tables host``): microseconds of Python and ATen work per layer
   (forward + backward) with the kernels as no-ops, against the SDPA backend at a shape
   so small that its arithmetic is negligible; and one ``triton.autotune`` look-up
   with the kernel itself stubbed out.

Usage::

    TRITON_INTERPRET=1 .venv/bin/python benchmarks/step_accounting.py
    TRITON_INTERPRET=1 .venv/bin/python benchmarks/step_accounting.py --tables launches,ops

What the interpreter cannot say: the time of Triton's compiled launcher and of the
kernels on a GPU. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

if "triton" not in sys.modules:  # must precede the first import of triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tables import print_command, print_table  # noqa: E402

from toolkit.kernels import flash_backward_tuned, flash_tuned, interpreter_active  # noqa: E402
from toolkit.models import FastGPT, GPTConfig  # noqa: E402
from toolkit.models.backends import causal_attention  # noqa: E402
from toolkit.train import configure_optimizer  # noqa: E402

#: (module, attribute) of every kernel object the Triton backend launches.
_KERNELS = (
    (flash_tuned, "_flash_attn_fwd_kernel", "forward"),
    (flash_backward_tuned, "bwd_preprocess_kernel", "backward: preprocess D = rowsum(dO*O)"),
    (flash_backward_tuned, "bwd_dkdv_kernel", "backward: dK, dV"),
    (flash_backward_tuned, "bwd_dkdv_tuned", "backward: dK, dV (autotuned)"),
    (flash_backward_tuned, "bwd_dq_kernel", "backward: dQ"),
    (flash_backward_tuned, "bwd_dq_tuned", "backward: dQ (autotuned)"),
)

#: (name, d_model, n_layers, n_heads, T, batch): the shapes of the GPU measurements.
GPU_SHAPES = (
    ("capstone: d 128, 4 layers, 4 heads (2 KV), T 128", 128, 4, 4, 128, 16),
    ("d 512, 8 layers, 8 heads (4 KV), T 1024", 512, 8, 8, 1024, 16),
)


# ----------------------------------------------------------------- kernel launches
@dataclass
class Launches:
    """Triton launches seen: kernel label -> count, and programs launched per label."""

    count: Counter = field(default_factory=Counter)
    programs: Counter = field(default_factory=Counter)


@contextmanager
def counting_launches(execute: bool = True):
    """Count the Triton backend's launches inside the block; ``execute=False`` makes
    every kernel a no-op (its outputs stay uninitialised).

    ``kernel[grid](*args, **meta)`` is intercepted at the class of each kernel object
    (``InterpretedFunction``, ``JITFunction``, ``Autotuner``): the objects themselves stay
    in place, so the wrappers' checks of interpreter mode see the real kernels.
    """
    launches = Launches()
    labels = {id(getattr(module, name)): label for module, name, label in _KERNELS}
    classes = {type(getattr(module, name)) for module, name, _ in _KERNELS}
    originals = {cls: cls.__getitem__ for cls in classes}
    own = {cls: cls.__dict__.get("__getitem__") for cls in classes}

    def make_getitem(original):
        def getitem(self, grid):
            label = labels.get(id(self))
            if label is None:
                return original(self, grid)

            def launch(*args, **meta):
                g = grid(meta) if callable(grid) else grid
                launches.count[label] += 1
                launches.programs[label] += math.prod(g)
                if not execute:
                    return None
                with _disable_current_modes():  # the interpreter's own tensor work is not ours
                    return original(self, grid)(*args, **meta)

            return launch

        return getitem

    try:
        for cls, original in originals.items():
            cls.__getitem__ = make_getitem(original)
        yield launches
    finally:
        for cls in originals:
            del cls.__getitem__  # the class's own, or the inherited one, is back
            if own.get(cls) is not None:
                cls.__getitem__ = own[cls]


# ----------------------------------------------------------------- ATen operations
_ALLOC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_FILL = {"zero_", "fill_", "zeros", "zeros_like", "new_zeros", "full", "full_like", "ones",
         "ones_like"}
_COPY = {"copy_", "clone", "_to_copy", "contiguous", "_unsafe_view", "cat", "stack"}


def _kind(func, args, out) -> str:
    name = func.overloadpacket.__name__
    if func.is_view or name in {"detach", "alias", "lift_fresh"}:
        return "view"
    if name in _ALLOC:
        return "alloc"
    if name in _FILL:
        return "fill"
    if name == "_to_copy":
        src = args[0]
        return "cast" if out.dtype != src.dtype else "copy"
    if name in _COPY:
        return "copy"
    return "compute"


def _nbytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


class CountingOps(TorchDispatchMode):
    """Every ATen operation: ``ops[(kind, name)] = [count, bytes]``.

    Bytes are those of the tensor inputs and outputs; views and allocations move none,
    zero-fills count the bytes they write.
    """

    def __init__(self):
        super().__init__()
        self.ops = defaultdict(lambda: [0, 0])
        self.allocated = 0  # bytes of the tensors made by allocations (alloc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        first = flat_out[0] if flat_out else None
        kind = _kind(func, args, first)
        if kind == "alloc":
            self.allocated += _nbytes(flat_out)
        if kind in ("view", "alloc"):
            moved = 0
        elif kind == "fill":
            moved = _nbytes(flat_out) or _nbytes(tree_flatten(args)[0][:1])
        else:
            moved = _nbytes(tree_flatten((args, kwargs))[0]) + _nbytes(flat_out)
        entry = self.ops[(kind, func.overloadpacket.__name__)]
        entry[0] += 1
        entry[1] += moved
        return out

    def by_kind(self) -> dict[str, list[int]]:
        totals = defaultdict(lambda: [0, 0])
        for (kind, _), (count, moved) in self.ops.items():
            totals[kind][0] += count
            totals[kind][1] += moved
        return totals


# ----------------------------------------------------------------- one training step
def tiny_config(backend: str) -> GPTConfig:
    return GPTConfig.modern(vocab_size=64, d_model=64, n_layers=2, n_heads=4, max_seq_len=32,
                            attention_backend=backend)


def _step_function(backend: str, batch: int = 2, T: int = 32, seed: int = 0):
    """A function that runs one step (forward, loss, backward, clip, AdamW) of the tiny
    modern GPT, always on the same batch."""
    torch.manual_seed(seed)
    model = FastGPT(tiny_config(backend))  # the backends live in the fast model
    opt = configure_optimizer(model, 1e-3, 0.1)
    x = torch.randint(0, 64, (batch, T))
    y = torch.randint(0, 64, (batch, T))

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def training_step(backend: str, batch: int = 2, T: int = 32, seed: int = 0):
    """One step of :func:`_step_function` counted: ``(launches, ops)``; a first,
    uncounted step warms everything up."""
    step = _step_function(backend, batch, T, seed)
    step()
    with counting_launches() as launches, CountingOps() as ops:
        step()
    return launches, ops


def table_launches(steps: dict) -> None:
    rows = []
    for backend, (launches, _) in steps.items():
        if not launches.count:
            rows.append([backend, "(none: one fused ATen op forward, one backward)", "0", "0"])
        for label, count in launches.count.items():
            rows.append([backend, label, str(count), str(launches.programs[label])])
    cfg = tiny_config("sdpa")
    print_table(
        f"Triton launches in one training step: modern GPT, d {cfg.d_model}, "
        f"{cfg.n_layers} layers, {cfg.n_heads} heads ({cfg.n_kv_heads} KV), batch 2 x T 32, "
        "fp32, interpreter (32 x 32 tiles)",
        ["backend", "kernel", "launches", "programs"], rows)


def table_ops(steps: dict) -> None:
    kinds = ("view", "alloc", "fill", "copy", "cast", "compute")
    totals = {b: ops.by_kind() for b, (_, ops) in steps.items()}
    rows = []
    for kind in (*kinds, "all"):
        row = [kind]
        for backend in steps:
            if kind == "all":
                count = sum(v[0] for v in totals[backend].values())
                moved = sum(v[1] for v in totals[backend].values())
            else:
                count, moved = totals[backend].get(kind, [0, 0])
            row += [str(count), f"{moved / 1024:.1f}"]
        rows.append(row)
    header = ["kind"] + [f"{b} {what}" for b in steps for what in ("ops", "KiB")]
    print_table("ATen operations in that step, by kind", header, rows)

    a, b = list(steps)
    ops_a, ops_b = steps[a][1].ops, steps[b][1].ops
    rows = []
    for key in sorted(set(ops_a) | set(ops_b)):
        ca, cb = ops_a.get(key, [0, 0]), ops_b.get(key, [0, 0])
        if ca[0] != cb[0] or (key[0] != "compute" and ca[1] != cb[1]):
            rows.append([key[0], key[1], str(ca[0]), str(cb[0]), f"{ca[1] / 1024:.1f}",
                         f"{cb[1] / 1024:.1f}"])
    print_table(f"ATen operations whose count differs ({a} vs {b}), same step",
                ["kind", "op", f"{a} ops", f"{b} ops", f"{a} KiB", f"{b} KiB"], rows)


# ----------------------------------------------------------------- one layer's attention
def attention_layer(backend: str, d_model: int, n_heads: int, T: int, batch: int,
                    dtype=torch.float16):
    """One layer's attention as FastCausalSelfAttention calls it, forward and backward:
    q, k, v views of the joint projection ``(B, T, H + 2 H_kv, D)``, attention, heads
    concatenated. Returns ``(launches, ops)``; the Triton kernels are no-ops."""
    H, H_kv, D = n_heads, n_heads // 2, d_model // n_heads
    qkv = torch.randn(batch, T, H + 2 * H_kv, D, dtype=dtype, requires_grad=True)
    grad = torch.randn(batch, T, H * D, dtype=dtype)
    with counting_launches(execute=False) as launches, CountingOps() as ops:
        q, k, v = qkv.split((H, H_kv, H_kv), dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        out = causal_attention(q, k, v, backend)
        concat = out.transpose(1, 2).reshape(batch, T, H * D)  # o_proj's input
        concat.backward(grad)
    return launches, ops


def table_bytes() -> None:
    rows = []
    for name, d_model, n_layers, n_heads, T, batch in GPU_SHAPES:
        for backend in ("sdpa", "triton"):
            launches, ops = attention_layer(backend, d_model, n_heads, T, 1)
            kinds = ops.by_kind()
            around = {k: v for k, v in kinds.items() if k in ("alloc", "fill", "copy", "cast")}
            detail = ", ".join(
                f"{name_}x{c}" for (kind, name_), (c, _) in sorted(ops.ops.items())
                if kind in ("alloc", "fill", "copy", "cast"))
            moved = sum(v[1] for v in around.values()) * batch  # batch 1 counted: linear in B
            allocated = ops.allocated * batch
            rows.append([name, backend, str(n_layers * sum(launches.count.values())),
                         str(n_layers * sum(v[0] for v in around.values())),
                         f"{n_layers * moved / 2**20:.1f}", f"{n_layers * allocated / 2**20:.1f}",
                         detail or "-"])
    print_table(
        "Around the attention, per training step (every layer's forward + backward), "
        "16-bit, batch 16: Triton launches, and ATen allocations, fills, copies and casts "
        "with the bytes they move (the fused SDPA op's own work is not listed)",
        ["shape", "backend", "Triton launches", "ATen ops around", "MiB moved", "MiB allocated",
         "ops (per layer)"],
        rows)


def table_grids() -> None:
    """Programs per launch at the GPU shapes, for every tile size the GPU may use."""
    from toolkit.kernels.flash_backward_kernels import bwd_dkdv_tuned, bwd_dq_tuned
    from toolkit.kernels.runtime import _cdiv

    rows = []
    for name, _, _, n_heads, T, batch in GPU_SHAPES:
        H, H_kv = n_heads, n_heads // 2
        rows.append([name, "forward (BLOCK_M 128, not tuned)", str(_cdiv(T, 128) * batch * H)])
        rows.append([name, "backward: preprocess (64 rows)", str(_cdiv(T, 64) * batch * H)])
        for label, tuned, block, heads in (("dK, dV", bwd_dkdv_tuned, "BLOCK_N", H_kv),
                                           ("dQ", bwd_dq_tuned, "BLOCK_M", H)):
            counts = sorted({_cdiv(T, c.kwargs[block]) * batch * heads for c in tuned.configs})
            blocks = sorted({c.kwargs[block] for c in tuned.configs})
            rows.append([name, f"backward: {label} ({block} {'/'.join(map(str, blocks))})",
                         " / ".join(map(str, counts))])
    print_table("Programs per launch at the GPU shapes, batch 16, for each tile size the "
                "autotuner may choose (an H100 or H200 has 132 SMs)",
                ["shape", "kernel", "programs"], rows)


# ----------------------------------------------------------------- host time
def _host_seconds(fn, repeat: int) -> float:
    fn()
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def table_host(repeat: int = 200) -> None:
    B, T, H, H_kv, D = 1, 16, 2, 1, 16
    qkv = torch.randn(B, T, H + 2 * H_kv, D, requires_grad=True)
    grad = torch.randn(B, H, T, D)

    def layer(backend):
        def run():
            q, k, v = qkv.split((H, H_kv, H_kv), dim=2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            causal_attention(q, k, v, backend).backward(grad)
        return run

    rows = [["sdpa (fused ATen op, its arithmetic included)",
             f"{_host_seconds(layer('sdpa'), repeat) * 1e6:.0f}"]]
    with counting_launches(execute=False):
        rows.append(["triton, kernels as no-ops (Python wrapper, checks, allocations, "
                     "autograd.Function)", f"{_host_seconds(layer('triton'), repeat) * 1e6:.0f}"])
    for backend in ("sdpa", "triton"):
        step = _step_function(backend)
        with counting_launches(execute=False):
            seconds = _host_seconds(step, max(1, repeat // 10))
        cfg = tiny_config(backend)
        rows.append([f"whole training step, {backend}"
                     + (", kernels as no-ops" if backend == "triton" else "")
                     + f" (d {cfg.d_model}, {cfg.n_layers} layers, batch 2 x T 32, AdamW)",
                     f"{seconds * 1e6:.0f}"])
    rows += _autotune_lookup(repeat)
    print_table(
        f"Host time per layer, forward + backward, B {B}, T {T}, {H} heads ({H_kv} KV), "
        f"D {D}, fp32, best of 5 x {repeat} (microseconds)", ["what", "us"], rows)


def _autotune_lookup(repeat: int) -> list[list[str]]:
    """One ``triton.autotune`` call on a cached key, the kernel's own ``run`` stubbed."""
    from toolkit.kernels.flash_backward_kernels import bwd_dq_tuned

    class _Stub:
        @staticmethod
        def run(*args, **kwargs):
            return None

    q = torch.randn(16, 4, 128, 32, dtype=torch.float16)
    lse = torch.empty(64, 128)
    args = (q, q, q, q, lse, lse, q, *q.stride(), *q.stride(), *q.stride(), *q.stride(),
            *q.stride(), 4, 2, 128, 128, 32, 0.17, 0.25)
    kwargs = dict(CAUSAL=True, BLOCK_D=32, DOT_PRECISION="tf32")
    real_fn, real_cache = bwd_dq_tuned.fn, dict(bwd_dq_tuned.cache)
    try:
        bwd_dq_tuned.fn = _Stub()
        nargs = dict(zip(bwd_dq_tuned.arg_names, args))
        key = [{**nargs, **kwargs}[k] for k in bwd_dq_tuned.keys]
        key += [str(a.dtype) for a in nargs.values() if hasattr(a, "dtype")]
        bwd_dq_tuned.cache[tuple(key)] = bwd_dq_tuned.configs[0]  # as after the first tuning
        autotuner = _host_seconds(lambda: bwd_dq_tuned.run(*args, **kwargs), repeat * 10)
    finally:
        bwd_dq_tuned.fn, bwd_dq_tuned.cache = real_fn, real_cache

    class _StubKernel:  # kernel[grid](*args, **kwargs) does nothing
        def __getitem__(self, grid):
            return _Stub.run

    tune_key = (128, 128, 32, True, 2, torch.float16)
    chosen = {(bwd_dq_tuned, tune_key): bwd_dq_tuned.configs[0]}
    real_chosen, flash_backward_tuned._CHOSEN = flash_backward_tuned._CHOSEN, chosen
    try:
        direct = _host_seconds(lambda: flash_backward_tuned._launch(
            _StubKernel(), bwd_dq_tuned, {}, tune_key,
            lambda meta: (flash_backward_tuned._cdiv(128, meta["BLOCK_M"]), 64), args, kwargs),
            repeat * 10)
    finally:
        flash_backward_tuned._CHOSEN = real_chosen
    return [
        [f"one triton.autotune look-up on a cached key (dQ kernel, {len(args)} arguments; "
         "no re-tuning): what each autotuned launch paid before", f"{autotuner * 1e6:.1f}"],
        ["the same launch's look-up now (flash_backward_tuned._launch: chosen config, grid)",
         f"{direct * 1e6:.1f}"],
    ]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="launches,ops,bytes,grids,host",
                   help="comma list of: launches, ops, bytes, grids, host")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    print_command(__file__, argv)
    if not interpreter_active():
        sys.exit("run with TRITON_INTERPRET=1 (set before triton is first imported)")
    torch.set_num_threads(args.threads)
    tables = args.tables.split(",")
    print(f"$ TRITON_INTERPRET=1 python benchmarks/step_accounting.py --tables {args.tables}")
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, Python "
          f"{platform.python_version()}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} thread(s), no GPU (Triton interpreter)\n")
    if {"launches", "ops"} & set(tables):
        steps = {b: training_step(b) for b in ("sdpa", "triton")}
        if "launches" in tables:
            table_launches(steps)
        if "ops" in tables:
            table_ops(steps)
    if "bytes" in tables:
        table_bytes()
    if "grids" in tables:
        table_grids()
    if "host" in tables:
        table_host()


if __name__ == "__main__":
    main()
