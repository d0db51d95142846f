"""The release view of the distinguishing test: every noisy release of a fit goes through `privfair_cli.privacy`
and is recorded (`Recording`); the fit is replayed on the neighbouring dataset with the same noise seed and forced
to the same outputs, which gives the values that dataset would have released, and the statistic is the exact
log-likelihood ratio of the transcript (Laplace and Gaussian densities, exponential-mechanism logits)."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from privfair_cli.privacy import NoiseSource
from privfair_cli.tools.audit.fitting import Setup, fit


class Diverged(Exception):
    """The replayed fit asked for other releases than the recorded one (noise drawn outside NoiseSource)."""


class Recording(NoiseSource):
    """A seeded NoiseSource that logs every release (kind, value, scale, output). With `replay` (the log of a fit
    on the neighbouring dataset with the same seed) it draws the same noise, so its generator stays in step, but
    returns the recorded outputs: the fit then follows the same transcript and logs the values its own data would
    have released, which gives the exact likelihood ratio of the transcript."""

    def __init__(self, seed, replay=None):
        super().__init__(np.random.PCG64(np.random.SeedSequence(list(seed))))
        self.log, self.replay = [], replay

    def _recorded(self, kind, shape):
        k = len(self.log)
        if self.replay is None:
            return None
        if k >= len(self.replay) or self.replay[k][0] != kind or np.shape(self.replay[k][3]) != shape:
            raise Diverged(f"release {k} ({kind}) differs between the neighbouring fits")
        return self.replay[k][3]

    def _add(self, value, scale, kind):
        out = super()._add(value, scale, kind)
        forced = self._recorded(kind, np.shape(out))
        out = out if forced is None else np.array(forced, dtype=float)
        v = np.asarray(value, dtype=float)
        self.log.append((kind, v.copy(), np.broadcast_to(np.asarray(scale, dtype=float), v.shape).copy(),
                         out.copy()))
        return out

    def select(self, logits):
        i = super().select(logits)
        forced = self._recorded("select", ())
        i = i if forced is None else int(forced)
        self.log.append(("select", np.asarray(logits, dtype=float).copy(), None, i))
        return i


def log_likelihood(log) -> float:
    """log P(transcript | the values logged): Laplace and Gaussian densities, exponential-mechanism logits."""
    total = 0.0
    for kind, v, scale, out in log:
        if kind == "select":
            total += float(v[out] - logsumexp(v)) if np.isfinite(v[out]) else -math.inf
            continue
        o = np.asarray(out, dtype=float)
        zero = scale == 0
        if np.any(zero & (o != v)):
            return -math.inf
        s_, d = scale[~zero], np.abs(o - v)[~zero]
        if kind == "laplace":
            total += float(-np.sum(d / s_) - np.sum(np.log(2 * s_)))
        else:
            total += float(-np.sum(d**2 / (2 * s_**2)) - np.sum(np.log(s_)))
    return total


def release_statistic(s: Setup, primary: Recording, other_table, seed: tuple, primary_is_d1: bool) -> float:
    """log p_{D'}(transcript) - log p_D(transcript) of the primary fit's releases (the Neyman-Pearson statistic)."""
    shadow = Recording(seed, replay=primary.log)
    fit(s, other_table, seed, shadow)
    if len(shadow.log) != len(primary.log):
        raise Diverged("the neighbouring fits made different numbers of releases")
    lp, lo = log_likelihood(primary.log), log_likelihood(shadow.log)
    llr = lp - lo if primary_is_d1 else lo - lp
    return float(np.nan_to_num(llr, nan=0.0, posinf=1e300, neginf=-1e300))
