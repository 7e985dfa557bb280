"""``autograder leaderboard NAME``: the class's checkpoints ranked on text none of them saw.

A capstone that asks for a trained checkpoint (07-capstone's ``capstone.safetensors``)
grades it on the validation split the notebook shows every student. The leaderboard
ranks the same checkpoints on a **held-out** text instead: by default source files of
the standard library that are not in the course's corpus (students train and validate on
their own list), or a file kept with the hidden checks. The loss is computed here, in the
trusted process, with the course's own ``GPT`` (:mod:`toolkit.models`) and the weights of
the ``.safetensors`` file (no code of the student's runs), on ``windows`` windows of
``block`` bytes: about what the hidden check spends on one checkpoint.

Each checkpoint is first checked as the hidden check does: it loads into the course's
``GPT`` (its config is read and its size counted on PyTorch's ``meta`` device before any
weight is allocated), has at most ``max_parameters`` parameters, is causal (logits before
position 64 do not move when later bytes change), and its loss is finite and not below
``implausible_loss``. One that fails is listed with the reason, unranked.

``--reproduce N`` retrains the top ``N`` from what each handed in next to the checkpoint,
the run file (``capstone-run.json``: ``steps``, ``batch_size``, ``block_size``, ``max_lr``,
``seed``, ``init_seed``, as the notebook's ``train_model`` takes them; the notebook writes it
beside the checkpoint). The retraining runs the student's own ``GPT`` and ``train_step``
in the sandbox, as grading does (the notebook executed in a sandboxed kernel, then the
training loop of the notebook's ``train_model`` sent as one request, at most
``reproduce_seconds``); only the trained weights come back, and this process evaluates
them on the held-out text. A checkpoint whose retrained loss misses its own by more
than ``tolerance`` (nats per byte) is flagged: its configuration does not produce it.
Hardware, thread counts and float rounding move a loss by far less than the default 0.05.

Opt-in per assignment, in its ``assignment.toml``::

    [leaderboard]
    checkpoint = "capstone.safetensors"   # what each student hands in
    run = "capstone-run.json"             # the configuration and seed it came from
    tolerance = 0.05                      # nats per byte, for --reproduce
    # held_out = "checks/held-out.txt"    # a private text instead of the default files

Names are hidden behind pseudonyms the students choose (``"pseudonym"`` in their run
file; ``entry N`` when they chose none) unless ``--names``. Nothing here writes grades.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import math
import re
import sys
import time
from pathlib import Path

from ..workspace.course import AssignmentSpec, Course, CourseError

#: Standard-library modules, pure Python in CPython 3.10 and later, outside the course's
#: corpus (:data:`toolkit.data.STDLIB_CORPUS_FILES`): the default held-out text.
DEFAULT_HELD_OUT = ("copy.py", "dataclasses.py", "fnmatch.py", "glob.py", "numbers.py",
                    "queue.py", "sched.py", "contextlib.py")
#: What a run file may set, and what the notebook's training uses when it does not.
RUN_DEFAULTS = {"steps": 600, "batch_size": 16, "block_size": 128, "max_lr": 3e-3,
                "seed": 0, "init_seed": 0}
#: Bounds a run file must keep (beyond them the retraining could not fit any budget).
RUN_BOUNDS = {"steps": (1, 1_000_000), "batch_size": (1, 4096), "block_size": (2, 4096),
              "max_lr": (0.0, 10.0), "seed": (0, 2**63 - 1), "init_seed": (0, 2**63 - 1)}
_PSEUDONYM = re.compile(r"[^\w .,'+-]", re.UNICODE)


@dataclasses.dataclass(frozen=True)
class LeaderboardSettings:
    """An assignment's ``[leaderboard]`` table (defaults suit 07-capstone)."""

    checkpoint: str = "capstone.safetensors"
    run: str = "capstone-run.json"
    held_out: tuple[str, ...] | str = DEFAULT_HELD_OUT
    windows: int = 64
    block: int = 128
    tolerance: float = 0.05
    max_parameters: int = 8_000_000
    implausible_loss: float = 0.7
    #: Seconds of retraining per entry (default: the assignment's submission_timeout).
    reproduce_seconds: float | None = None

    @classmethod
    def of(cls, spec: AssignmentSpec) -> LeaderboardSettings:
        """The settings of ``spec``, or CourseError when it has no leaderboard."""
        table = spec.leaderboard
        where = f"{spec.path / 'assignment.toml'}"
        if table is None:
            raise CourseError(f"{spec.name} has no leaderboard: add a [leaderboard] table to "
                              f"{where} (see autograder/leaderboard.py)")
        if not isinstance(table, dict):
            raise CourseError(f"{where}: leaderboard must be a table, [leaderboard]")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise CourseError(f"{where}: unknown key(s) {unknown} in [leaderboard]; known: "
                              f"{sorted(known)}")
        values = dict(table)
        if isinstance(values.get("held_out"), list):
            values["held_out"] = tuple(values["held_out"])
        settings = cls(**values)
        if not (settings.tolerance > 0 and settings.windows > 0 and settings.block > 1):
            raise CourseError(f"{where}: [leaderboard] needs tolerance > 0, windows > 0 and "
                              "block > 1")
        return settings


