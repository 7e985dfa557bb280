"""``autograder leaderboard 07-capstone``: checkpoints ranked on a held-out text in this
process; ``--reproduce`` retrains the top ones in the sandbox from the run file each
student handed in, and flags a planted checkpoint that its run file does not produce."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from autograder.cli import main
from autograder.reports import leaderboard
from autograder.workspace.course import AssignmentSpec, Course, CourseError

NAME = "07-capstone"
ASSIGNMENTS = Path(__file__).resolve().parents[2] / "assignments"
TINY = dict(vocab_size=256, d_model=32, n_layers=1, n_heads=2, max_seq_len=128)
RUN = dict(steps=30, batch_size=8, block_size=64, max_lr=1e-2, seed=3, init_seed=1)


def train(notebook: dict, run: dict, config) -> dict:
    """What the leaderboard's retraining computes, here with the GPT and train_step of
    ``notebook`` (the reference solution's): as a student trains an honest checkpoint."""
    from autograder.authoring.prepare_checkpoint import assignment_cells, run_cells

    torch.set_num_threads(1)  # the made submissions' runs do the same (prepare_submission)
    namespace = run_cells(assignment_cells(notebook), "capstone_for_test")
    namespace["inputs"] = {"run": run, "config": json.dumps(config.to_dict())}
    exec(leaderboard.RETRAIN, namespace)  # noqa: S102 - the project's own code
    return namespace["result"]


def save(folder: Path, config, weights: dict, run: dict | None) -> None:
    from toolkit.models import GPT
    from toolkit.train import save_checkpoint

    model = GPT(config)
    model.load_state_dict(weights, strict=False)
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, config, folder / "capstone.safetensors")
    if run is not None:
        (folder / "capstone-run.json").write_text(json.dumps(run))


@pytest.fixture(scope="module")
def capstone_class(tmp_path_factory):
    """Four students of 07-capstone, each with the reference notebook: ``honest`` (its
    checkpoint is what its run file trains), ``planted`` (run file of 30 steps, checkpoint
    of 200: better than its settings give), ``no-run`` (a checkpoint without a run file)
    and ``wrong-size`` (a checkpoint of another vocabulary)."""
    from toolkit.models import GPTConfig

    course = Course(tmp_path_factory.mktemp("leaderboard") / "workspace")
    course.init()
    course.release(NAME, exchange=False)
    notebook = course.path("source", NAME, "capstone.ipynb")
    config = GPTConfig.modern(**TINY)
    reference = json.loads(notebook.read_text())
    honest = train(reference, RUN, config)
    folders = {}
    for student in ("honest", "planted", "no-run", "wrong-size"):
        folders[student] = course.path("submitted", student, NAME)
        folders[student].mkdir(parents=True)
        shutil.copy(notebook, folders[student] / "capstone.ipynb")
    save(folders["honest"], config, honest, {**RUN, "pseudonym": "<b>Ada</b>"})
    save(folders["planted"], config, train(reference, {**RUN, "steps": 200}, config),
         {**RUN, "pseudonym": "speedy"})
    save(folders["no-run"], config, honest, None)
    wide = GPTConfig.modern(**{**TINY, "vocab_size": 300})
    save(folders["wrong-size"], wide, {}, RUN)
    return course


def _leaderboard(course, *extra):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["leaderboard", NAME, "--course", str(course.root), "--format", "json",
                     "--ungraded", *extra])
    assert code == 0
    return json.loads(out.getvalue())


def test_only_assignments_that_opt_in_have_a_leaderboard():
    assert leaderboard.LeaderboardSettings.of(AssignmentSpec.load(NAME, ASSIGNMENTS))
    with pytest.raises(CourseError, match=r"no leaderboard: add a \[leaderboard\]"):
        leaderboard.LeaderboardSettings.of(AssignmentSpec.load("01-attention", ASSIGNMENTS))


