"""The IMDB part of early stopping (early_stopping.md §1.5, §6, ambiguity 15): FastText per-example gradients in
closed form against autograd's, the TwitterAAE posterior against a hand computation and a plain port of the
reference loop, the token bags, and a tiny end-to-end DP-SGD run on a hand-made text table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from privfair_cli import evaluate
from privfair_cli.algorithms.dpsgd_trainer import (
    FastText,
    MeanBag,
    PerExampleGradients,
    build_model,
    per_example_loss,
    predict_scores,
    predictions_by_epoch,
)
from privfair_cli.datasets import Table, imdb
from privfair_cli.datasets.twitteraae import DialectModel
from privfair_cli.errors import ConfigError, DataError
from tests.conftest import fit


# ----------------------------------------------------------------------------------------- FastText gradients
def random_bags(n, vocab, width, rng):
    """Bags as the imdb card encodes them: distinct ids per row, count / length weights, padding id 1 weight 0."""
    ids = np.full((n, width), imdb.PAD, np.float32)
    w = np.zeros((n, width), np.float32)
    for i in range(n):  # test data only
        k = rng.integers(1, width + 1)
        ids[i, :k] = rng.choice(np.arange(2, vocab), size=k, replace=False)
        counts = rng.integers(1, 4, size=k)
        w[i, :k] = counts / counts.sum()
    return torch.as_tensor(np.concatenate([ids, w], 1))


def tiny_fasttext(vocab=30, width=7, seed=0):
    torch.manual_seed(seed)
    return build_model("fasttext", 2 * width, 2, {"vocab_size": vocab, "bag_width": width})


def autograd_per_example(model, x, y):
    """Every example's full gradient (all parameters, flattened) from its own backward pass (the reference)."""
    out = []
    for i in range(len(x)):
        model.zero_grad()
        loss = per_example_loss("fasttext", model(x[i:i + 1]), y[i:i + 1]).sum()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        out.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(out)


def test_fasttext_per_example_norms_and_clipped_sum_equal_autograd():
    rng = np.random.default_rng(0)
    model = tiny_fasttext()
    with torch.no_grad():
        model[1].weight.mul_(5)  # away from zero: every term of the norm matters
    x = random_bags(12, 30, 7, rng)
    y = torch.as_tensor(rng.integers(0, 2, 12))
    engine = PerExampleGradients(model)
    losses, nu = engine.compute(x, lambda out: per_example_loss("fasttext", out, y))
    ref = autograd_per_example(model, x, y)
    np.testing.assert_allclose(nu.numpy(), ref.norm(dim=1).numpy(), rtol=1e-5, atol=1e-7)
    c = torch.as_tensor(rng.uniform(0, 1, 12), dtype=torch.float32)
    summed = torch.cat([g.reshape(-1) for g in engine.clipped_sum(c)])
    np.testing.assert_allclose(summed.numpy(), (c[:, None] * ref).sum(0).numpy(), rtol=1e-5, atol=1e-6)
    # the spec's §9 closed form: ||g||^2 = (p - y)^2 (||h||^2 + 1 + ||v||^2 sum_t w_t^2)
    with torch.no_grad():
        h = model[0](x)
        p = torch.sigmoid(model(x)[:, 0])
        w = x[:, 7:]
        closed = (p - y) ** 2 * ((h * h).sum(1) + 1 + model[1].weight.pow(2).sum() * (w * w).sum(1))
    np.testing.assert_allclose(nu.numpy() ** 2, closed.numpy(), rtol=1e-5)


def test_mean_bag_is_the_mean_of_the_token_embeddings():
    model = tiny_fasttext(vocab=10, width=4)
    E = model[0].weight.detach()
    tokens = [2, 5, 5, 9]                               # "a b b c": distinct ids 2, 5, 9 with counts 1, 2, 1
    x = torch.tensor([[2, 5, 9, 1, 0.25, 0.5, 0.25, 0]])
    np.testing.assert_allclose(model[0](x)[0].detach().numpy(), E[tokens].mean(0).numpy(), rtol=1e-5, atol=1e-7)
    assert torch.all(E[[imdb.UNK, imdb.PAD]] == 0)      # the tutorial zeroes <unk> and <pad>


