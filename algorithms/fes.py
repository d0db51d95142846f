"""Fairness-enhanced sampling for semi-supervised learning (Zhang thesis ch. 4; fair_sampling.md) and its baselines.

Plugins (kind `semi_supervised`, no differential privacy in this chapter: guarantee `none`):
- `fes` (§1): fit the base learner on the labelled training rows, pseudo-label round(rho |D_u|) unlabelled rows
  drawn without replacement, merge, draw K re-sampled sets with all four (z, y) groups of exactly |G| rows
  (`kamiran_calders.balanced`; |G| = `group_size_factor` x the smallest group), fit the K base models together
  (`batched_linear`) and predict by majority vote;
- `ori` (§2): the base learner on the labelled training rows;
- `kc_uniform` (§3) / `kc_preferential` (§4): Kamiran & Calders' uniform / preferential re-sampling of the
  labelled training rows (`kamiran_calders`), then the base learner.
Base learners (`model`): `lr` = LogisticRegression(C), `svm` = LinearSVC(C) (squared hinge), both exact batched
Newton solves. The protected attribute is never a model input (§0): it only forms the groups.

Deviations (by spec item):
- §1.5 "5-fold cross-validation": not done; C is fixed by config (default 1.0, the spec's recommended learner).
- §1.3 step 8 / §8.3: an even-K vote tie is broken by the mean score of the K models (mean probability >= 0.5 for
  lr, mean decision value >= 0 for svm), as the spec recommends.
- §4.3: the ranker of `kc_preferential` is the base learner itself (lr or svm decision value), not naive Bayes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privfair_cli.algorithms import batched_linear, kamiran_calders
from privfair_cli.errors import DataError
from privfair_cli.metrics import group_counts
from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds


@dataclass(frozen=True)
class BaseLearnerConfig:
    model: Literal["lr", "svm"]
    C: float = field(metadata=bounds(gt=0))
    max_iter: int = field(metadata=bounds(ge=1))
    tol: float = field(metadata=bounds(gt=0))


@dataclass(frozen=True)
class FESConfig(BaseLearnerConfig):
    rho: float = field(metadata=bounds(ge=0, le=1))
    K: int = field(metadata=bounds(ge=1))
    group_size_factor: float = field(metadata=bounds(gt=0))


class _SemiSupervised(Plugin):
    """Shared by the four plugins: the labelled rows, the base learner, the vote."""

    kind = "semi_supervised"
    private = False
    guarantee = "none"
    Config = BaseLearnerConfig

    def _learn(self, X: np.ndarray, y: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Weights (K, d + 1) of the base learner, model k on the rows idx[k] of X, y (one model on all rows
        without idx)."""
        cfg = self.cfg
        idx = np.arange(len(y))[None] if idx is None else idx
        return batched_linear.fit_indexed(X, y, idx, cfg.model, cfg.C, cfg.max_iter, cfg.tol)

    @staticmethod
    def _labelled(data):
        m = data.y >= 0
        if not m.any():
            raise DataError(f"data={data.name}: no labelled training rows")
        if data.s is None:
            raise DataError(f"data={data.name}: the sampling algorithms need a protected attribute (data.sensitive)")
        return data.X[m], data.s[m].astype(int), data.y[m].astype(int)

    def _fit_one(self, X, y) -> None:
        self.W = self._learn(X, y)

    def scores(self, X) -> np.ndarray:
        return batched_linear.scores(self.cfg.model, X, self.W)

    def predict(self, X) -> np.ndarray:
        """Majority vote of the models (Eq. 4.11); a tie goes to the mean score's side of the threshold."""
        sc = self.scores(X)
        cut = batched_linear.threshold(self.cfg.model)
        votes = (sc >= cut).mean(1)
        return np.where(votes == 0.5, sc.mean(1) >= cut, votes > 0.5).astype(int)

    def extra_metrics(self) -> dict[str, float]:
        return {"n_models": float(self.W.shape[0])} | {f"train_{k}": v for k, v in self.train_groups.items()}

    def _train_groups(self, s, y) -> None:
        self.train_groups = group_counts(1 - s, y)

    def resample(self, X, s, y, rng) -> np.ndarray:
        """The labelled rows (indices, repeats allowed) the one base model trains on; ORI: all of them."""
        return np.arange(len(y))

    def fit(self, data, budget, ledger, rng, device="cpu"):
        X, s, y = self._labelled(data)
        idx = self.resample(X, s, y, rng)
        self._train_groups(s[idx], y[idx])
        self._fit_one(X[idx], y[idx])
        return self


@register
class ORI(_SemiSupervised):
    name = "ori"


@register
class KCUniform(_SemiSupervised):
    name = "kc_uniform"

    def resample(self, X, s, y, rng) -> np.ndarray:
        return kamiran_calders.uniform(s, y, rng)


@register
class KCPreferential(_SemiSupervised):
    name = "kc_preferential"

    def resample(self, X, s, y, rng) -> np.ndarray:
        ranker = self._learn(X, y)
        return kamiran_calders.preferential(s, y, batched_linear.decision(X, ranker)[:, 0])


@register
class FES(_SemiSupervised):
    name = "fes"
    Config = FESConfig

    def fit(self, data, budget, ledger, rng, device="cpu"):
        X, s, y = self._labelled(data)
        self._fit_one(X, y)  # f_0 (Algorithm 5, step 3)
        pool = np.flatnonzero(data.y < 0)
        self.pseudo_rows = np.sort(rng.choice(pool, size=int(round(self.cfg.rho * len(pool))), replace=False))
        self.pseudo_labels = self.predict(data.X[self.pseudo_rows])
        X_new = np.vstack([X, data.X[self.pseudo_rows]])
        s_new = np.concatenate([s, data.s[self.pseudo_rows].astype(int)])
        y_new = np.concatenate([y, self.pseudo_labels])
        self._train_groups(s_new, y_new)
        size = max(1, int(round(self.cfg.group_size_factor * min(self.train_groups.values()))))
        self.group_size = size
        idx = kamiran_calders.balanced(s_new, y_new, size, self.cfg.K, rng)  # (K, 4 size), Algorithm 4
        self.W = self._learn(X_new, y_new, idx)
        return self

    def extra_metrics(self) -> dict[str, float]:
        return super().extra_metrics() | {"group_size": float(self.group_size),
                                          "n_pseudo": float(len(self.pseudo_rows))}
