"""Privacy core: mechanisms, the budget ledger every plugin spends through, the noise source (seeded or secure)
every mechanism draws from, and every accounting formula: conversions and zCDP sizing (`accountants`), DP-SGD's
subsampled Gaussian (`dpsgd`) and PATE's moments accountant (`pate`)."""

from privfair_cli.privacy.ledger import INF_JSON, Budget, LedgerEntry, PrivacyLedger, from_json, to_json
from privfair_cli.privacy.mechanisms import (
    exponential,
    gaussian,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    gaussian_zcdp,
    laplace,
)
from privfair_cli.privacy.noise import NoiseSource, noise_source

__all__ = [
    "INF_JSON",
    "Budget",
    "LedgerEntry",
    "NoiseSource",
    "PrivacyLedger",
    "exponential",
    "from_json",
    "gaussian",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "gaussian_zcdp",
    "laplace",
    "noise_source",
    "to_json",
]
