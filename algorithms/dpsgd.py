"""DP-SGD, DPSGD-F (group-adaptive clipping) and the Naive reweighting baseline on PyTorch (Xu thesis ch. 9,
§3.1.6; spec `dpsgd_f.md`, DP-SGD conventions `foundations.md` §2.6).

Plugins `sgd` (non-private reference, §1.1), `dpsgd` (Algorithm 1, §1.2), `dpsgd_f` (Algorithm 7, §1.3) and
`dpsgd_naive` (Algorithm 8, §1.4). One family in three modules:
- this module: the typed config (`XuSGDConfig`; defaults in `configs/algo/dpsgd.yaml`), the groups (§0), the
  plugins and the per-epoch history; their evaluation (§5: per-group accuracy, cost of privacy) is
  `evaluate.group_accuracy`;
- `dpsgd_trainer.py`: models, per-example gradient norms, clipping rules, the training loop and its log;
- `dpsgd_accounting.py`: the noise plan (calibration, budget matching C5) and the ledger entries, on the
  accountants of `privacy/dpsgd.py` (dp-accounting's public API): `accounting: pld` (default, the PLD accountant)
  or `rdp` (§2, the thesis' moments accountant, which the reproduction experiments set).

Noise and budget. `sigma: calibrate` (the default) picks the smallest noise multiplier whose whole spend fits the
run's eps; a number fixes it (the run refuses a budget it would overspend); `auto` takes the thesis' §3 value for
the model (CNN 0.8, logistic 1), which the reproduction presets `configs/experiment/xu2021_table9_*` set. Every
value that enters a sensitivity or a noise scale (C, batch_size, epochs, lr, sigma, sigma1_ratio, l2) is typed and
range-checked before data is read; batch_size above the number of training rows is refused before any noise is
drawn; a private run draws the gradient noise at every step. Privacy unit: one example, add/remove adjacency.
The ledger is charged for all T steps before training starts (T, q, sigma are fixed in advance): under `accounting:
rdp` the T-step curve, and DPSGD-F and Naive also record the noisy counts (L2 sensitivity 1, multiplier `sigma1 =
sigma1_ratio * sigma`) as a second subsampled Gaussian at the same rate; under `pld` the run's (eps, delta) as one
entry, the counts drawn on the gradients' batch making one joint Gaussian step (`dpsgd_accounting`).

Per-epoch history (`EpochHistory`, what early-stopping rules read): for every epoch the steps taken, the eps spent
by the weights of that epoch (accountant at that step count), and, when `history` keeps the per-epoch weights
(auto: logistic regression and fasttext, whose history keeps a compact per-epoch summary), accuracy, per-group
accuracy and, for a binary label and sensitive attribute, the
fairness gaps of `metrics.classification` (risk difference, TPR / FPR / FDR differences) on the held-out
validation rows (`validation_size` > 0; their metrics are not covered by the DP guarantee) and on the test set.
Written to `history.csv` beside `curves.csv`.

Deviations and choices (spec §7):
- C1: the gradient average divides by the nominal `b` (not `b_tilde / b`).
- C2 / C11: noisy counts are clamped at 0 (Naive: group sizes at 1); `f_k` of a group with no noisy examples
  is `empty_group_fraction` (one | neutral | zero; default one); `C^k = C0` for all k when `m_tilde <= 0`;
  `denominator: batch_fraction` (thesis, `m_tilde / b`) or `mean_group_fraction` (public re-implementation).
- C3: `batch_sampling: poisson` (default, the thesis' accountant) | shuffle | fixed_uniform. The thesis charges
  every scheme as Poisson; here each is accounted for the batches it draws (`privacy.dpsgd.Sampling`): shuffle
  without amplification (its passes compose, q = 1), fixed_uniform with the sampling-without-replacement bound,
  both for replace-one adjacency (noise multiplier sigma / 2 against the 2C change of a replaced example).
- C5: `match_budget: thesis` removes the printed iterations (22/19/5/11/17/9, keyed by data card name, when T
  is within 1% of the thesis' T; other settings fall back to `exact`), `exact` removes iterations until
  DPSGD-F's total eps <= DPSGD's, `none`.
- C6: census `lr: inv_sqrt_T` = 1/sqrt(T) with the T of DPSGD, constant, for all four algorithms.
- C7: `l2` (0.01 for logistic regression) is weight decay applied after clipping and noise (weights only);
  `l2_mode: in_loss` puts it into every per-example loss before clipping instead.
- C8 / C9: logistic regression starts at zero; the CNN uses PyTorch's default initialisation (seeded from
  the run's noise stream); MNIST inputs are normalised with (x - 0.1307) / 0.3081.
- C9 momentum: plain SGD by default (`momentum: 0`, the spec). The thesis "replicates the setting in [76]"
  (Bagdasaryan et al. 2019) for MNIST, whose public code trains it with torch.optim.SGD at momentum 0.5 (lr
  0.01, batch 256, 60 epochs, the thesis' values): `momentum: 0.5` is that heavy-ball step on the noisy clipped
  gradient, post-processing that leaves the guarantee unchanged (docs/families/dpsgd.md has what it changes).
  Weight decay (C7, `after_noise`) stays outside the momentum buffer, where torch.optim.SGD would put it inside;
  the CNN has none (`l2: auto` = 0), so this only matters for logistic runs given a momentum.
- Cost of privacy (§5) needs the `sgd` model of the same seed and data: with `reference: true` the private
  plugins train it in the same run from the same random state, which reproduces the `sgd` run exactly
  (tested). A process trains that model once: a non-private training is kept and given again to a call with
  exactly the same settings, data, device, threads and random state (the stream is then left where the training
  would have left it), so a sweep's sgd run and the private runs of the same seed share one (tested). It is also
  kept on disk (`<cache>/sgd/`, without its per-epoch weights), keyed by the same inputs, torch's version and this
  family's training code, so a private run in another process (a sweep's worker, a later session) loads the
  reference its sgd run trained instead of training it again (a CNN on MNIST: 35 CPU minutes). The
  per-group loss / gradient-norm curves (Table 9.3, Figures 9.1/9.2/9.4) are non-private
  diagnostics of the training data, as in the thesis; they are written to `curves.csv`, never used to train.
- Table 9.3's "average gradient norm" fits the norm of the group's mean gradient over the epoch, not spec §5's
  mean per-example norm; both are logged (`mean_grad_norm`, with `group_mean_grad: auto` = logistic only, and
  `avg_grad_norm`), the comparison uses the former.
- `model: fasttext` (early_stopping.md §1.5, ambiguity 15; `auto` on a card of token bags such as imdb) trains the
  FastText text classifier on this trainer (`dpsgd_trainer.MeanBag`); its `auto` values are the thesis' IMDB
  DP-SGD column (C 1, sigma 1, 100 epochs, lr 0.6, no weight decay). Its vocabulary, read off the training texts
  by the card, is outside the DP guarantee: `claims()` is then `heuristic`.
- Model hyperparameters `auto` take the value of the `profile` for the model. `paper`: the spec's §3 values (CNN:
  C=1, sigma=0.8, 60 epochs, r=0.01; logistic: C=0.5, sigma=1, 20 epochs, r=1/sqrt(T), l2=0.01), which every
  reproduction experiment sets. `default` (issue 47): logistic C=2, 20 epochs, r=2, l2=0, a useful model at eps = 1
  (`USER_DEFAULTS`; the thesis' logistic values train the constant classifier on Adult at eps = 1); the CNN and
  fasttext as in `paper`. `model: auto` is the CNN for tables of 28x28 grey images without a sensitive column
  (MNIST; groups are the classes), logistic regression otherwise.
- C5, budgets: the printed iteration reductions leave DPSGD-F / Naive 0.0006-0.0064 above DPSGD's eps, so the
  experiments cap the budget above the printed eps (7 in Tables 9.1-9.4, 4.5 in Table 9.5); the spend is
  `eps_spent`.
- C15: the thesis reports single runs; the experiments report mean ± std over seeds.
- Census train size: the 80/20 split rounds the test part (Adult: 36,178 training rows vs the spec's 36,177);
  T and eps are unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch

from privfair_cli import metrics
from privfair_cli.algorithms import dpsgd_trainer
from privfair_cli.algorithms.dpsgd_accounting import NoisePlan, charge, plan_noise
from privfair_cli.algorithms.dpsgd_trainer import (
    BINARY_MODELS,
    CNN_INPUT,
    PerExampleGradients,  # noqa: F401  (bench/dpsgd.py reaches the engine through this module)
    TrainConfig,
    TrainLog,
    build_model,
    labels,
    predict_scores,
    predictions_by_epoch,
    train,
)
from privfair_cli.datasets import cache_root, read_cache, write_cache
from privfair_cli.errors import ConfigError
from privfair_cli.memo import Memo
from privfair_cli.privacy.dpsgd import SIGMA_MIN, Sampling, epsilon_after
from privfair_cli.registry import Plugin, option, register
from privfair_cli.threads import torch_threads
from privfair_cli.typed import bounds

SPEC_DEFAULTS = {  # spec §3, by model: what `auto` means under `profile: paper`
    "cnn": {"C": 1.0, "sigma": 0.8, "epochs": 60, "lr": 0.01, "l2": 0.0},
    "logistic": {"C": 0.5, "sigma": 1.0, "epochs": 20, "lr": "inv_sqrt_T", "l2": 0.01},
    "fasttext": {"C": 1.0, "sigma": 1.0, "epochs": 100, "lr": 0.6, "l2": 0.0},  # early_stopping.md §1.5 (IMDB)
}
# `profile: default` (issue 47): a useful model for a user at eps = 1, chosen once by one grid on Adult (eps 1, PLD,
# 20 epochs, b 256, seeds 0-1: C 0.5 / 1 / 2 x lr 0.1 / 0.5 / 2 x b 256 / 1024, docs/families/dpsgd.md). Logistic
# regression: no weight decay (the thesis' 0.01 after the noise, with C 0.5, trains the constant classifier even
# without noise), C 2 (the per-example gradient norm |p - y| ||(x, 1)|| of [0, 1]-scaled features is at most
# about 3 on Adult: C 2 clips only confidently wrong rows), lr 2 (the grid's best; the same on Bank, Dutch, COMPAS,
# law school and adult_3k at eps 1). The CNN and fasttext keep the thesis' clipping, with fewer epochs so that a
# default run ends within about 5 minutes on 2 CPU cores (an MNIST epoch of the CNN is about 40 s there, an IMDB
# epoch of fasttext about 30 s): CNN 3 (the thesis' 60 take 30-40 minutes), fasttext 5 (100: about 55 minutes). The
# CNN's step size for those 703 steps, chosen once by one grid on MNIST (eps 1, PLD, seed 0, test accuracy; r 0.01
# / 0.05 / 0.1 / 0.2 / 0.5 / 1 / 2: 0.659 / 0.843 / 0.886 / 0.909 / 0.935 / 0.934 / 0.907): 0.5 (the thesis' 0.01
# underfits in 3 epochs). fasttext keeps the thesis' 0.6.
USER_DEFAULTS = SPEC_DEFAULTS | {"logistic": {"C": 2.0, "sigma": 1.0, "epochs": 20, "lr": 2.0, "l2": 0.0},
                                 "cnn": SPEC_DEFAULTS["cnn"] | {"epochs": 3, "lr": 0.5},
                                 "fasttext": SPEC_DEFAULTS["fasttext"] | {"epochs": 5}}
PROFILES = {"default": USER_DEFAULTS, "paper": SPEC_DEFAULTS}
MNIST_NORMALISATION = (0.1307, 0.3081)  # spec C9: mean and std of MNIST's training pixels
SGD_KEPT_MAX = 8  # non-private trainings kept per process (`XuSGD._fit_model`); a CNN is 1.7 MB
# early_stopping.md §0.1: how the TPR and FPR gaps combine into one equal-odds gap (`eodds_agg`, default mean)
EODDS_AGG = {"mean": lambda a, b: (a + b) / 2, "max": np.maximum, "sum": lambda a, b: a + b}


@dataclass(frozen=True)
class XuSGDConfig:
    """Hyperparameters of the DP-SGD family; defaults with a comment per key in configs/algo/dpsgd.yaml.
    `lt=inf` refuses inf: a clipping bound, noise multiplier or step size must be a finite number."""

    model: Literal["auto", "cnn", "logistic", "fasttext"]
    batch_size: int = field(metadata=bounds(ge=1))
    epochs: int | Literal["auto"] = field(metadata=bounds(ge=1))
    lr: float | Literal["auto", "inv_sqrt_T"] = field(metadata=bounds(gt=0, lt=math.inf))
    C: float | Literal["auto"] = field(metadata=bounds(gt=0, lt=math.inf))
    sigma: float | Literal["auto", "calibrate"] = field(metadata=bounds(ge=SIGMA_MIN, lt=math.inf))
    sigma1_ratio: float = field(metadata=bounds(gt=0, lt=math.inf))
    l2: float | Literal["auto"] = field(metadata=bounds(ge=0, lt=math.inf))
    l2_mode: Literal["after_noise", "in_loss"]
    batch_sampling: Literal["poisson", "shuffle", "fixed_uniform"]
    group: Literal["auto", "sensitive", "label"]
    match_budget: Literal["thesis", "exact", "none"]
    empty_group_fraction: Literal["one", "neutral", "zero"]
    denominator: Literal["batch_fraction", "mean_group_fraction"]
    group_mean_grad: bool | Literal["auto"]
    reference: bool
    validation_size: float = field(metadata=bounds(ge=0, lt=1))
    history: bool | Literal["auto"]
    momentum: float = field(metadata=bounds(ge=0, lt=1))
    accounting: Literal["pld", "rdp"]
    profile: Literal["default", "paper"]
    profiles: ClassVar[dict] = PROFILES  # profile -> model -> what `auto` means

    @property
    def accountant(self) -> str | None:
        """The run's ledger accountant (`schema._budget` reads it): `basic` under `accounting: pld`, whose one
        (eps, delta) entry the ledger adds up (`dpsgd_accounting`); None otherwise (budget.accountant, else the
        family's `rdp`)."""
        return "basic" if self.accounting == "pld" else None

    def spec(self, key: str, model_kind: str):
        """The value of `key`, `auto` read as the profile's value for the model (`paper`: the spec's §3 value)."""
        value = getattr(self, key)
        return self.profiles[self.profile][model_kind][key] if value == "auto" else value


CNN_FEATURES = int(np.prod(CNN_INPUT))  # 784 pixels


def model_for(model: str, data) -> str:
    """The model a run trains. `auto`: spec §3's CNN for a table of 28x28 grey images (CNN_FEATURES columns)
    without a sensitive column (MNIST: the groups are the classes); logistic regression, the thesis' census
    model, otherwise. Refuses a CNN on other shapes and logistic regression on a label that is not 0/1."""
    if model == "auto" and "bag_width" in data.meta:
        model = "fasttext"  # a card of token bags (imdb): early_stopping.md's text model
    if model == "auto":
        model = "cnn" if data.d == CNN_FEATURES and data.s is None else "logistic"
    if model == "fasttext" and "bag_width" not in data.meta:
        raise ConfigError(f"algo.model=fasttext reads bags of tokens (a card with the `tokens` view, e.g. imdb); "
                          f"data={data.name} has none")
    if model != "fasttext" and "bag_width" in data.meta:
        raise ConfigError(f"data={data.name} holds bags of tokens; allowed: algo.model=fasttext (or auto)")
    if model == "cnn" and data.d != CNN_FEATURES:
        raise ConfigError(f"algo.model=cnn reads 28x28 images ({CNN_FEATURES} features); data={data.name} has {data.d}")
    if model in BINARY_MODELS and not np.isin(data.y, (0, 1)).all():
        raise ConfigError(f"algo.model={model} needs a 0/1 label; data={data.name} has other values")
    return model


def train_config(cfg: XuSGDConfig, algorithm: str, model_kind: str, n: int, groups: int) -> TrainConfig:
    """The trainer's settings for `n` training rows; sigma / sigma1 stay 0 until the noise is planned."""
    b = cfg.batch_size
    if b > n:
        raise ConfigError(f"algo.batch_size={b} is larger than the {n} training rows; allowed: 1 to {n}")
    epochs = int(cfg.spec("epochs", model_kind))
    steps = epochs * n // b  # T = floor(epochs n / b) >= 1
    lr = cfg.spec("lr", model_kind)
    lr = 1 / math.sqrt(steps) if lr == "inv_sqrt_T" else float(lr)
    logistic = model_kind == "logistic"
    binary = model_kind in BINARY_MODELS
    return TrainConfig(
        algorithm=algorithm, steps=steps, epochs=epochs, batch_size=b, lr=lr, C=float(cfg.spec("C", model_kind)),
        sigma=0.0, sigma1=0.0, l2=float(cfg.spec("l2", model_kind)), l2_mode=cfg.l2_mode,
        batch_sampling=cfg.batch_sampling, groups=groups, empty_group_fraction=cfg.empty_group_fraction,
        denominator=cfg.denominator,
        group_mean_grad=logistic if cfg.group_mean_grad == "auto" else cfg.group_mean_grad,
        keep_weights=binary if cfg.history == "auto" else cfg.history, momentum=float(cfg.momentum))


# --------------------------------------------------------------------------------------------- groups and metrics
@dataclass(frozen=True)
class Groups:
    """Who is a group (spec §0): the sensitive attribute (census, K = 2) or the class (MNIST, K = classes), and
    the two groups whose costs of privacy are compared (§5; None when the card names none)."""

    by_sensitive: bool
    K: int
    names: list[str]
    compare: tuple[int, int] | None

    @classmethod
    def of(cls, data, group: str) -> Groups:
        if group == "sensitive" and data.s is None:
            raise ConfigError(f"algo.group=sensitive but data={data.name} has no sensitive attribute")
        if group == "sensitive" or (group == "auto" and data.s is not None):
            return cls(True, 2, ["s0", "s1"], (1, 0))
        K = int(data.meta.get("classes", 2))
        names = list(data.meta.get("group_names") or [f"class{k}" for k in range(K)])
        pair = tuple(data.meta.get("compare_groups") or ()) or ((1, 0) if K == 2 else None)
        return cls(False, K, names, pair)

    def of_rows(self, table) -> np.ndarray:
        return np.asarray(table.s if self.by_sensitive else table.y, np.int64)


def group_accuracy(y, yhat, k, groups: Groups) -> dict[str, float]:
    """Total accuracy and `accuracy_<group>` for each of the K groups (spec §5; MNIST: per-class recall)."""
    rates = metrics.GroupRates(np.asarray(y), np.asarray(yhat), k, groups.K)
    by = rates.by_group()
    return {"accuracy": rates.rates()["accuracy"]} | {
        f"accuracy_{name}": by[g]["accuracy"] for g, name in enumerate(groups.names)}


@dataclass
class EpochHistory:
    """Per epoch: steps taken, eps spent by that epoch's weights and, per watched set (`validation`, `test`),
    metric name -> array over epochs (see the module docstring)."""

    epoch_steps: np.ndarray
    eps: np.ndarray
    sets: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    eodds_agg: str = "mean"

    def gaps(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The three fairness gaps of early_stopping.md §0.1 over epochs: `dp_gap` |PPR_1 - PPR_0|, `eopp_gap`
        |TPR_1 - TPR_0| and `eodds_gap` (|dTPR|, |dFPR| combined by `eodds_agg`), all from GroupRates; `watch`
        keeps the per-group PPR_z (`ppr_s0`, `ppr_s1`) beside them."""
        return {"dp_gap": values["risk_difference_abs"], "eopp_gap": values["dtpr_abs"],
                "eodds_gap": EODDS_AGG[self.eodds_agg](values["dtpr_abs"], values["dfpr_abs"])}

    def watch(self, name: str, predictions: np.ndarray, table, groups: Groups, binary: bool) -> None:
        """Metrics of every epoch's predictions (epochs x rows) on `table`."""
        k = groups.of_rows(table)
        rows = [(metrics.classification(table.y, p, table.s) if binary else {}) | group_accuracy(table.y, p, k, groups)
                for p in predictions]
        if rows:
            self.sets[name] = {key: np.array([r[key] for r in rows]) for key in rows[0]}
            if binary and table.s is not None:
                self.sets[name] |= self.gaps(self.sets[name])
                by = [metrics.GroupRates(table.y, p, table.s).by_group() for p in predictions]
                self.sets[name] |= {f"ppr_s{g}": np.array([b[g]["positive_rate"] for b in by]) for g in (0, 1)}

    def frame(self):
        import pandas as pd

        cols = {"epoch": np.arange(1, len(self.epoch_steps) + 1), "steps": self.epoch_steps, "eps": self.eps}
        for name, values in self.sets.items():
            cols |= {f"{name}_{key}": v for key, v in values.items()}
        return pd.DataFrame(cols)


# --------------------------------------------------------------------------------------------- plugins
class XuSGD(Plugin):
    """Shared plugin body of `sgd`, `dpsgd`, `dpsgd_f`, `dpsgd_naive`: settings, noise plan and ledger, the
    trained model (and the sgd reference), what the evaluation reads, history and diagnostics."""

    kind = "classifier"
    evaluation = "group_accuracy"
    needs = ("label", "features|tokens")
    cuda = True
    needs_delta = True
    accountant = "rdp"
    guarantee = "(eps,delta)-DP"
    guarantee_note = ("algo.batch_sampling=shuffle or fixed_uniform: accounted for those batches (no Poisson "
                      "amplification; replace-one adjacency); a card whose vocabulary is read off the training "
                      "texts (imdb): heuristic")
    Config = XuSGDConfig
    own_noise = "its gradient and count noise with torch / numpy samplers"  # not covered by privacy.secure
    algorithm: ClassVar[str]

    @classmethod
    def requirements(cls, cfg=None):
        return cls.needs + (("sensitive",) if option(cfg, "group", "auto") == "sensitive" else ())

    def fit(self, data, budget, ledger, rng, device="cpu"):
        self.device = device
        self.model_kind = model_for(self.cfg.model, data)
        self.binary = self.model_kind in BINARY_MODELS
        self.vocabulary_from_data = data.meta.get("vocabulary_from") == "train"
        if self.vocabulary_from_data:
            self.warn("the fasttext vocabulary is read off the training texts (the card's `vocabulary_from`): the "
                      "released embedding rows are outside the DP guarantee (claims: heuristic)")
        self.groups = Groups.of(data, self.cfg.group)
        data, validation = self._hold_out(data, rng)
        reference_rng = copy.deepcopy(rng)  # before any draw: the `sgd` run of this seed sees this very state
        settings = train_config(self.cfg, self.algorithm, self.model_kind, len(data), self.groups.K)
        self.info = {"steps": settings.steps, "q": settings.batch_size / len(data), "lr": settings.lr, "C": settings.C}
        self.plan = plan = self._charge(settings, data, budget, ledger) if self.private else None
        if plan is not None and plan.sigma == 0:
            self.warn("eps=inf with sigma=calibrate: the noise-free limit (sigma=0), no privacy guarantee")
        trained = settings if plan is None else replace(
            settings, sigma=plan.sigma, sigma1=plan.sigma1 or 0.0, steps=plan.steps)
        self.model, self.log = self._fit_model(trained, data, rng)
        self.reference = None
        if self.private and self.cfg.reference:
            self.reference, self.reference_log = self._fit_model(
                replace(settings, algorithm="sgd", keep_weights=False), data, reference_rng)
        self.history = self._history(plan, budget, ledger)
        if validation is not None:
            self.watch("validation", validation)
        return self

    def claims(self) -> str:
        """(eps, delta)-DP, or none for the noise-free limit (eps = inf, sigma = 0)."""
        noise_free = getattr(self, "plan", None) is not None and self.plan.sigma == 0
        if noise_free:
            return "none"
        return "heuristic" if getattr(self, "vocabulary_from_data", False) else super().claims()

    def _hold_out(self, data, rng):
        """`validation_size` > 0: a seeded share of the training rows held out for the per-epoch history."""
        if self.cfg.validation_size == 0:
            return data, None
        perm = rng.permutation(len(data))
        m = int(round(self.cfg.validation_size * len(data)))
        return data.subset(np.sort(perm[m:])), data.subset(np.sort(perm[:m]))

    def _charge(self, settings: TrainConfig, data, budget, ledger) -> NoisePlan:
        counts = self.algorithm in ("dpsgd_f", "dpsgd_naive")
        sigma = self.cfg.spec("sigma", self.model_kind)
        plan = plan_noise(sigma, counts, self.cfg.sigma1_ratio, self.cfg.match_budget,
                          settings.batch_size / len(data), settings.steps, budget, ledger, data.name,
                          Sampling(settings.batch_sampling, len(data), settings.batch_size), self.cfg.accounting)
        what = "2K clipped/unclipped counts" if self.algorithm == "dpsgd_f" else "K group sizes"
        charge(plan, ledger, "C" if counts else settings.C, note=f"clipped gradients ({settings.batch_sampling} "
               "batches)", counts_note=f"noisy {what} (L2 sensitivity 1)")
        self.info |= {"sigma": plan.sigma, "steps": plan.steps, "steps_removed": plan.removed}
        if counts:
            self.info["sigma1"] = plan.sigma1
        self.info["eps_accountant"] = ledger.spent()[0]
        return plan

    def _inputs(self, X) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(X), dtype=torch.float32, device=self.device)
        if self.model_kind == "cnn":
            mu, sd = MNIST_NORMALISATION
            x = (x - mu) / sd
        return x

    def _fit_model(self, settings: TrainConfig, data, rng) -> tuple[torch.nn.Module, TrainLog]:
        """Train a model with `settings` on `data` from the random state of `rng`. A non-private (`sgd`) training
        is kept (`_SGD_KEPT`, and on disk without its per-epoch weights) and given again to a later call with
        exactly the same inputs: the sgd run and the private runs' `reference` of one seed train the same model,
        once (a process's other calls take it from memory, other processes from disk)."""
        key = self._sgd_key(settings, data, rng)
        state, log, after = _SGD_KEPT.get(key, (None, None, None)) if key is not None else (None, None, None)
        if state is None and key is not None and not settings.keep_weights:
            state, log, after = _sgd_from_disk(key) or (None, None, None)
        if state is not None and (log.weights is not None or not settings.keep_weights):
            model = self._new_model(data, 0)
            model.load_state_dict(state)
            rng.bit_generator.state = after  # where the training would have left the stream
            return model, replace(copy.deepcopy(log), weights=log.weights.copy() if settings.keep_weights else None)
        model, log = self._train_model(settings, data, rng)
        if key is not None:
            _SGD_KEPT[key] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, copy.deepcopy(log),
                              rng.bit_generator.state)
            _sgd_to_disk(key, *_SGD_KEPT[key])
        return model, log

    def _sgd_key(self, settings: TrainConfig, data, rng) -> tuple | None:
        """Everything a non-private training's result depends on (whether it keeps each epoch's weights does not
        change the training: a kept one with weights serves a call without); None for private training or OS
        randomness."""
        if settings.private or getattr(rng, "secure", False) or not hasattr(rng, "bit_generator"):
            return None
        digest = hashlib.sha256()
        for array in (data.X, data.y, self.groups.of_rows(data)):
            digest.update(np.ascontiguousarray(array).view(np.uint8))
        threads = 1 if self.device == "cpu" and self.model_kind == "logistic" else torch.get_num_threads()
        meta = tuple(data.meta.get(k) for k in ("vocab_size", "bag_width", "classes"))
        state = json.dumps(rng.bit_generator.state, sort_keys=True, default=str)
        # sgd never clips, so its C (the private runs' bound, which their reference inherits) does not change it
        return (replace(settings, keep_weights=False, C=0.0), self.model_kind, self.binary, self.groups.K,
                str(self.device), threads, data.d, meta, digest.hexdigest(), state)

    def _new_model(self, data, seed: int) -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            classes = 2 if self.binary else int(data.meta.get("classes", self.groups.K))
            return build_model(self.model_kind, data.d, classes, data.meta).to(self.device)

    def _train_model(self, settings: TrainConfig, data, rng) -> tuple[torch.nn.Module, TrainLog]:
        seed = int(rng.integers(2**62))
        model = self._new_model(data, seed)
        tiny = self.device == "cpu" and self.model_kind == "logistic"  # thread hand-offs cost 10x the arithmetic
        with torch_threads(1) if tiny else contextlib.nullcontext():
            log = train(model, self.model_kind, self._inputs(data.X),
                        torch.as_tensor(data.y, dtype=torch.int64, device=self.device),
                        torch.as_tensor(self.groups.of_rows(data), device=self.device), settings, rng, self.device)
        return model, log

    def _history(self, plan: NoisePlan | None, budget, ledger) -> EpochHistory:
        steps = self.log.epoch_steps
        eps = np.zeros(len(steps)) if plan is None else epsilon_after(
            plan.q, plan.sigma, plan.sigma1, steps, budget.delta, ledger.orders, ledger.rdp_conversion, plan.sampling,
            plan.accounting)
        return EpochHistory(steps, eps, eodds_agg=getattr(self.cfg, "eodds_agg", "mean"))

    def watch(self, name: str, table) -> None:
        """Record the per-epoch metrics of the kept weights on `table` in the history under `name`."""
        if self.log.weights is not None:
            preds = predictions_by_epoch(self.model, self.model_kind, self.log.weights, self._inputs(table.X))
            self.history.watch(name, preds, table, self.groups, self.binary)

    # -- prediction and evaluation -------------------------------------------------------------------
    def predict(self, X):
        return labels(self.model_kind, predict_scores(self.model, self._inputs(X)))

    def predict_proba(self, X):
        scores = predict_scores(self.model, self._inputs(X))
        if self.model_kind in BINARY_MODELS:
            return torch.sigmoid(scores[:, 0]).cpu().numpy()
        return torch.softmax(scores, 1).cpu().numpy()

    def reference_predict(self, X):
        """Predictions of the non-private reference model (sgd, trained with the same settings), None without
        one."""
        if self.reference is None:
            return None
        return labels(self.model_kind, predict_scores(self.reference, self._inputs(X)))

    def extra_metrics(self) -> dict[str, float]:
        """Settings and spend (`info`), and the last epoch's per-group training diagnostics (spec §5, Table 9.3)."""
        out = {k: float(v) for k, v in self.info.items()}
        if self.log.clip_bound is not None:
            out["max_group_clip_bound"] = float(self.log.clip_bound.max())
        n = self.log.count[-1]
        seen = np.where(n > 0, n, np.nan)
        for g, name in enumerate(self.groups.names):
            out[f"avg_loss_{name}"] = float(self.log.loss[-1, g] / seen[g])
            out[f"avg_grad_norm_{name}"] = float(self.log.norm[-1, g] / seen[g])
            if self.log.mean_grad_norm is not None:
                out[f"mean_grad_norm_{name}"] = float(self.log.mean_grad_norm[-1, g]) if n[g] else float("nan")
        return out

    def curves(self):
        """Per-epoch, per-group rows: loss, gradient norm (before clipping), examples seen, C^k (DPSGD-F)."""
        import pandas as pd

        E, K = self.log.count.shape
        n = np.maximum(self.log.count, 1)
        df = pd.DataFrame({
            "epoch": np.repeat(np.arange(1, E + 1), K), "group": self.groups.names * E,
            "examples": self.log.count.ravel().astype(int), "avg_loss": (self.log.loss / n).ravel(),
            "avg_grad_norm": (self.log.norm / n).ravel()})
        if self.log.clip_bound is not None:
            df["avg_clip_bound"] = self.log.clip_bound.ravel()
        if self.log.mean_grad_norm is not None:
            df["mean_grad_norm"] = self.log.mean_grad_norm.ravel()
        return df

    def artifacts(self, run_dir) -> None:
        df = self.curves()
        Path(run_dir).mkdir(parents=True, exist_ok=True)   # the in-process sweep creates it only when writing
        df.to_csv(Path(run_dir) / "curves.csv", index=False, float_format="%.6g")
        self.history.frame().to_csv(Path(run_dir) / "history.csv", index=False, float_format="%.6g")


