"""Private and fair logistic regression through the functional mechanism (FM).

Algorithms (CLI keys; specs `pflr.md`, `pdfc.md`):

- `lr_taylor` - "No-Privacy" Taylor LR: the noise-free minimiser of the second-order Taylor polynomial of the
  LR loss (pdfc.md §2.1; Xu thesis Eqs. 3.10-3.12).
- `privlr`   - FM of Zhang et al. on that polynomial, Laplace, Delta_f = d^2/4 + d, eps-DP (pflr.md §2.2).
- `fairlr`   - LR under the decision-boundary covariance constraint |c^T w| <= tau, c = sum (s_i - s_bar) x_i
  (thesis Eqs. 3.16-3.17; pflr.md §2.3). Non-private. A constraint, not a penalty: §8.4.1 uses Eq. 3.17 "as
  the fairness constraint" (`mode: penalty` is the Eq. 8.1 alternative). `objective: exact` (Eq. 3.9, default,
  spec §1.1) | `taylor` (the Eq. 3.10 polynomial, which §8.3.2 calls "the regular logistic regression").
- `pflr`     - PFLR, thesis Algorithm 5: the fairness penalty |(s_i - s_bar) x_i| in the linear coefficients
  (deviation 3), FM with Delta_f_tilde = d^2/4 + 3d, eps-DP (pflr.md §2.4).
- `pflr_star`- PFLR*, thesis Algorithm 6: FM with Delta_f under eps_f, the Laplace noise of the linear
  coefficients shifted by mu = c + Lap(2d/eps_g), eps = eps_f + eps_g (pflr.md §2.5).
- `relaxed_fm` - Ding et al. Algorithm 2: FM with Gaussian noise, L2 sensitivity sqrt(d^2/16 + d), sigma from
  their extended Gaussian mechanism (Theorem 2), (eps, delta)-DP (pdfc.md §2.3).
- `pdfc`     - Ding et al. Algorithm 1: the PFLR polynomial, Laplace with budget eps_s on the coefficients that
  involve the attribute x_s and eps_n on the rest (pdfc.md §2.4).
- `adfc`     - Ding et al. Algorithm 3: as `pdfc` with Gaussian noise (pdfc.md §2.5).

Each plugin's hyperparameters are a typed `Config` (defaults and a comment per key in configs/algo/<name>.yaml);
every value that enters a sensitivity or a noise scale (alpha, eps_f, eps_f_ratio, eps_ratio, add_intercept) is
range-checked before any data is read. Shared pieces, written once: `Polynomial` (linear vector b, quadratic
matrix M, packing of the d + d^2 coefficients), the coefficient builders (`lr_polynomial`, `fair_linear`,
`covariance_vector`), the sensitivities, `FunctionalMechanism.noisy` (one release of every coefficient through
`privacy.mechanisms`: `laplace` at one scale, `heterogeneous` at per-coefficient scales) and `minimise` (the
noisy-quadratic solver of pflr.md §1.5). Every release is recorded in the run's ledger before its noise is
drawn; sensitivities come from d and the [0, 1] feature bounds, never from the data.

Feature bounds (pflr.md §0, §1.4; pdfc.md §1.3): every sensitivity assumes 0 <= x_l <= 1. Card-encoded datasets
satisfy it by construction (declared bounds); features outside it (e.g. `data=synthetic_gaussian`) are clipped
into [0, 1] row by row before anything is computed (a per-row map, so the guarantee holds for any input) and the
result's `warnings` say so (that one bit about the training data is not covered by the ledger). eps = inf is the
noise-free limit: every scale is 0 and the ledger records inf.

Deviations and choices (each a config key where the spec asks for one):

1. Boundedness of the noisy objective (pflr.md A1, pdfc.md B8; not in either paper): `post_processing`
   trim (default) | ridge | ridge+trim | none, with `reg_kappa` (default 0); lambda_reg = reg_kappa times the
   noise std of one quadratic coefficient (sqrt(2) Delta/eps for Laplace, sigma for Gaussian). Recorded in every
   run's metrics (`fm_trim`, `fm_ridge`, `fm_reg_kappa`, `fm_lambda_reg`, `fm_kept_eigenvalues`). Eigenvalues
   below EIG_TOL times the largest |eigenvalue| are trimmed (pflr.md §1.5 step 4).
2. Algorithm 5 line 7 builds the objective from the un-noised lambda_1 (A2): we use the noisy b_bar.
3. PFLR's fairness coefficient (A3), `fair_coef: abs_elementwise` (default) | `signed`. Eq. 8.2 penalises
   |sum_i (s_i - s_bar) x_i^T w|, which is not a polynomial. PFLR's own section then states the coefficient
   three times in the element-wise form lambda_1 + |(s_i - s_bar) x_i|: the sentence after Eq. 8.2,
   Algorithm 5 line 3, and Eq. 8.3, whose sensitivity is derived for the coefficient (1/2 - y + |s - s_bar|)
   itself. That operational text is the default. `signed` (c = sum_i (s_i - s_bar) x_i) is the author's own
   reading of Eq. 8.2 in §8.3.2 ("shifting the first degree polynomial coefficients of Phi_1 ... by
   sum_i (s_i - s_bar) x_i", with PFLR*'s noise mean having "the equivalent effect"; §8.1 likewise): the
   linear branch of |c^T w| on the side c^T w > 0 where the unconstrained model sits (A4); noise-free PFLR and
   PFLR* then minimise the same polynomial. The element-wise sum is n s_bar (1 - s_bar)(centroid_1 +
   centroid_0): it carries no group difference and mainly lowers every score, so `signed` is the reading that
   makes the penalty a fairness term; Eq. 8.3's bound (3/2 per coordinate) covers both. Neither reading
   reproduces both datasets (docs: literal matches Adult, signed matches Dutch at large eps). PDFC/ADFC use
   the same polynomial and default (Ding Eq. 5-6 print no per-row coefficients, B7). `alpha` (Eq. 8.1's
   weight; the thesis sets alpha = 1 "for ease of discussion", the analysis holds for any) scales the term;
   PFLR's sensitivity is then d^2/4 + d + 2 alpha d. Default alpha = 1 everywhere.
4. Quadratic coefficients are the d^2 ordered pairs with independent noise (A5); `quad_index: unique` draws
   one noise value per monomial w_l w_m (l <= m) instead (same L1 sensitivity).
5. No intercept (A6); `add_intercept: true` appends a constant-1 feature and the sensitivities use d + 1.
6. PFLR*'s shift: `shift: literal` (default, mu = sum_i (s_i - s_bar) x_i as printed) | `mean` (mu / n_train).
   The sum is the text's reading: Algorithm 6 line 2 and Eq. 8.5 (Delta_g = 2d is the sensitivity of the
   sum, not of a mean), and f_D is itself a sum over rows (Eq. 3.9), so sum-vs-sum with alpha = 1 is the weight
   Eq. 8.1 states; `mean` amounts to alpha = 1/n and is kept only as a named option. `alpha` scales the
   released mu (post-processing, no privacy cost). `eps_f` (absolute, must be < eps) or `eps_f_ratio`
   (default 0.5, Table 8.1; in (0, 1)) split the budget.
7. PDFC/ADFC split (B1, not in the paper): `eps_ratio = eps_s/eps_n` in (0, 1] (default 0.1) with the paper's
   accounting eps = eps_s/d + (d-1) eps_n/d; ADFC's delta_s = delta_n = 1 - sqrt(1 - delta). The noise goes
   through `privacy.mechanisms.heterogeneous`, which records the larger of the paper's figure and the exact
   bound of pdfc.md §2.4/§2.5 (eps_exact for Laplace; the exact Gaussian privacy profile at the reported eps for
   ADFC). eps_ratio > 1 is refused (B3: the paper's figure then understates the loss, and the exact loss always
   exceeds eps, so such a run could never fit its budget); B3's `allow_unsafe_split` is not offered. Theorem
   5's `/2` is read as `/d` (B2).
8. Gaussian calibration (`relaxed_fm`, `adfc`): `calibration: extended` (default; Ding Theorem 2 with
   A = ln(sqrt(2/pi)/delta), B4) | `classic` (Dwork & Roth, eps < 1) | `analytic` (Balle & Wang 2018), the
   latter two from `privacy.mechanisms`. The calibration is an algorithm key, typed and checked before the run;
   the `mechanism` group only names the noise family (`mechanism=gaussian` is what these two draw anyway).
9. `x_s` (`xs_attribute`): a feature name or the prefix of a one-hot block (`race`, `marital-status`); all its
   columns join Phi_s (B6). `auto` (default) resolves from the dataset card: the first attribute of the card's
   `roles.protected` that is a feature of the classifier view (the paper's Table 1 takes race, a protected
   attribute other than z, as x_s): `adult_race` -> race, `adult` -> native-country, `dutch` -> citizenship,
   `compas` -> Race, `german` -> age, `bank` -> age (the column its sensitive age_group is derived from). A card
   with none falls back to `random`, one attribute drawn with the noise stream, the rule Algorithm 1's text
   states (pdfc.md §1.2). The chosen attribute is named in the ledger entry's note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from threadpoolctl import threadpool_limits

from privfair_cli import metrics
from privfair_cli.algorithms.logistic import fit_logistic
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy import mechanisms
from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds

TAYLOR_LINEAR = 0.5  # f1'(0)/1! of f1(z) = log(1 + e^z)
TAYLOR_QUADRATIC = 0.125  # f1''(0)/2!
EIG_TOL = 1e-10  # pflr.md §1.5 step 4: eigenvalues below EIG_TOL * max|e| are numerically zero (one-hot blocks)


# ------------------------------------------------------------------------------------------ configs
FairCoef = Literal["abs_elementwise", "signed"]  # deviation 3


def finite(**limits):
    """A field whose value must be finite and within `limits` (it scales a sensitivity, a noise or a solver)."""
    return field(metadata=bounds(lt=math.inf, **limits))


@dataclass(frozen=True)
class TaylorConfig:
    """`lr_taylor` and the keys every FM plugin shares (pflr.md §1.5, A6)."""

    post_processing: Literal["trim", "ridge", "ridge+trim", "none"]
    reg_kappa: float = finite(ge=0)
    add_intercept: bool


@dataclass(frozen=True)
class FMConfig(TaylorConfig):
    """`privlr`: plus the indexing of the released quadratic coefficients (A5)."""

    quad_index: Literal["ordered", "unique"]


@dataclass(frozen=True)
class PFLRConfig(FMConfig):
    """`pflr`: the reading of the fairness coefficient and its weight alpha (Eq. 8.1; deviation 3)."""

    fair_coef: FairCoef
    alpha: float = finite(ge=0)


@dataclass(frozen=True)
class PFLRStarConfig(FMConfig):
    """`pflr_star`: the budget split eps = eps_f + eps_g and the shift's scale alpha (deviation 6)."""

    eps_f: float | None = finite(gt=0)
    eps_f_ratio: float = field(metadata=bounds(gt=0, lt=1))
    shift: Literal["literal", "mean"]
    alpha: float = finite(ge=0)


