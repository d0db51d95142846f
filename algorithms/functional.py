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

Shared pieces, written once: `Polynomial` (linear vector b, quadratic matrix M, packing of the d + d^2
coefficients), the coefficient builders (`lr_polynomial`, `fair_linear`, `covariance_vector`), the
sensitivities, `perturb` (independent noise per coefficient at per-coefficient scales) and `minimise`
(the noisy-quadratic solver of pflr.md §1.5). Every release is recorded in the run's ledger before its noise
is drawn; sensitivities come from d and the declared [0, 1] feature bounds, never from the data.

Deviations and choices (each a config key where the spec asks for one):

1. Boundedness of the noisy objective (pflr.md A1, pdfc.md B8; not in either paper): `post_processing`
   trim (default) | ridge | ridge+trim | none, with `reg_kappa` (default 0); lambda_reg = reg_kappa times the
   noise std of one quadratic coefficient (sqrt(2) Delta/eps for Laplace, sigma for Gaussian). Recorded in every
   run's metrics (`fm_trim`, `fm_ridge`, `fm_reg_kappa`, `fm_lambda_reg`, `fm_kept_eigenvalues`).
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
   released mu (post-processing, no privacy cost). `eps_f` (absolute) or `eps_f_ratio` (default 0.5, Table
   8.1) split the budget.
7. PDFC/ADFC split (B1, not in the paper): `eps_ratio = eps_s/eps_n` (default 0.1) with the paper's
   accounting eps = eps_s/d + (d-1) eps_n/d; ADFC's delta_s = delta_n = 1 - sqrt(1 - delta). The ledger records
   the larger of the paper's figure and the exact bound of pdfc.md §2.4/§2.5 (eps_exact for Laplace; the exact
   Gaussian privacy profile at the reported eps for ADFC), so a split whose paper figure understates the loss
   (eps_ratio > 1, B3) cannot pass the budget. Theorem 5's `/2` is read as `/d` (B2).
8. Extended Gaussian sigma with A = ln(sqrt(2/pi)/delta) (B4). `calibration: classic | analytic` use the core's
   calibrations instead (mechanism config `gaussian` sets it too).
9. `x_s` (`xs_attribute`): a feature name or the prefix of a one-hot block (`race`, `marital-status`); all its
   columns join Phi_s (B6). `random` draws one attribute with the noise stream, as the paper's text says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_ndtr
from threadpoolctl import threadpool_limits

from privfair_cli import metrics
from privfair_cli.algorithms.logistic import fit_logistic
from privfair_cli.errors import ConfigError
from privfair_cli.privacy import mechanisms
from privfair_cli.registry import Plugin, register

TAYLOR_LINEAR = 0.5  # f1'(0)/1! of f1(z) = log(1 + e^z)
TAYLOR_QUADRATIC = 0.125  # f1''(0)/2!
POST_PROCESSING = ("trim", "ridge", "ridge+trim", "none")


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


def extended_gaussian_sigma(sensitivity: float, eps: float, delta: float) -> float:
    """Ding et al. Theorem 2: sigma = sqrt(2) Delta / (2 eps) (sqrt(A) + sqrt(A + eps)), A = ln(sqrt(2/pi)/delta)."""
    a = math.log(math.sqrt(2 / math.pi) / delta)
    if not (eps > 0 and a > 0):
        raise ConfigError(f"extended Gaussian needs eps > 0 and delta < sqrt(2/pi) (got eps={eps}, delta={delta})")
    return math.sqrt(2) * sensitivity / (2 * eps) * (math.sqrt(a) + math.sqrt(a + eps))


def gaussian_exact_delta(r: float, eps: float) -> float:
    """delta(eps) of a unit-variance Gaussian mechanism with L2 sensitivity r (Balle & Wang 2018, Thm 8)."""
    return float(np.exp(log_ndtr(r / 2 - eps / r)) - np.exp(eps + log_ndtr(-r / 2 - eps / r)))


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
    if fair_coef == "abs_elementwise":
        return X.T @ np.abs(s - s.mean())
    if fair_coef == "signed":
        return covariance_vector(X, s)
    raise ConfigError(f"fair_coef={fair_coef!r} is unknown; allowed: signed, abs_elementwise")


def fair_polynomial(X, y, s, fair_coef="abs_elementwise", alpha: float = 1.0) -> Polynomial:
    """The Taylor polynomial of Eq. 8.1/8.2, f_D(w) + alpha g_D(w): b + alpha * fair_linear, M unchanged."""
    poly = lr_polynomial(X, y)
    return Polynomial(poly.b + alpha * fair_linear(X, s, fair_coef), poly.M)


