"""Similarity flags on a class of 01-attention: planted copies are found, independent
correct solutions are not, and nothing about grading changes.

The class (tests/fixtures/similarity/): five students who solved the exercises their
own way (checked correct against the toolkit below), three planted copies (renamed
variables, reordered independent lines, changed comments), and two broken hand-ins.
"""

import hashlib
import io
import json
import random
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from autograder.cli import main
from autograder.reports import similarity
from autograder.reports.similarity_report import _code
from autograder.workspace.course import Course

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "similarity"))
import make_class  # noqa: E402

NAME = "01-attention"


@pytest.fixture(scope="module")
def attention_class(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("similarity") / "workspace")
    course.init()
    course.release(NAME)
    for student in make_class.INDEPENDENT + list(make_class.PLANTED):
        make_class.hand_in(course, NAME, student, make_class.solutions_of(student))
    # A syntax error (an unclosed bracket) in an otherwise empty notebook, a file that
    # is not a notebook, and JSON whose cells are not cells: never fatal.
    broken = {"attention_weights": ["scores = (q @ k.transpose(-2, -1) * scale\nreturn scores\n"]}
    make_class.hand_in(course, NAME, "unclosed-bracket", broken)
    not_json = course.path("submitted", "not-a-notebook", NAME, "attention.ipynb")
    not_json.parent.mkdir(parents=True)
    not_json.write_text("{ this is not json")
    odd = course.path("submitted", "odd-cells", NAME, "attention.ipynb")
    odd.parent.mkdir(parents=True)
    odd.write_text(json.dumps({"cells": ["x", {"metadata": 3}, {"cell_type": "code"}]}))
    return course


def _similarity_json(course, *extra):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["report", NAME, "--similarity", "--course", str(course.root),
                     "--format", "json", *extra])
    assert code == 0
    return json.loads(out.getvalue())


def test_planted_copies_are_found(attention_class):
    data = _similarity_json(attention_class)
    pairs = {frozenset((p["a"], p["b"])): p["score"] for p in data["pairs"]}
    of_reference = {c for c, original in make_class.PLANTED.items() if original == "reference"}
    assert {r["a"] for r in data["reference"]} == of_reference
    for copy, original in make_class.PLANTED.items():
        if original != "reference":
            assert pairs[frozenset((copy, original))] >= 0.7, (copy, pairs)
    # Exercises too short to tell copying from the natural way to write them.
    assert {"scaled_dot_product_attention", "merge_heads"} <= set(data["skipped"])
    assert "attention_weights" in data["compared"]


def test_independent_solutions_are_not_flagged(attention_class):
    data = _similarity_json(attention_class)
    planted = {frozenset(item) for item in make_class.PLANTED.items()}
    planted |= {frozenset((a, b)) for a, of_a in make_class.PLANTED.items()
                for b, of_b in make_class.PLANTED.items() if a != b and of_a == of_b}
    assert all(frozenset((p["a"], p["b"])) in planted for p in data["pairs"]), data["pairs"]
    assert all(r["a"] in make_class.PLANTED for r in data["reference"]), data["reference"]
    # Not even close: the honest students who follow the hints (chloe) and the formulas
    # (fay) write much of what the reference writes, yet stay well below the threshold.
    from autograder.reports.similarity_report import run

    result, *_ = run(attention_class, NAME)
    independent = set(make_class.INDEPENDENT)
    honest = [m for m in result.pairs if {m.a, m.b} <= independent]
    honest += [m for m in result.reference if m.a in independent]
    assert max(m.score for m in honest) < result.settings.threshold - 0.1
    # Two lines in an otherwise empty notebook can be "all shared" with someone; too
    # little code to be evidence of anything, so never flagged.
    tiny = [m for m in result.pairs + result.reference if "unclosed-bracket" in (m.a, m.b)]
    assert all(m.shared < result.settings.min_shared for m in tiny)


def similarity_report_load(course):
    from autograder.reports.similarity_report import load

    return load(course, NAME)


def test_broken_hand_ins_are_noted_and_never_stop_the_report(attention_class, capsys):
    students, _, notes = similarity_report_load(attention_class)
    assert any("not-a-notebook" in n and "not a notebook" in n for n in notes)
    assert students["unclosed-bracket"]["attention_weights"].tokens[:3] == ["V", "=", "("]
    assert students["odd-cells"] == {}


def test_html_page_shows_the_copied_code_side_by_side(attention_class):
    _similarity_json(attention_class)
    page = (attention_class.root / "reports" / f"{NAME}-similarity.html").read_text()
    assert "ada and copy-of-ada" in page and "copy-of-reference and the reference" in page
    assert 'class="same"' in page and "torch.tril(ones, diagonal=offset)" in page
    # Student code is untrusted: shown as text, never as markup.
    reg = similarity.region("", "x = '</pre><script>alert(1)</script>'\n", set())
    assert "<script>" not in _code(reg, {0}) and "&lt;script&gt;" in _code(reg, {0})


