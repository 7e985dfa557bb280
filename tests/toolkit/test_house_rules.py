"""House rules a reader relies on: short modules, one name per hyper-parameter.

See CONTRIBUTING.md ("Layout", "Naming rule"). Read as source, never imported.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 350
#: Names the naming rule replaces, and what to write instead.
RETIRED = {
    "n_head": "n_heads", "n_layer": "n_layers", "n_kv_head": "n_kv_heads",
    "num_heads": "n_heads", "head_dim": "d_head", "max_len": "max_seq_len",
    "d_hidden": "d_ff",
}
#: Where the rule applies (tests may speak other libraries' languages, e.g. HF configs).
SOURCES = sorted(
    p
    for pattern in ("toolkit/**/*.py", "assignments/*/*.py", "assignments/*/checks/*.py",
                    "benchmarks/*.py", "course/*.py")
    for p in ROOT.glob(pattern)
)


@pytest.mark.parametrize(
    "path", sorted([*ROOT.glob("toolkit/**/*.py"), *ROOT.glob("autograder/**/*.py")]),
    ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_short(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, (
        f"{path.relative_to(ROOT)} has {n} lines (at most {MAX_LINES}): split it into a "
        "package of sections that re-exports its public names (see CONTRIBUTING.md)"
    )


def test_one_name_per_hyper_parameter():
    found = []
    for path in SOURCES:
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        for tok in tokens:
            if tok.type == tokenize.NAME and tok.string in RETIRED:
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string} -> "
                             f"{RETIRED[tok.string]}")
    assert not found, "retired hyper-parameter names (CONTRIBUTING.md, Naming rule):\n" + (
        "\n".join(found))