def attribute_mask(feature_names: list[str], attribute: str, quad_index: str = "ordered") -> np.ndarray:
    """Boolean mask over the packed coefficients: True for Phi_s, every monomial that contains a column of
    `attribute` (pdfc.md §1.2). With one column, Phi_s holds 2d of the d + d^2 ordered coefficients."""
    cols = np.array([n == attribute or n.startswith(attribute + "=") for n in feature_names])
    if not cols.any():
        raise ConfigError(f"algo.xs_attribute={attribute!r} is not a feature of this dataset; allowed: random or "
                          f"one of {attributes(feature_names)}")
    return Polynomial(cols.astype(float), (cols[:, None] | cols[None, :]).astype(float)).pack(quad_index) > 0


def attributes(feature_names: list[str]) -> list[str]:
    """Attribute names behind the encoded columns (`col=level` one-hot columns collapse to `col`)."""
    return list(dict.fromkeys(n.split("=", 1)[0] for n in feature_names))


# ------------------------------------------------------------------------------------------ mechanism
def perturb(poly: Polynomial, scale, noise: str, rng: np.random.Generator, quad_index: str = "ordered"):
    """Independent noise on every released coefficient: Laplace with scale `scale` or Gaussian with std
    `scale` (a number or one value per packed coefficient). The caller has recorded the release already."""
    v = poly.pack(quad_index)
    draw = rng.laplace if noise == "laplace" else rng.normal
    return Polynomial.unpack(v + draw(0.0, 1.0, size=v.shape) * scale, poly.d, quad_index)


def laplace_fm(poly: Polynomial, sensitivity: float, eps: float, rng, ledger, note: str,
               quad_index: str = "ordered") -> Polynomial:
    """The functional mechanism (pflr.md §1.3): one Laplace release of the d + d^2 coefficients."""
    v = mechanisms.laplace(poly.pack(quad_index), sensitivity, eps, rng, ledger, note)
    return Polynomial.unpack(v, poly.d, quad_index)


@dataclass
class Solution:
    w: np.ndarray
    kept: int
    lambda_reg: float


def minimise(poly: Polynomial, post_processing: str = "trim", reg_kappa: float = 0.0, noise_std: float = 0.0,
             eig_tol: float = 1e-10) -> Solution:
    """argmin_w w^T M w + b^T w (pflr.md §1.5): symmetrise, optionally add lambda_reg I with lambda_reg =
    reg_kappa * noise_std, then keep the eigen-directions with eigenvalue > eig_tol * max|e| (`trim`) or solve
    directly (`ridge`, positive definite only; `none`, least squares). Post-processing: no privacy cost."""
    if post_processing not in POST_PROCESSING:
        raise ConfigError(f"post_processing={post_processing!r} is unknown; allowed: {', '.join(POST_PROCESSING)}")
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
        keep = e > eig_tol * np.max(np.abs(e))
    w = -0.5 * Q[:, keep] @ ((Q[:, keep].T @ poly.b) / e[keep])
    return Solution(w, int(keep.sum()), lam)


# ------------------------------------------------------------------------------------------ plugins
class LinearClassifier(Plugin):
    """A linear model w on the [0,1] features (+ a constant with `add_intercept`), y_hat = 1[x^T w > 0]."""

    kind = "classifier"

    def __init__(self, **params):
        super().__init__(**params)
        self.info: dict[str, float] = {}

    def design(self, X: np.ndarray) -> np.ndarray:
        return np.hstack([X, np.ones((len(X), 1))]) if self.params.get("add_intercept", False) else X

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

    @property
    def quad_index(self) -> str:
        q = self.params.get("quad_index", "ordered")
        if q not in ("ordered", "unique"):
            raise ConfigError(f"quad_index={q!r} is unknown; allowed: ordered, unique")
        return q

    def fit(self, data, budget, ledger, rng, device="cpu"):
        X = self.design(data.X)
        self.info = {}
        pp, kappa = self.params.get("post_processing", "trim"), float(self.params.get("reg_kappa", 0.0))
        with threadpool_limits(1):  # one n x d product and a d x d eigh: threaded BLAS only adds contention
            poly, noise_std = self.release(X, data, budget, ledger, rng)
            sol = minimise(poly, pp, kappa, noise_std, float(self.params.get("eig_tol", 1e-10)))
        self.w = sol.w
        self.info |= {"fm_trim": float("trim" in pp), "fm_ridge": float("ridge" in pp or kappa > 0),
                      "fm_reg_kappa": kappa, "fm_lambda_reg": sol.lambda_reg,
                      "fm_kept_eigenvalues": sol.kept, "fm_d": X.shape[1]}
        return self


