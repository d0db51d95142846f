"""Where privacy noise comes from: `NoiseSource` (issue 11 item 4; DESIGN "Privacy accounting").

A `NoiseSource` is the `rng` every plugin's `fit` receives. It is a `numpy.random.Generator`, so a plugin uses it
as before for randomness that needs no protection (shuffles, initialisation, post-processing), and it draws the
privacy noise of the mechanisms in `privfair_cli.privacy.mechanisms` (`add_laplace`, `add_gaussian`, both with
one scale or one per coordinate, and `select`).

Two modes, chosen per run by `privacy.secure` and written to each result as `privacy.noise`:

- `seeded` (default): everything is drawn from the run's noise stream, PCG64 from `SeedSequence([seed, 2])`,
  with numpy's floating-point samplers. Runs reproduce exactly, which experiments need. It protects nothing
  against anyone who knows the seed (the seed is in the result): the noise of every release can be recomputed,
  and textbook floating-point samplers leak through the low bits of their outputs (Mironov 2012). Do not publish
  the outputs of a seeded run as private.
- `secure`: the mechanisms' noise comes from OpenDP's samplers (`opendp.measurements.make_laplace`,
  `make_gaussian`, `make_noisy_max` with Gumbel noise), which draw from the operating system's CSPRNG and sample
  exactly on the grid of all doubles (k = -1074: discrete Laplace / discrete Gaussian of Canonne, Kamath and
  Steinke 2020 on multiples of 2^-1074, then rounded to the nearest double, a post-processing step), so the output
  does not leak through floating-point artefacts. The generator itself is seeded from OS entropy, not from the
  run seed, so no noise of a secure run is reproducible (data generation, the split and evaluation keep their
  seeded streams: they are not privacy noise). Cost: about 20,000 Laplace and 10,000 Gaussian values per second,
  and ~0.3 ms per exponential-mechanism selection.

What secure mode does not cover: noise a plugin draws with its own sampler (DP-SGD's torch noise, objective
perturbation, any numpy sampler called on `rng` directly). A plugin that does so declares it with
`Plugin.own_noise` (the run is refused in one line before any data is read) or asks for `own_noise_generator()`;
and in secure mode the generator's float noise samplers (`laplace`, `normal`, `gumbel`, ...) refuse, so a plugin
that calls them directly fails in one line instead of claiming secure noise. Randomness a plugin draws from
`rng` with other methods (`permutation`, `choice`, `integers`, `random`) is OS-seeded in secure mode but drawn by
PCG64: fine for post-processing and for data-independent choices, not for privacy noise or for the sampling a
privacy amplification argument rests on.
"""

from __future__ import annotations

import numpy as np

from privfair_cli.errors import ConfigError

# numpy Generator methods that draw continuous noise: refused in secure mode, where noise must come from the
# floating-point-safe samplers below
FLOAT_SAMPLERS = ("laplace", "normal", "standard_normal", "gumbel", "exponential", "standard_exponential",
                  "multivariate_normal", "logistic")
EXACT_GRID = -1074  # OpenDP's k: noise on multiples of 2^k; -1074 is the grid of all doubles (no input rounding)


