"""toolkit.bert against Hugging Face's BERT modules with the same weights."""

from __future__ import annotations

import pytest
import torch

from toolkit.bert import (
    BertConfig,
    BertEmbeddings,
    ClassificationHead,
    MLMHead,
    NSPHead,
    TinyBert,
    tied_parameter_names,
)
from toolkit.pretrain import load_bert, save_bert

transformers = pytest.importorskip("transformers")
from transformers.models.bert import modeling_bert as hf  # noqa: E402

V, D, T = 30, 16, 12


def _hf_config(**kw):
    return transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=4 * D,
                                   max_position_embeddings=T, hidden_act="gelu", **kw)


def _randomise(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.dim() == 1 else 0.0))


def _ids(seed=0, b=3, t=T):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (b, t), generator=g), torch.randint(0, 2, (b, t), generator=g)


def test_embeddings_match_hugging_face():
    ref = hf.BertEmbeddings(_hf_config()).eval()
    _randomise(ref)
    ours = BertEmbeddings(V, D, T).eval()
    ours.load_state_dict(ref.state_dict())  # same names: word/position/token_type, LayerNorm
    ids, types = _ids()
    torch.testing.assert_close(ours(ids, types), ref(input_ids=ids, token_type_ids=types),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours(ids), ref(input_ids=ids), atol=1e-5, rtol=1e-5)


def test_embeddings_are_learned_tables_and_refuse_long_inputs():
    emb = BertEmbeddings(V, D, T)
    names = {n for n, p in emb.named_parameters()}
    assert "position_embeddings.weight" in names and "token_type_embeddings.weight" in names
    assert emb.position_embeddings.weight.requires_grad  # not a fixed sinusoid buffer
    ids, types = _ids()
    assert not torch.allclose(emb(ids, types), emb(ids, 1 - types))  # segments matter
    with pytest.raises(ValueError, match="max_seq_len"):
        emb(torch.zeros(1, T + 1, dtype=torch.long))


def test_mlm_head_matches_hugging_face_and_is_tied():
    config = _hf_config()
    ref = hf.BertLMPredictionHead(config).eval()
    _randomise(ref, 1)
    embeddings = torch.nn.Embedding(V, D)
    ours = MLMHead(embeddings).eval()
    assert ours.decoder.weight is embeddings.weight  # tied: one Parameter
    with torch.no_grad():
        ours.dense.load_state_dict(ref.transform.dense.state_dict())
        ours.LayerNorm.load_state_dict(ref.transform.LayerNorm.state_dict())
        embeddings.weight.copy_(ref.decoder.weight)
        ours.decoder.bias.copy_(ref.decoder.bias)
    h = torch.randn(2, 5, D)
    torch.testing.assert_close(ours(h), ref(h), atol=1e-5, rtol=1e-5)


def test_nsp_head_matches_hugging_face_pooler():
    config = _hf_config()
    pooler, nsp = hf.BertPooler(config).eval(), hf.BertOnlyNSPHead(config).eval()
    _randomise(pooler, 2)
    _randomise(nsp, 3)
    ours = NSPHead(D)
    ours.dense.load_state_dict(pooler.dense.state_dict())
    ours.seq_relationship.load_state_dict(nsp.seq_relationship.state_dict())
    h = torch.randn(2, 5, D)
    torch.testing.assert_close(ours(h), nsp(pooler(h)), atol=1e-5, rtol=1e-5)
    head = ClassificationHead(D, 3).eval()
    assert head(h).shape == (2, 3)
    h2 = h.clone()
    h2[:, 1:] += 1.0  # only [CLS] is read
    torch.testing.assert_close(head(h2), head(h))


def test_tiny_bert_padding_tying_and_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = TinyBert(BertConfig(vocab_size=V, d_model=D, n_layers=2, n_heads=2, max_seq_len=T))
    assert tied_parameter_names(model) == ["mlm_head.decoder.weight"]
    ids, types = _ids(1, b=2)
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    ids2 = ids.clone()
    ids2[0, 8:] = 0  # different padding tokens
    with torch.no_grad():
        a = model(ids, types, mask)
        b = model(ids2, types, mask)
    torch.testing.assert_close(a[0, :8], b[0, :8])
    path = tmp_path / "bert.safetensors"
    save_bert(model, path)
    loaded = load_bert(path)
    assert loaded.mlm_head.decoder.weight is loaded.embeddings.word_embeddings.weight
    with torch.no_grad():
        torch.testing.assert_close(loaded.mlm_head(loaded(ids, types, mask)),
                                   model.mlm_head(a))
    with pytest.raises(ValueError, match="vocab_size"):
        BertConfig(vocab_size=0)
    with pytest.raises(ValueError, match="no checkpoint"):
        load_bert(tmp_path / "missing.safetensors")