def test_compact_history_predicts_as_the_full_model():
    rng = np.random.default_rng(1)
    model = tiny_fasttext()
    x = random_bags(40, 30, 7, rng)
    summary = model.compact()
    assert isinstance(model, FastText) and summary.shape == (30 + 1,)
    full = (predict_scores(model, x)[:, 0] >= 0).long().numpy()
    np.testing.assert_array_equal(predictions_by_epoch(model, "fasttext", summary[None], x)[0], full)


def test_fasttext_refuses_in_loss_weight_decay_and_a_table_without_bags():
    with pytest.raises(ConfigError, match="l2_mode=in_loss is not supported by the fasttext model"):
        PerExampleGradients(tiny_fasttext(), l2_in_loss=0.01)
    with pytest.raises(ConfigError, match="reads bags of tokens"):
        build_model("fasttext", 10, 2, {})
    assert isinstance(tiny_fasttext()[0], MeanBag)


# ----------------------------------------------------------------------------------------- TwitterAAE posterior
VOCAB = ["lol", "the", "finna", "OOV"]
COUNTS = np.array([[30.0, 10, 5, 20], [40, 60, 10, 200], [50, 5, 1, 3], [4, 4, 4, 4]])


def reference_predict(model_vocab, counts, tokens, alpha=1.0, passes=5):
    """A plain port of the repository's predict.py (token by token), for the comparison."""
    phi = (counts + 1) / counts.sum(0)
    index = {w: i for i, w in enumerate(model_vocab)}
    ids = [index[t.lower()] for t in tokens if t.lower() in index]
    if len(ids) < 1 or len(ids) / len(tokens) < 0.2:
        return None
    lik = [phi[i] / phi[i].sum() for i in ids]
    q = [v.copy() for v in lik]
    Q = sum(q)
    for _ in range(passes - 1):
        for i in range(len(ids)):
            Q = Q - q[i]
            q[i] = lik[i] * (Q + alpha)
            q[i] = q[i] / q[i].sum()
            Q = Q + q[i]
    return Q / Q.sum()


def posterior(docs):
    model = DialectModel(VOCAB, COUNTS)
    doc = np.repeat(np.arange(len(docs)), [len(d) for d in docs])
    return model.posterior(doc, np.array([t for d in docs for t in d], dtype=object), len(docs))


def test_one_token_posterior_is_its_normalised_word_probability_by_hand():
    """One token: Q - q = 0, so q = l (0 + 1) normalised = l: phi['lol'] = (31, 11, 6, 21) / column totals."""
    totals = COUNTS.sum(0)                               # 124, 79, 20, 227
    phi = np.array([31, 11, 6, 21]) / totals
    np.testing.assert_allclose(posterior([["LOL"]])[0], phi / phi.sum(), rtol=1e-12)


def test_posterior_matches_the_reference_loop_and_the_coverage_rule():
    docs = [["lol", "the", "finna", "finna"], ["the", "the", "x"], ["finna", "a", "b", "c", "d"],
            ["the", "a", "b", "c", "d", "e"], ["nothing", "here"], ["OOV"], ["the", "lol", "the", "lol", "lol"]]
    got = posterior(docs)
    for row, d in zip(got, docs, strict=True):
        ref = reference_predict(VOCAB, COUNTS, d)
        if ref is None:
            assert np.isnan(row).all()
        else:
            np.testing.assert_allclose(row, ref, rtol=1e-12)
    assert not np.isnan(got[2]).any()                    # exactly 20% in the vocabulary passes
    assert np.isnan(got[3]).all() and np.isnan(got[4]).all() and np.isnan(got[5]).all()  # below 20%; `OOV` never


def test_dialect_model_refuses_a_table_that_does_not_fit_the_vocabulary():
    with pytest.raises(DataError, match="one row of 4 topic counts per token"):
        DialectModel(VOCAB, COUNTS[:3])
    with pytest.raises(DataError, match="negative or non-finite"):
        DialectModel(VOCAB, -COUNTS)