@dataclass(frozen=True)
class RelaxedFMConfig(FMConfig):
    """`relaxed_fm` (and `adfc`): the sigma calibration (deviation 8)."""

    calibration: Literal["extended", "classic", "analytic"]


@dataclass(frozen=True)
class PDFCConfig(FMConfig):
    """`pdfc`: x_s and the split eps_s / eps_n (deviations 7, 9)."""

    xs_attribute: str
    eps_ratio: float = field(metadata=bounds(gt=0, le=1))
    fair_coef: FairCoef


@dataclass(frozen=True)
class ADFCConfig(PDFCConfig, RelaxedFMConfig):
    """`adfc`: the keys of `pdfc` and the sigma calibration of `relaxed_fm`."""


@dataclass(frozen=True)
class FairLRConfig:
    """`fairlr` (pflr.md §2.3); alpha is the weight of `mode: penalty`."""

    objective: Literal["exact", "taylor"]
    mode: Literal["constraint", "penalty"]
    tau: float = finite(ge=0)
    alpha: float = finite(ge=0)
    l2: float = finite(ge=0)
    add_intercept: bool


# ------------------------------------------------------------------------------------------ sensitivities
def delta_f(d: int) -> float:
    """L1 sensitivity of the LR polynomial, thesis Eq. 3.13 / Ding Lemma 1."""
    return d * d / 4 + d


