"""The second hostile-input pass (issue 43) where a bad-input row cannot show it: the accountant a DP-SGD run is
charged with follows its batches, a planted cache file runs no code, an unwritable run folder keeps its result,
an understated sensitivity lowers the claim, MST calibrates with the run's accountant."""

from __future__ import annotations

import builtins
import math
import pathlib
import pickle

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, NeighboringRelation, SampledWithoutReplacementDpEvent
from dp_accounting.rdp import RdpAccountant

from privfair_cli import datasets as data_lib
from privfair_cli import registry, runner
from privfair_cli.datasets import store
from privfair_cli.errors import ConfigError
from privfair_cli.main import main
from privfair_cli.privacy import Budget, PrivacyLedger, accountants
from privfair_cli.privacy import dpsgd as accounting
from tests.conftest import card, fit, needs_data, table

ORDERS = accountants.DEFAULT_RDP_ORDERS
DELTA = 1e-5


# ------------------------------------------------------------------------------------------ DP-SGD sampling
def test_shuffled_batches_compose_their_passes_as_gaussians_without_amplification():
    """n = 1000, b = 100: 10 batches a permutation, 25 steps = 3 passes; each pass is one Gaussian release of
    sensitivity 2C (replace-one) at std sigma C: RDP 2 a / sigma^2 per pass, whatever q would have given."""
    sampling = accounting.Sampling("shuffle", 1000, 100)
    sigma = 3.0
    got = accounting.sampled_gaussian_rdp(0.1, sigma, 25, ORDERS, sampling)
    np.testing.assert_allclose(got, 3 * 2 * np.asarray(ORDERS, float) / sigma**2, rtol=1e-12)
    eps = accounting.dpsgd_epsilon(0.1, sigma, 25, DELTA, sampling=sampling)
    assert eps > accounting.dpsgd_epsilon(0.1, sigma, 25, DELTA)  # no amplification: charged more than Poisson


def test_fixed_size_batches_use_the_sampling_without_replacement_bound():
    """Independently: dp-accounting's own accountant on the same events, replace-one, multiplier sigma / 2."""
    n, b, sigma, steps = 2000, 50, 2.0, 120
    ref = RdpAccountant(list(ORDERS), neighboring_relation=NeighboringRelation.REPLACE_ONE)
    ref.compose(SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(sigma / 2)), steps)
    got = accounting.dpsgd_epsilon(b / n, sigma, steps, DELTA, sampling=accounting.Sampling("fixed_uniform", n, b))
    assert got == pytest.approx(accountants.rdp_to_dp(ORDERS, ref._rdp, DELTA)[0], rel=1e-12)
    assert got > accounting.dpsgd_epsilon(b / n, sigma, steps, DELTA)


@needs_data("german_credit")
@pytest.mark.parametrize("sampling", ["shuffle", "fixed_uniform"])
def test_a_run_is_charged_for_the_batches_it_draws(sampling):
    """The ledger of a shuffle / fixed_uniform run holds that scheme's curve, names it, and fits the budget; its
    calibrated sigma is larger than the Poisson run's at the same eps."""
    train, _ = table("german")
    plugin, ledger = fit("dpsgd", train, delta=DELTA, batch_sampling=sampling, epochs=2, reference=False)
    poisson, poisson_ledger = fit("dpsgd", train, delta=DELTA, epochs=2, reference=False)
    entry = ledger.entries[0]
    assert entry.extra["sampling"] == sampling and entry.extra["neighbouring"] == "replace_one"
    s = accounting.Sampling(sampling, len(train), plugin.cfg.batch_size)
    want = accounting.dpsgd_epsilon(s.q, plugin.plan.sigma, plugin.plan.steps, DELTA, sampling=s,
                                    accounting=plugin.cfg.accounting)
    assert ledger.spent()[0] == pytest.approx(want, rel=1e-12) and want <= 1.0 + 1e-9
    assert plugin.plan.sigma > poisson.plan.sigma
    assert "sampling" not in poisson_ledger.entries[0].extra  # Poisson runs' records are as before


def test_a_noise_multiplier_the_accountant_cannot_handle_is_refused():
    with pytest.raises(ConfigError, match="below 1e-06, the smallest the RDP accountant handles"):
        accounting.sampled_gaussian_rdp(0.01, 1e-300, 10, ORDERS)


# ------------------------------------------------------------------------------------------ claims
def test_an_understated_sensitivity_turns_the_claim_heuristic():
    """A plugin's claim is lowered by `understated` only when the value is below the derived bound."""
    plugin = registry.make("privlr")
    ledger = PrivacyLedger(Budget(1.0))
    ledger.spend_pure("laplace", 0.5)
    assert runner.guarantee(plugin, ledger) == "eps-DP"
    plugin.understated("sensitivity", 2.0, 1.0, "a bound")  # above the derived bound: nothing changes
    assert runner.guarantee(plugin, ledger) == "eps-DP" and not plugin.warnings()
    plugin.understated("sensitivity", 1e-12, math.sqrt(2), "Lemma 1")
    assert runner.guarantee(plugin, ledger) == "heuristic"
    assert "below the derived bound 1.41421" in plugin.warnings()[0]


