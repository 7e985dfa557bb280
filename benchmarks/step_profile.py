"""Profile whole capstone training steps per attention backend: where a step's time goes.

The GPU check that ``benchmarks/step_accounting.py`` (counted on a CPU) leaves open: for
each backend, a few training steps of the modern recipe (forward, loss, backward, clip,
AdamW; bf16 autocast on a GPU) under ``torch.profiler``, after untimed warm-up steps
(compilation, autotuning). Printed per backend:

* wall-clock milliseconds per step (timed without the profiler), and on a GPU the
  kernels' summed time per step and its share of the wall clock: a share well under
  one means the GPU waits on the host (Python and launches), and every microsecond of
  host work then shows in the step;
* the operations with the most self time (GPU time on a GPU, host time on a CPU),
  where the Triton kernels (``_flash_attn_fwd_kernel``, ``bwd_preprocess_kernel``,
  ``bwd_dkdv_kernel``, ``bwd_dq_kernel``) stand beside SDPA's.

Usage::

    .venv/bin/python benchmarks/step_profile.py --device cuda --shape capstone
    .venv/bin/python benchmarks/step_profile.py --device cuda --shape d512
    TRITON_INTERPRET=1 .venv/bin/python benchmarks/step_profile.py --shape tiny --steps 1
"""

from __future__ import annotations

import argparse
import platform
import time
from contextlib import nullcontext

import torch
from tables import print_command
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from toolkit.models import FastGPT, GPTConfig
from toolkit.train import configure_optimizer

#: name -> (d_model, n_layers, n_heads, T, batch): the shapes of the GPU measurements.
SHAPES = {
    "capstone": (128, 4, 4, 128, 16),
    "d512": (512, 8, 8, 1024, 16),
    "tiny": (64, 2, 4, 32, 2),  # for the interpreter
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_function(backend: str, shape: str, device: torch.device, vocab_size: int = 256):
    """One training step of the modern recipe at ``shape`` on ``device``, same batch always."""
    d_model, n_layers, n_heads, T, batch = SHAPES[shape]
    torch.manual_seed(0)
    config = GPTConfig.modern(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                              n_heads=n_heads, max_seq_len=T, attention_backend=backend)
    model = FastGPT(config).to(device)  # the backends live in the fast model
    opt = configure_optimizer(model, 1e-3, 0.1)
    x = torch.randint(0, vocab_size, (batch, T), device=device)
    y = torch.randint(0, vocab_size, (batch, T), device=device)
    amp = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
           else nullcontext())

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def _device_us(event) -> float:
    """An averaged event's self time on the device, microseconds (names differ by version)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def profile_backend(backend: str, args) -> None:
    device = torch.device(args.device)
    step = step_function(backend, args.shape, device)
    for _ in range(args.warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    _sync(device)
    wall_ms = (time.perf_counter() - t0) / args.steps * 1e3

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        _sync(device)
    events = prof.key_averages()
    line = f"\n{backend}: {wall_ms:.2f} ms per step (wall clock, no profiler)"
    if device.type == "cuda":
        # the kernels' own entries (device events), not the CPU ops that launched them
        kernels = [e for e in events if getattr(e, "device_type", None) == DeviceType.CUDA]
        kernel_ms = sum(_device_us(e) for e in kernels) / args.steps / 1e3
        line += (f"; kernels {kernel_ms:.2f} ms per step, {kernel_ms / wall_ms:.0%} of the "
                 "wall clock (well under 100%: the GPU waits on the host)")
    print(line)
    sort_by = "self_cpu_time_total"
    if device.type == "cuda":
        sort_by = next((name for name in ("self_device_time_total", "self_cuda_time_total")
                        if events and hasattr(events[0], name)), "self_cpu_time_total")
    print(events.table(sort_by=sort_by, row_limit=args.rows))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--shape", default="capstone", choices=sorted(SHAPES))
    p.add_argument("--backends", default="sdpa,triton")
    p.add_argument("--steps", type=int, default=10, help="profiled (and timed) steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--rows", type=int, default=15)
    p.add_argument("--threads", type=int, default=1, help="torch threads; 0 = torch default")
    args = p.parse_args(argv)
    print_command(__file__, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    d_model, n_layers, n_heads, T, batch = SHAPES[args.shape]
    name = (torch.cuda.get_device_name(args.device) if args.device.startswith("cuda")
            else platform.processor() or platform.machine())
    print(f"Training steps of the modern recipe, d {d_model}, {n_layers} layers, {n_heads} "
          f"heads ({n_heads // 2} KV), batch {batch} x T {T}, on {name}; torch "
          f"{torch.__version__}, {args.warmup} untimed + {args.steps} steps per backend")
    for backend in args.backends.split(","):
        profile_backend(backend, args)


if __name__ == "__main__":
    main()