@register
class TaylorLR(FunctionalMechanism):
    name = "lr_taylor"
    private = False
    mechanisms = ()

    def release(self, X, data, budget, ledger, rng):
        return lr_polynomial(X, data.y), 0.0


@register
class PrivLR(FunctionalMechanism):
    name = "privlr"

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        sens = delta_f(d)
        self.info["sensitivity"] = sens
        poly = laplace_fm(lr_polynomial(X, data.y), sens, budget.eps, rng, ledger,
                          f"LR polynomial, {d}+{d}^2 coefficients", self.quad_index)
        return poly, math.sqrt(2) * sens / budget.eps


def penalty_weight(params) -> float:
    """alpha of Eq. 8.1 (the thesis sets alpha = 1 "for ease of discussion"; the analysis holds for any alpha)."""
    alpha = float(params.get("alpha", 1.0))
    if not alpha >= 0:
        raise ConfigError(f"alpha={alpha} must be >= 0")
    return alpha


@register
class PFLR(FunctionalMechanism):
    name = "pflr"

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        alpha = penalty_weight(self.params)
        fair_coef = self.params.get("fair_coef", "abs_elementwise")
        sens = delta_f_tilde(d, alpha)
        self.info |= {"sensitivity": sens, "alpha": alpha, "fair_coef_signed": float(fair_coef == "signed")}
        poly = fair_polynomial(X, data.y, data.s, fair_coef, alpha)
        poly = laplace_fm(poly, sens, budget.eps, rng, ledger, "fair LR polynomial (Algorithm 5)", self.quad_index)
        return poly, math.sqrt(2) * sens / budget.eps


@register
class PFLRStar(FunctionalMechanism):
    name = "pflr_star"

    def budget_split(self, eps: float) -> tuple[float, float]:
        eps_f = self.params.get("eps_f")
        eps_f = float(eps_f) if eps_f is not None else float(self.params.get("eps_f_ratio", 0.5)) * eps
        if not 0 < eps_f < eps:
            raise ConfigError(f"pflr_star: eps_f={eps_f:g} must lie strictly between 0 and eps={eps:g}")
        return eps_f, eps - eps_f

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        eps_f, eps_g = self.budget_split(budget.eps)
        mu = mechanisms.laplace(covariance_vector(X, data.s), delta_g(d), eps_g, rng, ledger,
                                "mu = sum_i (s_i - s_bar) x_i (Algorithm 6 lines 1-2)")
        shift, alpha = self.params.get("shift", "literal"), penalty_weight(self.params)
        if shift == "mean":
            mu = mu / len(X)
        elif shift != "literal":
            raise ConfigError(f"pflr_star shift={shift!r} is unknown; allowed: literal, mean")
        mu = alpha * mu  # post-processing of the released mu
        sens = delta_f(d)
        poly = laplace_fm(lr_polynomial(X, data.y), sens, eps_f, rng, ledger,
                          "LR polynomial (Algorithm 6 lines 3-6)", self.quad_index)
        self.info |= {"eps_f": eps_f, "eps_g": eps_g, "sensitivity": sens, "sensitivity_g": delta_g(d),
                      "alpha": alpha, "shift_mean": float(shift == "mean")}
        return Polynomial(poly.b + mu, poly.M), math.sqrt(2) * sens / eps_f

    def evaluate(self, train, test, rng):
        """Default classifier metrics plus the A4 coding check: the shift lowers the scores of s = 1, so it
        narrows the gap only if the noise-free Taylor LR favours s = 1 on the training data."""
        out = metrics.classification(test.y, self.predict(test.X), test.s)
        X = self.design(train.X)
        w = minimise(lr_polynomial(X, train.y)).w
        rates = metrics.GroupRates(train.y, (X @ w > 0).astype(int), train.s).by_group()
        gap = rates[1]["positive_rate"] - rates[0]["positive_rate"]
        if gap < 0:
            print(f"warning: pflr_star: the group coded s=1 is not favoured by Taylor LR (train gap {gap:.3f}); "
                  "the PFLR* shift will widen the disparity - check the card's `privileged` (pflr.md A4)")
        return out | {"a4_taylor_train_gap": gap}


