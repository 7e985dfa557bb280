"""Train the hybrid that a *made* 06-beyond-attention submission hands in.

``autograder validate 06-beyond-attention`` and ``autograder demo`` grade submissions made
from the instructor notebook: the reference solution, the released stub, one per named
mutant. A real student hands in ``hybrid.safetensors`` next to the notebook (part 7's
training cell writes it), so a made submission needs one too. ``assignment.toml`` names
this script as ``prepare``; the autograder runs it once per made submission, in the
submission's folder, as::

    python prepare_submission.py STUDENT_ID

It does what the notebook's training cell does for the hybrid, with the submission's own
code: runs the notebook's assignment cells
(:mod:`autograder.authoring.prepare_checkpoint`), builds the ``"MA"`` model with *that*
notebook's ``HybridLM`` and ``selective_scan``, trains it with
``toolkit.hybrid.experiment.train_on_mqar`` on *that* notebook's ``mqar_batch`` (so a
mutant's bug is in its checkpoint, as a student's would be) and saves it with
``toolkit.hybrid.save_hybrid``. A notebook that cannot train gets no checkpoint and the
script exits 0. Only the cells training calls key the cache: the reference and the
mutants of every other exercise share one run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.authoring.prepare_checkpoint import prepare_checkpoint

NOTEBOOK = "beyond.ipynb"
CHECKPOINT = "hybrid.safetensors"
#: Cells that training never calls: excluded from the cache key.
NOT_FOR_TRAINING = {
    "top_k_gating", "load_balancing_loss", "apply_capacity", "sorted_dispatch", "sparse_moe",
    "active_parameters_question", "discretize_zoh", "associative_scan", "semiseparable_mask",
    "ssd_attention", "ssd_chunked", "wkv_recurrent", "gated_attention_unit",
    "hybrid_question", "recall_accuracy",
}
#: The notebook's RECALL_* settings (its training cell is not run here).
STEPS, PAIRS, VOCAB, SEED = 600, (2, 4, 8), 32, 0
MODEL = dict(d_model=32, n_heads=4, d_state=8, max_seq_len=4 * max(PAIRS))


def train_and_save(namespace: dict) -> float:
    """Train the notebook's hybrid "MA" on MQAR, save it; returns the loss on one more
    batch of 8 pairs."""
    # torch only here: a run that finds its checkpoint in the cache never imports it.
    import torch
    import torch.nn.functional as F

    from toolkit.hybrid import IGNORE, save_hybrid
    from toolkit.hybrid.experiment import train_on_mqar

    torch.set_num_threads(1)  # the made submissions train in parallel, one per core
    torch.manual_seed(SEED)
    model = namespace["HybridLM"](VOCAB, "MA", **MODEL, scan=namespace["selective_scan"])
    train_on_mqar(model, STEPS, PAIRS, VOCAB, seed=SEED, batch_fn=namespace["mqar_batch"])
    save_hybrid(model, CHECKPOINT, vocab_size=VOCAB, pattern="MA", **MODEL)
    inputs, targets = namespace["mqar_batch"](64, 8, VOCAB,
                                              generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE).item()


def main(argv: list[str]) -> int:
    return prepare_checkpoint(
        argv[1] if len(argv) > 1 else "?", script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CHECKPOINT, name="hybrid", not_for_training=NOT_FOR_TRAINING,
        train_and_save=train_and_save, steps=STEPS,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
