"""The mutant catalogue (issue 46): deliberately broken variants of privfair's mechanisms and algorithms that an
audit must flag, each a context manager that patches one function for the duration of the block and restores it
after (no algorithm module is edited; outside the block nothing changes). `make audit-mutants` audits every
mutant (`python -m privfair_cli.tools.audit --mutants`), tests/test_audit_mutants.py the fast ones in `make test`,
and the table of mutants and verdicts goes to docs/audit.md.

Each `Mutant` names the bug, the configuration it is audited on (small data, the white-box checks at their
defaults, 20 trials of the distinguishing test, which decides nothing here) and the check expected to flag it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@contextlib.contextmanager
def patched(module: str, name: str, make: Callable):
    """`module.name` replaced by `make(original)` within the block."""
    mod = importlib.import_module(module)
    real = getattr(mod, name)
    setattr(mod, name, make(real))
    try:
        yield
    finally:
        setattr(mod, name, real)


@contextlib.contextmanager
def patched_attr(obj, name: str, make: Callable):
    """`obj.name` (a class attribute) replaced by `make(original)` within the block."""
    real = obj.__dict__[name]
    setattr(obj, name, make(real))
    try:
        yield
    finally:
        setattr(obj, name, real)


# ------------------------------------------------------------------------------------------ the bugs
def laplace_noise_half():
    """Every Laplace draw with half the scale its mechanism asked for."""
    from privfair_cli.privacy.noise import NoiseSource

    return patched_attr(NoiseSource, "add_laplace", lambda real: lambda self, value, scale: real(
        self, value, np.asarray(scale) / 2))


def gaussian_noise_half():
    """Every Gaussian draw with half its sigma."""
    from privfair_cli.privacy.noise import NoiseSource

    return patched_attr(NoiseSource, "add_gaussian", lambda real: lambda self, value, sigma: real(
        self, value, np.asarray(sigma) / 2))


def exponential_noise_half():
    """The exponential mechanism's Gumbel noise halved: it samples from exp(2 logits) instead of exp(logits)."""
    from privfair_cli.privacy.noise import NoiseSource

    return patched_attr(NoiseSource, "select", lambda real: lambda self, logits: real(
        self, 2 * np.asarray(logits, dtype=float)))


def pflr_sensitivity_half():
    """PFLR's L1 sensitivity of the fair polynomial (delta_f_tilde) halved."""
    return patched("privfair_cli.algorithms.functional", "delta_f_tilde",
                   lambda real: lambda d, alpha=1.0: real(d, alpha) / 2)


def mst_sensitivity_half():
    """MST's marginals measured with half their L2 sensitivity (and so half the sigma, at the same rho)."""
    return patched("privfair_cli.algorithms.prefair", "gaussian_zcdp",
                   lambda real: lambda value, sensitivity, sigma, rng, ledger, note="": real(
                       value, sensitivity / 2, sigma / 2, rng, ledger, note))


def privpc_sensitivity_half():
    """PrivPC's selections (exponential mechanism) told half the score sensitivity."""
    return patched("privfair_cli.algorithms.causal", "exponential",
                   lambda real: lambda scores, sensitivity, eps, rng, ledger, note="", accounting="pure": real(
                       scores, sensitivity / 2, eps, rng, ledger, note, accounting))


def _train_with(**changes):
    return patched("privfair_cli.algorithms.dpsgd_trainer", "_update",
                   lambda real: lambda params, summed, C, cfg, gen, velocity=None: real(
                       params, summed, C, dataclasses.replace(cfg, **{k: f(cfg) for k, f in changes.items()}),
                       gen, velocity))


def dpsgd_no_noise():
    """DP-SGD's gradient noise left out (sigma = 0 in every update)."""
    return _train_with(sigma=lambda cfg: 0.0)


def dpsgd_noise_half():
    """DP-SGD's gradient noise at half its multiplier."""
    return _train_with(sigma=lambda cfg: cfg.sigma / 2)


def dpsgd_no_clipping():
    """DP-SGD's per-example clipping skipped (every clip factor 1; the noise still scaled to C)."""
    import torch

    return patched("privfair_cli.algorithms.dpsgd_trainer", "clip_factors",
                   lambda real: lambda cfg, nu, k, rng: (torch.ones_like(nu),) + tuple(real(cfg, nu, k, rng)[1:]))


def dpsgd_shuffled_batches():
    """DP-SGD's batches drawn by shuffling while the ledger charges the Poisson-subsampled Gaussian."""
    return patched("privfair_cli.algorithms.dpsgd_trainer", "batches",
                   lambda real: lambda n, cfg, rng: real(n, dataclasses.replace(cfg, batch_sampling="shuffle"), rng))


def output_perturbation_noise_half():
    """The correlated plugins' output perturbation draws its Gamma-norm noise at half the scale its entry states."""
    return patched("privfair_cli.privacy.correlated", "gamma_norm_noise",
                   lambda real: lambda d, scale, draws, rng: real(d, scale / 2, draws, rng))


