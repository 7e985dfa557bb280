"""Fair checks for 05's exercises 8c and 8d: solutions written differently from the
reference, from the released notebook's instructions alone, get every check.

The real hidden checks run in this process against the instructor's notebook with the
solution region replaced (as ``test_check_hints`` grades a whole notebook), through the
request files and the kernel side of the protocol.
"""

from __future__ import annotations

import shutil

import pytest
from test_check_hints import InProcessKernel, _whole_notebook

from autograder.grading.runner import run_checks
from autograder.protocol.trusted import Submission
from autograder.workspace.assignment_spec import AssignmentSpec

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")

REFERENCE_ENCODE = '''    ### BEGIN SOLUTION
    ids, types, mask = [], [], []
    for a, b in pairs:'''
# Preallocated rows filled by slices, and the error raised before anything is written.
ALTERNATIVE_ENCODE = '''    ### BEGIN SOLUTION
    names = ("input_ids", "token_type_ids", "attention_mask")
    out = {k: torch.zeros(len(pairs), seq_len, dtype=torch.int64) for k in names}
    for i, (first, second) in enumerate(pairs):
        end_a = len(first) + 2
        end = end_a + len(second) + 1
        if end > seq_len:
            raise ValueError("the pair does not fit in seq_len")
        out["input_ids"][i, :end] = torch.tensor([CLS_ID, *first, SEP_ID, *second, SEP_ID])
        out["input_ids"][i, end:] = PAD_ID
        out["token_type_ids"][i, end_a:end] = 1
        out["attention_mask"][i, :end] = 1
    return out
    ids, types, mask = [], [], []
    for a, b in pairs:'''

REFERENCE_LOAD = '''    ### BEGIN SOLUTION
    return BertClassifier(load_bert(path, model_class=TinyBert), n_labels, dropout=dropout)'''
# The file read by hand: the config from its metadata, the weights by load_state_dict.
ALTERNATIVE_LOAD = '''    ### BEGIN SOLUTION
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        config = BertConfig.from_dict(json.loads(f.metadata()["bert_config"]))
    encoder = TinyBert(config)
    encoder.load_state_dict(load_file(str(path)), strict=False)  # the tied decoder is absent
    return BertClassifier(encoder, n_labels=n_labels, dropout=dropout)'''


@pytest.mark.parametrize("edits, check", [
    ([(REFERENCE_ENCODE, ALTERNATIVE_ENCODE)], "test_encode_pairs"),
    ([(REFERENCE_LOAD, ALTERNATIVE_LOAD)], "test_classifier_from_pretrained"),
])
def test_an_alternative_solution_passes_every_check(edits, check, tmp_path):
    spec = AssignmentSpec.load("05-blocks")
    namespace, _ = _whole_notebook(spec, "blocks", edits)
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(spec.checks_dir() / f"{check}.py", checks)
    submission = Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path / "x")
    records, _ = run_checks(checks, submission)
    assert records and all(r.passed for r in records), [
        (r.id, r.message) for r in records if not r.passed]
