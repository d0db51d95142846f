"""The audited fits: the configuration (`Setup`: the run's own compose and schema path, refusing what cannot be
audited), the audited dataset D (drawn from the card, or given in memory), the plugin's own fit through a fresh
ledger with seeded noise (runner.build and runner.fit_plugin, as a run does it), the claim its ledger makes, and
the thread-pool shortcut of the thousands of fits."""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass

import numpy as np

from privfair_cli.errors import ConfigError
from privfair_cli.tools.audit.canaries import subgraph
from privfair_cli.tools.audit.outputs import STATISTICS


@dataclass
class Setup:
    rc: object  # the validated schema.RunConfig
    cls: type
    table: object  # D before the canary
    data: str  # the name reports give D: the card's, or the in-memory table's


def config(overrides: list[str]):
    """The validated RunConfig of `overrides` (one configuration, `key=value`), refused where there is no claim
    to audit or no way to audit it."""
    from privfair_cli import compose, registry, schema

    bad = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in ("hydra", "-m", "--multirun")]
    if bad:
        raise ConfigError(f"{bad[0]}: an audit is one configuration; it takes key=value overrides and audit.*")
    compose.prevalidate(overrides)
    rc = schema.validate(compose.compose(overrides))
    cls = registry.get(rc.algo)
    if not cls.private:
        raise ConfigError(f"algo={rc.algo} is not private (guarantee none): there is no claim to audit; choose "
                          "an algorithm with mechanisms (`privfair list`)")
    if cls.kind not in STATISTICS and not hasattr(cls, "audit_statistic"):
        raise ConfigError(f"algo={rc.algo}: task kind {cls.kind!r} has no audit statistic yet; audited kinds: "
                          f"{', '.join(STATISTICS)}")
    if math.isinf(rc.eps):
        raise ConfigError("eps=inf claims no privacy: nothing to audit; give a finite eps")
    if rc.secure:
        raise ConfigError("privacy.secure=true: an audit needs seeded, independent trials; run it without")
    return rc


def setup(overrides: list[str], rows: int, seed: int) -> Setup:
    """The configuration of `overrides` on `rows` rows (vertices) of its card drawn with `seed`."""
    from privfair_cli import registry, runner

    rc = config(overrides)
    rng = runner.streams(seed)
    table = runner.load_data(rc.data, rng, log=lambda *_: None)  # D whole: the audit draws its own rows
    if "graph" in table.meta:
        table = subgraph(table, rows, rng["split"])
    elif len(table) > rows:
        table = table.subset(np.sort(rng["split"].choice(len(table), size=rows, replace=False)))
    return Setup(rc, registry.get(rc.algo), table, rc.data.name)


def setup_for_table(overrides: list[str], table) -> Setup:
    """The configuration of `overrides` (validated as a run's, with its card) on the in-memory `table` (tests,
    scripts): the algorithm's defaults, accountant and delta are those a run of `overrides` gets."""
    from privfair_cli import registry

    rc = config(overrides)
    return Setup(rc, registry.get(rc.algo), table, table.name)


def fit(s: Setup, table, seed: tuple[int, ...], noise=None):
    """The plugin's own fit through a fresh ledger, with noise from a NoiseSource seeded by `seed` (or `noise`)."""
    from privfair_cli import runner
    from privfair_cli.privacy import Budget, NoiseSource

    rc, cls = s.rc, s.cls
    plugin = runner.build(cls, rc.params, rc.mechanism)
    if noise is None:
        noise = NoiseSource(np.random.PCG64(np.random.SeedSequence(list(seed))))
    ledger = runner.fit_plugin(plugin, table, Budget(rc.eps, rc.delta), noise, "cpu", rc.accountant,
                               rc.rdp_conversion)
    return plugin, ledger


def claim(plugin, ledger) -> tuple[str, float, float]:
    """The fit's claim: its guarantee and the (eps, delta) its ledger spent."""
    from privfair_cli import runner

    eps, delta = ledger.spent()
    return runner.guarantee(plugin, ledger), float(eps), float(delta)


class _CachedLimits:
    """`threadpool_limits(1)` without rescanning the loaded libraries on every call (~10 ms each, more than a small
    fit): the audit's thousands of fits use one ThreadpoolController, with the same effect."""

    def __init__(self):
        from threadpoolctl import ThreadpoolController

        self.controller = ThreadpoolController()

    def __call__(self, limits=None, user_api=None):
        return self.controller.limit(limits=limits, user_api=user_api)


@contextlib.contextmanager
def fast_threadpool(cls):
    """Within the block, the plugin's module calls the cached `threadpool_limits`; its own is restored after."""
    module = sys.modules[cls.__module__]
    if getattr(module, "threadpool_limits", None) is None or isinstance(module.threadpool_limits, _CachedLimits):
        yield
        return
    saved = module.threadpool_limits
    module.threadpool_limits = _CachedLimits()
    try:
        yield
    finally:
        module.threadpool_limits = saved
