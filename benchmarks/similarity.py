"""Similarity pass over a whole class: ``autograder report NAME --similarity`` on N
submissions of 01-attention (default 300), timed in this process.

The class: N - 11 students whose answers are put together from common ways of writing
each step (four ways to scale, four to score, four to mask, four to normalise the
attention weights, and so on; so most steps a student writes, many others wrote too),
plus the seven hand-written independent students and four planted copies of
``tests/fixtures/similarity``. Reported: seconds to read and normalise the class, to
compare it, to write the HTML page, the total against the one-minute budget, the
comparison's speed-up over comparing every pair directly (the baseline, run here on the
same fingerprints), and what was flagged: the planted copies must be, nothing else.

    python benchmarks/similarity.py [--n 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from autograder.reports import reference_baseline, similarity
from autograder.reports.similarity_report import load, write_html
from autograder.workspace.course import Course

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "similarity"))
import make_class  # noqa: E402
from tables import print_command  # noqa: E402

NAME = "01-attention"

# Each exercise is a sequence of steps; each step has several usual ways of writing it.
STEPS = {
    "attention_weights": [
        ["scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale",
         "if scale is None:\n    scale = q.shape[-1] ** -0.5",
         "d_k = q.size(-1)\nif scale is None:\n    scale = 1 / math.sqrt(d_k)",
         "scale = scale if scale is not None else 1.0 / q.shape[-1] ** 0.5"],
        ["scores = q @ k.transpose(-2, -1) * scale",
         "scores = torch.matmul(q, k.transpose(-1, -2)) * scale",
         "scores = torch.einsum('...id,...jd->...ij', q, k) * scale",
         "scores = (q * scale) @ k.transpose(-2, -1)"],
        ["if mask is not None:\n    if mask.dtype == torch.bool:\n"
         "        scores = scores.masked_fill(~mask, float('-inf'))\n"
         "    elif mask.is_floating_point():\n        scores = scores + mask\n"
         "    else:\n        raise ValueError('mask must be bool or float')",
         "if mask is not None and mask.dtype == torch.bool:\n"
         "    scores = torch.where(mask, scores, torch.tensor(float('-inf')))\n"
         "elif mask is not None and torch.is_floating_point(mask):\n    scores = scores + mask\n"
         "elif mask is not None:\n    raise ValueError(f'bad mask dtype {mask.dtype}')",
         "if mask is not None:\n"
         "    if mask.dtype not in (torch.bool, torch.float32, torch.float64):\n"
         "        raise ValueError('unsupported mask')\n    if mask.dtype == torch.bool:\n"
         "        mask = torch.zeros_like(mask, dtype=scores.dtype).masked_fill(~mask, -math.inf)\n"
         "    scores = scores + mask",
         "if mask is not None:\n    if mask.dtype is torch.bool:\n"
         "        scores = scores.masked_fill(mask.logical_not(), -math.inf)\n"
         "    elif mask.dtype.is_floating_point:\n        scores += mask\n"
         "    else:\n        raise ValueError('mask dtype')"],
        ["visible = scores.amax(dim=-1, keepdim=True) > float('-inf')\n"
         "weights = torch.softmax(scores.masked_fill(~visible, 0.0), dim=-1)\n"
         "return weights.masked_fill(~visible, 0.0)",
         "return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)",
         "peak = scores.max(dim=-1, keepdim=True).values\n"
         "peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak)\n"
         "e = torch.exp(scores - peak)\ntotal = e.sum(dim=-1, keepdim=True)\n"
         "return e / total.clamp_min(1e-30)",
         "lse = torch.logsumexp(scores, dim=-1, keepdim=True)\n"
         "p = torch.exp(scores - lse)\nreturn torch.where(torch.isfinite(lse), p, 0.0)"],
    ],
    "causal_mask": [
        ["n_keys = n_queries + offset if n_keys is None else n_keys",
         "if n_keys is None:\n    n_keys = n_queries + offset",
         "n_keys = n_keys if n_keys is not None else offset + n_queries"],
        ["i = torch.arange(n_queries, device=device).unsqueeze(1)\n"
         "j = torch.arange(n_keys, device=device).unsqueeze(0)\nreturn j <= i + offset",
         "ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)\n"
         "return torch.tril(ones, diagonal=offset)",
         "upper = torch.triu(torch.ones(n_queries, n_keys, device=device), diagonal=offset + 1)\n"
         "return upper == 0",
         "d = torch.arange(n_keys, device=device)[None, :] - "
         "torch.arange(n_queries, device=device)[:, None]\nreturn d <= offset"],
    ],
    "padding_mask": [
        ["max_len = int(lengths.max()) if max_len is None else max_len",
         "if max_len is None:\n    max_len = int(lengths.max().item())",
         "max_len = max_len or int(lengths.amax())"],
        ["pos = torch.arange(max_len, device=lengths.device)\n"
         "return (pos[None, :] < lengths[:, None])[:, None, None, :]",
         "pos = torch.arange(max_len, device=lengths.device).expand(len(lengths), max_len)\n"
         "return (pos < lengths.unsqueeze(1)).view(-1, 1, 1, max_len)",
         "ones = torch.ones(len(lengths), max_len, dtype=torch.long, device=lengths.device)\n"
         "return (ones.cumsum(1) <= lengths[:, None]).unsqueeze(1).unsqueeze(1)",
         "rows = [torch.arange(max_len) < int(n) for n in lengths]\n"
         "return torch.stack(rows).reshape(-1, 1, 1, max_len)"],
    ],
    "split_heads": [
        ["B, T, d_model = x.shape\nif d_model % n_heads != 0:\n"
         "    raise ValueError('d_model must be divisible by n_heads')",
         "d_model = x.size(-1)\nif d_model % n_heads:\n"
         "    raise ValueError('n_heads must divide d_model')",
         "B, T, d_model = x.size()\nd_k, rest = divmod(d_model, n_heads)\nif rest:\n"
         "    raise ValueError('cannot split evenly')"],
        ["return x.view(x.size(0), x.size(1), n_heads, -1).transpose(1, 2)",
         "return x.reshape(x.shape[0], x.shape[1], n_heads, -1).permute(0, 2, 1, 3)",
         "return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)",
         "return torch.stack(x.chunk(n_heads, dim=-1), dim=1)"],
    ],
    "multi_head_attention": [
        ["if d_model % n_heads != 0:\n"
         "    raise ValueError('d_model must be divisible by n_heads')\n"
         "self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads\n"
         "self.q_proj = nn.Linear(d_model, d_model, bias=bias)\n"
         "self.k_proj = nn.Linear(d_model, d_model, bias=bias)\n"
         "self.v_proj = nn.Linear(d_model, d_model, bias=bias)\n"
         "self.out_proj = nn.Linear(d_model, d_model, bias=bias)",
         "if d_model % n_heads:\n    raise ValueError('bad n_heads')\nself.d_model = d_model\n"
         "self.n_heads = n_heads\nself.d_k = d_model // n_heads\n"
         "for name in ('q_proj', 'k_proj', 'v_proj', 'out_proj'):\n"
         "    setattr(self, name, nn.Linear(d_model, d_model, bias=bias))",
         "self.d_model, self.n_heads = d_model, n_heads\n"
         "self.d_k, rest = divmod(d_model, n_heads)\n"
         "if rest:\n    raise ValueError('d_model % n_heads != 0')\n"
         "self.q_proj, self.k_proj, self.v_proj, self.out_proj = "
         "(nn.Linear(d_model, d_model, bias=bias) for _ in range(4))"],
        ["x_kv = x_q if x_kv is None else x_kv\nq = split_heads(self.q_proj(x_q), self.n_heads)\n"
         "k = split_heads(self.k_proj(x_kv), self.n_heads)\n"
         "v = split_heads(self.v_proj(x_kv), self.n_heads)\n"
         "return self.out_proj(merge_heads(scaled_dot_product_attention(q, k, v, mask)))",
         "kv = x_q if x_kv is None else x_kv\nB, T, _ = x_q.shape\n"
         "q = self.q_proj(x_q).view(B, T, self.n_heads, self.d_k).transpose(1, 2)\n"
         "k = self.k_proj(kv).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)\n"
         "v = self.v_proj(kv).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)\n"
         "out = attention_weights(q, k, mask) @ v\n"
         "return self.out_proj(out.transpose(1, 2).reshape(B, T, self.d_model))",
         "if x_kv is None:\n    x_kv = x_q\n"
         "heads = [split_heads(p(x), self.n_heads) for p, x in "
         "((self.q_proj, x_q), (self.k_proj, x_kv), (self.v_proj, x_kv))]\n"
         "return self.out_proj(merge_heads(scaled_dot_product_attention(*heads, mask=mask)))",
         "memory = x_q if x_kv is None else x_kv\n"
         "q, k, v = (split_heads(p, self.n_heads) for p in "
         "(self.q_proj(x_q), self.k_proj(memory), self.v_proj(memory)))\n"
         "w = attention_weights(q, k, mask)\n"
         "return self.out_proj(merge_heads(torch.matmul(w, v)))"],
    ],
}
COMMENTS = ["# my solution", "# see the hint above", "# TODO tidy up", "# works on the examples"]


def generated_student(rng: random.Random) -> dict[str, list[str]]:
    """One student's answers: a usual way of writing each step, some with a comment."""
    answers = {}
    for exercise, steps in STEPS.items():
        parts = [rng.choice(ways) for ways in steps]
        if rng.random() < 0.3:
            parts.insert(rng.randrange(len(parts)), rng.choice(COMMENTS))
        if exercise == "multi_head_attention":  # two stubs: __init__, then forward
            answers[exercise] = parts
        else:
            answers[exercise] = ["\n".join(parts) + "\n"]
    return answers