def delta_f_tilde(d: int, alpha: float = 1.0) -> float:
    """L1 sensitivity of the fairness-penalised polynomial, thesis Eq. 8.3 / Ding Lemma 2 (alpha = 1):
    per coordinate |1/2 - y + alpha (s - s_bar)| x_l <= 1/2 + alpha, quadratic d^2/8, times 2."""
    return d * d / 4 + d + 2 * alpha * d


def delta_g(d: int) -> float:
    """L1 sensitivity of mu = sum_i (s_i - s_bar) x_i, thesis Eq. 8.5."""
    return 2.0 * d


def delta_2(d: int) -> float:
    """L2 sensitivity of the LR polynomial, Ding Lemma 3."""
    return math.sqrt(d * d / 16 + d)


def delta_2_fair(d: int) -> float:
    """L2 sensitivity of the fairness-penalised polynomial, Ding Lemma 4."""
    return math.sqrt(d * d / 16 + 9 * d)


def laplace_std(sensitivity: float, eps: float) -> float:
    """Standard deviation of Lap(0, sensitivity/eps): the noise of one coefficient (0 at eps = inf)."""
    return math.sqrt(2) * sensitivity / eps


def extended_gaussian_sigma(sensitivity: float, eps: float, delta: float) -> float:
    """Ding et al. Theorem 2: sigma = sqrt(2) Delta / (2 eps) (sqrt(A) + sqrt(A + eps)), A = ln(sqrt(2/pi)/delta)."""
    a = math.log(math.sqrt(2 / math.pi) / delta)
    if not (eps > 0 and a > 0):
        raise ConfigError(f"extended Gaussian needs eps > 0 and delta < sqrt(2/pi) (got eps={eps}, delta={delta})")
    return math.sqrt(2) * sensitivity / (2 * eps) * (math.sqrt(a) + math.sqrt(a + eps))