def _plugin(class_name: str, algorithm: str, **attrs) -> type[XuSGD]:
    """The registered plugin `algorithm`: the shared body; its clipping rule is the trainer's `CLIP_RULES`."""
    body = {"name": algorithm, "algorithm": algorithm, "mechanisms": ("subsampled_gaussian",), "__module__": __name__}
    return register(type(class_name, (XuSGD,), body | attrs))


_SGD_KEPT = Memo(SGD_KEPT_MAX)  # `XuSGD._sgd_key` -> (state dict, TrainLog, the noise stream's state after training)


def _sgd_disk_path(key: tuple) -> Path:
    """Where a kept non-private training lies on disk: named by its key, torch's version and the source of this
    family's training code (an edit of the trainer never serves a model it would not train now)."""
    digest = hashlib.sha256(repr(key).encode())
    digest.update(torch.__version__.encode())
    for source in (__file__, dpsgd_trainer.__file__):
        digest.update(Path(source).read_bytes())
    return cache_root() / "sgd" / f"{digest.hexdigest()[:32]}.npz"


def _sgd_to_disk(key: tuple, state: dict, log: TrainLog, after: dict) -> None:
    """Write a kept training (its per-epoch weights left out) atomically; a cache that cannot be written is
    skipped."""
    arrays = {f"state/{k}": v.detach().cpu().numpy() for k, v in state.items()}
    arrays |= {f"log/{k}": v for k, v in vars(log).items() if v is not None and k != "weights"}
    write_cache(_sgd_disk_path(key), lambda f: np.savez(f, after=np.array(json.dumps(after)), **arrays))


def _sgd_from_disk(key: tuple) -> tuple[dict, TrainLog, dict] | None:
    """(state dict, TrainLog, stream state) of a training `_sgd_to_disk` wrote, or None (absent or damaged)."""
    def load(path):
        with np.load(path, allow_pickle=False) as f:
            state = {k.removeprefix("state/"): torch.from_numpy(f[k]) for k in f.files if k.startswith("state/")}
            log = TrainLog(**{k.removeprefix("log/"): f[k] for k in f.files if k.startswith("log/")})
            return state, log, json.loads(str(f["after"]))

    return read_cache(_sgd_disk_path(key), load)


SGD = _plugin("SGD", "sgd", private=False, needs_delta=False, accountant="basic", mechanisms=(), own_noise="")
DPSGD = _plugin("DPSGD", "dpsgd")
DPSGDF = _plugin("DPSGDF", "dpsgd_f")
DPSGDNaive = _plugin("DPSGDNaive", "dpsgd_naive")
