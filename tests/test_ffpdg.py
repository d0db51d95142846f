"""FFPDG family (ffpdg.md §12): RON-Gauss noise scales and projection, FairMaxEnt fairness, LRD, reweighing and DIR
against AIF360, DSP / DEO by hand, the ledger and the claimed guarantee, bad inputs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from privfair_cli import metrics, registry, schema
from privfair_cli.algorithms import preprocess, ron_gauss
from privfair_cli.config import load_card
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy.ledger import Budget, PrivacyLedger
from tests.conftest import require_data


def biased_table(n: int, rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """s (0/1, 30% ones), a 4-level attribute, a binary attribute and a label that depends on s."""
    s = (rng.random(n) < 0.3).astype(int)
    a = rng.integers(0, 4, n)
    b = (rng.random(n) < 0.5).astype(int)
    y = (rng.random(n) < np.where(s == 1, 0.6, 0.2) + 0.05 * a).astype(int)
    return np.column_stack([s, a, b, y]), [2, 4, 2, 2]


# ---------------------------------------------------------------------------------------------- RON-Gauss
def test_projection_is_orthonormal_and_covariance_psd():
    rng = np.random.default_rng(0)
    W = ron_gauss.projection(12, 7, rng)
    assert W.shape == (12, 7)
    np.testing.assert_allclose(W.T @ W, np.eye(7), atol=1e-12)
    A = rng.laplace(size=(6, 6))
    S = ron_gauss.psd(A)
    np.testing.assert_allclose(S, S.T)
    assert np.linalg.eigvalsh(S).min() >= -1e-12


@pytest.mark.parametrize("cov,expect", [("seed", lambda p: 2 * math.sqrt(p)), ("safe", lambda p: 2.0 * p)])
def test_ron_gauss_ledger_scales_and_split(cov, expect):
    X, domain = biased_table(2000, np.random.default_rng(1))
    ledger = PrivacyLedger(Budget(1.0, 0.0))
    out = ron_gauss.generate(X, domain, 3, 1500, 1.0, ron_gauss.Settings(cov_sensitivity=cov),
                             np.random.default_rng(2), ledger)
    assert out.shape == (1500, 4)
    assert all((out[:, j] >= 0).all() and (out[:, j] < c).all() for j, c in enumerate(domain))
    entries = ledger.to_dict()["ledger"]
    d = 1 + 4 + 1  # s and b as 0/1 columns, a one-hot
    p = d - 1
    assert [e["eps"] for e in entries] == pytest.approx([0.3, 0.7])
    assert entries[0]["sensitivity"] == pytest.approx(2 * math.sqrt(d))
    assert entries[1]["sensitivity"] == pytest.approx(expect(p))
    assert ledger.spent()[0] == pytest.approx(1.0)


def test_ron_gauss_noisy_counts_spend_the_whole_budget():
    X, domain = biased_table(1000, np.random.default_rng(3))
    ledger = PrivacyLedger(Budget(2.0, 0.0))
    settings = ron_gauss.Settings(class_counts="noisy", binary_decoding="onehot", count_share=0.1)
    ron_gauss.generate(X, domain, 3, 1000, 2.0, settings, np.random.default_rng(4), ledger)
    eps = [e["eps"] for e in ledger.to_dict()["ledger"]]
    assert eps == pytest.approx([0.2, 0.3 * 1.8, 0.7 * 1.8])
    assert ledger.to_dict()["ledger"][0]["sensitivity"] == 2.0


def test_ron_gauss_mean_noise_scale_matches_the_formula():
    """The released class sums carry Laplace noise of scale 2 sqrt(d) / eps_mu: its empirical std over many
    releases is sqrt(2) times that scale."""
    X, domain = biased_table(400, np.random.default_rng(5))
    Z, _ = ron_gauss.encode(X, domain, [0, 1, 2], "quantile", 0.0, np.random.default_rng(0))
    d = Z.shape[1]
    exact = ron_gauss.unit_rows(Z)[X[:, 3] == 0].sum(axis=0)
    from privfair_cli.privacy.mechanisms import laplace

    rng = np.random.default_rng(6)
    draws = np.stack([laplace(exact, 2 * math.sqrt(d), 0.3, rng, PrivacyLedger(Budget(1.0, 0.0)))
                      for _ in range(4000)]) - exact
    assert draws.std() == pytest.approx(math.sqrt(2) * 2 * math.sqrt(d) / 0.3, rel=0.05)


def test_ron_gauss_refuses_p_at_least_d():
    X, domain = biased_table(200, np.random.default_rng(7))
    with pytest.raises(ConfigError, match=r"1 <= p < d: algo.p=6 .* d=6"):
        ron_gauss.generate(X, domain, 3, 200, 1.0, ron_gauss.Settings(p=6), np.random.default_rng(0),
                           PrivacyLedger(Budget(1.0, 0.0)))


# ---------------------------------------------------------------------------------------------- FairMaxEnt
def test_fairmaxent_raises_statistical_and_representation_rate():
    X, domain = biased_table(20000, np.random.default_rng(8))
    assert preprocess.statistical_rate(X[:, 3], X[:, 0]) < 0.6
    assert preprocess.representation_rate(X[:, 0]) < 0.5
    fit = preprocess.fairmaxent_fit(X, domain, 0, 3)
    assert fit.converged
    # the fitted distribution itself
    grid, p = fit.grid, fit.p
    py1 = [p[(grid[:, 0] == z) & (grid[:, 3] == 1)].sum() / p[grid[:, 0] == z].sum() for z in (0, 1)]
    pz = [p[grid[:, 0] == z].sum() for z in (0, 1)]
    assert min(py1) / max(py1) >= 0.95 and min(pz) / max(pz) >= 0.95
    out = preprocess.fairmaxent(X, domain, 0, 3, np.random.default_rng(9)).X
    assert out.shape == X.shape
    assert preprocess.statistical_rate(out[:, 3], out[:, 0]) >= 0.95
    assert preprocess.representation_rate(out[:, 0]) >= 0.95


def test_fairmaxent_refuses_a_domain_too_large():
    X, domain = biased_table(100, np.random.default_rng(10))
    with pytest.raises(DataError, match=r"32 cells over 4 attributes exceed algo.max_domain=10"):
        preprocess.fairmaxent_fit(X, domain, 0, 3, max_domain=10)


# ---------------------------------------------------------------------------------------------- metrics
def test_lrd_of_a_resample_is_one_and_of_disjoint_tables_zero():
    rng = np.random.default_rng(11)
    real = preprocess.features(rng.integers(0, 5, (3000, 3)), [5, 5, 5])
    twin = real[rng.integers(0, len(real), len(real))]
    assert metrics.lrd(real, twin, rng) > 0.95
    other = preprocess.features(rng.integers(0, 5, (3000, 3)), [5, 5, 5])
    other[:, :5] = np.eye(5)[0]  # the first attribute is always code 0 in the second table
    real[:, :5] = np.eye(5)[4]  # ... and always code 4 in the first
    assert metrics.lrd(real, other, rng) < 0.05


def test_dsp_deo_by_hand():
    # group 0: 4 rows, y = 1 1 0 0, yhat = 1 0 1 0 -> positive rate 2/4, TPR 1/2
    # group 1: 5 rows, y = 1 1 1 0 0, yhat = 1 1 1 1 0 -> positive rate 4/5, TPR 3/3
    y = np.array([1, 1, 0, 0, 1, 1, 1, 0, 0])
    yhat = np.array([1, 0, 1, 0, 1, 1, 1, 1, 0])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1])
    gaps = metrics.parity_gaps(y, yhat, s)
    assert gaps["dsp"] == pytest.approx(abs(2 / 4 - 4 / 5))
    assert gaps["deo"] == pytest.approx(abs(1 / 2 - 1))


# ---------------------------------------------------------------------------------------------- AIF360
def _aif_dataset(X: np.ndarray, names: list[str]):
    from aif360.datasets import BinaryLabelDataset

    df = pd.DataFrame(X.astype(float), columns=names)
    return BinaryLabelDataset(df=df, label_names=["y"], protected_attribute_names=["s"], favorable_label=1.0,
                              unfavorable_label=0.0)


def test_reweighing_equals_aif360():
    pytest.importorskip("aif360")
    from aif360.algorithms.preprocessing import Reweighing

    X, _ = biased_table(3000, np.random.default_rng(12))
    ds = _aif_dataset(X, ["s", "a", "b", "y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = Reweighing(unprivileged_groups=[{"s": 0}], privileged_groups=[{"s": 1}]).fit_transform(ds)
    ours = preprocess.reweighing(X, 0, 3)
    np.testing.assert_allclose(ours.weights, theirs.instance_weights, rtol=1e-12)
    np.testing.assert_array_equal(ours.X, X)


def _dir_by_hand(values: list[int], groups: list[int]) -> list[int]:
    """Feldman et al.'s repair at level 1 written row by row (AIF360's documented algorithm): rank each row in
    its group (ties in row order), u = (rank + 1) / n_g, the lower median over the groups of their
    ceil(u n_h)-th smallest value."""
    by_group = {g: sorted(v for v, h in zip(values, groups, strict=True) if h == g) for g in set(groups)}
    order = {g: sorted((i for i, h in enumerate(groups) if h == g), key=lambda i: values[i]) for g in by_group}
    out = list(values)
    for rows in order.values():
        for rank, i in enumerate(rows):
            u = (rank + 1) / len(rows)
            q = sorted(by_group[h][max(math.ceil(u * len(by_group[h]) - 1e-9) - 1, 0)] for h in sorted(by_group))
            out[i] = q[(len(q) - 1) // 2]
    return out


def test_dir_matches_the_documented_algorithm_and_equalises_groups():
    """DIR at repair level 1 equals the row-by-row algorithm, leaves s and y alone, and gives both groups the same
    distribution of every repaired attribute (up to one row per code from the rank rounding)."""
    rng = np.random.default_rng(13)
    n = 600
    s = (rng.random(n) < 0.4).astype(int)
    a = np.clip(rng.binomial(8, np.where(s == 1, 0.6, 0.3)), 0, 8)
    b = (rng.random(n) < np.where(s == 1, 0.7, 0.4)).astype(int)
    y = (rng.random(n) < 0.3).astype(int)
    X = np.column_stack([s, a, b, y])
    out = preprocess.dir_repair(X, [2, 9, 2, 2], 0, 3).X
    np.testing.assert_array_equal(out[:, [0, 3]], X[:, [0, 3]])
    for j in (1, 2):
        assert out[:, j].tolist() == _dir_by_hand(X[:, j].tolist(), s.tolist())
        shares = [np.bincount(out[s == g, j], minlength=9) / (s == g).sum() for g in (0, 1)]
        assert np.abs(shares[0] - shares[1]).max() < 2 / min((s == 0).sum(), (s == 1).sum())
    assert abs(X[s == 0, 1].mean() - X[s == 1, 1].mean()) > 1


# ---------------------------------------------------------------------------------------------- plugin
def _run(card: str, tmp_path, *overrides):
    from privfair_cli import compose, runner

    require_data(load_card(card)["subdir"])
    cfg = compose.compose(["algo=ffpdg", f"data={card}", "algo.classifiers=[lr,gnb]", *overrides])
    return runner.run(cfg, tmp_path / "run", log=lambda *_: None)


def test_ffpdg_run_is_heuristic_and_spends_eps(tmp_path):
    record = _run("compas_ffpdg", tmp_path)
    assert record["guarantee"] == "heuristic"
    assert any("not end-to-end DP" in w for w in record["warnings"])
    assert record["privacy"]["eps_spent"] == pytest.approx(1.0)
    assert [e["eps"] for e in record["privacy"]["ledger"]] == pytest.approx([0.3, 0.7])
    m = record["metrics"]
    for key in ("aucroc", "dsp", "deo", "lrd", "runtime"):
        assert math.isfinite(m[key])
    assert 0.5 <= m["aucroc"] <= 1 and 0 <= m["lrd"] <= 1
    assert m["statistical_rate"] > 0.8  # FairMaxEnt's fairness survives the generator roughly
    assert (tmp_path / "run" / "artifacts" / "synthetic.csv.gz").is_file()


def test_fair_last_rigorous_variant_claims_eps_dp(tmp_path):
    record = _run("compas_ffpdg", tmp_path, "algo.order=fair_last", "algo.class_counts=noisy",
                  "algo.binary_decoding=onehot")
    assert record["guarantee"] == "eps-DP"
    assert record["privacy"]["eps_spent"] == pytest.approx(1.0)
    assert not any("not end-to-end DP" in w for w in record["warnings"])


@pytest.mark.parametrize("over,claim", [
    ({"generator": "none"}, "none"),
    ({"preprocessor": "none", "class_counts": "noisy", "binary_decoding": "onehot"}, "eps-DP"),
    ({"preprocessor": "none", "class_counts": "noisy", "binary_decoding": "onehot", "cov_sensitivity": "seed"},
     "heuristic"),
    ({"order": "fair_last"}, "heuristic"),
])
def test_claims(over, claim):
    assert registry.make("ffpdg", **over).claims() == claim


def test_original_data_reweighing_passes_weights(tmp_path):
    record = _run("compas_ffpdg", tmp_path, "algo.preprocessor=reweighing", "algo.generator=none")
    assert record["guarantee"] == "none" and record["privacy"]["eps_spent"] == 0
    frame = pd.read_csv(tmp_path / "run" / "artifacts" / "synthetic.csv.gz")
    assert "weight" in frame and frame["weight"].nunique() == 4


def test_fairmaxent_needs_an_enumerable_card():
    cls = registry.get("ffpdg")
    assert "enumerable" in schema.card_views(load_card("adult_ffpdg"))
    assert "enumerable" not in schema.declared_views(load_card("adult"))  # derived for the run (datasets/views.py)
    assert "enumerable" in cls.requirements(registry.defaults("ffpdg"))
    assert "enumerable" in cls.requirements(registry.defaults("ron_gauss"))
    assert "enumerable" not in cls.requirements(registry.defaults("ffpdg") | {"preprocessor": "dir",
                                                                              "generator": "none"})