def gaussian_sigma(calibration: str, sensitivity: float, eps: float, delta: float) -> float:
    """The Gaussian std for (eps, delta) and L2 sensitivity under `calibration` (deviation 8); 0 at eps = inf."""
    if math.isinf(eps):
        return 0.0
    if calibration == "extended":
        return extended_gaussian_sigma(sensitivity, eps, delta)
    if calibration == "classic":
        return mechanisms.gaussian_sigma_classic(sensitivity, eps, delta)
    return mechanisms.gaussian_sigma_analytic(sensitivity, eps, delta)


# ------------------------------------------------------------------------------------------ polynomial
@dataclass
class Polynomial:
    """Degree-1 and degree-2 coefficients of f(w) = b^T w + w^T M w (the constant n ln 2 is dropped)."""

    b: np.ndarray
    M: np.ndarray

    @property
    def d(self) -> int:
        return len(self.b)

    def pack(self, quad_index: str = "ordered") -> np.ndarray:
        """The released coefficients: b then the d^2 entries of M (`ordered`, thesis) or the d(d+1)/2
        monomial coefficients M_ll and M_lm + M_ml, l < m (`unique`)."""
        if quad_index == "ordered":
            return np.concatenate([self.b, self.M.ravel()])
        iu = np.triu_indices(self.d)
        return np.concatenate([self.b, (self.M + self.M.T - np.diag(np.diag(self.M)))[iu]])

    @classmethod
    def unpack(cls, v: np.ndarray, d: int, quad_index: str = "ordered") -> Polynomial:
        if quad_index == "ordered":
            return cls(v[:d], v[d:].reshape(d, d))
        iu = np.triu_indices(d)
        upper = np.zeros((d, d))
        upper[iu] = v[d:]
        return cls(v[:d], (upper + upper.T) / 2)


def coefficient_sensitivities(d: int, linear: float, quad_index: str = "ordered") -> np.ndarray:
    """Per packed coefficient, how far replacing one row moves it: twice the per-row bound, `linear` for each
    linear coefficient (1/2 for the LR polynomial, 1/2 + alpha for the fair one) and 1/8 per ordered quadratic
    entry (1/4 per unique off-diagonal monomial). Their sum is the L1 sensitivity (delta_f, delta_f_tilde), the
    root of their sum of squares the L2 one (delta_2, delta_2_fair)."""
    return 2 * Polynomial(np.full(d, linear), np.full((d, d), TAYLOR_QUADRATIC)).pack(quad_index)


def lr_polynomial(X: np.ndarray, y: np.ndarray) -> Polynomial:
    """b = sum_i (1/2 - y_i) x_i, M = (1/8) X^T X (thesis Eqs. 3.10-3.12)."""
    return Polynomial(X.T @ (TAYLOR_LINEAR - y), TAYLOR_QUADRATIC * (X.T @ X))


def covariance_vector(X: np.ndarray, s: np.ndarray) -> np.ndarray:
    """c = sum_i (s_i - s_bar) x_i: the decision-boundary covariance g_D(w) = c^T w (thesis Eq. 3.17)."""
    return X.T @ (s - s.mean())


def fair_linear(X: np.ndarray, s: np.ndarray, fair_coef: str = "abs_elementwise") -> np.ndarray:
    """The fairness part of PFLR's linear coefficients: `abs_elementwise` sum_i |(s_i - s_bar) x_i|, Algorithm 5
    line 3 as printed (default), or `signed` sum_i (s_i - s_bar) x_i = c, the shift of the Phi_1 coefficients
    that thesis §8.3.2 reads off Eq. 8.2 (see deviation 3)."""
    if fair_coef == "signed":
        return covariance_vector(X, s)
    return X.T @ np.abs(s - s.mean())


def fair_polynomial(X, y, s, fair_coef="abs_elementwise", alpha: float = 1.0) -> Polynomial:
    """The Taylor polynomial of Eq. 8.1/8.2, f_D(w) + alpha g_D(w): b + alpha * fair_linear, M unchanged."""
    poly = lr_polynomial(X, y)
    return Polynomial(poly.b + alpha * fair_linear(X, s, fair_coef), poly.M)


def attribute_mask(feature_names: list[str], attribute: str, quad_index: str = "ordered") -> np.ndarray:
    """Boolean mask over the packed coefficients: True for Phi_s, every monomial that contains a column of
    `attribute` (pdfc.md §1.2). With one column, Phi_s holds 2d of the d + d^2 ordered coefficients."""
    cols = np.array([n == attribute or n.startswith(attribute + "=") for n in feature_names])
    if not cols.any():
        raise ConfigError(f"algo.xs_attribute={attribute!r} is not a feature of this dataset; allowed: auto, "
                          f"random or one of {attributes(feature_names)}")
    return Polynomial(cols.astype(float), (cols[:, None] | cols[None, :]).astype(float)).pack(quad_index) > 0