class NoiseSource(np.random.Generator):
    """A numpy Generator that also draws the privacy noise of privfair's mechanisms, seeded or secure."""

    def __init__(self, bit_generator: np.random.BitGenerator, secure: bool = False):
        super().__init__(bit_generator)
        self.secure = bool(secure)

    @classmethod
    def for_run(cls, stream: np.random.Generator, secure: bool) -> NoiseSource:
        """The run's noise source: the seeded `stream` itself, or (secure) a generator seeded from OS entropy."""
        if secure:
            return cls(np.random.PCG64(np.random.SeedSequence()), secure=True)
        return cls(stream.bit_generator)

    @property
    def kind(self) -> str:
        """`seeded` or `secure`, as written to a result's `privacy.noise`."""
        return "secure" if self.secure else "seeded"

    # -- the mechanisms' noise -----------------------------------------------------------------------------
    def add_laplace(self, value, scale) -> np.ndarray:
        """value + Lap(0, scale) per coordinate; `scale` is a number or one per coordinate, 0 meaning no noise."""
        return self._add(value, scale, "laplace")

    def add_gaussian(self, value, sigma) -> np.ndarray:
        """value + N(0, sigma^2) per coordinate; `sigma` is a number or one per coordinate, 0 meaning no noise."""
        return self._add(value, sigma, "gaussian")

    def select(self, logits) -> int:
        """An index drawn with probability proportional to exp(logits); -inf has probability 0."""
        u = np.asarray(logits, dtype=float)
        if not self.secure:
            u = u - np.max(u)
            p = np.exp(u)
            p = p / p.sum()
            return int(self.choice(len(p), p=p))
        alive = np.flatnonzero(u > -np.inf)
        return int(alive[_opendp_select(u[alive])])

    def own_noise_generator(self, what: str) -> np.random.Generator:
        """The generator a plugin draws its own privacy noise from (`what`, e.g. "DP-SGD's torch noise"): this
        seeded source; refused in secure mode, whose guarantee covers only the samplers above."""
        if self.secure:
            raise ConfigError(f"privacy.secure=true cannot cover {what}: it is drawn outside privfair's "
                              "floating-point-safe samplers; run without privacy.secure (noise: seeded)")
        return self

    def _add(self, value, scale, kind: str) -> np.ndarray:
        value = np.asarray(value, dtype=float)
        if not (np.asarray(scale) >= 0).all():
            raise ValueError(f"{kind} noise scale must be >= 0")
        if not self.secure:  # exactly the draws the mechanisms made before there was a NoiseSource
            draw = self.laplace if kind == "laplace" else self.normal
            if np.ndim(scale) == 0:
                return value + draw(0.0, scale, size=value.shape)
            return value + draw(0.0, 1.0, size=value.shape) * np.asarray(scale, dtype=float)
        scale = np.broadcast_to(np.asarray(scale, dtype=float), value.shape)
        out = value.copy()
        for s in np.unique(scale[scale > 0]):
            at = scale == s
            out[at] = _opendp_add(value[at], float(s), kind)
        return out


def _guarded(name: str):
    base = getattr(np.random.Generator, name)

    def method(self, *args, **kwargs):
        if self.secure:
            raise ConfigError(f"privacy.secure=true: the algorithm draws noise with the generator's float sampler "
                              f"`{name}`, which secure mode does not cover; run without privacy.secure")
        return base(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in FLOAT_SAMPLERS:
    setattr(NoiseSource, _name, _guarded(_name))


def noise_source(rng) -> NoiseSource:
    """`rng` as a NoiseSource: itself, or a plain Generator wrapped (sharing its state, so draws are unchanged)."""
    if isinstance(rng, NoiseSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return NoiseSource(rng.bit_generator)
    raise TypeError(f"expected a numpy Generator or NoiseSource, got {type(rng).__name__}")


# ------------------------------------------------------------------------------------------ OpenDP samplers
def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError:
        raise ConfigError("privacy.secure=true needs OpenDP: pip install opendp") from None
    dp.enable_features("contrib")
    return dp


def _opendp_add(values: np.ndarray, scale: float, kind: str) -> np.ndarray:
    """OpenDP's exact discrete Laplace / Gaussian on the grid of all doubles (k = -1074), from the OS CSPRNG."""
    dp = _opendp()
    atoms = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    if kind == "laplace":
        meas = dp.m.make_laplace(atoms, dp.l1_distance(T=float), scale=scale, k=EXACT_GRID)
    else:
        meas = dp.m.make_gaussian(atoms, dp.l2_distance(T=float), scale=scale, k=EXACT_GRID)
    return np.asarray(meas(values.tolist()), dtype=float)


def _opendp_select(logits: np.ndarray) -> int:
    """Report-noisy-max with Gumbel(1) noise (OpenDP, zCDP flavour): P(i) proportional to exp(logits_i)."""
    dp = _opendp()
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    meas = dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=1.0)
    return int(meas(logits.tolist()))
