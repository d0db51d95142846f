"""The privacy ledger: every noisy release of every plugin is recorded here, then composed.

Accountants (chosen per algorithm with `accountant:` in its config, or for the run with `budget.accountant`), and
what each does with each kind of entry (issue 11 item 2: every accepted entry is accounted for, or refused):

| entry (spend_*)      | basic               | zcdp                     | rdp                                        |
|----------------------|---------------------|--------------------------|--------------------------------------------|
| pure eps             | eps adds up         | eps^2/2 (zCDP of eps-DP) | min(eps, a eps^2/2) per order a            |
| approx (eps, delta)  | eps, delta add up   | refused (no zCDP bound)  | refused (no RDP bound)                     |
| zcdp rho             | refused             | rho adds up              | rho a per order a (exact: the definition)  |
| rdp curve            | refused             | refused                  | adds up order by order                     |

`zcdp` converts the total rho to (eps, delta) at the budget's delta with the conversion of Canonne, Kamath and
Steinke (2020); `rdp` converts the total curve at the budget's delta (`rdp_conversion`: classic | balle2020).
Spending beyond the budget raises `BudgetExceeded` at the offending call, so no noisy value is released past the
budget; `check()` repeats the test at the end of the run.

eps = inf is the noise-free limit: a release at eps = inf (or rho = inf) is recorded and composes to inf, which
only a budget of eps = inf admits. `to_dict()` writes inf as `INF_JSON`, the largest double (JSON has no inf),
so results stay numbers that sort above every finite budget; `from_json` reads it back as inf.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy import accountants

ACCOUNTANTS = ("basic", "zcdp", "rdp")
RDP_CONVERSIONS = ("classic", "balle2020")
INF_JSON = sys.float_info.max  # how eps = inf is written to metrics.json (1.7976931348623157e308)
_SLACK = 1e-9
# Callables (ledger, entry) told of every accepted entry, in order: how `privfair audit`'s white-box checks pair
# each noise draw with the entry that pays for it. Empty outside an audit, so a run pays one empty loop per entry.
OBSERVERS: list = []


def to_json(value: float) -> float:
    """A budget figure as JSON can hold it: +inf becomes INF_JSON."""
    return INF_JSON if value == math.inf else value


def from_json(value):
    """The inverse of `to_json`: INF_JSON (or more) reads as inf; None and other values pass through."""
    return math.inf if isinstance(value, int | float) and value >= INF_JSON else value


@dataclass(frozen=True)
class Budget:
    eps: float
    delta: float = 0.0


@dataclass
class LedgerEntry:
    mechanism: str
    eps: float = 0.0
    delta: float = 0.0
    rho: float | None = None
    sensitivity: float | None = None
    note: str = ""
    rdp: list[float] | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Totals:
    """Running totals, so that recording a spend costs O(1) however many releases came before."""

    eps: float = 0.0
    delta: float = 0.0
    rho: float = 0.0
    rdp: np.ndarray | None = None


class PrivacyLedger:
    def __init__(
        self,
        budget: Budget,
        accountant: str = "basic",
        rdp_conversion: str = "classic",
        orders=accountants.DEFAULT_RDP_ORDERS,
    ):
        if accountant not in ACCOUNTANTS:
            raise ConfigError(f"accountant={accountant!r} is unknown; allowed: {', '.join(ACCOUNTANTS)}")
        if rdp_conversion not in RDP_CONVERSIONS:
            raise ConfigError(f"budget.rdp_conversion={rdp_conversion!r} is unknown; allowed: "
                              f"{', '.join(RDP_CONVERSIONS)}")
        if accountant in ("zcdp", "rdp") and not budget.delta > 0:
            raise ConfigError(f"accountant={accountant} converts to (eps, delta)-DP: set delta > 0")
        self.budget = budget
        self.accountant = accountant
        self.rdp_conversion = rdp_conversion
        self.orders = tuple(orders)
        self.entries: list[LedgerEntry] = []
        self._totals = _Totals(rdp=np.zeros(len(self.orders)))

    # -- recording -------------------------------------------------------------------------------
    def spend_pure(self, mechanism: str, eps: float, sensitivity: float | None = None, note: str = "") -> None:
        if not eps > 0:
            raise BudgetExceeded(f"{mechanism}: eps must be > 0, got {eps}")
        self._record(LedgerEntry(mechanism, eps=float(eps), sensitivity=sensitivity, note=note))

    def spend_approx(
        self, mechanism: str, eps: float, delta: float, sensitivity: float | None = None, note: str = ""
    ) -> None:
        if self.accountant != "basic":
            raise ConfigError(f"{mechanism}: an (eps, delta) release has no {self.accountant} bound to compose "
                              f"with; use accountant=basic")
        if not (eps >= 0 and 0 <= delta <= 1):
            raise BudgetExceeded(f"{mechanism}: need eps >= 0 and 0 <= delta <= 1, got eps={eps}, delta={delta}")
        self._record(LedgerEntry(mechanism, eps=float(eps), delta=float(delta), sensitivity=sensitivity, note=note))

    def spend_pld(self, mechanism: str, eps: float, delta: float, key: str, extra: dict,
                  sensitivity: float | None = None, note: str = "") -> None:
        """An (eps, delta) release whose eps a privacy-loss-distribution accountant computed for a composed
        mechanism (T subsampled-Gaussian steps, ...): one entry, whose `extra` states the mechanism (accountant,
        sigma, q, steps, ...) so the audit can recompose it. `key` is the config key that chose PLD accounting,
        named in the error under a ledger that composes in RDP or zCDP (it cannot add up an (eps, delta) pair)."""
        if self.accountant != "basic":
            raise ConfigError(f"{key}=pld charges the run as one (eps, delta) release, which the {self.accountant} "
                              f"ledger does not add up; leave budget.accountant unset, or set {key}=rdp")
        if not (eps >= 0 and 0 <= delta <= 1):
            raise BudgetExceeded(f"{mechanism}: need eps >= 0 and 0 <= delta <= 1, got eps={eps}, delta={delta}")
        self._record(LedgerEntry(mechanism, eps=float(eps), delta=float(delta), sensitivity=sensitivity, note=note,
                                 extra=dict(extra)))

    def spend_zcdp(self, mechanism: str, rho: float, sensitivity: float | None = None, note: str = "") -> None:
        if self.accountant == "basic":
            raise ConfigError(f"{mechanism}: a zCDP release needs accountant=zcdp or rdp, not basic")
        if not rho >= 0:
            raise BudgetExceeded(f"{mechanism}: rho must be >= 0, got {rho}")
        self._record(LedgerEntry(mechanism, rho=float(rho), sensitivity=sensitivity, note=note))

    def spend_rdp(self, mechanism: str, rdp, note: str = "", **extra) -> None:
        """Record a release by its RDP curve on `self.orders` (e.g. T steps of the sampled Gaussian)."""
        if self.accountant != "rdp":
            raise ConfigError(f"{mechanism}: an RDP release needs accountant=rdp")
        rdp = [float(v) for v in np.asarray(rdp, dtype=float)]
        if len(rdp) != len(self.orders):
            raise ValueError("RDP curve must be given on the ledger's orders")
        if not all(v >= 0 for v in rdp):
            raise BudgetExceeded(f"{mechanism}: an RDP curve must be >= 0 at every order")
        self._record(LedgerEntry(mechanism, rdp=rdp, note=note, extra=extra))

    def _curve(self, entry: LedgerEntry) -> np.ndarray:
        """The entry's RDP curve on the ledger's orders (rdp accountant only)."""
        if entry.rdp is not None:
            return np.asarray(entry.rdp)
        if entry.rho is not None:
            return accountants.zcdp_rdp(entry.rho, self.orders)
        return accountants.pure_dp_rdp(entry.eps, self.orders)

    def _with(self, entry: LedgerEntry) -> _Totals:
        t = self._totals
        rho = entry.rho if entry.rho is not None else accountants.square(entry.eps) / 2
        rdp = t.rdp + self._curve(entry) if self.accountant == "rdp" else t.rdp
        return _Totals(t.eps + entry.eps, t.delta + entry.delta, t.rho + rho, rdp)

    def _record(self, entry: LedgerEntry) -> None:
        totals = self._with(entry)
        eps, delta = self._compose(totals)
        if self._over(eps, delta):
            raise BudgetExceeded(
                f"{entry.mechanism} ({entry.note or 'release'}) would spend eps={eps:.6g}, delta={delta:.3g} "
                f"beyond the budget eps={self.budget.eps:g}, delta={self.budget.delta:g}"
            )
        self.entries.append(entry)
        self._totals = totals
        for observe in OBSERVERS:
            observe(self, entry)

    def _over(self, eps: float, delta: float) -> bool:
        return eps > self.budget.eps * (1 + _SLACK) + 1e-12 or delta > self.budget.delta * (1 + _SLACK) + 1e-15

    # -- composition -----------------------------------------------------------------------------
    def rho(self) -> float:
        return self._totals.rho

    def rdp(self) -> np.ndarray:
        return self._totals.rdp.copy()

    def _compose(self, t: _Totals) -> tuple[float, float]:
        if self.accountant == "basic":
            return t.eps, t.delta
        if self.accountant == "zcdp":
            return accountants.cdp_eps(t.rho, self.budget.delta), self.budget.delta
        eps, _ = accountants.rdp_to_dp(self.orders, t.rdp, self.budget.delta, self.rdp_conversion)
        return eps, self.budget.delta

    def spent(self) -> tuple[float, float]:
        """(eps, delta) spent so far, under this ledger's accountant."""
        if not self.entries:
            return 0.0, 0.0
        return self._compose(self._totals)

    def zcdp_left(self) -> float:
        """The largest rho a zCDP release can still spend within the budget under this ledger's accountant (e.g.
        to calibrate a zCDP mechanism whatever `budget.accountant` the run chose)."""
        if self.accountant == "basic":
            raise ConfigError("a zCDP release needs accountant=zcdp or rdp, not basic")
        if math.isinf(self.budget.eps):
            return math.inf
        if self.accountant == "zcdp":
            return max(accountants.cdp_rho(self.budget.eps, self.budget.delta) - self._totals.rho, 0.0)

        def over(rho: float) -> bool:
            return self._over(*self._compose(self._with(LedgerEntry("probe", rho=rho))))

        hi = 1.0
        while not over(hi):
            hi *= 2
        return accountants.bisect(over, 0.0, hi)[0]

    def check(self) -> None:
        eps, delta = self.spent()
        if self._over(eps, delta):
            raise BudgetExceeded(f"spent eps={eps:.6g}, delta={delta:.3g} beyond the budget {self.budget}")

    def to_dict(self) -> dict:
        eps, delta = self.spent()
        out = {
            "eps_spent": to_json(eps),
            "delta_spent": delta,
            "accountant": self.accountant,
            "ledger": [_entry_dict(e) for e in self.entries],
        }
        if self.accountant == "zcdp" and self.entries:
            out["rho"] = to_json(self.rho())
        return out


def _entry_dict(entry: LedgerEntry) -> dict:
    """An entry as metrics.json holds it: no empty fields, no RDP curve (long; the composed eps is what matters),
    inf written as INF_JSON."""
    out = {k: v for k, v in asdict(entry).items() if v not in (None, "", {}) and k != "rdp"}
    return {k: to_json(v) if isinstance(v, float) else v for k, v in out.items()}