def attributes(feature_names: list[str]) -> list[str]:
    """Attribute names behind the encoded columns (`col=level` one-hot columns collapse to `col`)."""
    return list(dict.fromkeys(n.split("=", 1)[0] for n in feature_names))


def resolve_attribute(setting: str, data, rng: np.random.Generator) -> str:
    """x_s for `xs_attribute` (deviation 9): `auto` -> the card's first protected attribute among the features,
    else `random`; `random` -> one attribute drawn with the noise stream; anything else as given."""
    names = attributes(list(data.feature_names))
    if setting == "auto":
        protected = [a for a in (data.roles or {}).get("protected") or [] if a in names]
        setting = protected[0] if protected else "random"
    return str(rng.choice(names)) if setting == "random" else setting


# ------------------------------------------------------------------------------------------ solver
@dataclass
class Solution:
    w: np.ndarray
    kept: int
    lambda_reg: float


def minimise(poly: Polynomial, post_processing: str = "trim", reg_kappa: float = 0.0,
             noise_std: float = 0.0) -> Solution:
    """argmin_w w^T M w + b^T w (pflr.md §1.5): symmetrise, optionally add lambda_reg I with lambda_reg =
    reg_kappa * noise_std, then keep the eigen-directions with eigenvalue > EIG_TOL * max|e| (`trim`) or solve
    directly (`ridge`, positive definite only; `none`, least squares). Post-processing: no privacy cost."""
    S = (poly.M + poly.M.T) / 2
    lam = reg_kappa * noise_std if ("ridge" in post_processing or reg_kappa > 0) else 0.0
    S = S + lam * np.eye(poly.d)
    if post_processing == "none":
        return Solution(np.linalg.lstsq(2 * S, -poly.b, rcond=None)[0], poly.d, lam)
    e, Q = np.linalg.eigh(S)
    if post_processing == "ridge":
        if e[0] <= 0:
            raise ConfigError(f"post_processing=ridge: S + {lam:.3g} I is not positive definite (min eigenvalue "
                              f"{e[0]:.3g}); raise reg_kappa or use ridge+trim")
        keep = np.ones(poly.d, bool)
    else:
        keep = e > EIG_TOL * np.max(np.abs(e))
    w = -0.5 * Q[:, keep] @ ((Q[:, keep].T @ poly.b) / e[keep])
    return Solution(w, int(keep.sum()), lam)


# ------------------------------------------------------------------------------------------ plugins
class LinearClassifier(Plugin):
    """A linear model w on the features clipped into [0, 1] (+ a constant with `add_intercept`),
    y_hat = 1[x^T w > 0]. `needs_sensitive`: the algorithm reads s."""

    kind = "classifier"
    needs_sensitive = True

    @classmethod
    def requirements(cls, cfg=None):
        return ("binary_label", "features") + (("sensitive",) if cls.needs_sensitive else ())

    def __init__(self, cfg=None, mechanism=None):
        super().__init__(cfg, mechanism)
        self.info: dict[str, float] = {}

    def design(self, X: np.ndarray) -> np.ndarray:
        X = np.clip(X, 0.0, 1.0)
        return np.hstack([X, np.ones((len(X), 1))]) if self.cfg.add_intercept else X

    def check(self, data) -> None:
        """One line instead of a traceback where the data lacks what the algorithm reads."""
        if self.needs_sensitive and data.s is None:
            raise DataError(f"algo={self.name} needs a sensitive attribute; data={data.name} has none")
        if np.any((data.X < 0) | (data.X > 1)):
            self.warn(f"{self.name}: features outside [0, 1] (the bounds its sensitivity assumes) were clipped into "
                      f"[0, 1]; declare the bounds in the card of data={data.name}")

    def fit(self, data, budget, ledger, rng, device="cpu"):
        self.check(data)
        self.info = {}
        with threadpool_limits(1):  # n x d products and d x d solves: threaded BLAS only adds contention
            self.w = self.solve(self.design(data.X), data, budget, ledger, rng)
        return self

    def solve(self, X, data, budget, ledger, rng) -> np.ndarray:
        raise NotImplementedError

    def predict_proba(self, X):
        return expit(self.design(X) @ self.w)

    def predict(self, X):
        return (self.design(X) @ self.w > 0).astype(int)

    def extra_metrics(self):
        return dict(self.info)


