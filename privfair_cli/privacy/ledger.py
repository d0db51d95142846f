"""The privacy ledger: every noisy release of every plugin is recorded here, then composed.

Accountants (chosen per algorithm with `accountant:` in its config):
- `basic`: sequential composition, eps and delta add up (pure and approximate DP entries).
- `zcdp`: rho adds up; pure entries count as eps^2/2; the total converts to (eps, delta) at the
  budget's delta with the conversion of Canonne, Kamath and Steinke (2020).
- `rdp`: RDP curves add up order by order; pure entries count as min(eps, a eps^2/2); the total converts
  at the budget's delta (`rdp_conversion`: classic | balle2020).
Spending beyond the budget raises `BudgetExceeded` at the offending call, so no noisy value is released
past the budget; `check()` repeats the test at the end of the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy import accountants

ACCOUNTANTS = ("basic", "zcdp", "rdp")
_SLACK = 1e-9


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
        if accountant in ("zcdp", "rdp") and not budget.delta > 0:
            raise ConfigError(f"accountant={accountant} converts to (eps, delta)-DP: set delta > 0")
        self.budget = budget
        self.accountant = accountant
        self.rdp_conversion = rdp_conversion
        self.orders = tuple(orders)
        self.entries: list[LedgerEntry] = []
        # running totals, so that recording a spend costs O(1) however many releases came before
        self._eps = self._delta = self._rho = 0.0
        self._rdp = np.zeros(len(self.orders))

    # -- recording -------------------------------------------------------------------------------
    def spend_pure(self, mechanism: str, eps: float, sensitivity: float | None = None, note: str = "") -> None:
        if not eps > 0:
            raise BudgetExceeded(f"{mechanism}: eps must be > 0, got {eps}")
        self._record(LedgerEntry(mechanism, eps=float(eps), sensitivity=sensitivity, note=note))

    def spend_approx(
        self, mechanism: str, eps: float, delta: float, sensitivity: float | None = None, note: str = ""
    ) -> None:
        if self.accountant == "zcdp":
            raise ConfigError(f"{mechanism}: an (eps, delta) release cannot be composed under zCDP")
        self._record(LedgerEntry(mechanism, eps=float(eps), delta=float(delta), sensitivity=sensitivity, note=note))

    def spend_zcdp(self, mechanism: str, rho: float, sensitivity: float | None = None, note: str = "") -> None:
        if self.accountant == "basic":
            raise ConfigError(f"{mechanism}: a zCDP release needs accountant=zcdp or rdp, not basic")
        self._record(LedgerEntry(mechanism, rho=float(rho), sensitivity=sensitivity, note=note))

    def spend_rdp(self, mechanism: str, rdp, note: str = "", **extra) -> None:
        """Record a release by its RDP curve on `self.orders` (e.g. T steps of the sampled Gaussian)."""
        if self.accountant != "rdp":
            raise ConfigError(f"{mechanism}: an RDP release needs accountant=rdp")
        rdp = [float(v) for v in np.asarray(rdp, dtype=float)]
        if len(rdp) != len(self.orders):
            raise ValueError("RDP curve must be given on the ledger's orders")
        self._record(LedgerEntry(mechanism, rdp=rdp, note=note, extra=extra))

    def _add(self, entry: LedgerEntry, sign: float) -> None:
        self._eps += sign * entry.eps
        self._delta += sign * entry.delta
        self._rho += sign * (entry.rho if entry.rho is not None else entry.eps**2 / 2)
        if self.accountant == "rdp":
            curve = np.asarray(entry.rdp) if entry.rdp is not None else accountants.pure_dp_rdp(entry.eps, self.orders)
            self._rdp += sign * curve

    def _record(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)
        self._add(entry, +1.0)
        eps, delta = self.spent()
        if eps > self.budget.eps * (1 + _SLACK) + 1e-12 or delta > self.budget.delta * (1 + _SLACK) + 1e-15:
            self.entries.pop()
            self._add(entry, -1.0)
            raise BudgetExceeded(
                f"{entry.mechanism} ({entry.note or 'release'}) would spend eps={eps:.6g}, delta={delta:.3g} "
                f"beyond the budget eps={self.budget.eps:g}, delta={self.budget.delta:g}"
            )

    # -- composition -----------------------------------------------------------------------------
    def rho(self) -> float:
        return self._rho

    def rdp(self) -> np.ndarray:
        return self._rdp.copy()

    def spent(self) -> tuple[float, float]:
        """(eps, delta) spent so far, under this ledger's accountant."""
        if not self.entries:
            return 0.0, 0.0
        if self.accountant == "basic":
            return self._eps, self._delta
        if self.accountant == "zcdp":
            return accountants.cdp_eps(self.rho(), self.budget.delta), self.budget.delta
        eps, _ = accountants.rdp_to_dp(self.orders, self.rdp(), self.budget.delta, self.rdp_conversion)
        return eps, self.budget.delta

    def check(self) -> None:
        eps, delta = self.spent()
        if eps > self.budget.eps * (1 + _SLACK) + 1e-12 or delta > self.budget.delta * (1 + _SLACK) + 1e-15:
            raise BudgetExceeded(f"spent eps={eps:.6g}, delta={delta:.3g} beyond the budget {self.budget}")

    def to_dict(self) -> dict:
        eps, delta = self.spent()
        out = {
            "eps_spent": eps,
            "delta_spent": delta,
            "accountant": self.accountant,
            "ledger": [{k: v for k, v in asdict(e).items() if v not in (None, "", {})} for e in self.entries],
        }
        if self.accountant in ("zcdp", "rdp") and self.entries:
            out["rho"] = self.rho() if self.accountant == "zcdp" else None
        for e in out["ledger"]:
            e.pop("rdp", None)  # curves are long; the composed eps above is what matters
        return {k: v for k, v in out.items() if v is not None}