# -- the held-out text -------------------------------------------------------------------
def held_out_tokens(spec: AssignmentSpec, settings: LeaderboardSettings):
    """The held-out text as byte tokens (a 1-D long tensor)."""
    import torch

    from toolkit.data import STDLIB_CORPUS_FILES, stdlib_corpus_text

    if isinstance(settings.held_out, str):
        path = (spec.path / settings.held_out).resolve()
        if not path.is_file():
            raise CourseError(f"{spec.path / 'assignment.toml'}: held_out file {path} not found")
        text = path.read_text(encoding="utf-8", errors="replace")
    else:
        overlap = sorted(set(settings.held_out) & set(STDLIB_CORPUS_FILES))
        if overlap:
            raise CourseError(f"{spec.path / 'assignment.toml'}: held_out {overlap} are in the "
                              "training corpus; a held-out text must be one nobody trained on")
        try:
            text = stdlib_corpus_text(tuple(settings.held_out))
        except ValueError as exc:
            raise CourseError(f"held-out text: {exc}") from None
    data = torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
    if len(data) < settings.block + 2:
        raise CourseError(f"the held-out text has {len(data)} bytes; it needs more than "
                          f"block = {settings.block}")
    return data


def evaluation_windows(data, n: int, block: int):
    """``n`` evenly spaced windows of ``block`` tokens of ``data`` and their next tokens."""
    import torch

    starts = torch.linspace(0, len(data) - block - 1, n).round().long()
    offsets = torch.arange(block)
    return data[starts[:, None] + offsets], data[starts[:, None] + offsets + 1]


# -- one checkpoint, in this process -------------------------------------------------------
class Unranked(Exception):
    """Why a checkpoint is not on the board (said to the instructor as is)."""