class FunctionalMechanism(LinearClassifier):
    """Build the coefficients (`release`: noisy polynomial and the noise std of one quadratic coefficient),
    then minimise the noisy quadratic with the configured post-processing."""

    mechanisms = ("laplace",)

    def release(self, X, data, budget, ledger, rng) -> tuple[Polynomial, float]:
        raise NotImplementedError

    def noisy(self, poly: Polynomial, linear: float, scales, rng, ledger, note: str, noise: str = "laplace",
              eps: float | None = None, claim: float = 0.0) -> tuple[Polynomial, float]:
        """One release of every coefficient at per-coefficient `scales` (privacy.mechanisms.heterogeneous),
        with the per-coefficient sensitivities of a polynomial whose linear coefficients are bounded by
        `linear`; returns the noisy polynomial and the exact loss the mechanism computed."""
        q = self.cfg.quad_index
        sens = coefficient_sensitivities(poly.d, linear, q)
        v, exact = mechanisms.heterogeneous(poly.pack(q), sens, scales, rng, ledger, note, noise, eps, claim)
        return Polynomial.unpack(v, poly.d, q), exact

    def solve(self, X, data, budget, ledger, rng) -> np.ndarray:
        cfg = self.cfg
        poly, noise_std = self.release(X, data, budget, ledger, rng)
        sol = minimise(poly, cfg.post_processing, cfg.reg_kappa, noise_std)
        self.info |= {"fm_trim": float("trim" in cfg.post_processing),
                      "fm_ridge": float("ridge" in cfg.post_processing or cfg.reg_kappa > 0),
                      "fm_reg_kappa": cfg.reg_kappa, "fm_lambda_reg": sol.lambda_reg,
                      "fm_kept_eigenvalues": sol.kept, "fm_d": X.shape[1]}
        return sol.w


@register
class TaylorLR(FunctionalMechanism):
    name = "lr_taylor"
    private = False
    mechanisms = ()
    needs_sensitive = False
    Config = TaylorConfig

    def release(self, X, data, budget, ledger, rng):
        return lr_polynomial(X, data.y), 0.0


class LaplaceFM(FunctionalMechanism):
    """The functional mechanism (pflr.md §1.3): one Laplace release of the d + d^2 coefficients of
    `polynomial` with L1 sensitivity `sensitivity(d)`."""

    note = "Taylor polynomial, {d}+{d}^2 coefficients"

    def polynomial(self, X, data) -> Polynomial:
        raise NotImplementedError

    def sensitivity(self, d: int) -> float:
        raise NotImplementedError

    def laplace(self, poly: Polynomial, sens: float, eps: float, rng, ledger, note: str) -> Polynomial:
        q = self.cfg.quad_index
        return Polynomial.unpack(mechanisms.laplace(poly.pack(q), sens, eps, rng, ledger, note), poly.d, q)

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        sens = self.sensitivity(d)
        self.info["sensitivity"] = sens
        poly = self.laplace(self.polynomial(X, data), sens, budget.eps, rng, ledger, self.note.format(d=d))
        return poly, laplace_std(sens, budget.eps)


@register
class PrivLR(LaplaceFM):
    name = "privlr"
    note = "LR polynomial, {d}+{d}^2 coefficients"
    needs_sensitive = False
    Config = FMConfig

    def polynomial(self, X, data):
        return lr_polynomial(X, data.y)

    def sensitivity(self, d):
        return delta_f(d)


@register
class PFLR(LaplaceFM):
    name = "pflr"
    note = "fair LR polynomial (Algorithm 5)"
    Config = PFLRConfig

    def polynomial(self, X, data):
        self.info |= {"alpha": self.cfg.alpha, "fair_coef_signed": float(self.cfg.fair_coef == "signed")}
        return fair_polynomial(X, data.y, data.s, self.cfg.fair_coef, self.cfg.alpha)

    def sensitivity(self, d):
        return delta_f_tilde(d, self.cfg.alpha)


@register
class PFLRStar(LaplaceFM):
    name = "pflr_star"
    Config = PFLRStarConfig

    def budget_split(self, eps: float) -> tuple[float, float]:
        """(eps_f, eps_g): eps_f absolute or eps_f_ratio * eps; at eps = inf both are inf (noise-free)."""
        eps_f = self.cfg.eps_f if self.cfg.eps_f is not None else self.cfg.eps_f_ratio * eps
        if math.isinf(eps):
            return eps_f, eps
        if not eps_f < eps:
            raise ConfigError(f"algo.eps_f={eps_f:g} must be < eps={eps:g} (eps_g = eps - eps_f is mu's budget)")
        return eps_f, eps - eps_f

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        eps_f, eps_g = self.budget_split(budget.eps)
        mu = mechanisms.laplace(covariance_vector(X, data.s), delta_g(d), eps_g, rng, ledger,
                                "mu = sum_i (s_i - s_bar) x_i (Algorithm 6 lines 1-2)")
        if self.cfg.shift == "mean":
            mu = mu / len(X)
        mu = self.cfg.alpha * mu  # post-processing of the released mu
        sens = delta_f(d)
        poly = self.laplace(lr_polynomial(X, data.y), sens, eps_f, rng, ledger, "LR polynomial (Algorithm 6 lines 3-6)")
        self.info |= {"eps_f": eps_f, "eps_g": eps_g, "sensitivity": sens, "sensitivity_g": delta_g(d),
                      "alpha": self.cfg.alpha, "shift_mean": float(self.cfg.shift == "mean")}
        return Polynomial(poly.b + mu, poly.M), laplace_std(sens, eps_f)

    def fit(self, data, budget, ledger, rng, device="cpu"):
        """The release, then the A4 coding check on the training rows (`a4_taylor_train_gap`): the shift lowers
        the scores of s = 1, so it narrows the gap only if the noise-free Taylor LR favours s = 1."""
        super().fit(data, budget, ledger, rng, device)
        X = self.design(data.X)
        w = minimise(lr_polynomial(X, data.y)).w
        rates = metrics.GroupRates(data.y, (X @ w > 0).astype(int), data.s).by_group()
        gap = rates[1]["positive_rate"] - rates[0]["positive_rate"]
        if gap < 0:
            self.warn(f"pflr_star: the group coded s=1 is not favoured by Taylor LR (train gap {gap:.3f}); "
                      "the PFLR* shift will widen the disparity - check the card's `privileged` (pflr.md A4)")
        self.info["a4_taylor_train_gap"] = gap
        return self


