"""The controls: the distinguishing test on a vectorised release (`audit_mechanism`), and the control table of
docs/audit.md, the mechanisms of `privfair_cli.privacy` correct and deliberately broken on a count the canary moves
by 1. A test that passes a broken mechanism would prove nothing about the plugins. The tightness rows run 10,000
trials: the threshold test on the Laplace mechanism, the parametric GDP bound (`bounds.gdp_eps`) on the Gaussian,
whose extra loss the threshold test cannot see at these counts (it lies in tails of probability near delta)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from privfair_cli.tools.audit.bounds import Distinguished, distinguish, gdp_eps, gdp_mu_lower, refutes
from privfair_cli.tools.audit.options import OPTIONS

TRIALS, CONFIDENCE = OPTIONS["trials"][0], OPTIONS["confidence"][0]


def audit_mechanism(release: Callable[[int, np.random.Generator, int], np.ndarray], eps: float, delta: float = 0.0,
                    trials: int = TRIALS, confidence: float = CONFIDENCE,
                    seed: int = 0) -> tuple[Distinguished, bool]:
    """The distinguishing test on a vectorised release: `release(side, rng, n)` returns the statistics of n
    independent releases on D (side 0) or D' (side 1). Returns the result and whether it refutes (eps, delta)."""
    out = [np.asarray(release(side, np.random.default_rng([seed, 24, side]), trials), dtype=float)
           for side in (0, 1)]
    res = distinguish(out[0], out[1], delta, confidence)
    return res, refutes(res.eps_lb, eps)


def mechanism_rows(trials: int = TRIALS, confidence: float = CONFIDENCE) -> list[dict]:
    """The control table: the mechanisms of privfair_cli.privacy, correct and deliberately broken, on a count the
    canary moves by 1, at the default trials (randomised response also at 200,000, its known answer)."""
    from privfair_cli.privacy import Budget, PrivacyLedger, mechanisms

    def laplace(sens):
        return lambda side, rng, n: mechanisms.laplace(np.full(n, float(side)), sens, 1.0, rng,
                                                       PrivacyLedger(Budget(1.0)))

    def gaussian(sens):
        return lambda side, rng, n: mechanisms.gaussian(np.full(n, float(side)), sens, 1.0, 1e-5, rng,
                                                        PrivacyLedger(Budget(1.0, 1e-5)), calibration="analytic")

    def rr(eps):
        q = math.exp(eps) / (1 + math.exp(eps))
        return lambda side, rng, n: np.where(rng.random(n) < q, side, 1 - side).astype(float)

    cases = [("randomised response, eps = 1", rr(1.0), 0.0, 200_000),
             ("randomised response, eps = 1", rr(1.0), 0.0, trials),
             ("Laplace", laplace(1.0), 0.0, trials), ("Laplace, sensitivity halved", laplace(0.5), 0.0, trials),
             ("Laplace, noise / 10", laplace(0.1), 0.0, trials),
             ("Gaussian (analytic)", gaussian(1.0), 1e-5, trials),
             ("Gaussian, sensitivity halved", gaussian(0.5), 1e-5, trials),
             ("Gaussian, noise / 10", gaussian(0.1), 1e-5, trials)]
    cases.append(("Laplace", laplace(1.0), 0.0, TIGHT_TRIALS))
    rows = []
    for name, release, delta, n in cases:
        res, refuted = audit_mechanism(release, 1.0, delta, trials=n, confidence=confidence)
        rows.append({"mechanism": name, "delta": delta, "trials": n, "eps_lb": res.eps_lb,
                     "verdict": "fail" if refuted else "pass"})
    for name, release in (("Gaussian (analytic), GDP bound", gaussian(1.0)),
                          ("Gaussian, sensitivity halved, GDP bound", gaussian(0.5))):
        lb = gaussian_bound(release, 1e-5, TIGHT_TRIALS, confidence)
        rows.append({"mechanism": name, "delta": 1e-5, "trials": TIGHT_TRIALS, "eps_lb": lb,
                     "verdict": "fail" if refutes(lb, 1.0) else "pass"})
    return rows


TIGHT_TRIALS = 10_000  # the controls that measure tightness (the goal: a bound >= 0.8 of the claim)


def gaussian_bound(release, delta: float, trials: int, confidence: float = CONFIDENCE, seed: int = 0) -> float:
    """The parametric (GDP) lower bound on the eps at `delta` of a Gaussian release (`bounds.gdp_mu_lower`)."""
    out = [np.asarray(release(side, np.random.default_rng([seed, 24, side]), trials), dtype=float)
           for side in (0, 1)]
    return gdp_eps(gdp_mu_lower(out[0], out[1], confidence), delta)