def test_similarity_never_touches_grades_or_submissions(attention_class):
    def snapshot():
        root = attention_class.root
        files = [root / "gradebook.db", *attention_class.path("submitted").rglob("*")]
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}

    before = snapshot()
    _similarity_json(attention_class, "--threshold", "0.3")
    assert snapshot() == before
    assert not list(attention_class.path("autograder").rglob("*.json"))


def test_normalising_removes_names_comments_layout_and_literals():
    given = similarity.given_names(["import torch\ndef softmax(x):\n    pass"])
    a = "w = torch.softmax(scores * 0.5, dim=-1)  # weights\nreturn w"
    b = "probs = torch.softmax(\n    logits * 2,\n    dim=-1)\n\nreturn probs"
    ta = similarity.normalise(a, [0, 1], given)[0]
    tb = similarity.normalise(b, list(range(6)), given)[0]
    assert ta == tb == ["V", "=", "torch", ".", "softmax", "(", "V", "*", "N", ",", "dim", "=",
                        "-", "N", ")", "return", "V"]
    assert similarity.normalise("s = f'{x}'", [0], given)[0] == ["V", "=", "S"]
    # The released scaffold is not what the student wrote.
    scaffold = "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    answer = "def f(x):\n    y = x + 1\n    return y"
    assert similarity.written_lines(scaffold, answer) == [1, 2]


def test_winnowing_always_sees_a_long_enough_shared_run():
    """Any run of ``window + k - 1`` tokens shared by two sequences shares a fingerprint
    (the guarantee of Schleimer et al.), wherever it sits."""
    rng = random.Random(0)
    s = similarity.Settings()
    alphabet = ["V", "=", "(", ")", ".", "N", "torch", "+", "*", "return"]
    for _ in range(200):
        run = [rng.choice(alphabet) for _ in range(s.window + s.k - 1)]
        a = [rng.choice(alphabet) for _ in range(rng.randrange(30))] + run
        b = run + [rng.choice(alphabet) for _ in range(rng.randrange(30))]
        fa = similarity.winnow(similarity.kgram_hashes(a, s.k), s.window)
        fb = similarity.winnow(similarity.kgram_hashes(b, s.k), s.window)
        assert set(fa) & set(fb)


# -- the independent solutions really are correct -----------------------------------
PRELUDE = "import math\nimport torch\nfrom torch import Tensor, nn\n"


def _student_namespace(course, student):
    ns: dict = {}
    exec(PRELUDE, ns)  # noqa: S102 - our own fixture code
    for source in make_class.filled_cells(course, NAME, make_class.solutions_of(student)).values():
        exec(source, ns)  # noqa: S102
    return ns


@pytest.mark.parametrize("student", make_class.INDEPENDENT)
def test_independent_solutions_are_correct(attention_class, student):
    from toolkit import attention as ref
    from toolkit import masks

    ns = _student_namespace(attention_class, student)
    answered = make_class.solutions_of(student)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (5, 7, 7))
    bool_mask = torch.rand(2, 1, 5, 7, generator=g) > 0.4
    bool_mask[0, 0, 2] = False  # a query that sees nothing
    for mask in (None, bool_mask, torch.randn(5, 7, generator=g)):
        torch.testing.assert_close(ns["attention_weights"](q, k, mask, 0.3),
                                   ref.attention_weights(q, k, mask, 0.3))
    with pytest.raises(ValueError):
        ns["attention_weights"](q, k, bool_mask.int())
    if "scaled_dot_product_attention" in answered:
        torch.testing.assert_close(ns["scaled_dot_product_attention"](q, k, v, bool_mask),
                                   ref.scaled_dot_product_attention(q, k, v, bool_mask))
    for n_q, n_k, offset in [(4, None, 0), (3, 6, 3), (2, None, 4)]:
        assert torch.equal(ns["causal_mask"](n_q, n_k, offset=offset),
                           masks.causal_mask(n_q, n_k, offset=offset))
    lengths = torch.tensor([3, 1, 4])
    for max_len in (None, 6):
        expected_mask = masks.padding_mask(lengths, max_len)
        assert torch.equal(ns["padding_mask"](lengths, max_len), expected_mask)
    x = torch.randn(2, 5, 12, generator=g)
    assert torch.equal(ns["split_heads"](x, 3), ref.split_heads(x, 3))
    with pytest.raises(ValueError):
        ns["split_heads"](x, 5)
    mha = ns["MultiHeadAttention"](12, 3)
    expected = ref.MultiHeadAttention(12, 3)
    expected.load_state_dict(mha.state_dict())
    memory = torch.randn(2, 4, 12, generator=g)
    per_head = torch.rand(2, 3, 5, 4, generator=g) > 0.3
    for args in [(x, None, masks.causal_mask(5)), (x, memory, per_head), (x, memory, None)]:
        torch.testing.assert_close(mha(*args), expected(*args))
    with pytest.raises(ValueError):
        ns["MultiHeadAttention"](10, 3)