@register
class RelaxedFM(FunctionalMechanism):
    name = "relaxed_fm"
    mechanisms = ("gaussian",)
    needs_delta = True

    def sigma(self, sensitivity, eps, delta) -> float:
        calibration = (self.params.get("mechanism") or {}).get("calibration") or self.params.get(
            "calibration", "extended")
        if calibration == "extended":
            return extended_gaussian_sigma(sensitivity, eps, delta)
        if calibration == "classic":
            return mechanisms.gaussian_sigma_classic(sensitivity, eps, delta)
        if calibration == "analytic":
            return mechanisms.gaussian_sigma_analytic(sensitivity, eps, delta)
        raise ConfigError(f"calibration={calibration!r} is unknown; allowed: extended, classic, analytic")

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        sens = delta_2(d)
        sigma = self.sigma(sens, budget.eps, budget.delta)
        ledger.spend_approx("gaussian_extended", budget.eps, budget.delta, sens, "LR polynomial (Algorithm 2)")
        self.info |= {"sensitivity": sens, "sigma": sigma}
        return perturb(lr_polynomial(X, data.y), sigma, "gaussian", rng, self.quad_index), sigma


class CalibratedFM(FunctionalMechanism):
    """PDFC / ADFC: the PFLR polynomial with a smaller budget eps_s on Phi_s (the coefficients touching x_s)."""

    def split(self, eps: float, d: int) -> tuple[float, float]:
        ratio = float(self.params.get("eps_ratio", 0.1))
        if not ratio > 0:
            raise ConfigError(f"{self.name}: eps_ratio={ratio} must be > 0")
        eps_n = eps * d / (ratio + d - 1)
        return ratio * eps_n, eps_n

    def mask(self, data, d, rng) -> np.ndarray:
        names = list(data.feature_names) + (["intercept"] if d > len(data.feature_names) else [])
        attribute = self.params.get("xs_attribute", "random")
        if attribute == "random":
            attribute = str(rng.choice(attributes(list(data.feature_names))))
        self.attribute = attribute
        return attribute_mask(names, attribute, self.quad_index)

    def fair_polynomial(self, X, data) -> Polynomial:
        return fair_polynomial(X, data.y, data.s, self.params.get("fair_coef", "abs_elementwise"))

    @staticmethod
    def row_mass(mask: np.ndarray, d: int, quad_index: str, power: int) -> float:
        """max over rows of sum_{phi in mask} |coefficient bound|^power, with the per-coordinate bounds of the
        fair polynomial (3/2 linear; 1/8 per ordered quadratic entry, 1/4 per unique off-diagonal monomial)."""
        bound = Polynomial(np.full(d, 1.5), np.full((d, d), TAYLOR_QUADRATIC)).pack(quad_index)
        return float(np.sum(bound[mask] ** power))


@register
class PDFC(CalibratedFM):
    name = "pdfc"

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        mask = self.mask(data, d, rng)
        eps_s, eps_n = self.split(budget.eps, d)
        sens = delta_f_tilde(d)
        b_s = 2 * self.row_mass(mask, d, self.quad_index, 1)  # twice the largest per-row L1 mass of Phi_s
        eps_paper = eps_s / d + (d - 1) * eps_n / d
        eps_exact = (eps_s * b_s + eps_n * (sens - b_s)) / sens
        ledger.spend_pure("laplace_calibrated", max(eps_paper, eps_exact), sens,
                          f"fair LR polynomial (Algorithm 1), x_s={self.attribute}")
        scale = np.where(mask, sens / eps_s, sens / eps_n)
        self.info |= {"sensitivity": sens, "eps_s": eps_s, "eps_n": eps_n, "eps_paper": eps_paper,
                      "eps_exact": eps_exact, "phi_s_size": int(mask.sum())}
        poly = perturb(self.fair_polynomial(X, data), scale, "laplace", rng, self.quad_index)
        return poly, math.sqrt(2) * sens / eps_n