def hand_in_class(course: Course, n: int, seed: int) -> None:
    rng = random.Random(seed)
    named = make_class.INDEPENDENT + list(make_class.PLANTED)
    for student in named:
        make_class.hand_in(course, NAME, student, make_class.solutions_of(student))
    for i in range(n - len(named)):
        make_class.hand_in(course, NAME, f"student-{i:03d}", generated_student(rng))


def all_pairs(students, reference, settings) -> int:
    """The baseline: every pair's fingerprints intersected directly (no index)."""
    compared = [ex for ex, reg in reference.items() if len(reg.tokens) >= settings.min_tokens]
    prints = {
        owner: {ex: set(similarity.fingerprints(regs[ex], settings)) for ex in compared
                if ex in regs}
        for owner, regs in students.items()
    }
    shared = 0
    for a, b in itertools.combinations(sorted(prints), 2):
        for ex in compared:
            if ex in prints[a] and ex in prints[b]:
                shared += len(prints[a][ex] & prints[b][ex])
    return shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print_command(__file__)
    with tempfile.TemporaryDirectory(prefix="similarity-bench-") as tmp:
        course = Course(Path(tmp) / "workspace")
        course.init()
        course.release(NAME)
        hand_in_class(course, args.n, args.seed)
        settings = similarity.Settings()
        t0 = time.perf_counter()
        students, reference, notes = load(course, NAME)
        t1 = time.perf_counter()
        result = similarity.compare(students, reference, settings)
        result.baseline = reference_baseline.discount(
            result, reference, reference_baseline.load_independent(course, NAME))
        t2 = time.perf_counter()
        write_html(Path(tmp) / "similarity.html", result, NAME, students, reference)
        t3 = time.perf_counter()
        all_pairs(students, reference, settings)
        t4 = time.perf_counter()
    pairs, ref = result.flagged()
    flagged = {frozenset((m.a, m.b)) for m in pairs} | {frozenset((m.a, "reference")) for m in ref}
    planted = {frozenset(item) for item in make_class.PLANTED.items()}
    planted |= {frozenset((a, b)) for a, of_a in make_class.PLANTED.items()  # same source
                for b, of_b in make_class.PLANTED.items() if a < b and of_a == of_b}
    print(f"{len(students)} submissions of {NAME} on {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {platform.machine()}")
    print(f"  read + normalise   {t1 - t0:6.2f} s")
    print(f"  compare            {t2 - t1:6.2f} s   (every pair directly: {t4 - t3:.2f} s, "
          f"{(t4 - t3) / max(t2 - t1, 1e-9):.1f}x slower)")
    print(f"  HTML page          {t3 - t2:6.2f} s")
    print(f"  total              {t3 - t0:6.2f} s   (budget 60 s: {(t3 - t0) / 60:.1%} of it)")
    print(f"  planted copies found: {len(planted & flagged)}/{len(planted)}; "
          f"other pairs flagged: {len(flagged - planted)}; notes: {len(notes)}")
    for m in pairs + ref:
        print(f"    {m.a} ~ {m.b}: {m.score:.0%}")


if __name__ == "__main__":
    main()