class GaussianNoise:
    """Mixin of the Gaussian members (relaxed_fm, adfc, pdfc.md §2.3, §2.5): (eps, delta)-DP, so a run needs
    delta > 0."""

    mechanisms = ("gaussian",)
    noise = "gaussian"
    needs_delta = True
    guarantee = "(eps,delta)-DP"


@register
class RelaxedFM(GaussianNoise, FunctionalMechanism):
    """Ding et al. Algorithm 2 (pdfc.md §2.3): Gaussian noise on every coefficient of the LR polynomial, L2
    sensitivity Delta_2 = sqrt(d^2/16 + d), sigma by `calibration` (deviation 8)."""

    name = "relaxed_fm"
    needs_sensitive = False
    Config = RelaxedFMConfig

    def release(self, X, data, budget, ledger, rng):
        sens = delta_2(X.shape[1])
        sigma = gaussian_sigma(self.cfg.calibration, sens, budget.eps, budget.delta)
        poly, delta_exact = self.noisy(lr_polynomial(X, data.y), TAYLOR_LINEAR, sigma, rng, ledger,
                                       f"LR polynomial (Algorithm 2), {self.cfg.calibration} sigma", "gaussian",
                                       budget.eps, budget.delta)
        self.info |= {"sensitivity": sens, "sigma": sigma, "delta_exact": delta_exact}
        return poly, sigma


FAIR_LINEAR = TAYLOR_LINEAR + 1.0  # |1/2 - y + |s - s_bar|| <= 3/2: the fair polynomial's linear bound (alpha = 1)


class CalibratedFM(FunctionalMechanism):
    """PDFC / ADFC: the PFLR polynomial with a smaller budget eps_s on Phi_s (the coefficients touching x_s),
    released at once by the heterogeneous mechanism (`noise`: laplace | gaussian) at the members' `scales`."""

    noise: ClassVar[str] = "laplace"

    def split(self, eps: float, d: int) -> tuple[float, float]:
        """(eps_s, eps_n) with eps_s = eps_ratio eps_n and the paper's eps = eps_s/d + (d-1) eps_n/d (B1)."""
        eps_n = eps * d / (self.cfg.eps_ratio + d - 1)
        return self.cfg.eps_ratio * eps_n, eps_n

    def mask(self, data, d, rng) -> np.ndarray:
        names = list(data.feature_names) + (["intercept"] if d > len(data.feature_names) else [])
        self.attribute = resolve_attribute(self.cfg.xs_attribute, data, rng)
        return attribute_mask(names, self.attribute, self.cfg.quad_index)

    def fair_polynomial(self, X, data) -> Polynomial:
        return fair_polynomial(X, data.y, data.s, self.cfg.fair_coef)

    def scales(self, d: int, eps_s: float, eps_n: float, eps_paper: float, delta: float) -> tuple[float, ...]:
        """(noise scale on Phi_s, on Phi_n, the guarantee the paper reports: its eps or delta)."""
        raise NotImplementedError

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        mask = self.mask(data, d, rng)
        eps_s, eps_n = self.split(budget.eps, d)
        eps_paper = eps_s / d + (d - 1) * eps_n / d  # Algorithm 1 line 25, Algorithm 3 line 26 (B2)
        scale_s, scale_n, claim = self.scales(d, eps_s, eps_n, eps_paper, budget.delta)
        poly, exact = self.noisy(self.fair_polynomial(X, data), FAIR_LINEAR, np.where(mask, scale_s, scale_n), rng,
                                 ledger, f"fair LR polynomial ({self.name}), x_s={self.attribute}", self.noise,
                                 eps_paper, claim)
        self.info |= {"eps_s": eps_s, "eps_n": eps_n, "eps_paper": eps_paper, "phi_s_size": int(mask.sum()),
                      ("eps_exact" if self.noise == "laplace" else "delta_exact"): exact}
        return poly, scale_n * (math.sqrt(2) if self.noise == "laplace" else 1.0)  # std of one Phi_n coefficient


