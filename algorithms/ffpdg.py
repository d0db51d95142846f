"""FFPDG: fast, fair and private data generation (ffpdg.md; seed 004, Weijie Xu), the composable two-stage
pipeline: a fairness pre-processor (`algorithms/preprocess.py`: `fairmaxent`, `reweighing`, `dir`, `none`) and a
private generator (`algorithms/ron_gauss.py`: `ron_gauss`; `algorithms/dpwgan.py`: `dpwgan`; `algorithms/pategan.py`:
`pategan`; or `none` for the processed data itself), chosen
independently (`algo.preprocessor`, `algo.generator`), run in `order: fair_first` (pre-process, then generate;
the FFPDG default) or `fair_last` (the pre-processor applied to the generator's output, §0). `algo=ffpdg` is the
seed's combination (Algorithm 1: FairMaxEnt, then RON-Gauss); `algo=ron_gauss` is the stand-alone generator (§3).
The 4 x 4 grid of Tables 4-5 is one multirun: `privfair run -m algo=ffpdg delta=1e-5
algo.preprocessor=none,reweighing,dir,fairmaxent algo.generator=none,ron_gauss,dpwgan,pategan`.

Steps (§1) on the card's discrete view (Adult and COMPAS in the small domains of §6: `data=adult_ffpdg`,
`data=compas_ffpdg`): 1-3 the FairMaxEnt domain is the card's discrete view, whose records are their own keys;
2 FairMaxEnt samples n rows; 4-9 RON-Gauss (class-wise GMM) releases n' = n rows. Reweighing feeds a generator by
a weighted resample of n rows (§4.1); with generator `none` its weights go to the classifiers (F17).
Evaluation (§7; evaluate.py, the generator evaluation and the metric set `classifier_panel`): the eight
scikit-learn classifiers of `downstream.panel_metrics` trained on the release and tested on the real test split
(`aucroc` = max AUC, `dsp`, `deo` = means), `lrd` (`metrics.lrd`, the release against the real training rows),
TVD / ACD (`metrics.release_metrics`), `runtime` (the release's wall clock and its sampling, evaluation apart); the
release is the run artifact `synthetic.csv.gz`.

Privacy. Every noisy release is a Laplace release through the ledger: eps_mu + eps_sigma = eps (+ eps_count with
noisy class counts). `claims()`: the seed's pipeline is NOT end-to-end DP (FairMaxEnt reads the raw data, the
class counts and the binary thresholds are raw, the seed's covariance sensitivity is too small, F6): it claims
`heuristic` and the run warns why. The rigorous variant claims `eps-DP`: generator `ron_gauss` on the raw rows
(`order: fair_last`, or `preprocessor: none`) with `class_counts: noisy`, `binary_decoding: onehot` and
`cov_sensitivity: safe`; the pre-processor then only post-processes the release. Generator `none` releases the
(processed) real rows: `none`. The GAN generators spend (eps, delta) (the run's delta must be > 0): `dpwgan` the
eps of its subsampled-Gaussian critic steps by `dpwgan_accounting` (PLD by default, RDP in the xu2023
experiments), `pategan` the moments accountant's eps_hat; on the raw
rows (`fair_last` or `preprocessor: none`) they claim (eps,delta)-DP, except PATE-GAN with the paper's
data-dependent moments (`pategan_bound: data_dependent`, the default), which claims `heuristic` and warns. The GANs
decode by argmax over one-hot blocks, so no raw statistic enters their release.

Deviations and choices (ffpdg.md IDs):
- §1 steps 1/3: the original format is the card's small-domain view (age decade and education years as
  categories, not years), so every record is its own FairMaxEnt key and step 3 returns the sampled key itself:
  no real record is copied and no nearest-key search is needed (F22 does not arise). Numeric min-max scaling and
  its inversion (step 4 / 9, F10) do not arise either.
- F5: the mean's scale is the seed's 2 sqrt(d) / (n eps_mu). F6: `cov_sensitivity` default `safe` (2 p); the
  reproduction experiments set `seed` (2 sqrt(p)), which lowers the claim to `heuristic` and warns. F7: symmetrise
  and clip. F8: p = d - 1 by default. F9: one-hot white noise U(0, 0.2), renormalised. F11: class-wise GMM only
  (the unsupervised and regression variants are not implemented: both cards have a binary label).
- F12: n' = n_train; class counts from the generator's input (after FairMaxEnt: the spec's pi~_c) or noisy.
- F16: FairMaxEnt prior q_C^w with theta^w by default (`target`), C = 0.1 (`smoothing`); dual by L-BFGS over the
  enumerated domain, capped at `max_domain` cells.
- F17: reweighing weights are a weighted resample for a generator and `sample_weight` for the Original-Data
  classifiers.
- F15: DIR repairs the attributes, never the label or the protected attribute (on codes; see preprocess.py).
- §7: the classifiers are fitted on the release's distinct rows weighted by their counts (`compress_rows`, the
  same fit for a small domain; RandomForest's bootstrap and the MLP's minibatches then run over distinct rows).
- §5 DP-WGAN / PATE-GAN: their own modules list their choices (per-example clipping, the precomputed number of
  critic steps; PATE-GAN's accountant and what happens at the spec's lambda = 1). CTGAN / CopulaGAN are not
  implemented (no generator of that name).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from privfair_cli.algorithms import dpwgan, pategan, preprocess, ron_gauss
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.registry import Plugin, option, register
from privfair_cli.typed import bounds

GANS = ("dpwgan", "pategan")
Panel = Literal["lr", "rf", "mlp", "gnb", "gb", "bnb", "dt", "lda"]


@dataclass(frozen=True)
class FFPDGConfig:
    """`ffpdg` / `ron_gauss` (defaults: configs/algo/ffpdg.yaml, ron_gauss.yaml)."""

    preprocessor: Literal["none", "reweighing", "dir", "fairmaxent"]
    generator: Literal["none", "ron_gauss", "dpwgan", "pategan"]
    order: Literal["fair_first", "fair_last"]
    smoothing: float = field(metadata=bounds(ge=0, le=1))
    target: Literal["weighted", "data", "balanced"]
    max_domain: int = field(metadata=bounds(ge=1))
    repair_level: float = field(metadata=bounds(ge=0, le=1))
    p: int | None = field(metadata=bounds(ge=1))
    eps_mu_share: float = field(metadata=bounds(gt=0, lt=1))
    cov_sensitivity: Literal["seed", "safe"]
    class_counts: Literal["exact", "noisy"]
    count_share: float = field(metadata=bounds(gt=0, lt=1))
    binary_decoding: Literal["quantile", "onehot"]
    white_noise: float = field(metadata=bounds(ge=0))
    classifiers: list[Panel] | Panel
    compress_rows: bool
    lrd_folds: int = field(metadata=bounds(ge=2))
    gan_noise_dim: int = field(metadata=bounds(ge=1))
    gan_hidden: int = field(metadata=bounds(ge=1))
    gan_batch: int = field(metadata=bounds(ge=1))
    gan_lr: float = field(metadata=bounds(gt=0))
    dpwgan_layers: int = field(metadata=bounds(ge=1))
    dpwgan_sigma: float = field(metadata=bounds(gt=0))
    dpwgan_clip: float = field(metadata=bounds(gt=0))
    dpwgan_weight_clip: float = field(metadata=bounds(gt=0))
    dpwgan_critic_steps: int = field(metadata=bounds(ge=1))
    dpwgan_epochs: int = field(metadata=bounds(ge=1))
    dpwgan_max_steps: int | None = field(metadata=bounds(ge=1))
    dpwgan_accounting: Literal["pld", "rdp"]
    pategan_teachers: int = field(metadata=bounds(ge=2))
    pategan_teacher_hidden: int = field(metadata=bounds(ge=0))
    pategan_teacher_iters: int = field(metadata=bounds(ge=1))
    pategan_student_iters: int = field(metadata=bounds(ge=1))
    pategan_lambda: float = field(metadata=bounds(gt=0))
    pategan_moments: int = field(metadata=bounds(ge=1))
    pategan_bound: Literal["data_dependent", "data_independent"]
    pategan_max_rounds: int | None = field(metadata=bounds(ge=1))


def protected_column(data, columns: list[str], name: str) -> int:
    """The discrete-view column of the card's sensitive attribute: among `roles.protected`, the two-level column
    whose codes equal s (or 1 - s) on every row."""
    if data.s is None:
        raise DataError(f"algo={name}: a fairness pre-processor needs a sensitive attribute, and data={data.name} "
                        f"has none; allowed: a card with `sensitive` and `privileged` (e.g. data=adult_ffpdg) or "
                        f"algo.preprocessor=none")
    s = np.asarray(data.s).astype(int)
    for c in (data.roles or {}).get("protected") or []:
        if c in columns:
            v = data.frame[c].to_numpy()
            if np.isin(v, (0, 1)).all() and (np.array_equal(v, s) or np.array_equal(v, 1 - s)):
                return columns.index(c)
    raise DataError(f"algo={name}: data={data.name} has no two-level `roles.protected` attribute in its discrete "
                    f"view coding the sensitive attribute {data.name!r} declares; add it to the card's roles")


@register
class FFPDG(Plugin):
    """`ffpdg`: pre-processor x generator, in either order (see the module docstring)."""

    name = "ffpdg"
    kind = "generator"
    needs = ("discrete", "roles", "sensitive", "binary_label")
    mechanisms = ("laplace",)
    guarantee = "heuristic"  # what the defaults (the seed's pipeline) give; claims() says eps-DP for the rigorous one
    guarantee_note = ("eps-DP only for the rigorous pipeline: algo.order=fair_last or algo.preprocessor=none, and for "
                      "ron_gauss algo.class_counts=noisy, binary_decoding=onehot, cov_sensitivity=safe, for the GANs "
                      "dpwgan or pategan_bound=data_independent; algo.generator=none: none")
    Config = FFPDGConfig
    metric_sets = ("classifier_panel",)

    @classmethod
    def requirements(cls, cfg=None) -> tuple[str, ...]:
        """FairMaxEnt enumerates the domain, and RON-Gauss draws a d x d projection over the one-hot width d: both
        are written for the small domains of spec §6 and need the `enumerable` view (a declared domain of at most
        registry.ENUMERABLE_CELLS cells)."""
        small = (option(cfg, "preprocessor", "fairmaxent") == "fairmaxent"
                 or option(cfg, "generator", "ron_gauss") == "ron_gauss")
        return cls.needs + (("enumerable",) if small else ())

    def claims(self) -> str:
        cfg = self.cfg
        if cfg.generator == "none":
            return "none"
        raw_input = cfg.order == "fair_last" or cfg.preprocessor == "none"
        if cfg.generator in GANS:  # (eps, delta): the runner reports "(eps,delta)-DP" for delta > 0
            rigorous = raw_input and (cfg.generator == "dpwgan" or cfg.pategan_bound == "data_independent")
            return "eps-DP" if rigorous else "heuristic"
        rigorous = (raw_input and cfg.class_counts == "noisy" and cfg.binary_decoding == "onehot"
                    and cfg.cov_sensitivity == "safe")
        return "eps-DP" if rigorous else "heuristic"

    def _why_heuristic(self) -> list[str]:
        cfg, out = self.cfg, []
        if cfg.order == "fair_first" and cfg.preprocessor != "none":
            out.append(f"{cfg.preprocessor} reads the raw rows before the private generator (one row can change "
                       "many of its outputs)")
        if cfg.generator in GANS:
            if cfg.generator == "pategan" and cfg.pategan_bound == "data_dependent":
                out.append("PATE-GAN's moments accountant is data-dependent (the teachers' vote gaps on the private "
                           "rows set eps_hat and the stopping time; pategan_bound=data_independent avoids it)")
            return out
        if cfg.class_counts == "exact":
            out.append("the class counts are exact (class_counts=noisy releases them)")
        if cfg.binary_decoding == "quantile":
            out.append("binary columns are decoded at the raw share of ones (binary_decoding=onehot avoids it)")
        if cfg.cov_sensitivity == "seed":
            out.append("the covariance noise uses the seed's sensitivity 2 sqrt(p), below the entrywise L1 bound "
                       "2p (F6; cov_sensitivity=safe)")
        return out

    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        if data.frame is None or not data.domain:
            raise ConfigError(f"algo={self.name} needs the card's `discrete:` view: add it to "
                              f"configs/data/{data.name}.yaml")
        cfg = self.cfg
        self.columns = list(data.frame.columns)
        self.domain = [int(data.domain[c]) for c in self.columns]
        outcome = [c for c in (data.roles or {}).get("outcome") or [] if c in self.columns]
        if not outcome:
            raise ConfigError(f"algo={self.name}: data={data.name} has no `roles.outcome` in its discrete view")
        self.y_col = self.columns.index(outcome[0])
        if self.domain[self.y_col] != 2:
            raise DataError(f"algo={self.name}: the outcome {outcome[0]} must have two levels (class-wise RON-Gauss, "
                            f"binary metrics); it has {self.domain[self.y_col]}")
        X = data.frame.to_numpy(np.int64)
        if not np.array_equal(X[:, self.y_col] == 1, np.asarray(data.y).astype(bool)):
            raise DataError(f"algo={self.name}: data={data.name}: the outcome's code 1 must be the card's positive "
                            "label (order its `levels` so)")
        self.s_col = None
        if cfg.preprocessor != "none":
            self.s_col = protected_column(data, self.columns, self.name)
        self.n_original = len(X)
        pre = lambda Z: preprocess.apply(cfg.preprocessor, Z, self.domain, self.s_col, self.y_col, rng,  # noqa: E731
                                         cfg.smoothing, cfg.target, cfg.max_domain, cfg.repair_level)
        if cfg.order == "fair_first":
            processed = pre(X)
            Z, w = processed.X, processed.weights
            if cfg.generator != "none":
                if w is not None:  # F17: a weighted resample feeds the generator
                    Z = Z[rng.choice(len(Z), size=len(Z), p=w / w.sum())]
                    w = None
                Z = self._generate(Z, budget, ledger, rng)
        else:
            Z = self._generate(X, budget, ledger, rng) if cfg.generator != "none" else X
            processed = pre(Z)
            Z, w = processed.X, processed.weights
        self.release, self.weights = Z, w
        self.fit_seconds = time.perf_counter() - t0
        if self.claims() == "heuristic":
            self.warn("guarantee heuristic, not end-to-end DP: " + "; ".join(self._why_heuristic()))
        return self

    def _generate(self, Z, budget, ledger, rng):
        cfg = self.cfg
        gan = {"noise_dim": cfg.gan_noise_dim, "hidden": cfg.gan_hidden, "batch": cfg.gan_batch, "lr": cfg.gan_lr}
        if cfg.generator == "dpwgan":
            s = dpwgan.Settings(**gan, layers=cfg.dpwgan_layers, sigma=cfg.dpwgan_sigma, clip=cfg.dpwgan_clip,
                                weight_clip=cfg.dpwgan_weight_clip, critic_steps=cfg.dpwgan_critic_steps,
                                epochs=cfg.dpwgan_epochs, max_steps=cfg.dpwgan_max_steps,
                                accounting=cfg.dpwgan_accounting)
            return dpwgan.generate(Z, self.domain, len(Z), budget.eps, budget.delta, s, rng, ledger)
        if cfg.generator == "pategan":
            s = pategan.Settings(**gan, teacher_hidden=cfg.pategan_teacher_hidden, teachers=cfg.pategan_teachers,
                                 teacher_iters=cfg.pategan_teacher_iters, student_iters=cfg.pategan_student_iters,
                                 lam=cfg.pategan_lambda, moments=cfg.pategan_moments, bound=cfg.pategan_bound,
                                 max_rounds=cfg.pategan_max_rounds)
            out, labels = pategan.generate(Z, self.domain, len(Z), budget.eps, budget.delta, s, rng, ledger)
            self.pategan_labels = labels
            if not labels:
                self.warn(f"PATE-GAN released no noisy label: eps={budget.eps:g} does not cover the first batch of "
                          f"{cfg.gan_batch} under the moments accountant (lambda={cfg.pategan_lambda:g}, "
                          f"{cfg.pategan_teachers} teachers, delta={budget.delta:g}); the release is the untrained "
                          "generator's, nothing was spent")
            return out
        settings = ron_gauss.Settings(cfg.p, cfg.eps_mu_share, cfg.cov_sensitivity, cfg.class_counts,
                                      cfg.count_share, cfg.binary_decoding, cfg.white_noise)
        return ron_gauss.generate(Z, self.domain, self.y_col, len(Z), budget.eps, settings, rng, ledger)

    def n_rows(self) -> int:
        return len(self.release)

    def sample(self, n, rng) -> pd.DataFrame:
        return pd.DataFrame(self.release[:n], columns=self.columns)

    def extra_metrics(self) -> dict[str, float]:
        """PATE-GAN's count of released noisy labels (generator `pategan`)."""
        return {"pategan_labels": float(self.pategan_labels)} if hasattr(self, "pategan_labels") else {}

    def released_table(self):
        """The released table (the run's `synthetic.csv.gz`), with the pre-processor's row weights where it
        reweighs."""
        frame = self.sample(self.n_rows(), None)
        if self.weights is not None:
            frame["weight"] = self.weights
        return frame


@register
class RONGauss(FFPDG):
    """`ron_gauss`: the stand-alone generator (§3), no pre-processor by default."""

    name = "ron_gauss"
