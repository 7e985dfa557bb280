"""House rules a reader relies on: one concept per module, one name per hyper-parameter.

See CONTRIBUTING.md ("Layout", "Naming rule"). Read as source, never imported.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A module longer than this is read twice before it is kept whole.
LONG = 500
#: The modules over LONG lines, each with the one-line reason it is one concept.
LONG_MODULES: dict[str, str] = {
    "autograder/reports/leaderboard.py": "one command: rank on held-out text, retrain the top "
    "entries, draw the page; all three share its evaluation of a checkpoint",
}
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


def test_a_long_module_says_why_it_is_one_concept():
    """One concept per module, however long: a module is not cut to fit a line count, and
    one that grows past LONG lines says, in LONG_MODULES, why it is still one concept
    (else: split it by concept, e.g. into a package of sections; see CONTRIBUTING.md)."""
    paths = [*ROOT.glob("toolkit/**/*.py"), *ROOT.glob("autograder/**/*.py"),
             *ROOT.glob("benchmarks/*.py")]
    long = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in paths
            if "node_modules" not in p.parts}
    long = {path: n for path, n in long.items() if n > LONG}
    unexplained = [f"{path} ({n} lines)" for path, n in sorted(long.items())
                   if not LONG_MODULES.get(path, "").strip()]
    assert not unexplained, (
        f"modules over {LONG} lines with no reason in LONG_MODULES: {unexplained}")
    stale = sorted(set(LONG_MODULES) - set(long))
    assert not stale, f"no longer over {LONG} lines (drop them from LONG_MODULES): {stale}"


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
