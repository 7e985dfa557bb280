"""Train the checkpoint that a *made* capstone submission hands in.

``autograder validate 07-capstone`` and ``autograder demo`` grade submissions made from
the instructor notebook: the reference solution, the released stub, one per named
mutant. A real student hands in ``capstone.safetensors`` next to the notebook (the
notebook's training section writes it), so a made submission needs one too.
``assignment.toml`` names this script as ``prepare``; the autograder runs it once per
made submission, after writing the notebook, as::

    python prepare_submission.py STUDENT_ID        # working directory: the submission folder

It does what the student's notebook would do, with the submission's own code:

1. execute the notebook's assignment-defined code cells from ``capstone.ipynb``: the
   nbgrader read-only cells and solution cells, never the test cells, cells tagged
   ``skip-grading`` or cells without nbgrader metadata (so a demo submission's inserted
   infinite loop never runs here);
2. build a small modern-recipe model with *that* notebook's ``GPT`` and train it with
   *that* notebook's ``train_step`` (so a mutant's bug is in its checkpoint, as a
   student's would be): ``STEPS`` steps of AdamW with warm-up and cosine decay on random
   windows of the training split (about 30 s on two idle CPU cores; the reference
   reaches a validation loss near 2.2 nats/byte, under the 2.5 target of the checks);
3. save ``capstone.safetensors`` with ``toolkit.train.save_checkpoint``.

A notebook that cannot train (the stub raises ``NotImplementedError``) gets no checkpoint,
like a student who handed none in; the script says so and exits 0.

Identical training code trains identically, so results are cached in
``$AUTOGRADER_PREPARE_SCRATCH`` (shared by the runs of one ``write_submissions`` call),
keyed by a hash of this script and of the executed cells that training uses (not the
sampling and decoding cells): the reference and the mutants of the samplers share one run.
"""

from __future__ import annotations
import __future__

import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

# On a busy machine (grading workers, other jobs) OpenMP threads that spin while they
# wait for each other make a training step ten times slower; waiting passively costs
# little when the machine is idle. It must be set before torch starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

NOTEBOOK = "capstone.ipynb"
CHECKPOINT = "capstone.safetensors"
#: Cells that training never calls: excluded from the cache key.
NOT_FOR_TRAINING = {"sampling", "sampling_given", "generate"}
MODEL = dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_seq_len=128)
STEPS, BATCH, BLOCK, MAX_LR, SEED = 300, 16, 128, 1e-2, 0


def assignment_cells(nb: dict) -> list[tuple[str, str]]:
    """``(grade_id, source)`` of the code cells this script executes, in order."""
    cells = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {})
        nbgrader = meta.get("nbgrader")
        if cell.get("cell_type") != "code" or not nbgrader:
            continue
        if nbgrader.get("grade") and not nbgrader.get("solution"):
            continue  # a test cell
        if "skip-grading" in meta.get("tags", []):
            continue
        source = cell.get("source", "")
        cells.append((nbgrader.get("grade_id", "?"), "".join(source) if isinstance(source, list)
                      else source))
    return cells


def cache_key(cells: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(torch.__version__.encode())
    for grade_id, source in cells:
        if grade_id not in NOT_FOR_TRAINING:
            digest.update(grade_id.encode() + b"\0" + source.encode() + b"\0")
    return digest.hexdigest()[:32]


def run_cells(cells: list[tuple[str, str]]) -> dict:
    """Execute the cells in one namespace; a failing cell is reported and skipped."""
    namespace: dict = {"__name__": "capstone_submission"}
    flags = __future__.annotations.compiler_flag
    for grade_id, source in cells:
        try:
            exec(compile(source, f"<cell {grade_id}>", "exec", flags=flags, dont_inherit=True),
                 namespace)
        except Exception as exc:  # a broken submission: what can run, runs
            print(f"cell {grade_id}: {type(exc).__name__}: {exc}")
    return namespace


def train(namespace: dict) -> tuple:
    """Train the notebook's GPT with the notebook's train_step; returns (model, config, loss)."""
    from toolkit.data import get_batch, load_corpus
    from toolkit.models import GPTConfig
    from toolkit.train import configure_optimizer, lr_schedule

    gpt, train_step = namespace["GPT"], namespace["train_step"]
    corpus = load_corpus()
    torch.manual_seed(SEED)
    config = GPTConfig.modern(**MODEL)
    model = gpt(config).train()
    optimizer = configure_optimizer(model, MAX_LR, weight_decay=0.1)
    generator = torch.Generator().manual_seed(SEED)
    loss = float("nan")
    for step in range(STEPS):
        lr = lr_schedule(step, STEPS // 10, STEPS, MAX_LR, MAX_LR / 10)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(corpus.train, BATCH, BLOCK, generator)
        loss, _ = train_step(model, optimizer, x, y, grad_clip=1.0)
        if not math.isfinite(loss):
            raise FloatingPointError(f"the loss became {loss} at step {step}")
    return model.eval(), config, loss


def main(argv: list[str]) -> int:
    student = argv[1] if len(argv) > 1 else "?"
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    try:
        nb = json.loads(Path(NOTEBOOK).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{student}: no checkpoint: {NOTEBOOK} is unreadable ({exc})")
        return 0
    cells = assignment_cells(nb)
    scratch = os.environ.get("AUTOGRADER_PREPARE_SCRATCH")
    cached = Path(scratch, f"capstone-{cache_key(cells)}.safetensors") if scratch else None
    if cached is not None and cached.is_file():
        shutil.copyfile(cached, CHECKPOINT)
        print(f"{student}: {CHECKPOINT} from the cache")
        return 0
    started = time.perf_counter()
    try:
        model, config, loss = train(run_cells(cells))
        from toolkit.train import save_checkpoint

        save_checkpoint(model, config, CHECKPOINT)
    except Exception as exc:  # the stub, or a mutant that cannot train
        Path(CHECKPOINT).unlink(missing_ok=True)
        print(f"{student}: no checkpoint: training failed ({type(exc).__name__}: {exc})"[:500])
        return 0
    if cached is not None:
        shutil.copyfile(CHECKPOINT, cached)
    print(f"{student}: trained {STEPS} steps in {time.perf_counter() - started:.0f}s, "
          f"last training loss {loss:.3f}; saved {CHECKPOINT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
