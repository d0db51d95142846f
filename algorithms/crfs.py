"""Correlated differential privacy with correlation reduction by feature selection (Zhang thesis ch. 3; crfs.md).

Plugins (kind `classifier`; `task`: `lr` / `svm` release an output-perturbed linear model, `count` / `mean` a
workload of noisy queries):
- `crfs` (§1): Step 0-2 preparation (missing / single-valued / collinear / zero- and low-importance features, with
  non-private random-forest importances), Step 3 DP importances (Laplace, budget eps1, once per run), Step 4 the
  useful set B (non-private accuracy of the top-m prefixes), Step 5 the correlation-based adjustment (forward and
  backward candidates scored by the validation accuracy of the correlated output-perturbed LR/SVM, averaged over
  `eval_draws` draws), Step 6 the release on F* at eps2 with the correlated sensitivity kappa_CS(F*);
- `cdp_zhu` (§2): the prepared set (Steps 0-2), released with kappa_CS (Zhu et al. 2015);
- `cdp_group` (§3): the prepared set, released with kappa_GS = the largest correlated group (Chen et al. 2014);
- `cdp_nonprivate` (§4): the prepared set, no noise.
Mechanisms, Theta and the sensitivities: `privfair_cli.privacy.correlated`. Models (§0.5): lam-regularised ERM,
(1/n) sum loss(y w.x) + lam/2 |w|^2, logistic loss (`lr`) or Huber-smoothed hinge with h = 0.5 (`svm`), both
1-Lipschitz; features mapped from the card's [0, 1] to [-1, 1]; with `intercept` a constant feature is appended and
every row divided by sqrt(K + 1), so |x| <= 1 without looking at the data.

Budgets. `eps_release` (eps2, the figures' x-axis) set: each release (model draw, or query answer) is calibrated
to it; null: eps2 is what the run's eps leaves after Step 3, a query workload's share split evenly over its
answers. `eps1` set: Step 3's per-importance budget as the seed defines it; null: Step 3 is charged half the
run's eps. The ledger records Step 3 once and every release.

Guarantee: `heuristic` for the three private plugins (claims()), and the run's log says why: the seed leaves
unaccounted the non-private importances and accuracies of Steps 1, 2 and 4 (crfs also Step 5's noisy evaluations,
drawn outside the ledger), and the data-dependent Theta itself (its kappa sets the noise scale). Within the
correlated-DP model with Theta public, Step 3 and the releases are eps1- and eps2-DP (`global_l1`), as recorded.

Deviations (by spec item):
- §1 Step 3 `seed` mode: Lap(1/eps1) per importance as the seed; charged 2 eps1, not the spec's K eps1: the
  importance vector sums to 1, so its L1 sensitivity is 2 (both are valid bounds; 2 eps1 is the tighter for K > 2).
- §1 Step 3 `empirical_loo`: Delta_h from `loo_records` deletions, each a refit of the forest; recorded in the ledger
  at eps1 with the note "not DP".
- §0.5 count workload: the seed calibrates each answer alone; the ledger records a workload of Q answers at Q eps2
  (basic composition), and with `eps_release` null splits the release budget over the Q answers.
- §0.5 mean queries: one per feature of the released set (the spec's first option); Delta = 2/N, N = training rows
  (replace-one neighbours, N public), recorded in the run's warnings.
- §1 Step 5 for queries: F* from the LR pipeline of the same run (the spec's recommendation); `selection_score`
  min_kappa not implemented.
- §1 Step 4: B's accuracies and Step 5's scores on a validation split carved from the training split
  (`val_size` of it: 0.15 / 0.85 gives the spec's 70/15/15 with `data.test_size=0.15`).
- §1 Step 1: the collinear pair loses the feature with the lower non-private importance (ties: the later column),
  the spec's recommendation; Steps 1-2 run on the forest fitted once on the prepared features.
- §0.1 / §8: Theta over the candidate's columns is taken literally, so a set of one column (every row constant:
  kappa = 1) or two columns (every |theta| = 1) has a degenerate kappa; Step 5 may prefer such a set, and a release
  on fewer than 3 columns carries a warning.
- §0.1: theta_ij >= theta0 - 1e-9 passes the threshold (a correlation exactly at theta0 is not lost to rounding).
- §1.5: theta0 `null` reads the card's `theta0` (Porto Seguro 0.7), else 0.9; lam = 0.01 fixed (the spec's
  validation tuning over {1e-3, 1e-2, 1e-1} is not done).
- §6: Titanic drops PassengerId, Name, Ticket and Cabin (the spec's recommendation): 7 features enter Step 1.
- Query tasks release no classifier: `predict` returns -1 for every row.
Deterministic pieces (the forests, Theta's kappas per candidate set, the non-private ERM fits) are memoised within a
process (`memo`), keyed by a digest of the training rows, so a sweep computes each once; results are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from privfair_cli.errors import ConfigError, DataError
from privfair_cli.memo import Memo
from privfair_cli.privacy import correlated
from privfair_cli.privacy.mechanisms import laplace
from privfair_cli.privacy.noise import noise_source
from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds

MODEL_TASKS = ("lr", "svm")
CACHE_MAX = 100_000  # memoised deterministic pieces (see `memo`) kept; the oldest leave first
_CACHE = Memo(CACHE_MAX)
CACHE = {"enabled": True}
HUBER_H = 0.5
SPEC_THETA0 = 0.9  # crfs.md §0.1: theta0 of a card that declares none (Adult, Breast cancer, Titanic)


@dataclass(frozen=True)
class CDPConfig:
    task: Literal["lr", "svm", "count", "mean"]
    theta0: float | None = field(metadata=bounds(ge=-1, le=1))
    abs_threshold: bool
    lam: float = field(metadata=bounds(gt=0))
    intercept: bool
    eps_release: float | None = field(metadata=bounds(gt=0))
    noise_draws: int = field(metadata=bounds(ge=1))
    n_queries: int = field(metadata=bounds(ge=1))
    T_cf: float = field(metadata=bounds(gt=0, le=1))
    T_mv: float = field(metadata=bounds(ge=0, le=1))
    T_fi: float = field(metadata=bounds(gt=0, le=1))
    n_estimators: int = field(metadata=bounds(ge=1))
    val_size: float = field(metadata=bounds(gt=0, lt=1))
    eps1: float | None = field(metadata=bounds(gt=0))  # crfs' Step 3; the baselines have no Step 3


@dataclass(frozen=True)
class CRFSConfig(CDPConfig):
    sensitivity_mode: Literal["seed", "global_l1", "empirical_loo"]
    tie_tolerance: float = field(metadata=bounds(ge=0))
    eval_draws: int = field(metadata=bounds(ge=1))
    loo_records: int = field(metadata=bounds(ge=1))
    correlation_curve: bool
    curve_tolerance: float = field(metadata=bounds(gt=0))


# ------------------------------------------------------------------------------------------------ models (§0.5)
def design(Z: np.ndarray, intercept: bool) -> np.ndarray:
    """Rows of norm <= 1 from features in [-1, 1]: divide by sqrt(K) (sqrt(K + 1) with the constant feature)."""
    k = Z.shape[1] + (1 if intercept else 0)
    X = np.hstack([Z, np.ones((len(Z), 1))]) if intercept else Z
    return X / math.sqrt(max(k, 1))


def _loss(model: str, m: np.ndarray):
    """Loss and derivative in the margin m = y w.x (both 1-Lipschitz)."""
    if model == "lr":
        return np.logaddexp(0.0, -m), -expit(-m)
    hi, lo = m > 1 + HUBER_H, m < 1 - HUBER_H
    quad = (1 + HUBER_H - m) ** 2 / (4 * HUBER_H)
    loss = np.where(hi, 0.0, np.where(lo, 1 - m, quad))
    grad = np.where(hi, 0.0, np.where(lo, -1.0, -(1 + HUBER_H - m) / (2 * HUBER_H)))
    return loss, grad


def fit_erm(X: np.ndarray, y: np.ndarray, model: str, lam: float) -> np.ndarray:
    """argmin_w (1/n) sum loss(y_i w.x_i) + lam/2 |w|^2, y in {-1, +1} (strongly convex: L-BFGS to 1e-10)."""
    n = len(y)

    def f(w):
        m = y * (X @ w)
        loss, g = _loss(model, m)
        return loss.mean() + 0.5 * lam * w @ w, X.T @ (g * y) / n + lam * w

    return minimize(f, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                    options={"maxiter": 500, "gtol": 1e-10}).x


def accuracies(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Accuracy of each weight vector (rows of W) with prediction sign(w.x) (0 counts as +1)."""
    return np.mean(np.where(X @ W.T >= 0, 1, -1) == y[:, None], axis=0)


