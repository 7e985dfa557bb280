"""Train the checkpoint that a *made* 08-encoder-decoder submission hands in.

``autograder validate 08-encoder-decoder`` and ``autograder demo`` grade submissions made
from the instructor notebook: the reference solution, the released stub, one per named
mutant. A real student hands in ``encdec.safetensors`` next to the notebook (the
notebook's training section writes it), so a made submission needs one too.
``assignment.toml`` names this script as ``prepare``; the autograder runs it once per made
submission, in the submission's folder, as::

    python prepare_submission.py STUDENT_ID

It does what the student's notebook does, with the submission's own code: runs the
notebook's assignment cells (:mod:`autograder.authoring.prepare_checkpoint`), builds the notebook's
default model with *that* notebook's ``EncoderDecoder`` (so a mutant's bug is in its
checkpoint, as a student's would be), trains it with ``toolkit.seq2seq.train_numbers``
(``STEPS`` steps of 64 examples; the reference then converts about 70% of the held-out
numbers exactly, against the 50% of full points) and saves it with
``toolkit.seq2seq.save_encdec``. A notebook that cannot train gets no checkpoint and the
script exits 0. Identical training code trains once (the decoding cells are not part of
the cache key): the reference and the decoding mutants share one run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.authoring.prepare_checkpoint import prepare_checkpoint

NOTEBOOK = "encdec.ipynb"
CHECKPOINT = "encdec.safetensors"
#: Cells that training never calls: excluded from the cache key.
NOT_FOR_TRAINING = {"greedy", "beam", "checkpoint_helpers"}
MODEL = dict(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2, n_decoder_layers=2,
             num_buckets=32, max_distance=64)
STEPS, BATCH, MAX_LR, SEED = 600, 64, 3e-3, 0


def train_and_save(namespace: dict) -> float:
    """Train the notebook's EncoderDecoder on the number task, save it; returns the mean
    training loss of the last 20 steps."""
    # torch only here: a run that finds its checkpoint in the cache never imports it.
    import torch

    from toolkit.seq2seq import EncDecConfig, NumberTokenizer, save_encdec, train_numbers

    torch.set_num_threads(1)  # the made submissions train in parallel, one per core
    torch.manual_seed(SEED)
    config = EncDecConfig(vocab_size=NumberTokenizer().vocab_size, **MODEL)
    model = namespace["EncoderDecoder"](config)
    losses = train_numbers(model, STEPS, BATCH, MAX_LR, seed=SEED)
    save_encdec(model, CHECKPOINT)
    return sum(losses[-20:]) / 20


def main(argv: list[str]) -> int:
    return prepare_checkpoint(
        argv[1] if len(argv) > 1 else "?", script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CHECKPOINT, name="encdec", not_for_training=NOT_FOR_TRAINING,
        train_and_save=train_and_save, steps=STEPS,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
