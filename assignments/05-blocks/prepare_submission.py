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
   steps, about 10 s of CPU (one block escapes the predict-the-commonest-word plateau
   sooner than two); the reference reaches a masked-word accuracy of about 0.13, above
   the 0.10 target of the checks;
3. save ``mlm.safetensors`` with ``toolkit.pretrain.save_bert``.

A notebook that cannot train (the stub raises ``NotImplementedError``) gets no checkpoint,
like a student who handed none in; the script says so and exits 0.

Identical training code trains identically, so results are cached in
``$AUTOGRADER_PREPARE_SCRATCH`` (shared by the runs of one ``write_submissions`` call),
keyed by a hash of this script and of the executed cells that training uses: the reference
and the mutants of RMSNorm, the feed-forward and the distillation exercises share one run.
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

import torch

NOTEBOOK = "blocks.ipynb"
CHECKPOINT = "mlm.safetensors"
#: Cells that training never calls: excluded from the cache key. (The model uses
#: LayerNorm and the GELU MLP; RMSNorm and SwiGLU only when a config asks for them.)
NOT_FOR_TRAINING = {"rms_norm", "gated_ffn", "glu_family", "distillation"}
MODEL = dict(d_model=64, n_layers=1, n_heads=4, max_seq_len=64)
STEPS, BATCH, LR, SEED = 250, 32, 3e-3, 0


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
    namespace: dict = {"__name__": "blocks_submission"}
    flags = __future__.annotations.compiler_flag
    for grade_id, source in cells:
        try:
            exec(compile(source, f"<cell {grade_id}>", "exec", flags=flags, dont_inherit=True),
                 namespace)
        except Exception as exc:  # a broken submission: what can run, runs
            print(f"cell {grade_id}: {type(exc).__name__}: {exc}")
    return namespace


def train(namespace: dict):
    """Pre-train the notebook's TinyBert on the notebook's MaskedLMDataset; returns the model."""
    from toolkit.bert import BertConfig
    from toolkit.pretrain import load_mlm_corpus, pretrain

    tiny_bert, dataset = namespace["TinyBert"], namespace["MaskedLMDataset"]
    corpus = load_mlm_corpus()
    v = corpus.vocab
    torch.manual_seed(SEED)
    model = tiny_bert(BertConfig(vocab_size=v.vocab_size, **MODEL))
    masking = dataset(corpus.train_ids, v.special_ids, v.mask_id, v.vocab_size, seed=SEED)
    losses = pretrain(model, corpus, STEPS, batch_size=BATCH, lr=LR, seed=SEED, masking=masking)
    if not all(math.isfinite(loss) for loss in losses):
        raise FloatingPointError("the loss stopped being finite")
    return model, losses[-1]


def main(argv: list[str]) -> int:
    student = argv[1] if len(argv) > 1 else "?"
    # One thread: this tiny model gains little from two, and loses much when the cores are
    # shared (grading workers, a parallel test run).
    torch.set_num_threads(1)
    try:
        nb = json.loads(Path(NOTEBOOK).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{student}: no checkpoint: {NOTEBOOK} is unreadable ({exc})")
        return 0
    cells = assignment_cells(nb)
    scratch = os.environ.get("AUTOGRADER_PREPARE_SCRATCH")
    cached = Path(scratch, f"blocks-{cache_key(cells)}.safetensors") if scratch else None
    if cached is not None and cached.is_file():
        shutil.copyfile(cached, CHECKPOINT)
        print(f"{student}: {CHECKPOINT} from the cache")
        return 0
    started = time.perf_counter()
    try:
        model, loss = train(run_cells(cells))
        from toolkit.pretrain import save_bert

        save_bert(model, CHECKPOINT)
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