def test_dpne_claims_heuristic_with_either_noise_term():
    for term in ("abs", "linear"):
        assert registry.make("dpne", noise_term=term).claims() == "heuristic"


def test_dpsgd_es_claims_heuristic():
    assert registry.make("dpsgd_es").claims() == "heuristic"


@needs_data("adult")
def test_mst_calibrates_with_the_rdp_accountant_the_run_uses():
    """Under budget.accountant=rdp the zCDP releases are sized to fit the RDP conversion, which they fill."""
    train, _ = table("adult", n=800)
    plugin = registry.make("mst")
    budget = Budget(1.0, 1e-9)
    ledger = PrivacyLedger(budget, "rdp")
    plugin.fit(train, budget, ledger, np.random.default_rng(0))
    ledger.check()
    assert 0.99 < ledger.spent()[0] <= 1.0 + 1e-8
    zcdp = PrivacyLedger(budget, "zcdp")
    registry.make("mst").fit(train, budget, zcdp, np.random.default_rng(0))
    assert 0.99 < zcdp.spent()[0] <= 1.0 + 1e-8


# ------------------------------------------------------------------------------------------ the parse cache
def test_the_cache_format_round_trips_what_a_table_holds_and_refuses_the_rest():
    import io

    import pandas as pd
    import scipy.sparse as sp

    from privfair_cli.datasets.graphs import Graph

    frame = pd.DataFrame({"a": np.arange(3), "b": pd.Categorical(["x", "y", "x"])})
    graph = Graph(sp.csr_matrix(np.eye(3)), np.array(["n1", "n2", "n3"], dtype=object), {"edges": 3})
    t = data_lib.Table("t", np.ones((3, 2)), np.array([0, 1, 0]), None, ["f", "g"], frame, {"a": 3},
                       {"protected": ["a"]}, {"graph": graph, "values": [np.int64(1), "x"], "pair": (1, 2.5)})
    buf = io.BytesIO()
    store.save(t, buf)
    buf.seek(0)
    u = store.load(buf)
    assert u.frame.equals(frame) and u.domain == {"a": 3} and u.meta["pair"] == (1, 2.5)
    assert type(u.meta["values"][0]) is np.int64 and (u.meta["graph"].adjacency != graph.adjacency).nnz == 0
    assert list(u.meta["graph"].node_ids) == ["n1", "n2", "n3"]
    with pytest.raises(TypeError, match="cannot be cached safely"):
        store.save({"f": lambda: 0}, io.BytesIO())


class _Marker:
    """Unpickling this writes a marker file: what a planted pickle would do."""

    path = ""

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.path), "pwned"))


@needs_data("german_credit")
def test_a_planted_cache_file_runs_no_code(tmp_path, monkeypatch):
    """A pickle planted where the parse cache lives (under its name, and under the old .pkl name) is never
    unpickled: the table is parsed again and the marker file never appears."""
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    c = card("german")
    data_lib.load(c)
    (cached,) = (tmp_path / "cache" / "parsed").glob("german-*.npz")
    marker = tmp_path / "marker"
    _Marker.path = str(marker)
    planted = pickle.dumps(_Marker())
    cached.write_bytes(planted)
    cached.with_suffix(".pkl").write_bytes(planted)
    table_ = data_lib.load(c)
    assert len(table_) == 1000 and not marker.exists()
    assert cached.is_file() and cached.read_bytes()[:2] == b"PK"  # rebuilt as an npz (a zip)


# ------------------------------------------------------------------------------------------ results
@needs_data("german_credit")
def test_overwrite_into_an_unwritable_run_folder_fails_in_one_line_and_keeps_the_result(tmp_path, monkeypatch,
                                                                                     capsys):
    """As a read-only folder would (root ignores permission bits, so writes under it are refused here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    args = ["run", "algo=lr", "data=german", "data.n=200", "hydra.run.dir=out"]
    assert main(args) == 0
    before = (tmp_path / "out" / "metrics.json").read_bytes()
    root = str((tmp_path / "out").resolve())
    real_open, real_mkdir = builtins.open, pathlib.Path.mkdir

    def inside(p) -> bool:
        return not isinstance(p, int) and str(pathlib.Path(p).resolve()).startswith(root)

    def ro_open(f, mode="r", *a, **k):
        if any(c in mode for c in "wax+") and inside(f):
            raise PermissionError(13, "Permission denied", str(f))
        return real_open(f, mode, *a, **k)

    def ro_mkdir(self, *a, **k):
        if inside(self) and not self.is_dir():
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(builtins, "open", ro_open)
    monkeypatch.setattr(pathlib.Path, "mkdir", ro_mkdir)
    capsys.readouterr()
    try:
        code = main(args + ["overwrite=true"])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert code == 2 and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("privfair: error")] == [
        f"privfair: error: cannot write {root}/privfair.log: Permission denied; any complete result already there "
        "is kept"]
    assert (tmp_path / "out" / "metrics.json").read_bytes() == before