def test_the_held_out_text_is_none_the_students_train_on():
    from toolkit.data import load_corpus

    spec = AssignmentSpec.load(NAME, ASSIGNMENTS)
    settings = leaderboard.LeaderboardSettings.of(spec)
    held_out = bytes(leaderboard.held_out_tokens(spec, settings).tolist())
    corpus = load_corpus().text.encode()
    x, _ = leaderboard.evaluation_windows(leaderboard.held_out_tokens(spec, settings), 8, 128)
    assert not any(bytes(row.tolist()) in corpus for row in x)
    assert len(held_out) > 50_000


def test_checkpoints_are_ranked_on_the_held_out_text(capstone_class):
    data = _leaderboard(capstone_class)
    ranked = [e for e in data["entries"] if e["loss"] is not None]
    unranked = {e["name"]: e["unranked"] for e in data["entries"] if e["loss"] is None}
    # The planted checkpoint (200 steps) beats the honest one (30), which beats no training.
    assert [e["name"] for e in ranked] == ["speedy", "bAdab", "entry 3"]
    assert ranked[0]["loss"] < ranked[1]["loss"] - 0.1
    assert ranked[1]["loss"] == ranked[2]["loss"]  # honest and no-run share weights
    assert ranked[1]["loss"] < 5.0  # trained: below a uniform guess, ln 256 = 5.55
    assert "vocab_size 300" in unranked["entry 4"]
    assert "student" not in data["entries"][0]  # pseudonyms only, unless --names
    named = _leaderboard(capstone_class, "--names")
    assert [e["name"] for e in named["entries"]][:2] == ["planted", "honest"]


def test_without_grading_nothing_is_ranked_unless_asked(capstone_class, capsys):
    code = main(["leaderboard", NAME, "--course", str(capstone_class.root)])
    assert code == 2 and "grade 07-capstone" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduction_flags_the_planted_checkpoint(capstone_class):
    """The top three are retrained in the sandbox with each notebook's own GPT and
    train_step: the honest checkpoint is reproduced within the tolerance, the planted one
    (trained longer than its run file says) and the one without a run file are flagged."""
    data = _leaderboard(capstone_class, "--reproduce", "3")
    by_name = {e["name"]: e for e in data["entries"]}
    honest, planted, no_run = by_name["bAdab"], by_name["speedy"], by_name["entry 3"]
    assert not honest["flagged"], honest
    assert abs(honest["retrained_loss"] - honest["loss"]) < 1e-3
    assert planted["flagged"] and planted["retrained_loss"] > planted["loss"] + 0.1, planted
    assert "misses it by" in planted["reproduction"]
    assert no_run["flagged"] and "capstone-run.json" in no_run["reproduction"]
    page = (capstone_class.root / "reports" / f"{NAME}-leaderboard.html").read_text()
    assert "data:image/png;base64," in page and "<b>Ada" not in page
    assert "class='flag'" in page


def test_a_run_file_is_untrusted_input(tmp_path):
    path = tmp_path / "run.json"
    for text, says in [("[1]", "not a JSON object"), ('{"steps": 1e12}', "outside"),
                       ('{"steps": "many"}', "not a number"), ("{", "not JSON")]:
        path.write_text(text)
        run, problem = leaderboard.read_run(path)
        assert run is None and says in problem, (text, problem)
    path.write_text('{"seed": 7, "pseudonym": "<script>x</script>"}')
    run, problem = leaderboard.read_run(path)
    assert problem is None and run["seed"] == 7 and run["steps"] == 600
    assert leaderboard.pseudonym(run) == "scriptxscript"
    assert torch.is_tensor(leaderboard.evaluation_windows(torch.arange(300), 2, 10)[0])


def test_by_default_only_graded_submissions_are_ranked(capstone_class):
    """A student's results file (written by ``autograder grade``) marks a graded one."""
    results = capstone_class.results_dir(NAME)
    results.mkdir(parents=True, exist_ok=True)
    (results / "honest.json").write_text(json.dumps({"student": "honest"}))
    try:
        entries, _, _ = leaderboard.rank(capstone_class, NAME)
        assert [(e.student, e.graded) for e in entries] == [("honest", True)]
    finally:
        (results / "honest.json").unlink()
