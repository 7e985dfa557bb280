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
   windows of the training split (about 35 s on one idle CPU core; the reference
   reaches a validation loss near 2.2 nats/byte, under the 2.5 target of the checks);
3. save ``capstone.safetensors`` with ``toolkit.train.save_checkpoint``.

A notebook that cannot train (the stub raises ``NotImplementedError``) gets no checkpoint,
like a student who handed none in; the script says so and exits 0.

Identical training code trains identically, so results are cached
(:mod:`autograder.authoring.prepare_checkpoint`, which does step 1 and the caching for every such
script; the sampling and decoding cells are not part of the key): the reference and the
mutants of the samplers share one run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from autograder.authoring.prepare_checkpoint import prepare_checkpoint

NOTEBOOK = "capstone.ipynb"
CHECKPOINT = "capstone.safetensors"
#: Cells that training never calls: excluded from the cache key.
NOT_FOR_TRAINING = {"sampling", "sampling_given", "generate"}
MODEL = dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_seq_len=128)
STEPS, BATCH, BLOCK, MAX_LR, SEED = 300, 16, 128, 1e-2, 0


def train_and_save(namespace: dict) -> float:
    """Train the notebook's GPT with the notebook's train_step, save it; returns the last
    training loss."""
    # torch only here: a run that finds its checkpoint in the cache never imports it (2 s).
    import torch

    from toolkit.data import get_batch, load_corpus
    from toolkit.models import GPTConfig
    from toolkit.train import configure_optimizer, lr_schedule, save_checkpoint

    # One thread: the made submissions' runs go in parallel, one per core. With two
    # threads each, threads share a core and wait for each other: a step took 175 ms
    # (OpenMP threads waiting passively) against 88 ms on one thread, on an idle machine.
    torch.set_num_threads(1)

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
    save_checkpoint(model.eval(), config, CHECKPOINT)
    return loss


def main(argv: list[str]) -> int:
    return prepare_checkpoint(
        argv[1] if len(argv) > 1 else "?", script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CHECKPOINT, name="capstone", not_for_training=NOT_FOR_TRAINING,
        train_and_save=train_and_save, steps=STEPS,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