def load_weights(path: Path, settings: LeaderboardSettings):
    """``(config, state)`` of a checkpoint file, checked before anything big is built."""
    from safetensors import safe_open

    from toolkit.models import GPTConfig

    if not path.is_file():
        raise Unranked(f"no {path.name} handed in")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            config = GPTConfig.from_dict(json.loads(meta["gpt_config"]))
            stored = sum(math.prod(f.get_slice(n).get_shape()) for n in f.keys())
            if stored > settings.max_parameters:
                raise Unranked(f"{stored:,} parameters stored; the limit is "
                               f"{settings.max_parameters:,}")
            state = {n: f.get_tensor(n) for n in f.keys()}
    except Unranked:
        raise
    except Exception as exc:  # not safetensors, no config, a config that does not parse
        raise Unranked(f"{path.name} is not a checkpoint of the course's GPT "
                       f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return config, state


def build_model(config, state, settings: LeaderboardSettings):
    """The course's ``GPT`` with ``state`` loaded (sized on the meta device first)."""
    import torch

    from toolkit.models import GPT, count_parameters

    if config.vocab_size != 256 or config.max_seq_len < settings.block:
        raise Unranked(f"vocab_size {config.vocab_size} and max_seq_len {config.max_seq_len}; "
                       f"the board needs 256 and at least {settings.block}")
    try:
        with torch.device("meta"):
            size = count_parameters(GPT(config))
    except Exception as exc:
        raise Unranked(f"its config does not build the course's GPT: {exc}"[:300]) from None
    if size > settings.max_parameters:
        raise Unranked(f"its config makes {size:,} parameters; the limit is "
                       f"{settings.max_parameters:,}")
    model = GPT(config).float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise Unranked(f"the weights do not fit the course's GPT: missing {sorted(missing)[:3]}, "
                       f"unexpected {sorted(unexpected)[:3]}")
    return model.eval()


def held_out_loss(model, x, y, settings: LeaderboardSettings) -> float:
    """Mean next-byte cross-entropy (nats/byte) of ``model`` on the windows ``x, y``, after
    the soundness checks of the hidden check (causal, finite, not implausibly low)."""
    import torch
    import torch.nn.functional as F

    probe_from = min(64, settings.block // 2)
    probe = x[:4].clone()
    g = torch.Generator().manual_seed(0)
    probe[:, probe_from:] = torch.randint(0, 256, (probe.size(0), x.size(1) - probe_from),
                                          generator=g)
    with torch.no_grad():
        logits = model(x)[0].float()
        moved = model(probe)[0].float()
    if not (torch.isfinite(logits).all() and torch.isfinite(moved).all()):
        raise Unranked("its logits on the held-out text hold NaN or inf")
    if not torch.allclose(moved[:, :probe_from], logits[:4, :probe_from], atol=1e-3, rtol=1e-3):
        raise Unranked("it is not causal: later bytes change its earlier logits")
    loss = F.cross_entropy(logits.double().flatten(0, 1), y.flatten()).item()
    if loss < settings.implausible_loss:
        raise Unranked(f"held-out loss {loss:.3f} is implausibly low (below "
                       f"{settings.implausible_loss}): it sees the future or the text")
    return loss


# -- the class ----------------------------------------------------------------------------
@dataclasses.dataclass
class Entry:
    student: str
    name: str  # what the board shows: the pseudonym, or the student id with --names
    loss: float | None = None
    parameters: int | None = None
    unranked: str | None = None
    graded: bool = False
    run: dict | None = None
    run_problem: str | None = None
    retrained_loss: float | None = None
    reproduction: str | None = None  # what reproducing found ("ok", or the problem)
    flagged: bool = False


def read_run(path: Path) -> tuple[dict | None, str | None]:
    """``(run settings, problem)`` from a student's run file (untrusted JSON)."""
    if not path.is_file():
        return None, f"no {path.name} handed in (the configuration and seed to retrain from)"
    try:
        data = json.loads(path.read_bytes()[:65536])
    except (OSError, ValueError, UnicodeDecodeError):
        return None, f"{path.name} is not JSON"
    if not isinstance(data, dict):
        return None, f"{path.name} is not a JSON object"
    run = dict(RUN_DEFAULTS)
    for key, (low, high) in RUN_BOUNDS.items():
        if key not in data:
            continue
        value = data[key]
        kind = float if key == "max_lr" else int
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and not float(value).is_integer()):
            return None, f"{path.name}: {key} is {value!r}, not a number"
        if not low <= value <= high:
            return None, f"{path.name}: {key} = {value} is outside [{low}, {high}]"
        run[key] = kind(value)
    if isinstance(data.get("pseudonym"), str):
        run["pseudonym"] = data["pseudonym"]
    return run, None


def pseudonym(run: dict | None) -> str:
    """The name a student chose, cleaned for a public page (at most 32 characters)."""
    chosen = (run or {}).get("pseudonym") or ""
    return _PSEUDONYM.sub("", chosen).strip()[:32]


def rank(course: Course, name: str, *, names: bool = False, ungraded: bool = False,
         log=print) -> tuple[list[Entry], LeaderboardSettings, dict]:
    """Every handed-in checkpoint of ``name`` evaluated on the held-out text; ranked
    entries first (lowest loss first), then the unranked with their reasons. Only graded
    submissions unless ``ungraded``. Returns ``(entries, settings, about)``."""
    from ..grading import gradebook as writer

    spec = course.require_released(name)
    settings = LeaderboardSettings.of(spec)
    data = held_out_tokens(spec, settings)
    x, y = evaluation_windows(data, settings.windows, settings.block)
    entries = []
    started = time.monotonic()
    for student in course.students_with_submissions(name):
        graded = writer.read_result_file(course, name, student) is not None
        if not (graded or ungraded):
            continue
        folder = course.path("submitted", student, name)
        run, problem = read_run(folder / settings.run)
        entry = Entry(student, student, graded=graded, run=run, run_problem=problem)
        try:
            config, state = load_weights(folder / settings.checkpoint, settings)
            model = build_model(config, state, settings)
            entry.parameters = sum(p.numel() for p in model.parameters())
            entry.loss = held_out_loss(model, x, y, settings)
        except Unranked as exc:
            entry.unranked = str(exc)
        entries.append(entry)
    ranked = sorted((e for e in entries if e.loss is not None), key=lambda e: (e.loss, e.student))
    unranked = sorted((e for e in entries if e.loss is None), key=lambda e: e.student)
    taken: set[str] = set()
    for i, entry in enumerate(ranked + unranked, 1):
        chosen = pseudonym(entry.run)
        if names:
            entry.name = entry.student
        else:
            entry.name = chosen if chosen and chosen.casefold() not in taken else f"entry {i}"
            taken.add(entry.name.casefold())
    about = {"held_out_bytes": len(data), "windows": settings.windows, "block": settings.block,
             "held_out": settings.held_out if isinstance(settings.held_out, str)
             else list(settings.held_out), "seconds": round(time.monotonic() - started, 2)}
    return ranked + unranked, settings, about


# -- reproduction, in the sandbox ----------------------------------------------------------
# Runs in the student's kernel after their notebook: the notebook's train_model loop with
# their GPT and train_step; only the trained weights come back.
RETRAIN = """
import json as _json

import torch as _torch
from toolkit.data import get_batch as _get_batch, load_corpus as _load_corpus
from toolkit.models import GPTConfig as _GPTConfig
from toolkit.train import configure_optimizer as _configure_optimizer
from toolkit.train import lr_schedule as _lr_schedule

_run = inputs["run"]
_corpus = _load_corpus()
_torch.manual_seed(_run["init_seed"])
_model = GPT(_GPTConfig.from_dict(_json.loads(inputs["config"])))
_torch.manual_seed(_run["seed"])
_generator = _torch.Generator().manual_seed(_run["seed"])
_model.train()
_optimizer = _configure_optimizer(_model, _run["max_lr"], weight_decay=0.1)
_steps = _run["steps"]
for _step in range(_steps):
    _lr = _lr_schedule(_step, _steps // 10, _steps, _run["max_lr"], _run["max_lr"] / 10)
    for _group in _optimizer.param_groups:
        _group["lr"] = _lr
    _x, _y = _get_batch(_corpus.train, _run["batch_size"], _run["block_size"], _generator)
    train_step(_model, _optimizer, _x, _y, grad_clip=1.0)
result = {_n: _t.detach().float().contiguous() for _n, _t in _model.state_dict().items()}
"""


def retrain_in_sandbox(course: Course, spec: AssignmentSpec, student: str, config_json: str,
                       run: dict, seconds: float) -> dict:
    """The weights the student's notebook trains from ``run`` (in a sandboxed kernel)."""
    from ..grading.sanitize import NotGradable, grade_cell_ids, sanitized_job
    from ..protocol import kernel_side
    from ..protocol.trusted import Submission
    from ..sandbox.kernel import SandboxedKernel

    notebook_id = spec.notebooks[0]
    with course.gradebook() as gb:
        points, _ = grade_cell_ids(gb, notebook_id, spec.name)
        try:
            job = sanitized_job(course, spec, student, notebook_id,
                                course.path("submitted", student, spec.name), gb, points)
        except NotGradable as exc:
            raise Unranked(f"its notebook cannot run: {exc}"[:300]) from None
    limits = dataclasses.replace(
        spec.limits, submission_timeout=spec.limits.submission_timeout + seconds,
        cpu_seconds=int(spec.limits.cpu_seconds + seconds * 2))
    test_ids = set(job.test_cell_ids)
    with SandboxedKernel(limits, hidden=job.hidden, submission_dir=job.submission_dir,
                         notebook_name=f"{notebook_id}.ipynb") as kernel:
        try:
            kernel.start(job.notebook)
            kernel.run_notebook(job.notebook, skip_grade_ids=test_ids)
            if not kernel.alive():
                raise Unranked("its kernel died while the notebook ran")
            kernel.install_bridge(kernel_side.kernel_source())
            submission = Submission(kernel, job.notebook, kernel.exchange_dir,
                                    forbid=job.forbid, call_timeout=seconds)
            weights = submission.run(RETRAIN, config=config_json, run=run, timeout=seconds)
        except Unranked:
            raise
        except Exception as exc:  # a submission that cannot retrain is a finding, not a crash
            raise Unranked(f"retraining failed: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(weights, dict):
        raise Unranked("retraining returned no weights")
    return weights


def reproduce(course: Course, name: str, entries: list[Entry], settings: LeaderboardSettings,
              top: int, log=print, retrain=retrain_in_sandbox) -> None:
    """Retrain the ``top`` ranked entries from their run files and flag those whose
    retrained held-out loss misses the checkpoint's by more than the tolerance."""
    spec = course.spec(name)
    seconds = settings.reproduce_seconds or spec.limits.submission_timeout
    data = held_out_tokens(spec, settings)
    x, y = evaluation_windows(data, settings.windows, settings.block)
    for entry in [e for e in entries if e.loss is not None][:top]:
        log(f"reproducing {entry.name} ...")
        if entry.run is None:
            entry.reproduction, entry.flagged = entry.run_problem, True
            continue
        folder = course.path("submitted", entry.student, name)
        config, _ = load_weights(folder / settings.checkpoint, settings)
        try:
            weights = retrain(course, spec, entry.student, json.dumps(config.to_dict()),
                              entry.run, seconds)
            model = build_model(config, weights, settings)
            entry.retrained_loss = held_out_loss(model, x, y, settings)
        except Unranked as exc:
            entry.reproduction, entry.flagged = f"not reproduced: {exc}", True
            continue
        gap = entry.retrained_loss - entry.loss
        entry.flagged = abs(gap) > settings.tolerance
        entry.reproduction = (
            f"retrained loss {entry.retrained_loss:.3f} vs {entry.loss:.3f} handed in: "
            + (f"misses it by {abs(gap):.3f} > tolerance {settings.tolerance}"
               if entry.flagged else f"within {settings.tolerance}"))


# -- output --------------------------------------------------------------------------------
def as_text(entries: list[Entry], name: str, settings: LeaderboardSettings, about: dict) -> str:
    lines = [f"Leaderboard of {name}: held-out loss (nats/byte) on {about['windows']} windows "
             f"of {about['block']} bytes of text no student trained on "
             f"({about['held_out_bytes']:,} bytes)", ""]
    for i, e in enumerate([e for e in entries if e.loss is not None], 1):
        lines.append(f"  {i:3d}. {e.name:32s} {e.loss:.3f}  ({e.parameters:,} parameters)"
                     + ("" if e.graded else "  [not graded yet]"))
        if e.reproduction:
            lines.append(f"       {'FLAGGED: ' if e.flagged else ''}{e.reproduction}")
    unranked = [e for e in entries if e.loss is None]
    if unranked:
        lines += ["", "Not ranked:"] + [f"  {e.name}: {e.unranked}" for e in unranked]
    flagged = [e for e in entries if e.flagged]
    if any(e.reproduction for e in entries):
        lines += ["", f"Reproduction (tolerance {settings.tolerance} nats/byte): "
                  f"{len(flagged)} flagged" + (": " + ", ".join(e.name for e in flagged)
                                               if flagged else "")]
    return "\n".join(lines)


def as_json(entries: list[Entry], name: str, settings: LeaderboardSettings, about: dict,
            names: bool) -> str:
    rows = []
    for e in entries:
        row = {"name": e.name, "loss": e.loss, "parameters": e.parameters,
               "unranked": e.unranked, "graded": e.graded,
               "retrained_loss": e.retrained_loss, "reproduction": e.reproduction,
               "flagged": e.flagged}
        if names:
            row["student"] = e.student
        rows.append(row)
    return json.dumps({"assignment": name, "tolerance": settings.tolerance, **about,
                       "entries": rows}, indent=2)


def plot_png(entries: list[Entry], name: str, settings: LeaderboardSettings) -> bytes:
    """A bar per ranked entry (held-out loss), retrained losses as dots, flags in red."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    ranked = [e for e in entries if e.loss is not None]
    fig = Figure(figsize=(max(4.0, 0.5 * len(ranked) + 2), 3.2), dpi=100)
    ax = fig.add_subplot()
    positions = range(len(ranked))
    ax.bar(positions, [e.loss for e in ranked],
           color=["#d9534f" if e.flagged else "#4a7ebb" for e in ranked])
    retrained = [(i, e.retrained_loss) for i, e in enumerate(ranked) if e.retrained_loss]
    if retrained:
        ax.scatter(*zip(*retrained, strict=True), color="black", zorder=3, label="retrained")
        ax.legend(loc="upper left")
    ax.set_xticks(list(positions), [e.name for e in ranked], rotation=45, ha="right",
                  fontsize=8)
    ax.set_ylabel("held-out loss (nats/byte)")
    ax.set_title(f"{name}: lower is better")
    if ranked:
        low = min(min(e.loss for e in ranked), min((r for _, r in retrained), default=9e9))
        ax.set_ylim(max(0.0, low - 0.3), None)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def write_html(path: Path, entries: list[Entry], name: str, settings: LeaderboardSettings,
               about: dict) -> None:
    """One page, the plot inside it; every name and message escaped (they are untrusted)."""
    png = base64.b64encode(plot_png(entries, name, settings)).decode()
    rows = []
    for i, e in enumerate([e for e in entries if e.loss is not None], 1):
        repro = html.escape(e.reproduction or "")
        rows.append(f"<tr class='{'flag' if e.flagged else ''}'><td>{i}</td>"
                    f"<td>{html.escape(e.name)}</td><td>{e.loss:.3f}</td>"
                    f"<td>{e.parameters:,}</td><td>{repro}</td></tr>")
    unranked = "".join(f"<li>{html.escape(e.name)}: {html.escape(e.unranked or '')}</li>"
                       for e in entries if e.loss is None)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>Leaderboard: {html.escape(name)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5em}td,th{padding:.2em .6em;"
        "text-align:left}tr.flag{background:#fbe3e2}</style>"
        f"<h1>Leaderboard of {html.escape(name)}</h1>"
        f"<p>Held-out loss in nats per byte (lower is better) on {about['windows']} windows of "
        f"{about['block']} bytes of text that no one trained on, computed by the grader with "
        "the course's model. Retrained entries were trained again from the configuration and "
        f"seed handed in; a red row misses its own checkpoint by more than "
        f"{settings.tolerance}.</p>"
        f"<img alt='held-out loss per entry' src='data:image/png;base64,{png}'>"
        "<table><tr><th>#</th><th>name</th><th>loss</th><th>parameters</th>"
        f"<th>reproduction</th></tr>{''.join(rows)}</table>"
        + (f"<h2>Not ranked</h2><ul>{unranked}</ul>" if unranked else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page + "\n")


def main(course: Course, args) -> int:
    """``autograder leaderboard NAME [--reproduce N] [--names] [--ungraded] [--html FILE]``."""
    log = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.format == "json" else print
    entries, settings, about = rank(course, args.name, names=args.names,
                                    ungraded=args.ungraded, log=log)
    if not entries:
        raise CourseError(f"no {'' if args.ungraded else 'graded '}submission of {args.name} "
                          "to rank" + ("" if args.ungraded else
                                       f": run `{course.command(f'grade {args.name}')}` "
                                       "first, or pass --ungraded"))
    if args.reproduce:
        reproduce(course, args.name, entries, settings, args.reproduce, log=log)
    page = Path(args.html or course.root / "reports" / f"{args.name}-leaderboard.html")
    write_html(page, entries, args.name, settings, about)
    if args.format == "json":
        print(as_json(entries, args.name, settings, about, args.names))
    else:
        print(as_text(entries, args.name, settings, about))
        print(f"\nPage with the plot: {page}")
    return 0
