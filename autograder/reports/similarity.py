"""Similarity flags: which submissions share more code than independent work explains.

Copying rarely survives untouched: names change, comments change, lines move.
So code is compared after *normalising* it, as MOSS does, in four steps:

1. **Normalise** (:func:`normalise`). The student's code is cut into Python tokens.
   Comments and layout are dropped; every number becomes ``N`` and every string
   ``S``; every name the student chose becomes ``V``. Names the student did not
   choose stay: keywords, builtins, names the assignment defines or imports
   (``torch``, ``F``, ``attention_weights``), attributes after a dot
   (``.masked_fill``) and keyword arguments (``dim=``). So
   ``w = torch.softmax(s, dim=-1)  # weights`` and ``probs = torch.softmax(x, dim=1)``
   both read ``V = torch . softmax ( V , dim = - N )``.
2. **Fingerprint** (:func:`fingerprints`). Hash every run of ``k`` consecutive tokens
   (a k-gram), then *winnow*: in every window of ``w`` consecutive hashes keep the
   smallest (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for
   document fingerprinting", SIGMOD 2003). Two pieces of code that share a run of at
   least ``w + k - 1`` tokens are guaranteed to share a fingerprint; runs shorter than
   ``k`` never count, however often they occur.
3. **Discard common code** (:func:`compare`). A k-gram that more than
   ``common_share`` of the class wrote is how everyone writes it (the idiom the hints
   suggest), not evidence of copying: it is ignored, as MOSS's ``-m`` option does.
4. **Compare** every pair, per exercise, through an inverted index from fingerprint to
   submissions (only pairs that share something are ever touched), and every
   submission against the reference solution. What a submission has *of its own* is
   its fingerprints that are not common code; a pair's similarity in an exercise is
   the share of the smaller side's own fingerprints that the other side also has, and
   over the assignment the same ratio summed over the exercises both answered (long
   exercises weigh more than short ones). So a copy scores near 1 however much of it
   is common code, and two honest solutions that share only the usual idioms score
   near 0. A flag also needs ``min_shared`` shared fingerprints: two identical lines in
   an otherwise empty cell are "all shared" but no evidence.

Only exercises whose reference solution is at least ``min_tokens`` normalised tokens
long are compared: in a one-line exercise every correct answer looks alike.
Reordered independent lines keep every k-gram inside each line, so they change
little. Nothing here reads or writes scores.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import difflib
import io
import itertools
import json
import keyword
import tokenize
import zlib
from collections import defaultdict
from pathlib import Path

#: Token types that carry no meaning for similarity (layout, comments).
_LAYOUT = {
    tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
    tokenize.ENCODING, tokenize.ENDMARKER,
}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
_HASH_MASK = (1 << 61) - 1
#: How the reference solution is named in matches (no student folder has this name).
REFERENCE = "the reference solution"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Knobs of the comparison; the defaults suit exercises of 01-attention's size."""

    k: int = 5  # tokens per k-gram: shorter shared runs are noise
    window: int = 4  # winnowing window: shared runs of k + window - 1 tokens are always seen
    min_tokens: int = 40  # exercises whose reference is shorter are not compared
    common_share: float = 0.1  # k-grams in more than this share of the class are common code
    common_min: int = 5  # ...but never fewer than this many submissions
    threshold: float = 0.6  # pairs at or above this similarity are flagged...
    min_shared: int = 10  # ...if they share at least this many fingerprints (a few lines)


@dataclasses.dataclass
class Region:
    """What one author wrote in one exercise (a solution cell), normalised.

    ``lines`` are the cell's source lines, ``written`` the indices of those the author
    wrote (not the released scaffold); ``tokens[i]`` came from line ``token_lines[i]``.
    """

    lines: list[str]
    written: list[int]
    tokens: list[str]
    token_lines: list[int]


# -- 1. normalise ------------------------------------------------------------------
def given_names(released_cells: list[str]) -> set[str]:
    """Names the author did not choose: builtins, and the modules, functions and classes
    the released notebook imports or defines at top level. (Its demo variables, ``x =
    torch.randn(...)``, are not given: a student's own ``x`` is still a chosen name.)"""
    names = set(dir(builtins))
    for source in released_cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def written_lines(released: str, submitted: str) -> list[int]:
    """Indices of ``submitted``'s lines that are not the released scaffold: what the
    author wrote in place of the stub (lines compared without trailing spaces)."""
    old = [line.rstrip() for line in released.splitlines()]
    new = [line.rstrip() for line in submitted.splitlines()]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [
        j
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in ("replace", "insert")
        for j in range(j1, j2)
        if new[j].strip()
    ]


