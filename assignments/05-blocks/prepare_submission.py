"""Pre-train the checkpoint that a *made* 05-blocks submission hands in.

``autograder validate 05-blocks`` and ``autograder demo`` grade submissions made from the
instructor notebook: the reference solution, the released stub, one per named mutant. A
real student hands in ``mlm.safetensors`` next to the notebook (the notebook's training
section writes it), so a made submission needs one too. ``assignment.toml`` names this
script as ``prepare``; the autograder runs it once per made submission, after writing the
notebook, as::

    python prepare_submission.py STUDENT_ID        # working directory: the submission folder

It does what the student's notebook would do, with the submission's own code:

1. execute the notebook's assignment-defined code cells from ``blocks.ipynb``: the
   nbgrader read-only cells and solution cells, never the test cells, cells tagged
   ``skip-grading`` or cells without nbgrader metadata (so a demo submission's inserted
   infinite loop never runs here);
2. build *that* notebook's ``TinyBert`` (its ``BertEmbeddings``, ``EncoderStack``,
   ``PreLNBlock``, ``LayerNorm``) and pre-train it with ``toolkit.pretrain.pretrain`` on
   batches from *that* notebook's ``MaskedLMDataset`` (so a mutant's bug is in its
   checkpoint, as a student's would be). To keep ``validate`` quick the model is smaller
   and the run shorter than the notebook's default: one block of width 64, ``STEPS``
   steps, about 10 s on one idle CPU core (one block escapes the predict-the-commonest-word
   plateau sooner than two); the reference reaches a masked-word accuracy of about 0.10,
   above the 0.09 target of the checks;
3. save ``mlm.safetensors`` with ``toolkit.pretrain.save_bert``.

A notebook that cannot train (the stub raises ``NotImplementedError``) gets no checkpoint,
like a student who handed none in; the script says so and exits 0.

Identical training code trains identically, so results are cached
(:mod:`autograder.authoring.prepare_checkpoint`, which does step 1 and the caching for every such
script): the reference and the mutants of RMSNorm, the feed-forward and the distillation
exercises share one run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from autograder.authoring.prepare_checkpoint import prepare_checkpoint

NOTEBOOK = "blocks.ipynb"
CHECKPOINT = "mlm.safetensors"
#: Cells that training never calls: excluded from the cache key. (The model uses
#: LayerNorm and the GELU MLP; RMSNorm and SwiGLU only when a config asks for them; the
#: NSP pairs and the classifier of part 8 come after pre-training.)
NOT_FOR_TRAINING = {"rms_norm", "gated_ffn", "glu_family", "distillation",
                    "document_nsp_pairs", "bert_classifier"}
MODEL = dict(d_model=64, n_layers=1, n_heads=4, max_seq_len=64)
STEPS, BATCH, LR, SEED = 250, 32, 3e-3, 0


def train_and_save(namespace: dict) -> float:
    """Pre-train the notebook's TinyBert on the notebook's MaskedLMDataset, save it;
    returns the last training loss."""
    # torch only here: a run that finds its checkpoint in the cache never imports it (2 s).
    import torch

    from toolkit.bert import BertConfig
    from toolkit.pretrain import load_mlm_corpus, pretrain, save_bert

    # One thread: this tiny model gains little from two, and loses much when the cores are
    # shared (the other made submissions' runs, grading workers, a parallel test run).
    torch.set_num_threads(1)

    tiny_bert, dataset = namespace["TinyBert"], namespace["MaskedLMDataset"]
    corpus = load_mlm_corpus()
    v = corpus.vocab
    torch.manual_seed(SEED)
    model = tiny_bert(BertConfig(vocab_size=v.vocab_size, **MODEL))
    masking = dataset(corpus.train_ids, v.special_ids, v.mask_id, v.vocab_size, seed=SEED)
    losses = pretrain(model, corpus, STEPS, batch_size=BATCH, lr=LR, seed=SEED, masking=masking)
    if not all(math.isfinite(loss) for loss in losses):
        raise FloatingPointError("the loss stopped being finite")
    save_bert(model, CHECKPOINT)
    return losses[-1]


def main(argv: list[str]) -> int:
    return prepare_checkpoint(
        argv[1] if len(argv) > 1 else "?", script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CHECKPOINT, name="blocks", not_for_training=NOT_FOR_TRAINING,
        train_and_save=train_and_save, steps=STEPS,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
