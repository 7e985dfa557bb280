"""toolkit.data and toolkit.train: corpus, batches, schedule, clipping, checkpoints."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open

from toolkit.data import (
    STDLIB_CORPUS_FILES,
    ByteTokenizer,
    CharTokenizer,
    get_batch,
    load_corpus,
    split_train_val,
    stdlib_corpus_text,
)
from toolkit.models import GPT, GPTConfig
from toolkit.train import (
    TrainConfig,
    configure_optimizer,
    grad_norm,
    load_checkpoint,
    lr_schedule,
    main,
    save_checkpoint,
    train,
    train_step,
)


def tiny_model(recipe="modern", vocab=256, seed=0, **kw):
    torch.manual_seed(seed)
    build = GPTConfig.modern if recipe == "modern" else GPTConfig.classic
    return GPT(build(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, **kw))


TEXT = "def add(a, b):\n    return a + b\n\n" * 40


# ---------------------------------------------------------------- corpus


def test_stdlib_corpus_is_fixed_and_documented():
    assert list(STDLIB_CORPUS_FILES) == sorted(STDLIB_CORPUS_FILES)
    text = stdlib_corpus_text()
    assert text == stdlib_corpus_text()  # deterministic
    assert len(text) > 100_000
    headers = [line for line in text.splitlines() if line.startswith("# ==== ")]
    assert headers == [f"# ==== {name} ====" for name in STDLIB_CORPUS_FILES]


def test_default_corpus_split_is_the_last_tenth():
    corpus = load_corpus()
    n = len(corpus.train) + len(corpus.val)
    assert n == len(corpus.text.encode("utf-8"))
    assert len(corpus.val) == n - int(n * 0.9)
    assert corpus.tokenizer.decode(corpus.val[:50]) in corpus.text[-(len(corpus.val) + 50) :]
    assert corpus.vocab_size == 256 and corpus.source.startswith("stdlib:")


def test_tokenizers_round_trip():
    text = "héllo ✓ wörld\n\t"
    byte = ByteTokenizer()
    ids = byte.encode(text)
    assert max(ids) < 256 and len(ids) == len(text.encode("utf-8"))
    assert byte.decode(ids) == text and byte.decode(torch.tensor(ids)) == text
    char = CharTokenizer(text)
    assert char.vocab_size == len(set(text))
    assert char.decode(char.encode(text)) == text
    with pytest.raises(ValueError, match="vocabulary"):
        char.encode("z")
    with pytest.raises(ValueError, match="ids"):
        byte.decode([300])


def test_load_corpus_from_any_file(tmp_path):
    path = tmp_path / "poem.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_corpus(path, tokenizer="char")
    assert corpus.tokenizer.decode(torch.cat([corpus.train, corpus.val])) == TEXT
    with pytest.raises(ValueError, match="path"):
        load_corpus(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="tokenizer"):
        load_corpus(path, tokenizer="bpe")
    with pytest.raises(ValueError, match="val_fraction"):
        split_train_val(torch.arange(10), 0.0)


def test_get_batch_targets_are_shifted_inputs():
    data = torch.arange(1000)
    x, y = get_batch(data, 8, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y, x + 1)
    x2, _ = get_batch(data, 8, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)  # reproducible
    with pytest.raises(ValueError, match="block_size"):
        get_batch(data[:10], 2, 10)


# ---------------------------------------------------------------- schedule


def test_lr_schedule_values():
    kw = dict(warmup=10, max_steps=110, max_lr=1e-3, min_lr=1e-4)
    assert lr_schedule(0, **kw) == pytest.approx(1e-4)  # (0 + 1) / 10 of max
    assert lr_schedule(9, **kw) == pytest.approx(1e-3)
    assert lr_schedule(10, **kw) == pytest.approx(1e-3)  # end of warm-up: max_lr
    assert lr_schedule(60, **kw) == pytest.approx(0.5 * (1e-3 + 1e-4))  # half-way: the mean
    assert lr_schedule(110, **kw) == pytest.approx(1e-4)  # end: min_lr
    assert lr_schedule(500, **kw) == pytest.approx(1e-4)
    warm = [lr_schedule(s, **kw) for s in range(11)]
    decay = [lr_schedule(s, **kw) for s in range(10, 111)]
    assert warm == sorted(warm) and decay == sorted(decay, reverse=True)
    # cosine: lr(warmup + f * span) = min + (max - min) (1 + cos(pi f)) / 2
    assert lr_schedule(35, **kw) == pytest.approx(1e-4 + 9e-4 * (1 + math.cos(math.pi / 4)) / 2)
    with pytest.raises(ValueError, match="warmup"):
        lr_schedule(0, warmup=20, max_steps=10, max_lr=1.0, min_lr=0.0)


# ---------------------------------------------------------------- optimisation


def test_weight_decay_only_on_matrices():
    model = tiny_model("classic")
    opt = configure_optimizer(model, 1e-3, 0.1)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))  # tied weight once
    assert any(p is model.wte.weight for p in decay["params"])


def test_the_update_is_fused_and_equals_adamw_s_loop():
    """One fused kernel per tensor on a CPU (PyTorch's default there is a Python loop),
    and the same parameters as the loop after a few steps."""
    fused_model, loop_model = tiny_model("modern"), tiny_model("modern")
    loop_model.load_state_dict(fused_model.state_dict())
    fused = configure_optimizer(fused_model, 1e-2, 0.1)
    assert fused.defaults["fused"] is True
    by_name = dict(loop_model.named_parameters())
    groups = [{"params": [by_name[n] for n in names], "weight_decay": g["weight_decay"]}
              for g, names in zip(fused.param_groups, _group_names(fused_model, fused))]
    loop = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), foreach=False, fused=False)
    assert not loop.param_groups[0]["fused"]
    x, y = get_batch(torch.tensor(ByteTokenizer().encode(TEXT)), 4, 32,
                     torch.Generator().manual_seed(0))
    for _ in range(3):
        train_step(fused_model, fused, x, y)
        train_step(loop_model, loop, x, y)
    for (name, a), b in zip(fused_model.named_parameters(), loop_model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def _group_names(model, optimizer) -> list[list[str]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]


def test_gradient_clipping_bounds_the_norm():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = get_batch(torch.tensor(ByteTokenizer().encode(TEXT)), 4, 32,
                     torch.Generator().manual_seed(0))
    _, raw = train_step(model, opt, x, y, grad_clip=None)
    assert grad_norm(model) == pytest.approx(raw, rel=1e-5)
    clip = raw / 10
    _, before = train_step(model, opt, x, y, grad_clip=clip)
    assert before == pytest.approx(raw, rel=1e-5) and before > clip
    assert grad_norm(model) <= clip * (1 + 1e-4)  # the step used clipped gradients
    assert grad_norm(model) == pytest.approx(clip, rel=1e-3)


def test_train_loop_learns_evaluates_and_calls_back():
    data = torch.tensor(ByteTokenizer().encode(TEXT))
    train_data, val_data = split_train_val(data)
    model = tiny_model()
    calls = []
    cfg = TrainConfig(max_steps=20, batch_size=4, block_size=32, max_lr=1e-2, eval_every=8,
                      eval_batches=2, progress=False)
    history = train(model, train_data, val_data, cfg, callback=lambda s, h: calls.append(s))
    assert calls == list(range(20))
    assert history.val_step == [7, 15, 19]  # every 8 steps and after the last
    assert len(history.train_loss) == len(history.lr) == len(history.grad_norm) == 20
    assert history.val_loss[-1] < 0.6 * math.log(256)
    assert history.tokens_seen == 20 * 4 * 32 and history.tokens_per_s > 0
    assert history.lr[1] == pytest.approx(cfg.max_lr) and history.lr[-1] > cfg.min_lr
    with pytest.raises(ValueError, match="cfg"):
        train(model, train_data, val_data, {"max_steps": 3})
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(max_steps=5, warmup_steps=6)


# ---------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("recipe, tie", [("classic", True), ("modern", True), ("modern", False)])
def test_checkpoint_round_trip(tmp_path, recipe, tie):
    model = tiny_model(recipe, tie_weights=tie).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(model, model.config, path)
    loaded = load_checkpoint(path, model_class=type(model))  # the same class: bit for bit
    assert loaded.config == model.config and not loaded.training
    idx = torch.randint(256, (2, 20))
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0], atol=0, rtol=0)
    assert (loaded.lm_head.weight is loaded.wte.weight) == tie  # re-tied on load
    with safe_open(str(path), framework="pt") as f:
        assert ("lm_head.weight" in f.keys()) == (not tie)  # stored once when tied
        assert json.loads(f.metadata()["gpt_config"])["recipe"] == recipe


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(ValueError, match="path"):
        load_checkpoint(tmp_path / "nothing.safetensors")
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="gpt_config"):
        load_checkpoint(tmp_path / "other.safetensors")


def test_cli_trains_and_saves(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "cli.safetensors"
    main(["--recipe", "classic", "--steps", "3", "--corpus", str(corpus), "--out", str(out),
          "--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--block-size", "16",
          "--batch-size", "2", "--sample", "5", "--no-progress"])
    printed = capsys.readouterr().out
    assert "val_loss=" in printed and "saved" in printed
    model = load_checkpoint(out)
    assert model.config.recipe == "classic" and model.config.d_model == 32