def _python_tokens(source: str) -> list[tokenize.TokenInfo]:
    """Tokens of a cell; a cell that does not tokenise (a student's syntax error) keeps
    the tokens read so far and the rest is read line by line."""
    tokens: list[tokenize.TokenInfo] = []
    try:
        tokens.extend(tokenize.generate_tokens(io.StringIO(source).readline))
        return tokens
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    done = tokens[-1].start[0] if tokens else 0
    for lineno, line in enumerate(source.splitlines()[done:], start=done + 1):
        try:
            for tok in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
                tokens.append(tok._replace(start=(lineno, tok.start[1])))
        except (tokenize.TokenError, IndentationError, SyntaxError):
            continue
    return tokens


def normalise(source: str, written: list[int], given: set[str]) -> tuple[list[str], list[int]]:
    """(normalised tokens, 0-based source line of each) of the written lines of ``source``."""
    keep = set(written)
    raw = [t for t in _python_tokens(source) if t.type not in _LAYOUT and t.string.strip()]
    out: list[str] = []
    lines: list[int] = []
    depth = 0  # bracket depth: ``name=`` inside brackets is a keyword argument
    in_fstring = 0
    for i, tok in enumerate(raw):
        if tok.type == _FSTRING_START:
            in_fstring += 1
            if in_fstring > 1:
                continue
            text = "S"
        elif in_fstring:
            in_fstring -= tok.type == _FSTRING_END
            continue
        elif tok.type == tokenize.OP:
            depth += tok.string in "([{"
            depth -= tok.string in ")]}" and depth > 0
            text = tok.string
        elif tok.type == tokenize.NUMBER:
            text = "N"
        elif tok.type == tokenize.STRING:
            text = "S"
        elif tok.type == tokenize.NAME:
            after_dot = i > 0 and raw[i - 1].string == "."
            keyword_arg = depth > 0 and i + 1 < len(raw) and raw[i + 1].string == "="
            chosen = not (keyword.iskeyword(tok.string) or tok.string in given)
            text = "V" if chosen and not after_dot and not keyword_arg else tok.string
        else:
            text = tok.string
        if tok.start[0] - 1 in keep:
            out.append(text)
            lines.append(tok.start[0] - 1)
    return out, lines


def region(released: str, submitted: str, given: set[str]) -> Region:
    written = written_lines(released, submitted)
    tokens, token_lines = normalise(submitted, written, given)
    return Region(submitted.splitlines(), written, tokens, token_lines)


# -- 2. fingerprint ------------------------------------------------------------------
def kgram_hashes(tokens: list[str], k: int) -> list[int]:
    """One deterministic 61-bit hash per k-gram (the same in every run and process)."""
    codes = [zlib.crc32(t.encode()) for t in tokens]
    hashes = []
    for start in range(len(codes) - k + 1):
        h = 0
        for code in codes[start : start + k]:
            h = (h * 1_000_003 + code) & _HASH_MASK
        hashes.append(h)
    return hashes


def winnow(hashes: list[int], window: int) -> dict[int, list[int]]:
    """Robust winnowing: ``{hash: [k-gram positions]}`` of the rightmost minimum of
    every window of ``window`` consecutive hashes (each selection recorded once)."""
    selected: dict[int, list[int]] = defaultdict(list)
    last = -1
    for start in range(max(1, len(hashes) - window + 1)):
        chunk = hashes[start : start + window]
        if not chunk:
            break
        smallest = min(chunk)
        pos = start + max(i for i, h in enumerate(chunk) if h == smallest)
        if pos != last:
            selected[hashes[pos]].append(pos)
            last = pos
    return dict(selected)


def fingerprints(reg: Region, settings: Settings) -> dict[int, list[int]]:
    return winnow(kgram_hashes(reg.tokens, settings.k), settings.window)


# -- 3 and 4. compare ------------------------------------------------------------------
@dataclasses.dataclass
class Match:
    """How much of ``a`` and ``b`` is shared: overall and per exercise
    (``{exercise: (shared fingerprints, fingerprints of the smaller side)}``)."""

    a: str
    b: str
    score: float
    exercises: dict[str, tuple[int, int]]

    @property
    def shared(self) -> int:
        return sum(n for n, _ in self.exercises.values())

    def exercise_score(self, exercise: str) -> float:
        shared, size = self.exercises[exercise]
        return shared / size if size else 0.0


@dataclasses.dataclass
class Result:
    """Every pair that shares anything, and every submission against the reference."""

    compared: list[str]  # exercises long enough to compare
    skipped: list[str]  # exercises too short (their reference has < min_tokens tokens)
    pairs: list[Match]
    reference: list[Match]
    common: dict[str, set[int]]  # exercise -> k-gram hashes treated as common code
    settings: Settings
    # What the reference comparison counts beyond, once set by
    # autograder.reports.reference_baseline.
    baseline: object = None

    def flagged(self) -> tuple[list[Match], list[Match]]:
        """(pairs, reference matches) at or above the threshold, most similar first. A
        pair must also share ``min_shared`` fingerprints: two lines someone wrote in an
        otherwise empty cell may be "all shared" without being evidence of anything."""
        s = self.settings
        flag = lambda m: m.score >= s.threshold and m.shared >= s.min_shared
        return [m for m in self.pairs if flag(m)], [m for m in self.reference if flag(m)]


