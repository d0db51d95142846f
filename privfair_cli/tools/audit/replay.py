"""The release view of the distinguishing test: every noisy release of a fit goes through `privfair_cli.privacy`
and is recorded (`Recording`); the fit is replayed on the neighbouring dataset with the same noise seed and forced
to the same outputs, which gives the values that dataset would have released, and the statistic is the exact
log-likelihood ratio of the transcript (Laplace and Gaussian densities, exponential-mechanism logits).

Neighbouring fits must share every random draw but the canary's. A draw with one row per record (RON-Gauss's
and FFPDG's per-row white noise, FFPDG's resampling of its records) would otherwise shift the run's stream by
the canary's share and desynchronise every later draw (the projection, the releases' noise), which reads as a
difference the canary made: such draws are taken row by row from streams keyed by the record's id
(`Recording._per_row`), and a resampling of the records with replacement is an exponential race over the
records' own streams (`Recording._resample`). The algorithms draw as before outside an audit; in an audit these
draws have the same law, only keyed differently."""

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

    def __init__(self, seed, replay=None, row_ids=None):
        super().__init__(np.random.PCG64(np.random.SeedSequence(list(seed))))
        self.log, self.replay = [], replay
        self.seed = [int(v) for v in seed]
        self.row_ids = None if row_ids is None or len(row_ids) < 2 else np.asarray(row_ids, dtype=np.int64)
        self.per_row_calls, self.in_release = 0, False

    def _per_row(self, name: str, args: tuple, kwargs: dict):
        """A draw with one row per record of the fitted table (its first dimension the table's length), drawn
        row by row from streams keyed by (seed, call, row id) instead of the run's stream, or None for any other
        draw. Neighbouring tables then share every record's draws (the canary's are its own) and the run's stream
        stays in step however many rows a table has (per-row white noise, resampling weights)."""
        if self.row_ids is None or self.in_release:
            return None
        if name == "choice":
            return self._resample(args, kwargs)
        pos = SIZE_ARG[name]
        size = args[pos] if len(args) > pos else kwargs.get("size")
        shape = (size,) if isinstance(size, int | np.integer) else tuple(size) if size is not None else ()
        if len(shape) == 0 or shape[0] != len(self.row_ids):
            return None
        call = self.per_row_calls
        self.per_row_calls += 1
        args = list(args)
        if len(args) > pos:
            args[pos] = shape[1:] or None
        else:
            kwargs = kwargs | {"size": shape[1:] or None}
        rows = [getattr(np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed + [PER_ROW_KEY, call,
                                                                                                 int(r)]))), name)(
            *args, **kwargs) for r in self.row_ids]
        return np.asarray(rows)

    def _resample(self, args: tuple, kwargs: dict):
        """`choice(a, size, p=w)` with replacement where a or size is the table's length (a resampling of the
        records or of candidates to as many rows), coupled across neighbours: slot s picks argmin_j E_sj / w_j with
        E_sj ~ Exp(1) from candidate j's own stream (record id, else index): an exponential race, the same law as
        the inverse-CDF draw, so adding or removing a record changes only the slots it wins or the weights move."""
        names = ("a", "size", "replace", "p")
        given = dict(zip(names, args, strict=False)) | kwargs
        a, size, p = given.get("a"), given.get("size"), given.get("p")
        n = len(self.row_ids)
        if not given.get("replace", True) or not isinstance(a, int | np.integer) \
                or not isinstance(size, int | np.integer) or n not in (a, size):
            return None
        call = self.per_row_calls
        self.per_row_calls += 1
        keys = self.row_ids if a == n else np.arange(a)  # records by id, other candidates by index
        w = np.ones(a) if p is None else np.asarray(p, dtype=float)
        race = np.column_stack([np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            self.seed + [PER_ROW_KEY, call, int(r)]))).standard_exponential(int(size)) for r in keys])
        with np.errstate(divide="ignore"):
            return np.argmin(race / w[None, :], axis=1)

    def _recorded(self, kind, shape):
        k = len(self.log)
        if self.replay is None:
            return None
        if k >= len(self.replay) or self.replay[k][0] != kind or np.shape(self.replay[k][3]) != shape:
            raise Diverged(f"release {k} ({kind}) differs between the neighbouring fits")
        return self.replay[k][3]

    def _add(self, value, scale, kind):
        self.in_release = True
        try:
            out = super()._add(value, scale, kind)
        finally:
            self.in_release = False
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


def _keyed(name: str):
    base = getattr(np.random.Generator, name)

    def method(self, *args, **kwargs):
        out = self._per_row(name, args, kwargs)
        return base(self, *args, **kwargs) if out is None else out

    method.__name__, method.__doc__ = name, base.__doc__
    return method


SIZE_ARG = {"random": 0, "standard_normal": 0, "uniform": 2, "normal": 2, "integers": 2, "choice": 1}  # `size`
PER_ROW_KEY = 46  # the per-row streams' key, apart from the run's
for _name in SIZE_ARG:
    setattr(Recording, _name, _keyed(_name))


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
    shadow = Recording(seed, replay=primary.log, row_ids=other_table.meta.get("row_id"))
    fit(s, other_table, seed, shadow)
    if len(shadow.log) != len(primary.log):
        raise Diverged("the neighbouring fits made different numbers of releases")
    lp, lo = log_likelihood(primary.log), log_likelihood(shadow.log)
    llr = lp - lo if primary_is_d1 else lo - lp
    return float(np.nan_to_num(llr, nan=0.0, posinf=1e300, neginf=-1e300))
