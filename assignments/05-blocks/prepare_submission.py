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
3. save ``mlm.safetensors`` with ``toolkit.pretrain.save_bert``;
4. fine-tune for part 9 as the notebook does, with *that* notebook's code: its
   ``classifier_from_pretrained`` on the ``mlm.safetensors`` of step 3, its
   ``encode_pairs`` for the task's inputs (``toolkit.finetune.module_task``), its
   ``BertClassifier``; ``FINETUNE_STEPS`` steps of ``toolkit.finetune.finetune`` (about 3 s
   on one idle core), saved as ``classifier.safetensors`` with
   ``toolkit.finetune.save_classifier``. A mutant that starts from a fresh encoder hands
   in a classifier whose encoder does not descend from its ``mlm.safetensors``.

A notebook that cannot train (the stub raises ``NotImplementedError``) gets no checkpoint,
like a student who handed none in; the script says so and exits 0. One that pre-trains
but cannot fine-tune hands in ``mlm.safetensors`` alone.

Identical training code trains identically, so results are cached
(:mod:`autograder.authoring.prepare_checkpoint`, which does step 1 and the caching for every such
script), the two checkpoints separately: the reference and the mutants of RMSNorm, the
feed-forward and the distillation exercises share one pre-training run, and the mutants of
part 8 share the reference's pre-training (fine-tuning is keyed by the cells it uses and by
the pre-trained checkpoint's bytes).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from autograder.authoring.prepare_checkpoint import prepare_checkpoint

NOTEBOOK = "blocks.ipynb"
CHECKPOINT = "mlm.safetensors"
CLASSIFIER = "classifier.safetensors"
#: Cells of part 8 and 9: fine-tuning, which comes after pre-training.
FINETUNING_CELLS = {"document_nsp_pairs", "bert_classifier", "encode_pairs",
                    "classifier_from_pretrained", "finetune_setup"}
#: Cells that pre-training never calls: excluded from its cache key. (The model uses
#: LayerNorm and the GELU MLP; RMSNorm and SwiGLU only when a config asks for them.)
NOT_FOR_TRAINING = {"rms_norm", "gated_ffn", "glu_family", "distillation", *FINETUNING_CELLS}
#: Cells that fine-tuning never calls (it reads the pre-trained encoder from its file).
NOT_FOR_FINETUNING = {"rms_norm", "gated_ffn", "glu_family", "distillation",
                      "document_nsp_pairs", "mask_tokens", "masked_lm_dataset"}
MODEL = dict(d_model=64, n_layers=1, n_heads=4, max_seq_len=64)
STEPS, BATCH, LR, SEED = 250, 32, 3e-3, 0
#: Part 9's fine-tuning: the notebook's FINETUNE_STEPS, FINETUNE_LR and FINETUNE_SEED.
FINETUNE_STEPS, FINETUNE_LR, FINETUNE_SEED = 120, 2e-3, 0


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


def finetune_and_save(namespace: dict) -> float:
    """Fine-tune the notebook's classifier from the pre-trained ``mlm.safetensors`` on
    the module task built with the notebook's ``encode_pairs``, save it; returns the last
    training loss."""
    import torch

    from toolkit.finetune import TASK_MODULES, finetune, module_task, save_classifier
    from toolkit.pretrain import load_mlm_corpus

    torch.set_num_threads(1)
    train, _ = module_task(load_mlm_corpus().vocab, encode=namespace["encode_pairs"])
    torch.manual_seed(FINETUNE_SEED)
    classifier = namespace["classifier_from_pretrained"](CHECKPOINT, len(TASK_MODULES))
    losses = finetune(classifier, train, FINETUNE_STEPS, lr=FINETUNE_LR, seed=FINETUNE_SEED)
    if not all(math.isfinite(loss) for loss in losses):
        raise FloatingPointError("the fine-tuning loss stopped being finite")
    save_classifier(classifier, CLASSIFIER)
    return losses[-1]


def main(argv: list[str]) -> int:
    student = argv[1] if len(argv) > 1 else "?"
    prepare_checkpoint(
        student, script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CHECKPOINT, name="blocks", not_for_training=NOT_FOR_TRAINING,
        train_and_save=train_and_save, steps=STEPS,
    )
    if not Path(CHECKPOINT).is_file():
        print(f"{student}: no {CLASSIFIER}: there is no {CHECKPOINT} to fine-tune")
        return 0
    return prepare_checkpoint(
        student, script=Path(__file__), notebook=NOTEBOOK,
        checkpoint=CLASSIFIER, name="blocks-classifier", not_for_training=NOT_FOR_FINETUNING,
        train_and_save=finetune_and_save, steps=FINETUNE_STEPS,
        also_reads=(Path(CHECKPOINT).resolve(),),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