@register
class ADFC(CalibratedFM):
    name = "adfc"
    mechanisms = ("gaussian",)
    needs_delta = True

    def release(self, X, data, budget, ledger, rng):
        d = X.shape[1]
        mask = self.mask(data, d, rng)
        eps_s, eps_n = self.split(budget.eps, d)
        delta_half = 1 - math.sqrt(1 - budget.delta)
        sens = delta_2_fair(d)
        sigma_s = extended_gaussian_sigma(sens, eps_s, delta_half)
        sigma_n = extended_gaussian_sigma(sens, eps_n, delta_half)
        eps_paper = eps_s / d + (d - 1) * eps_n / d
        delta_paper = 1 - (1 - delta_half) ** 2
        # squared sensitivity per coordinate: (2 * 3/2)^2 linear, (2/8)^2 quadratic -> 4 * bound^2
        s2_s = 4 * self.row_mass(mask, d, self.quad_index, 2)
        s2_n = 4 * self.row_mass(~mask, d, self.quad_index, 2)
        r = math.sqrt(s2_s / sigma_s**2 + s2_n / sigma_n**2)
        delta_exact = gaussian_exact_delta(r, eps_paper)
        ledger.spend_approx("gaussian_calibrated", eps_paper, max(delta_paper, delta_exact), sens,
                            f"fair LR polynomial (Algorithm 3), x_s={self.attribute}")
        scale = np.where(mask, sigma_s, sigma_n)
        self.info |= {"sensitivity": sens, "eps_s": eps_s, "eps_n": eps_n, "sigma_s": sigma_s,
                      "sigma_n": sigma_n, "eps_paper": eps_paper, "delta_paper": delta_paper,
                      "delta_exact": delta_exact, "phi_s_size": int(mask.sum())}
        return perturb(self.fair_polynomial(X, data), scale, "gaussian", rng, self.quad_index), sigma_n


@register
class FairLR(LinearClassifier):
    """FairLR (thesis Eqs. 3.16-3.17): LR subject to -tau <= c^T w <= tau. `objective: exact` (Eq. 3.9, default)
    or `taylor` (the Eq. 3.10 polynomial that thesis §8.3.2 calls "the regular logistic regression"). `mode:
    constraint` solves tau = 0 exactly in the null space of c (w = P v, P = I - c c^T / c^T c) and tau > 0 by
    SLSQP; `mode: penalty` minimises f(w) + alpha |c^T w - tau| (Eq. 8.1 form, |.| smoothed at 1e-6)."""

    name = "fairlr"
    private = False

    def fit(self, data, budget, ledger, rng, device="cpu"):
        X = self.design(data.X)
        c = covariance_vector(X, data.s)
        tau = float(self.params.get("tau", 0.0))
        mode = self.params.get("mode", "constraint")
        objective = self.params.get("objective", "exact")
        if objective not in ("exact", "taylor"):
            raise ConfigError(f"fairlr objective={objective!r} is unknown; allowed: exact, taylor")
        with threadpool_limits(1):
            self.w = self.solve(X, data.y, c, tau, mode, objective, float(self.params.get("l2", 1e-6)))
        self.info = {"constraint_value": float(c @ self.w), "tau": tau,
                     "objective_taylor": float(objective == "taylor")}
        return self

    def solve(self, X, y, c, tau, mode, objective, l2) -> np.ndarray:
        taylor = lr_polynomial(X, y) if objective == "taylor" else None
        if mode == "constraint" and tau == 0:
            P = np.eye(len(c)) - np.outer(c, c) / (c @ c)
            if taylor is not None:  # the c direction has eigenvalue 0 in P M P and is trimmed
                return P @ minimise(Polynomial(P @ taylor.b, P @ taylor.M @ P)).w
            return P @ fit_logistic(X @ P, y, l2=l2, intercept=False)
        elif mode in ("constraint", "penalty"):
            alpha = float(self.params.get("alpha", 1.0))

            def loss(w):
                if taylor is None:
                    z = X @ w
                    f, g = np.sum(np.logaddexp(0.0, z) - y * z), X.T @ (expit(z) - y)
                else:
                    f, g = taylor.b @ w + w @ taylor.M @ w, taylor.b + (taylor.M + taylor.M.T) @ w
                f, g = f + 0.5 * l2 * w @ w, g + l2 * w
                if mode == "penalty":
                    u = c @ w - tau
                    f, g = f + alpha * np.sqrt(u * u + 1e-12), g + alpha * u / np.sqrt(u * u + 1e-12) * c
                return f, g

            w0 = np.zeros(len(c))
            if mode == "penalty":
                return minimize(loss, w0, jac=True, method="L-BFGS-B").x
            cons = [{"type": "ineq", "fun": lambda w: tau - c @ w, "jac": lambda w: -c},
                    {"type": "ineq", "fun": lambda w: tau + c @ w, "jac": lambda w: c}]
            return minimize(loss, w0, jac=True, method="SLSQP", constraints=cons, options={"maxiter": 500}).x
        raise ConfigError(f"fairlr mode={mode!r} is unknown; allowed: constraint, penalty")