def release_outside_ledger():
    """The second Laplace release of each fit is drawn without its ledger entry (PFLR*'s polynomial after mu)."""
    from privfair_cli.privacy import mechanisms
    from privfair_cli.privacy.noise import noise_source

    def make(real):
        def laplace(value, sensitivity, eps, rng, ledger, note=""):
            calls = getattr(ledger, "_mutant_calls", 0)
            ledger._mutant_calls = calls + 1
            if calls == 1:
                return noise_source(rng).add_laplace(value, sensitivity / eps)
            return real(value, sensitivity, eps, rng, ledger, note)
        return laplace

    return patched(mechanisms.__name__, "laplace", make)


def composition_once():
    """The ledger composes a second entry of the same mechanism as if it were free (counted once for two)."""
    from privfair_cli.privacy.ledger import PrivacyLedger

    def make(real):
        def _with(self, entry):
            if any(e.mechanism == entry.mechanism for e in self.entries):
                return self._totals
            return real(self, entry)
        return _with

    return patched_attr(PrivacyLedger, "_with", make)


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    make: Callable
    overrides: tuple[str, ...]
    expect: str  # the check expected to flag it
    fast: bool = True  # in `make test` (tests/test_audit_mutants.py); the rest is `-m slow`


SGD = ("algo=dpsgd", "data=compas", "eps=4", "algo.reference=false", "algo.epochs=3", "algo.batch_size=32")
# the MNIST CNN on 300 rows in full batches: 431,080 parameters, one Dirac canary each
SGD_ONE_RUN = ("algo=dpsgd", "data=mnist", "eps=4", "algo.reference=false", "algo.epochs=10", "algo.batch_size=300")
CDP = ("algo=cdp_group", "data=compas", "eps=1", "algo.n_estimators=10")  # fewer trees: a faster preparation
MUTANTS = [
    Mutant("laplace_noise_half", "Laplace noise / 2 (privlr)", laplace_noise_half,
           ("algo=privlr", "data=compas", "eps=1"), "calibration"),
    Mutant("gaussian_noise_half", "Gaussian noise / 2 (MST's marginals)", gaussian_noise_half,
           ("algo=mst", "data=compas", "eps=1"), "calibration"),
    Mutant("exponential_noise_half", "exponential mechanism's noise / 2 (MST's selection)", exponential_noise_half,
           ("algo=mst", "data=compas", "eps=1"), "calibration"),
    Mutant("pflr_sensitivity_half", "functional mechanism's sensitivity / 2 (pflr)", pflr_sensitivity_half,
           ("algo=pflr", "data=compas", "eps=1"), "sensitivity"),
    Mutant("mst_sensitivity_half", "MST's marginals' sensitivity / 2", mst_sensitivity_half,
           ("algo=mst", "data=compas", "eps=1"), "sensitivity"),
    Mutant("privpc_sensitivity_half", "PrivPC's selection sensitivity / 2", privpc_sensitivity_half,
           ("algo=privpc", "data=adult_pc", "eps=1"), "sensitivity", fast=False),
    Mutant("dpsgd_no_noise", "DP-SGD without noise", dpsgd_no_noise, SGD, "dpsgd_noise"),
    Mutant("dpsgd_noise_half", "DP-SGD noise / 2", dpsgd_noise_half, SGD, "dpsgd_noise"),
    Mutant("dpsgd_no_clipping", "DP-SGD clipping skipped", dpsgd_no_clipping, SGD, "dpsgd_clipping"),
    Mutant("dpsgd_shuffled_batches", "DP-SGD shuffled batches under the Poisson accountant", dpsgd_shuffled_batches,
           SGD, "dpsgd_batches"),
    Mutant("dpsgd_noise_half_one_run", "DP-SGD noise / 2, full batches (the white-box one-run audit)",
           dpsgd_noise_half, SGD_ONE_RUN, "dpsgd_one_run", fast=False),
    Mutant("output_perturbation_noise_half", "output perturbation's Gamma-norm noise / 2 (cdp_group)",
           output_perturbation_noise_half, CDP, "calibration", fast=False),
    Mutant("release_outside_ledger", "a Laplace release that bypasses the ledger (pflr_star's polynomial)",
           release_outside_ledger, ("algo=pflr_star", "data=compas", "eps=1"), "ledger"),
    Mutant("composition_once", "composition counted once for two releases (pflr_star)", composition_once,
           ("algo=pflr_star", "data=compas", "eps=1"), "accounting"),
]
CORRECT = sorted({m.overrides for m in MUTANTS})  # the same configurations without a bug: every one must pass
MUTANT_OPTS = {"trials": 20, "rows": 300}


def audit_mutant(m: Mutant | None, overrides: tuple[str, ...], opts: dict | None = None):
    """The audit of `overrides` with the mutant `m` active (None: the correct code); returns the Report."""
    from privfair_cli.tools.audit.run import audit

    with m.make() if m is not None else contextlib.nullcontext():
        return audit(list(overrides), MUTANT_OPTS | (opts or {}))


def flagged_by(rep) -> list[str]:
    """The white-box checks (and `bound`, the distinguishing or one-run test) that failed."""
    out = [c["name"] for c in rep.details.get("whitebox") or [] if c["verdict"] == "fail"]
    from privfair_cli.tools.audit.bounds import refutes

    return (["bound"] if refutes(rep.eps_lb, rep.eps_claimed) else []) + out