# ----------------------------------------------------------------------------------------- token bags, sampling
def test_tokens_bigrams_and_a_vocabulary_of_the_training_texts():
    texts = pd.Series(["Good film.<br />Good!", "bad film", "unseen words"])
    tokens = imdb.tokenise(texts)
    assert list(tokens[tokens.index == 0]) == ["good", "film", ".", "good", "!"]
    ids, w, V = imdb.bags(tokens, 3, train_rows=np.array([0, 1]), vocab_size=100)
    np.testing.assert_allclose(w.sum(1), 1, rtol=1e-6)   # weights: count / length over unigrams + bigrams
    assert V == 2 + 5 + 5                                # 5 unigrams + 5 bigrams of the two training texts
    assert set(ids[2][w[2] > 0]) == {imdb.UNK}           # text 3 (test) is all unknown: one <unk> slot
    assert w[0][ids[0] == ids[0][np.argmax(w[0])]].max() == pytest.approx(2 / 9)  # "good" twice of 5 + 4 grams
    small = imdb.bags(tokens, 3, np.array([0, 1]), vocab_size=2)
    assert small[2] == 4 and small[0].max() == 3


def test_group_sample_is_label_balanced_within_each_group_and_capped():
    rng = np.random.default_rng(0)
    y = np.tile([0, 1], 50)
    s = np.where(np.arange(100) < 12, 0, 1)
    s[20] = -1                                           # no dialect: dropped
    is_test = np.arange(100) >= 60
    s[60:64] = 0
    keep = imdb.balanced_sample(y, s, is_test, 20, rng)
    assert 20 not in keep
    for split in (False, True):
        for g in (0, 1):
            rows = keep[(is_test[keep] == split) & (s[keep] == g)]
            assert (y[rows] == 0).sum() == (y[rows] == 1).sum() <= 10
    assert ((s[keep] == 0) & ~is_test[keep]).sum() == 12  # 6 per label in the small group: all of it
    with pytest.raises(DataError, match="no review of one label"):
        imdb.balanced_sample(np.zeros(100, int), s, is_test, 20, rng)
    with pytest.raises(ConfigError, match="data.n_per_group=1"):
        imdb.check_card({"n_per_group": 1})
    with pytest.raises(ConfigError, match="data.dialect_rule='aae'"):
        imdb.check_card({"dialect_rule": "aae"})


# ----------------------------------------------------------------------------------------- end to end
def text_table(n=400, seed=0, vocab=40, width=6):
    """Bags whose label follows token 2 vs 3; the sensitive group is a coin."""
    rng = np.random.default_rng(seed)
    X = random_bags(n, vocab, width, rng).numpy()
    y = rng.integers(0, 2, n)
    X[:, 0] = np.where(y == 1, 2, 3)
    s = rng.integers(0, 2, n)
    meta = {"vocab_size": vocab, "bag_width": width, "vocabulary_from": "train"}
    return Table("texts", X, y, s, [f"c{i}" for i in range(2 * width)], meta=meta)


def test_dpsgd_es_trains_fasttext_and_reports_the_rules_at_the_accountant_eps():
    data = text_table()
    plugin, _ = fit("dpsgd_es", data, eps=100, delta=1e-5, model="fasttext", epochs=6, n_start=3, window=3,
                    lr=0.6, C=1.0, sigma=1.0, l2=0.0, batch_size=32)
    test = text_table(200, seed=5)
    out = evaluate.metrics_for(plugin, data, test, np.random.default_rng(0))
    assert out["accuracy"] > 0.8                         # the label token is learnt through the noise
    assert plugin.claims() == "heuristic"                # the vocabulary is read off the training texts
    assert plugin.log.weights.shape == (6, 40 + 1)       # compact history: V scores + bias per epoch
    for r in plugin.stop_rows:
        assert 3 <= r["stop_epoch"] <= 6
        assert r["eps"] == pytest.approx(plugin.history.eps[r["stop_epoch"] - 1])
