"""Privacy core: mechanisms, accountants and the budget ledger every plugin spends through."""

from privfair_cli.privacy.ledger import Budget, LedgerEntry, PrivacyLedger
from privfair_cli.privacy.mechanisms import (
    exponential,
    gaussian,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    gaussian_zcdp,
    laplace,
)

__all__ = [
    "Budget",
    "LedgerEntry",
    "PrivacyLedger",
    "exponential",
    "gaussian",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "gaussian_zcdp",
    "laplace",
]