def memo(key: tuple, compute):
    """The value of `compute()`, remembered under `key` within the process: Theta's kappas per candidate feature set,
    the random forests and the non-private ERM fits depend only on the training rows (`key` holds their digest),
    the columns and the settings, never on eps or the noise, so a sweep over eps, tasks, schemes and noise draws
    computes each once. Results are identical with the cache off (`CACHE["enabled"] = False`)."""
    if not CACHE["enabled"]:
        return compute()
    return _CACHE.get_or(key, compute)


# ------------------------------------------------------------------------------------------- Steps 0-2 (§1)
def forest_importance(Z: np.ndarray, y: np.ndarray, n_estimators: int, seed: int) -> np.ndarray:
    from sklearn.ensemble import RandomForestClassifier

    if Z.shape[1] == 0:
        return np.zeros(0)
    rf = RandomForestClassifier(n_estimators=n_estimators, random_state=seed, n_jobs=1)
    h = rf.fit(Z, y).feature_importances_
    return h / h.sum() if h.sum() > 0 else np.full(len(h), 1.0 / len(h))


def prepare(Z, y, missing, cfg, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Steps 1-2: the kept column indices (in table order), their non-private importances, and how many columns
    each rule removed."""
    keep = np.arange(Z.shape[1])
    removed = {}
    frac = missing.mean(0) if missing is not None and missing.size else np.zeros(Z.shape[1])
    ok = frac[keep] <= cfg.T_mv
    removed["missing"], keep = int((~ok).sum()), keep[ok]
    ok = np.ptp(Z[:, keep], axis=0) > 0 if len(Z) else np.ones(len(keep), bool)
    removed["single_valued"], keep = int((~ok).sum()), keep[ok]
    h = forest_importance(Z[:, keep], y, cfg.n_estimators, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.nan_to_num(np.corrcoef(Z[:, keep], rowvar=False)) if len(keep) > 1 else np.zeros((1, 1))
    alive = np.ones(len(keep), bool)
    for a in range(len(keep)):
        for b in range(a + 1, len(keep)):
            if alive[a] and alive[b] and abs(rho[a, b]) > cfg.T_cf:
                alive[b if h[b] <= h[a] else a] = False
    removed["collinear"] = int((~alive).sum())
    keep, h = keep[alive], h[alive]
    ok = h > 0
    removed["zero_importance"], keep, h = int((~ok).sum()), keep[ok], h[ok]
    if len(keep):
        order = np.argsort(-h, kind="stable")
        cum = np.cumsum(h[order]) / h.sum()
        m = int(np.searchsorted(cum, cfg.T_fi - 1e-12) + 1)
        chosen = np.sort(order[:m])
        removed["low_importance"] = len(keep) - len(chosen)
        keep, h = keep[chosen], h[chosen]
    if not len(keep):
        raise DataError("preparation (crfs.md §1 Steps 1-2) removed every feature: no feature left to select")
    return keep, h / h.sum(), removed


# --------------------------------------------------------------------------------------------------- plugins
class _CorrelatedDP(Plugin):
    """Shared by the four plugins: data, preparation, the release on a feature set and its metrics."""

    kind = "classifier"
    evaluation = "correlated_release"
    needs = ("binary_label", "features")
    mechanisms = ("laplace",)
    guarantee = "heuristic"  # the seed's selection steps and Theta are not accounted (module docstring)
    guarantee_note = ("always heuristic: the seed's feature-selection steps and its Theta are not accounted; "
                      "algo.sensitivity_mode=empirical_loo reads the sensitivity off the data")
    own_noise = "the Gamma-norm noise of output perturbation"
    Config = CDPConfig
    kappa_kind = "kappa_cs"

    # -- setup ----------------------------------------------------------------------------------------------
    def _setup(self, data, budget, rng):
        if len(np.unique(data.y)) < 2:
            raise DataError(f"data={data.name}: the training split holds one label only")
        self.seed = int(noise_source(rng).integers(2**31))
        cut = np.random.default_rng(self.seed)
        Z = 2.0 * np.asarray(data.X, dtype=float) - 1.0
        y = np.where(np.asarray(data.y) == 1, 1, -1)
        missing = data.meta.get("row_missing")
        self.feature_names = list(data.feature_names)
        self.stages = {"original": int(data.meta.get("original_columns", data.d + 1))}
        self.Z, self.y = Z, y
        self.theta0 = self.cfg.theta0 if self.cfg.theta0 is not None else float(data.meta.get("theta0", SPEC_THETA0))
        # the validation split (stratified by label) carved from the training rows
        val = np.zeros(len(y), bool)
        for label in (-1, 1):
            rows = np.flatnonzero(y == label)
            val[cut.choice(rows, size=int(round(self.cfg.val_size * len(rows))), replace=False)] = True
        if val.all() or not val.any() or len(np.unique(y[~val])) < 2:
            val[:] = False
        self.val = val
        import hashlib

        digest = hashlib.sha1(Z.tobytes() + y.tobytes() + val.tobytes()
                              + (b"" if missing is None else np.asarray(missing).tobytes())).hexdigest()
        self.digest = digest
        c = self.cfg
        keep, h, removed = memo(("prepare", digest, c.T_cf, c.T_mv, c.T_fi, c.n_estimators, self.seed),
                                lambda: prepare(Z, y, missing, c, self.seed))
        self.prepared, self.prepared_importance, self.removed = keep, h, removed
        self.stages["after_preparation"] = len(keep)
        self.eps_total = budget.eps
        self.notes = ["Steps 1-2 (missing, single-valued, collinear, zero / low importance) use non-private "
                      "random-forest importances and correlations: not accounted (crfs.md §1.4)",
                      "Theta (record-to-record correlation) is computed from the data and sets the noise scale: "
                      "it is not protected (correlated-DP model: the adversary's knowledge)"]

    def claims(self) -> str:
        return "heuristic" if self.private else "none"

    def _train_val(self, cols):
        tr = ~self.val if self.val.any() else np.ones(len(self.y), bool)
        va = self.val if self.val.any() else tr
        X = design(self.Z[:, cols], self.cfg.intercept)
        return X[tr], self.y[tr], X[va], self.y[va]

    def _kappa(self, cols) -> dict[str, float]:
        cols = np.asarray(cols)
        return memo(("kappa", self.digest, cols.tobytes(), self.theta0, self.cfg.abs_threshold),
                    lambda: correlated.kappas(self.Z[:, cols], self.theta0, self.cfg.abs_threshold))

    def _erm(self, cols, model: str, rows: str) -> np.ndarray:
        """The non-private ERM on `cols`, fitted on the training part (`rows="train"`) or all training rows."""
        cols = np.asarray(cols)

        def compute():
            if rows == "train":
                Xtr, ytr, _, _ = self._train_val(cols)
                return fit_erm(Xtr, ytr, model, self.cfg.lam)
            return fit_erm(design(self.Z[:, cols], self.cfg.intercept), self.y, model, self.cfg.lam)

        return memo(("erm", self.digest, cols.tobytes(), model, self.cfg.lam, self.cfg.intercept, rows), compute)

    # -- release ----------------------------------------------------------------------------------------------
    def _release(self, cols, kappa: float, eps: float | None, ledger, rng) -> None:
        """Step 6 (or the baselines' release) on the columns `cols`: `noise_draws` releases."""
        cfg = self.cfg
        self.final = np.asarray(cols)
        self.kappa_release = kappa
        n = len(self.y)
        if cfg.task in MODEL_TASKS:
            self.w = self._erm(cols, cfg.task, "all")
            eps2 = self._eps2(eps, cfg.noise_draws)
            if self.private:
                self.W = correlated.correlated_output_perturbation(
                    self.w, n, cfg.lam, kappa, eps2, rng, ledger, note=f"release ({self.kappa_kind}={kappa:g})",
                    draws=cfg.noise_draws)
            else:
                self.W = self.w[None, :]
            self.eps2 = eps2
            return
        wl = np.random.default_rng(self.seed + 1)
        Zc = self.Z[:, cols]
        if cfg.task == "count":
            q = cfg.n_queries
            f = wl.integers(len(cols), size=q)
            ab = np.sort(wl.uniform(-1, 1, size=(q, 2)), axis=1)
            vals = Zc[:, f]
            truth = np.sum((vals >= ab[:, 0]) & (vals <= ab[:, 1]), axis=0).astype(float)
            delta = 1.0
        else:
            f = np.arange(len(cols))
            truth = Zc.mean(0)
            delta = 2.0 / n
            self.notes.append(f"mean queries: Delta = 2/N with N = {n} training rows public (replace-one "
                              "neighbours, not the add/remove-one convention of foundations.md)")
        self.query_features = np.asarray(cols)[f]
        eps2 = self._eps2(eps, cfg.noise_draws * len(truth))
        if self.private:
            noisy = np.stack([correlated.correlated_laplace(
                truth, delta, kappa, eps2, rng, ledger, note=f"release ({self.kappa_kind}={kappa:g}, "
                f"{len(truth)} answers)", answers_composed=len(truth)) for _ in range(cfg.noise_draws)])
        else:
            noisy = truth[None, :]
        self.noisy = noisy
        self.errors = np.abs(noisy - truth[None, :])
        self.eps2 = eps2
        self.query_delta = delta

    def _eps2(self, eps: float | None, releases: int) -> float:
        """The eps of one release: `eps_release`, else the budget left split over `releases` releases."""
        if not self.private:
            return math.inf
        if self.cfg.eps_release is not None:
            return float(self.cfg.eps_release)
        if math.isinf(self.eps_total):
            return math.inf
        left = self.eps_total - getattr(self, "eps1_charged", 0.0)
        if not left > 0:
            raise ConfigError(f"algo={self.name}: Step 3 takes the whole budget eps={self.eps_total:g}; set "
                              "algo.eps1 lower or algo.eps_release")
        return left / releases

    # -- evaluation ---------------------------------------------------------------------------------------------
    def predict(self, X) -> np.ndarray:
        if self.cfg.task not in MODEL_TASKS:
            return np.full(len(X), -1)
        Xd = design(2.0 * np.asarray(X, dtype=float)[:, self.final] - 1.0, self.cfg.intercept)
        return (Xd @ self.W[0] >= 0).astype(int)

    def audit_statistic(self, canary: dict) -> float:
        """`privfair audit`'s score of one release: the canary's signed margin under the first released model (LR /
        SVM tasks), else the sum of the first draw's noisy answers."""
        if self.cfg.task in MODEL_TASKS:
            x = design(2.0 * np.asarray(canary["X"], dtype=float)[None, self.final] - 1.0, self.cfg.intercept)
            return float((x @ self.W[0])[0] * (1 if int(canary["y"]) == 1 else -1))
        return float(self.noisy[0].sum())

    def model_predictions(self, X) -> tuple[np.ndarray, np.ndarray] | None:
        """For the model tasks: 0/1 predictions on X of every released model draw (rows x draws) and of the
        non-private model (evaluate.correlated_release); None for the query tasks."""
        if self.cfg.task not in MODEL_TASKS:
            return None
        Xd = design(2.0 * np.asarray(X, dtype=float)[:, self.final] - 1.0, self.cfg.intercept)
        return (Xd @ self.W.T >= 0), (Xd @ self.w[None, :].T >= 0)[:, 0]

    def extra_metrics(self) -> dict[str, float]:
        """The feature counts per step, kappa and eps of the release, and for the query tasks the answers' errors
        (`mae`, its std over draws, the expected kappa Delta / eps2)."""
        out = {f"n_features_{k}": float(v) for k, v in self.stages.items()}
        out |= {"n_features": float(len(self.final)), "kappa": float(self.kappa_release), "theta0": self.theta0,
                "eps_release": float(min(self.eps2, 1.7976931348623157e308))}
        out |= {f"{k}_final": v for k, v in self.final_kappas.items()}
        if self.cfg.task not in MODEL_TASKS:
            out |= {"mae": float(self.errors.mean()), "mae_std": float(self.errors.mean(1).std()),
                    "mae_expected": float(self.kappa_release * self.query_delta / self.eps2)
                    if self.private and not math.isinf(self.eps2) else 0.0}
            out |= self._mae2()
        return out

    def _mae2(self) -> dict[str, float]:
        return {}

    def artifacts(self, folder) -> None:
        import json
        from pathlib import Path

        sets = {"final": [self.feature_names[i] for i in self.final],
                "prepared": [self.feature_names[i] for i in self.prepared]}
        sets |= getattr(self, "extra_sets", {})
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "feature_sets.json").write_text(json.dumps(sets, indent=1) + "\n")

    def _finish(self) -> None:
        if self.private and len(self.final) < 3:
            self.notes.append(f"the released feature set has {len(self.final)} feature(s): Pearson correlation "
                              "between records over fewer than 3 columns is degenerate (1 column: every row constant, "
                              "kappa = 1; 2 columns: every |theta| = 1), so kappa says nothing about the records")
        for note in self.notes:
            self.warn(note)


class _Baseline(_CorrelatedDP):
    def fit(self, data, budget, ledger, rng, device="cpu"):
        self._setup(data, budget, rng)
        cols = self.prepared
        self.final_kappas = self._kappa(cols)
        kappa = self.final_kappas[self.kappa_kind] if self.private else 1.0
        self._release(cols, kappa, None, ledger, rng)
        self._finish()
        return self


@register
class CDPZhu(_Baseline):
    name = "cdp_zhu"


@register
class CDPGroup(_Baseline):
    name = "cdp_group"
    kappa_kind = "kappa_gs"


@register
class CDPNonprivate(_Baseline):
    name = "cdp_nonprivate"
    private = False
    guarantee = "none"
    mechanisms = ()
    own_noise = ""

    def _finish(self) -> None:
        return None


@register
class CRFS(_CorrelatedDP):
    name = "crfs"
    Config = CRFSConfig

    def claims(self) -> str:
        return "heuristic"

    # Step 3 --------------------------------------------------------------------------------------------------
    def _noisy_importance(self, ledger, rng) -> np.ndarray:
        cfg = self.cfg
        cols = self.prepared
        tr = ~self.val if self.val.any() else np.ones(len(self.y), bool)
        h = memo(("forest", self.digest, np.asarray(cols).tobytes(), cfg.n_estimators, self.seed + 2),
                 lambda: forest_importance(self.Z[tr][:, cols], self.y[tr], cfg.n_estimators, self.seed + 2))
        self.importance_fits = getattr(self, "importance_fits", 0) + 1
        if cfg.eps1 is None:
            charged = self.eps_total / 2
            eps1 = charged / 2 if cfg.sensitivity_mode == "seed" else charged
        else:
            eps1 = float(cfg.eps1)
            charged = 2 * eps1 if cfg.sensitivity_mode == "seed" else eps1
        self.eps1, self.eps1_charged = eps1, charged
        if cfg.sensitivity_mode == "empirical_loo":
            delta_h = self._loo_sensitivity(h, cols, tr)
            self.delta_h = delta_h
            ledger.spend_pure("laplace_empirical_sensitivity", eps1, delta_h,
                              "Step 3 importances, empirical leave-one-out sensitivity: not DP")
            scale = 0.0 if math.isinf(eps1) else delta_h / eps1
            noisy = noise_source(rng).add_laplace(h, scale)
            self.notes.append("sensitivity_mode=empirical_loo: Step 3's noise uses a sensitivity read off the "
                              "data; the importance release is not differentially private")
        else:
            # seed: Lap(1/eps1) per importance = L1 sensitivity 2 at 2 eps1; global_l1: Lap(2/eps1) at eps1
            self.delta_h = 1.0 if cfg.sensitivity_mode == "seed" else 2.0
            noisy = laplace(h, 2.0, charged, rng, ledger, note=f"Step 3 importances ({cfg.sensitivity_mode})")
        noisy = np.clip(noisy, 0.0, None)
        return noisy / noisy.sum() if noisy.sum() > 0 else np.full(len(h), 1.0 / len(h))

    def _loo_sensitivity(self, h, cols, tr) -> float:
        rows = np.flatnonzero(tr)
        pick = np.random.default_rng(self.seed + 3).choice(rows, size=min(self.cfg.loo_records, len(rows)),
                                                             replace=False)
        worst = 0.0
        for i in pick:
            keep = rows[rows != i]
            hi = forest_importance(self.Z[keep][:, cols], self.y[keep], self.cfg.n_estimators, self.seed + 2)
            worst = max(worst, float(np.max(np.abs(hi - h))))
        return max(worst, 1e-12)

    # Steps 4-5 -----------------------------------------------------------------------------------------------
    def _score(self, cols, eps2: float, rng) -> float:
        """Step 5 score: validation accuracy of the correlated output-perturbed model, mean over eval_draws
        draws (noise drawn outside the ledger: an internal evaluation the seed does not account)."""
        cfg = self.cfg
        model = cfg.task if cfg.task in MODEL_TASKS else "lr"
        Xtr, ytr, Xva, yva = self._train_val(cols)
        w = self._erm(cols, model, "train")
        kappa = self._kappa(cols)["kappa_cs"]
        W = correlated.correlated_output_perturbation(w, len(ytr), cfg.lam, kappa, eps2, rng, None,
                                                      draws=cfg.eval_draws)
        self.candidates.append({"n": len(cols), "kappa_cs": kappa, "score": float(accuracies(Xva, yva, W).mean())})
        return self.candidates[-1]["score"]

    def _pick(self, sets, scores):
        if not sets:
            return None, -np.inf
        scores = np.asarray(scores)
        best = scores.max()
        near = [i for i in range(len(sets)) if scores[i] >= best - self.cfg.tie_tolerance]
        i = min(near, key=lambda k: (len(sets[k]), -scores[k]))
        return sets[i], float(scores[i])

    def fit(self, data, budget, ledger, rng, device="cpu"):
        cfg = self.cfg
        self._setup(data, budget, rng)
        self.notes.append("Step 4 (useful set B) uses non-private validation accuracies and Step 5 scores "
                          f"candidates with {cfg.eval_draws} noisy evaluations each, drawn outside the ledger: "
                          "not accounted (crfs.md §1.4, §8.16)")
        h = self._noisy_importance(ledger, rng)  # Step 3: once per run
        order = self.prepared[np.argsort(-h, kind="stable")]
        model = cfg.task if cfg.task in MODEL_TASKS else "lr"
        # Step 4: the smallest prefix within T of the best non-private validation accuracy
        acc = []
        for m in range(1, len(order) + 1):
            _, _, Xva, yva = self._train_val(order[:m])
            acc.append(float(accuracies(Xva, yva, self._erm(order[:m], model, "train")[None, :])[0]))
        acc = np.asarray(acc)
        m_b = int(np.flatnonzero(acc >= acc.max() - cfg.tie_tolerance)[0]) + 1
        B, R = order[:m_b], order[m_b:]
        self.stages["useful_set_B"] = len(B)
        # Step 5: forward (B plus the first j of R) and backward (B minus its j least important)
        eps2 = self._eps2(None, cfg.noise_draws)  # the LR / SVM release's eps2 (queries: F* of the LR pipeline)
        self.candidates = []
        forward = [np.concatenate([B, R[:j]]) for j in range(1, len(R) + 1)]
        backward = [B[:len(B) - j] for j in range(1, len(B))]
        a1, s1 = self._pick(forward, [self._score(c, eps2, rng) for c in forward])
        a2, s2 = self._pick(backward, [self._score(c, eps2, rng) for c in backward])
        final = B if a1 is None and a2 is None else (a1 if s1 >= s2 else a2)
        self.stages["final_adjusted_set_A"] = len(final)
        self.B = B
        self.extra_sets = {"useful_set_B": [self.feature_names[i] for i in B],
                           "importance_order": [self.feature_names[i] for i in order]}
        self.final_kappas = self._kappa(final)
        if cfg.correlation_curve:
            self._curve(order)
        self._release(final, self.final_kappas["kappa_cs"], None, ledger, rng)
        self._finish()
        return self

    def _curve(self, order) -> None:
        """Fig. 3.1: mean |theta_ij| (i != j) and kappa_CS of the top-m features of the noisy importance order, and
        the smallest m from which the mean stays within `curve_tolerance` of its value at m = K."""
        rows = [{"m": m} | self._kappa(order[:m]) for m in range(1, len(order) + 1)]
        self.curve = rows
        c = np.array([r["mean_abs_corr"] for r in rows])
        off = np.abs(c - c[-1]) > self.cfg.curve_tolerance
        self.corr_stable = int(np.flatnonzero(off)[-1] + 2) if off.any() else 1

    def artifacts(self, folder) -> None:
        super().artifacts(folder)
        if getattr(self, "curve", None):
            import pandas as pd

            pd.DataFrame(self.curve).to_csv(f"{folder}/correlation_curve.csv", index=False)

    def _mae2(self) -> dict[str, float]:
        inb = np.isin(self.query_features, self.B)
        return {"mae2": float(self.errors[:, inb].mean()) if inb.any() else float("nan")}

    def extra_metrics(self) -> dict[str, float]:
        return super().extra_metrics() | {"eps1": float(min(self.eps1, 1.7976931348623157e308)),
                "eps1_charged": float(min(self.eps1_charged, 1.7976931348623157e308)),
                "delta_h": float(self.delta_h), "importance_fits": float(self.importance_fits)} | (
                    {"n_features_corr_stable": float(self.corr_stable)} if getattr(self, "curve", None) else {})
