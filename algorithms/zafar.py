"""Zafar et al.'s fairness-constrained linear classifiers (the baselines of the fair semi-supervised chapter: Zhang
thesis ch. 5, fair_ssl.md §3-4). No differential privacy (guarantee `none`); kind `semi_supervised`: they see the
labelled training rows only.

- `zafar_fc` (§3): Zafar et al. (AISTATS 2017): LR / SVM under the decision-boundary covariance constraint
  |Cov(z, w.x)| <= c (disparate impact, `fairness: di`);
- `zafar_dm` (§4): Zafar et al. (WWW 2017): the disparate-mistreatment constraint (`fairness`: omr | fpr | fnr),
  solved by the convex-concave procedure.

Both are one w-step of the fair SSL method on D_l (fair_ssl.py `solve_w`: the same solvers, tolerances and
deviations, listed there), with its standardisation over D_l u D_u and its evaluation (`evaluate.fair_linear`).
"""

from __future__ import annotations

from dataclasses import dataclass

from privfair_cli.algorithms.fair_ssl import FairLinear, FairLinearConfig, solve_w
from privfair_cli.errors import ConfigError
from privfair_cli.registry import register


@dataclass(frozen=True)
class ZafarDMConfig(FairLinearConfig):
    def __post_init__(self):
        super().__post_init__()
        if self.fairness == "di":
            raise ConfigError("algo.fairness=di is not a mistreatment notion for zafar_dm; allowed: omr, fpr, fnr "
                              "(disparate impact is zafar_fc)")


@dataclass(frozen=True)
class ZafarFCConfig(FairLinearConfig):
    def __post_init__(self):
        super().__post_init__()
        if self.fairness != "di":
            raise ConfigError(f"algo.fairness={self.fairness} is not disparate impact; zafar_fc allows: di "
                              f"(the mistreatment notions are zafar_dm)")


class _Zafar(FairLinear):
    """Zafar et al.: the constrained linear model on the labelled rows only (spec §3-4)."""

    def fit(self, data, budget, ledger, rng, device="cpu"):
        lab = self._parts(data)
        self._fit_scaler(data.X)  # D_l u D_u, the same standardisation as the proposed method
        X, y, z = self._standardise(data.X[lab]), data.y[lab].astype(int), data.s[lab].astype(float)
        self.statuses, self.failed = [], None
        self._record(solve_w(X, y, [(X, z, y, self.cfg.c)], self.cfg))
        return self


@register
class ZafarFC(_Zafar):
    name = "zafar_fc"
    Config = ZafarFCConfig


@register
class ZafarDM(_Zafar):
    name = "zafar_dm"
    Config = ZafarDMConfig