def _match(a: str, b: str, shared: dict[str, int], sizes_a: dict, sizes_b: dict) -> Match:
    exercises = {
        ex: (shared.get(ex, 0), min(sizes_a[ex], sizes_b[ex]))
        for ex in sizes_a
        if ex in sizes_b and sizes_a[ex] and sizes_b[ex]
    }
    total = sum(size for _, size in exercises.values())
    score = sum(n for n, _ in exercises.values()) / total if total else 0.0
    return Match(a, b, round(score, 4), exercises)


def compare(
    students: dict[str, dict[str, Region]],
    reference: dict[str, Region],
    settings: Settings = Settings(),
) -> Result:
    """Compare every pair of ``students`` (``{owner: {exercise: Region}}``) and each
    with the ``reference`` regions, on the exercises long enough to judge."""
    compared = sorted(ex for ex, reg in reference.items() if len(reg.tokens) >= settings.min_tokens)
    skipped = sorted(set(reference) - set(compared))
    cutoff = max(settings.common_min, settings.common_share * len(students))
    prints: dict[str, dict[str, set[int]]] = defaultdict(dict)  # owner -> exercise -> hashes
    common: dict[str, set[int]] = {}
    for ex in compared:
        seen_by: dict[int, int] = defaultdict(int)  # k-gram hash -> submissions that wrote it
        for owner, regions in students.items():
            reg = regions.get(ex)
            if reg is None or len(reg.tokens) < settings.k:
                continue
            for h in set(kgram_hashes(reg.tokens, settings.k)):
                seen_by[h] += 1
            prints[owner][ex] = set(fingerprints(reg, settings))
        common[ex] = {h for h, n in seen_by.items() if n > cutoff}
    # What a submission has of its own: its fingerprints that are not common code.
    sizes = {o: {ex: len(f - common[ex]) for ex, f in exs.items()} for o, exs in prints.items()}

    # Pairs: an inverted index, so only pairs with a shared fingerprint are visited.
    shared: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for ex in compared:
        holders: dict[int, list[str]] = defaultdict(list)
        for owner in sorted(prints):
            for h in prints[owner].get(ex, ()):
                if h not in common[ex]:
                    holders[h].append(owner)
        for owners in holders.values():
            for a, b in itertools.combinations(owners, 2):
                shared[(a, b)][ex] += 1
    pairs = [_match(a, b, counts, sizes[a], sizes[b]) for (a, b), counts in shared.items()]

    # The reference, against everyone.
    ref_prints = {
        ex: set(fingerprints(reference[ex], settings)) - common[ex] for ex in compared
    }
    ref_sizes = {ex: len(ref_prints[ex]) for ex in compared}
    ref_matches = []
    for owner in sorted(prints):
        counts = {ex: len(prints[owner][ex] & ref_prints[ex]) for ex in prints[owner]}
        ref_matches.append(_match(owner, REFERENCE, counts, sizes[owner], ref_sizes))
    order = lambda m: (-m.score, m.a, m.b)
    return Result(
        compared, skipped, sorted(pairs, key=order), sorted(ref_matches, key=order), common,
        settings,
    )


def shared_lines(a: Region, b: Region, common: set[int], k: int) -> tuple[set[int], set[int]]:
    """The source lines of ``a`` and of ``b`` covered by k-grams both contain (common
    code left out): what the side-by-side view highlights."""
    ha, hb = kgram_hashes(a.tokens, k), kgram_hashes(b.tokens, k)
    both = (set(ha) & set(hb)) - common

    def covered(reg: Region, hashes: list[int]) -> set[int]:
        return {
            reg.token_lines[j]
            for i, h in enumerate(hashes)
            if h in both
            for j in range(i, i + k)
        }

    return covered(a, ha), covered(b, hb)


def code_solution_cells(nb: dict) -> dict[str, str]:
    """``{grade_id: source}`` of a notebook's code solution cells. A handed-in notebook
    is untrusted JSON: anything not shaped like a cell is passed over."""
    cells = {}
    for cell in nb.get("cells") if isinstance(nb.get("cells"), list) else []:
        meta = cell.get("metadata") if isinstance(cell, dict) else None
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not meta.get("solution"):
            continue
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else src
        if isinstance(src, str):
            cells[str(meta.get("grade_id"))] = src
    return cells


def read_notebook(path: Path) -> dict | None:
    """A notebook file as JSON, or None when it cannot be read as a JSON object."""
    try:
        nb = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return nb if isinstance(nb, dict) else None