@register
class PDFC(CalibratedFM):
    """Ding et al. Algorithm 1 (pdfc.md §2.4): Laplace, eps_s on Phi_s and eps_n on Phi_n."""

    name = "pdfc"
    Config = PDFCConfig

    def scales(self, d, eps_s, eps_n, eps_paper, delta):
        """Laplace Delta_1/eps_s and Delta_1/eps_n with Delta_1 = d^2/4 + 3d (Lemma 2); reports eps_paper."""
        sens = self.info["sensitivity"] = delta_f_tilde(d)
        return sens / eps_s, sens / eps_n, eps_paper


@register
class ADFC(GaussianNoise, CalibratedFM):
    """Ding et al. Algorithm 3 (pdfc.md §2.5): Gaussian, (eps_s, delta_s) on Phi_s and (eps_n, delta_n) on Phi_n."""

    name = "adfc"
    Config = ADFCConfig

    def scales(self, d, eps_s, eps_n, eps_paper, delta):
        """sigma_s, sigma_n for (eps_s, delta_half), (eps_n, delta_half) and Delta_2' = sqrt(d^2/16 + 9d)
        (Lemma 4), delta_half = 1 - sqrt(1 - delta); reports delta = 1 - (1 - delta_half)^2 (B1)."""
        delta_half = 1 - math.sqrt(1 - delta)
        sens = self.info["sensitivity"] = delta_2_fair(d)
        sigma_s, sigma_n = (gaussian_sigma(self.cfg.calibration, sens, e, delta_half) for e in (eps_s, eps_n))
        delta_paper = 1 - (1 - delta_half) ** 2
        self.info |= {"sigma_s": sigma_s, "sigma_n": sigma_n, "delta_paper": delta_paper}
        return sigma_s, sigma_n, delta_paper


@register
class FairLR(LinearClassifier):
    """FairLR (thesis Eqs. 3.16-3.17): LR subject to -tau <= c^T w <= tau. `objective: exact` (Eq. 3.9, default)
    or `taylor` (the Eq. 3.10 polynomial that thesis §8.3.2 calls "the regular logistic regression"). `mode:
    constraint` solves tau = 0 exactly in the null space of c (w = P v, P = I - c c^T / c^T c) and tau > 0 by
    SLSQP; `mode: penalty` minimises f(w) + alpha |c^T w - tau| (Eq. 8.1 form, |.| smoothed at 1e-6)."""

    name = "fairlr"
    private = False
    Config = FairLRConfig

    def solve(self, X, data, budget, ledger, rng) -> np.ndarray:
        c = covariance_vector(X, data.s)
        w = self.constrained(X, data.y, c)
        self.info = {"constraint_value": float(c @ w), "tau": self.cfg.tau,
                     "objective_taylor": float(self.cfg.objective == "taylor")}
        return w

    def constrained(self, X, y, c) -> np.ndarray:
        cfg = self.cfg
        taylor = lr_polynomial(X, y) if cfg.objective == "taylor" else None
        if cfg.mode == "constraint" and cfg.tau == 0:
            P = np.eye(len(c)) - np.outer(c, c) / (c @ c)
            if taylor is not None:  # the c direction has eigenvalue 0 in P M P and is trimmed
                return P @ minimise(Polynomial(P @ taylor.b, P @ taylor.M @ P)).w
            return P @ fit_logistic(X @ P, y, l2=cfg.l2, intercept=False)

        def loss(w):
            if taylor is None:
                z = X @ w
                f, g = np.sum(np.logaddexp(0.0, z) - y * z), X.T @ (expit(z) - y)
            else:
                f, g = taylor.b @ w + w @ taylor.M @ w, taylor.b + (taylor.M + taylor.M.T) @ w
            f, g = f + 0.5 * cfg.l2 * w @ w, g + cfg.l2 * w
            if cfg.mode == "penalty":
                u = c @ w - cfg.tau
                f, g = f + cfg.alpha * np.sqrt(u * u + 1e-12), g + cfg.alpha * u / np.sqrt(u * u + 1e-12) * c
            return f, g

        w0 = np.zeros(len(c))
        if cfg.mode == "penalty":
            return minimize(loss, w0, jac=True, method="L-BFGS-B").x
        cons = [{"type": "ineq", "fun": lambda w: cfg.tau - c @ w, "jac": lambda w: -c},
                {"type": "ineq", "fun": lambda w: cfg.tau + c @ w, "jac": lambda w: c}]
        return minimize(loss, w0, jac=True, method="SLSQP", constraints=cons, options={"maxiter": 500}).x
