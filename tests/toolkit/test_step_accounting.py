"""benchmarks/step_accounting.py (and step_profile.py) on a tiny step, in the Triton
interpreter: the Triton backend launches four kernels per layer and step, and adds no
copy, cast or fill to a training step that the SDPA backend does not have (only
allocations of its outputs and statistics). Counted, never timed.

A fresh process, because ``TRITON_INTERPRET`` must be set before triton is first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import json, sys
sys.path.insert(0, "benchmarks")
import step_accounting as sa
steps = {b: sa.training_step(b) for b in ("sdpa", "triton")}
print(json.dumps({
    "layers": sa.tiny_config("triton").n_layers,
    "launches": {b: dict(l.count) for b, (l, _) in steps.items()},
    "kinds": {b: {k: v[0] for k, v in ops.by_kind().items()} for b, (_, ops) in steps.items()},
    "copy_bytes": {b: ops.by_kind().get("copy", [0, 0])[1] for b, (_, ops) in steps.items()},
}))
"""


@pytest.fixture(scope="module")
def counted():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_four_triton_launches_per_layer_and_step(counted):
    layers = counted["layers"]
    assert counted["launches"]["sdpa"] == {}
    assert counted["launches"]["triton"] == {
        "forward": layers,
        "backward: preprocess D = rowsum(dO*O)": layers,
        "backward: dK, dV": layers,
        "backward: dQ": layers,
    }


def test_triton_backend_adds_no_copy_cast_or_fill(counted):
    sdpa, triton = counted["kinds"]["sdpa"], counted["kinds"]["triton"]
    for kind in ("copy", "cast", "fill", "view"):
        assert triton.get(kind, 0) == sdpa.get(kind, 0), kind
    assert counted["copy_bytes"]["triton"] == counted["copy_bytes"]["sdpa"]
    # out, lse, dq, dk, dv, D and the base-2 log-sum-exp: seven allocations per layer
    assert triton.get("alloc", 0) - sdpa.get("alloc", 0) == 7 * counted["layers"]


def test_step_profile_runs_both_backends_in_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "benchmarks/step_profile.py", "--shape", "tiny", "--steps", "1",
         "--warmup", "1", "--rows", "40"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sdpa: " in proc.stdout and "triton: " in proc.stdout
    assert "TritonFlashAttentionBackward" in proc.stdout  # the Triton path was profiled
