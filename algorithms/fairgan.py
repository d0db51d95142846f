"""Fair data generation with GANs (fairgan.md; seed: Xu thesis ch. 6, FairGAN [111] and FairGAN+ [112]) and the
baselines of Tables 6.1 / 6.2. "DP" here means demographic parity: nothing in this family is differentially
private (privacy mechanism none, guarantee `none`).

One implementation, `FairGANModel` (on the shared trainer `gan.py`), covers the generators through its flags:
- `fairgan` (§2): `label_mode=generated` (G(z | s) outputs (x, y)), D1 on (x, y, s), D2 predicts s from the
  generated (x, y), weight `lambda_`; no classifier, no D3;
- `fairgan_plus_dp` / `_eo` / `_eop` (§3): `label_mode=conditioned` (G(z | y, s) outputs x; y', s' drawn
  independently from the real marginals), D1 on (x, y, s), D2 predicts s from (x, y), a logistic-regression
  classifier eta co-trained with G, and D3 predicting s from eta's output (`constraint` dp: eta(x); eo:
  [eta(x), y]; eop: eta(x) on label-1 rows), weight `mu`;
- `acgan` (§4): the FairGAN+ machinery with lambda = mu = 0 (no D2, no D3).
Classifier: `lr_real` (C1: scikit-learn LogisticRegression(max_iter=2000) on the real data; its run also reports
the real table's data metrics, D1). The chapter's other baseline classifier, `adv_debias` (C4), is
algorithms/adv_debias.py.

Schedule (§2.3 / §3.4): AE pre-training, phase 1 with lambda = mu = 0, phase 2 with the configured weights; each
iteration `d_steps` discriminator steps, then `g_steps` joint G(+decoder, + eta) steps, each on a fresh batch.
A term whose weight is 0 (D2 / D3 in phase 1) is not evaluated: its gradient is exactly zero, so D2 / D3 get the
zero-gradient Adam step (only the L2 decay moves their weights), as when the term was computed and multiplied by 0.
`profile: full` runs the epochs of the config (the spec's 200 / 2000 / 2000 at batch 100); `fast` is spec §11's
CPU profile (batch 500, 50 / 150 / 150 epochs); `smoke` is 5 epochs per phase at batch 100 (tests, CI).
`schedule: default` (the configs' default, not the spec's: issue 47 asks a default run to finish within about 5
minutes on 2 CPU cores) trains `DEFAULT` (batch 500, 20 AE + 25 + 25 epochs) while the configured epochs are the
spec's; `schedule: paper` trains the configured epochs (Tables 6.1 / 6.2 pin it). Training is timed on a
throwaway model first (an estimate over 5 minutes is printed before training), runs under one progress bar for all
phases, and checkpoints / resumes through `gan.Checkpoint` (same model as an uninterrupted run on a CPU).

Metrics (spec §7, the published keys; computed by evaluate.py, metric sets `fair_data` for the generators, `rd_clf`
and `real_data` for the classifiers; every group rate through `metrics.GroupRates`): `rd_data` (the released
table's own P(y=1|s=1) - P(y=1|s=0)), `ber` (LinearSVC(C=1) predicting s from x, fitted and scored on the released
table, `ber_eval: same`, or fitted on it and scored on the real table, `real`), `dist_xy` / `dist_xys`
(`metrics.pmf_distance`: L2 distance of the row PMFs, cells = distinct rows), and of the generator's classifier on
the real data: `rd_clf`, `accuracy`, `dtpr`, `dfpr` (eta for FairGAN+ / ACGAN; for FairGAN, the downstream
LogisticRegression(max_iter=2000) of `downstream.fit_predict` trained on its synthetic (x, y), C3). Plus the
generic release metrics (`tvd_1way`, ...).
The released table is the run's artifact `synthetic.csv.gz`: the input's discrete view, same columns and codes.

Encoding: x is the one-hot of every attribute of the card's discrete view except the sensitive and label
columns (Adult as spec §8.2: card `adult_fairgan`, 57 dims). The sensitive column must be two-valued.

Deviations and choices (spec IDs):
- A5: `ae_loss` bce (default) or mse. A6 / A7: full BCE for the classifier, per-player losses of §3.3.
  A8: `d3_on` both (default) / real / fake; x-hat is detached inside the D3 term (G gets no gradient from V3).
  A9: D2 sees generated samples only; the port's `d2_on_real` / `share_d_body` options are not implemented.
  A10: `d2_balanced` (default true) applies to D2 and D3 alike. A11: `adv_mode` minimax (default) / flip.
  A12: conditioning by the learned embedding; D1 gets the condition bits appended; discretisation by arg max per
  one-hot group (`discretise: argmax`) or a categorical draw (`sample`), BN in inference mode when generating.
- D3's architecture is not given anywhere: a one-hidden-layer MLP of width `d3_hidden` (ReLU) [rec, ours].
- Real batches are drawn uniformly with replacement (independently per iteration), not epoch permutations;
  one "epoch" is ceil(N / batch) iterations (§2.3).
- L2 weight decay (0.001) is coupled Adam weight decay on the weight matrices (the gradient of the L2 term
  medGAN adds to every loss); biases, BN parameters are not decayed.
- Seeds: a run trains its seed alone; in a sweep run in process (`privfair reproduce`) the runs that differ only in
  their seed train as one batched ensemble, each member from generators of its own seed (`privfair_cli.seedbatch`,
  `env.seeds_batched`; a member's `runtime` is its share of the group's training). A member is its seed's run up
  to the order of some float sums, which training amplifies: an equally valid run, not the solo one bit for bit.
- Training flushes denormal floats to zero (`threads.torch_threads`), TensorFlow's CPU default, which the seed's code
  had; without it a CPU run slowed 5-7x after about a thousand iterations. On CUDA each phase's iteration is
  replayed as one CUDA graph (`gan.Graphed`): the same arithmetic and seeded generators, the draws in the graph's
  order, so a CUDA run's numbers differ from an eager run's as any device's do.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from privfair_cli.algorithms import gan
from privfair_cli.errors import DataError
from privfair_cli.registry import ONEHOT_WIDTH, Plugin, register, variants
from privfair_cli.typed import bounds

SEED_BITS = 62
GEN_CHUNK = 10_000  # rows per generation pass
# spec §11: the CPU profile and the smoke profile replace the configured schedule
PROFILES = {"fast": {"batch_size": 500, "pretrain_epochs": 50, "phase1_epochs": 150, "phase2_epochs": 150},
            "smoke": {"batch_size": 100, "pretrain_epochs": 5, "phase1_epochs": 5, "phase2_epochs": 5}}
# the spec's schedule (§2.3 / §9; configs/algo/*.yaml) and the default one a user run trains (`schedule: default`,
# issue 47: a default run finishes within about 5 minutes on 2 CPU cores; Tables 6.1 / 6.2 pin `schedule: paper`)
PAPER = {"batch_size": 100, "pretrain_epochs": 200, "phase1_epochs": 2000, "phase2_epochs": 2000}
DEFAULT = {"batch_size": 500, "pretrain_epochs": 20, "phase1_epochs": 25, "phase2_epochs": 25}


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class FairGANConfig(gan.FairGANKeys):
    """Every generator of the family (defaults per plugin in configs/algo/<name>.yaml)."""

    label_mode: Literal["generated", "conditioned"]
    lambda_: float = field(metadata=bounds(ge=0))
    mu: float = field(metadata=bounds(ge=0))
    constraint: Literal["dp", "eo", "eop", "none"]
    pretrain_epochs: int = field(metadata=bounds(ge=0))
    phase1_epochs: int = field(metadata=bounds(ge=0))
    phase2_epochs: int = field(metadata=bounds(ge=0))
    d_steps: int = field(metadata=bounds(ge=1))
    g_steps: int = field(metadata=bounds(ge=1))
    d3_hidden: int = field(metadata=bounds(ge=1))
    weight_decay: float = field(metadata=bounds(ge=0))
    bn_momentum: float = field(metadata=bounds(gt=0, le=1))
    ae_loss: Literal["bce", "mse"]
    d2_balanced: bool
    d3_on: Literal["both", "real", "fake"]
    discretise: Literal["argmax", "sample"]
    ber_eval: Literal["same", "real"]

    def epochs(self) -> dict[str, int]:
        """The schedule this config trains (`schedule_named`, without its name)."""
        return self.schedule_named()[0]

    def schedule_named(self) -> tuple[dict[str, int], str]:
        own = {k: getattr(self, k) for k in PAPER}
        return gan.resolve_schedule(self, own, PAPER, DEFAULT, PROFILES)


# ---------------------------------------------------------------------------------------------- encoding
MAX_WIDTH = ONEHOT_WIDTH  # one-hot columns of a record (Adult's 57 in the seed); wider views are refused, not trained
@dataclass
class Encoding:
    """The one-hot x of the discrete view's attributes (all but sensitive and label) and the codes of s and y."""

    attributes: list[str]
    sizes: list[int]
    columns: list[str]
    sensitive: str
    label: str
    s_codes: tuple[int, int]  # discrete code of s = 0, s = 1
    y_codes: tuple[int, int]

    @property
    def dim(self) -> int:
        return int(sum(self.sizes))

    def onehot(self, frame: pd.DataFrame) -> np.ndarray:
        out = np.zeros((len(frame), self.dim), dtype=np.float32)
        offset = 0
        for col, k in zip(self.attributes, self.sizes, strict=True):
            out[np.arange(len(frame)), offset + frame[col].to_numpy(np.int64)] = 1
            offset += k
        return out

    def xys(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The one-hot x and the 0/1 y and s of a table in this encoding."""
        y = (frame[self.label].to_numpy() == self.y_codes[1]).astype(int)
        return self.onehot(frame), y, (frame[self.sensitive].to_numpy() == self.s_codes[1]).astype(int)

    def frame(self, codes: np.ndarray, y: np.ndarray, s: np.ndarray) -> pd.DataFrame:
        cols = {a: codes[:, i] for i, a in enumerate(self.attributes)}
        cols[self.sensitive] = np.where(s == 1, self.s_codes[1], self.s_codes[0])
        cols[self.label] = np.where(y == 1, self.y_codes[1], self.y_codes[0])
        return pd.DataFrame({c: cols[c].astype(np.int64) for c in self.columns})


def _column_of(data, key: str, values: np.ndarray, role: str, card_key: str) -> tuple[str, tuple[int, int]]:
    """The discrete-view column of the sensitive attribute / label and its codes for 0 and 1 (must be two-valued)."""
    frame, where = data.frame, f"configs/data/{data.name}.yaml"
    name = data.meta.get(key)
    if name is None:
        candidates = [c for c in (data.roles or {}).get(role, []) if c in frame.columns]
        name = candidates[0] if len(candidates) == 1 else None
    if name is None or name not in frame.columns:
        raise DataError(f"data={data.name}: the discrete view has no column for the {card_key} attribute; add "
                        f"`{card_key}` (and its `discrete:` entry) to {where}")
    codes = frame[name].to_numpy(np.int64)
    pairs = {(int(v), int(c)) for v, c in zip(values, codes, strict=True)}
    mapping = dict(pairs)
    if len(pairs) != len(mapping) or data.domain.get(name, 2) > 2 or len(set(mapping.values())) != len(mapping):
        raise DataError(f"data={data.name}: the {card_key} attribute {name} has {data.domain.get(name)} values in the "
                        f"discrete view; this family needs a binary one: declare it as "
                        f"`discrete: {{{name}: {{one_of: [<value coded 1>]}}}}` in {where}")
    other = {0: 1, 1: 0}
    for v in (0, 1):
        if v not in mapping:
            mapping[v] = other[mapping[1 - v]] if (1 - v) in mapping else v
    return name, (mapping[0], mapping[1])


def encoding_of(data) -> Encoding:
    if data.frame is None or not data.domain:
        raise DataError(f"data={data.name}: this family reads the card's `discrete:` view; add it to "
                        f"configs/data/{data.name}.yaml")
    if data.s is None:
        raise DataError(f"data={data.name}: the card has no sensitive attribute; add `sensitive` and `privileged` "
                        f"to configs/data/{data.name}.yaml")
    sens, s_codes = _column_of(data, "sensitive_column", data.s, "protected", "sensitive")
    label, y_codes = _column_of(data, "label_column", data.y, "outcome", "label")
    columns = list(data.frame.columns)
    attrs = [c for c in columns if c not in (sens, label)]
    if not attrs:
        raise DataError(f"data={data.name}: no attribute besides {sens} and {label} to generate")
    sizes = [int(data.domain[a]) for a in attrs]
    if sum(sizes) > MAX_WIDTH:
        widest = ", ".join(f"{a} ({k:,})" for k, a in sorted(zip(sizes, attrs, strict=True), reverse=True)[:3])
        raise DataError(f"data={data.name}: the one-hot record would have {sum(sizes):,} columns (widest: {widest}); "
                        f"this family allows at most {MAX_WIDTH:,}: bin or drop those attributes in the card's "
                        f"`discrete:` view")
    return Encoding(attrs, sizes, columns, sens, label, s_codes, y_codes)


# ---------------------------------------------------------------------------------------------- the model
class FairGANModel:
    """FairGAN / FairGAN+ / ACGAN as one model of `E` members (gan.Ensemble). `fit(X, y, s)` trains;
    `generate(n)` returns soft (x, y, s) of member-stacked shape; `eta_logits(X)` the classifier's."""

    def __init__(self, cfg: FairGANConfig, groups: list[int], E: int = 1, device: str = "cpu",
                 seed: int | Sequence[int] = 0):
        """`seed`: one int (one generator for the E members) or E ints, one per member (gan.Ensemble)."""
        self.cfg, self.groups = cfg, list(groups)
        self.ens = ens = gan.Ensemble(E, device, seed)
        self.n_x = int(sum(groups))
        self.generated = cfg.label_mode == "generated"
        self.vdim = self.n_x + (1 if self.generated else 0)
        self.cond_bits = 1 if self.generated else 2
        width = cfg.noise_dim
        self.ae = gan.Autoencoder(ens, self.vdim, width)
        self.G = gan.ResidualGenerator(ens, width, 2 if self.generated else 4, 2, cfg.bn_momentum)
        hidden = list(cfg.d_hidden)
        self.D1 = gan.MLP(ens, [self.vdim + self.cond_bits, *hidden, 1], minibatch_mean=True)
        self.D2 = gan.MLP(ens, [self.n_x + 1, *hidden, 1], minibatch_mean=True) if cfg.lambda_ > 0 else None
        self.eta = None if self.generated else gan.Linear(ens, self.n_x, 1)
        if self.eta is not None:  # logistic regression starts at 0 (every prediction 1/2), not at random weights
            self.eta.W.data.zero_()
        use_d3 = cfg.mu > 0 and self.eta is not None and cfg.constraint != "none"
        self.D3 = gan.MLP(ens, [2 if cfg.constraint == "eo" else 1, cfg.d3_hidden, 1]) if use_d3 else None
        self.d_modules = [m for m in (self.D1, self.D2, self.D3) if m is not None]
        self.g_modules = [m for m in (self.G, self.ae.dec, self.eta) if m is not None]
        self.opt_ae = gan.adam([self.ae], cfg.lr, cfg.weight_decay)
        self.opt_d = gan.adam(self.d_modules, cfg.lr, cfg.weight_decay)
        self.opt_g = gan.adam(self.g_modules, cfg.lr, cfg.weight_decay)
        self.d_params, self.g_params, self.ae_params = self.opt_d.params, self.opt_g.params, self.opt_ae.params
        self.seed = seed

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor training changes (parameters, batch-norm running statistics, Adam's state): a checkpoint."""
        params = [*self.opt_ae.params, *self.opt_d.params, *self.opt_g.params]
        return params + [t for bn in self.G.norms for t in (bn.mean, bn.var)] + gan.optimiser_state(
            [self.opt_ae, self.opt_d, self.opt_g])

    # -- data
    def set_data(self, X: np.ndarray, y: np.ndarray, s: np.ndarray) -> None:
        dev = self.ens.device
        self.X = torch.as_tensor(X, dtype=torch.float32, device=dev)
        self.y = torch.as_tensor(y, dtype=torch.float32, device=dev)
        self.s = torch.as_tensor(s, dtype=torch.float32, device=dev)
        self.V = torch.cat([self.X, self.y[:, None]], 1) if self.generated else self.X
        self.table = torch.cat([self.V, self.y[:, None], self.s[:, None]], 1).contiguous()  # one gather per batch
        self.p_s, self.p_y = float(self.s.mean()), float(self.y.mean())

    def real_batch(self, B: int):
        idx = gan.batches(self.ens, len(self.X), B)
        rows = self.table.index_select(0, idx.reshape(-1)).view(self.ens.E, B, -1)
        return rows[..., :-2], rows[..., -2], rows[..., -1]

    def fake_batch(self, B: int):
        """(v-hat soft (E, B, vdim), y' (E, B), s' (E, B)); y' is the generated label in `generated` mode."""
        s = (self.ens.rand(B) < self.p_s).float()
        if self.generated:
            c = s.long()
        else:
            y = (self.ens.rand(B) < self.p_y).float()
            c = (2 * y + s).long()
        v = self.ae.decode(self.G(self.ens.randn(B, self.cfg.noise_dim), c))
        if self.generated:
            y = v[..., -1]
        return v, y, s

    def _cond(self, v, y, s):
        bits = s[..., None] if self.generated else torch.stack([y, s], -1)
        return torch.cat([v, bits], -1)

    def _d2_input(self, v, y):
        return v if self.generated else torch.cat([v, y[..., None]], -1)

    def _weights(self, s, mask=None):
        if self.cfg.d2_balanced:
            return gan.balanced_weights(s, mask)
        m = torch.ones_like(s) if mask is None else mask.to(s.dtype)
        return m / m.sum(1, keepdim=True).clamp_min(1.0)

    def _d3_terms(self, x_real, y_real, s_real, x_fake, y_fake, s_fake):
        """D3's logits, targets s and row weights on the samples `d3_on` names (x-hat detached, A8)."""
        parts = {"real": (x_real, y_real, s_real), "fake": (x_fake.detach(), y_fake, s_fake)}
        chosen = [parts["real"], parts["fake"]] if self.cfg.d3_on == "both" else [parts[self.cfg.d3_on]]
        x = torch.cat([c[0] for c in chosen], 1)
        y = torch.cat([c[1] for c in chosen], 1)
        s = torch.cat([c[2] for c in chosen], 1)
        p = torch.sigmoid(self.eta(x))
        inp = torch.cat([p, y[..., None]], -1) if self.cfg.constraint == "eo" else p
        mask = (y > 0.5) if self.cfg.constraint == "eop" else None
        return self.D3(inp)[..., 0], s, self._weights(s, mask)

    # -- losses (per member, shape (E,))
    def d_loss(self, real, fake, lam: float, mu: float) -> torch.Tensor:
        (v, y, s), (vf, yf, sf) = real, fake
        d_real, d_fake = self.D1.many([self._cond(v, y, s), self._cond(vf, yf, sf)])  # one pass, own batch means
        loss = gan.bce(d_real[..., 0], torch.ones_like(s)) + gan.bce(d_fake[..., 0], torch.zeros_like(sf))
        if self.D2 is not None and lam:  # a zero weight: zero gradient, the term is skipped (not computed)
            loss = loss + lam * gan.bce(self.D2(self._d2_input(vf, yf))[..., 0], sf, self._weights(sf))
        if self.D3 is not None and mu:
            logits, target, w = self._d3_terms(v, y, s, vf, yf, sf)
            loss = loss + mu * gan.bce(logits, target, w)
        return loss

    def g_loss(self, real, fake, lam: float, mu: float) -> torch.Tensor:
        """G's (and decoder's) loss plus eta's: the gradient w.r.t. G and eta of this sum is each player's own."""
        (v, y, s), (vf, yf, sf) = real, fake
        loss = gan.bce(self.D1(self._cond(vf, yf, sf))[..., 0], torch.ones_like(sf))
        if self.D2 is not None and lam:
            logits, w = self.D2(self._d2_input(vf, yf))[..., 0], self._weights(sf)
            loss = loss + lam * (-gan.bce(logits, sf, w) if self.cfg.adv_mode == "minimax" else gan.bce(
                logits, 1 - sf, w))
        if self.eta is not None:
            loss = loss + gan.bce(self.eta(vf)[..., 0], yf) + gan.bce(self.eta(v)[..., 0], y)
        if self.D3 is not None and mu:
            logits, target, w = self._d3_terms(v, y, s, vf, yf, sf)
            loss = loss + mu * (-gan.bce(logits, target, w) if self.cfg.adv_mode == "minimax" else gan.bce(
                logits, 1 - target, w))
        return loss

    # -- training
    def pretrain_step(self, B: int) -> torch.Tensor:
        v, _, _ = self.real_batch(B)
        logits = self.ae.decode_logits(self.ae.encode(v))
        if self.cfg.ae_loss == "bce":
            per = F.binary_cross_entropy_with_logits(logits, v, reduction="none")
        else:
            per = (torch.sigmoid(logits) - v) ** 2
        loss = per.sum(2).mean(1)
        gan.step(self.opt_ae, self.ae_params, loss.sum())
        return loss.detach()  # (E,), left on the device (no host sync per step)

    def iteration(self, B: int, lam: float, mu: float) -> None:
        for _ in range(self.cfg.d_steps):
            real = self.real_batch(B)
            with torch.no_grad():
                fake = self.fake_batch(B)
            gan.step(self.opt_d, self.d_params, self.d_loss(real, fake, lam, mu).sum())
        for _ in range(self.cfg.g_steps):
            real = self.real_batch(B)
            gan.step(self.opt_g, self.g_params, self.g_loss(real, self.fake_batch(B), lam, mu).sum())

    def costs(self, X, y, s, B: int) -> tuple[float, float, float]:
        """Estimated seconds of one AE step and of one GAN iteration in phase 1 and in phase 2, timed on a throwaway
        model of the same shape (this model's state and random streams do not move)."""
        probe = FairGANModel(self.cfg, self.groups, self.ens.E, str(self.ens.device), 0)
        probe.set_data(X, y, s)
        dev = self.ens.device
        ae = gan.calibrate(lambda: probe.pretrain_step(B), device=dev)
        it1 = gan.calibrate(lambda: probe.iteration(B, 0.0, 0.0), n=2, device=dev)
        it2 = gan.calibrate(lambda: probe.iteration(B, self.cfg.lambda_, self.cfg.mu), n=2, device=dev)
        return ae, it1, it2

    def fit(self, X, y, s, description: str = "fairgan") -> FairGANModel:
        self.set_data(X, y, s)
        sched, name = self.cfg.schedule_named()
        B = sched["batch_size"]
        per_epoch = math.ceil(len(X) / B)
        ae_cost, it1_cost, it2_cost = self.costs(X, y, s, B)
        ae_step = gan.Graphed(lambda: self.pretrain_step(B), self.ens)
        steps = {}  # (lambda, mu) -> the phase's iteration (one CUDA graph per phase on a GPU)

        def gan_step(lam, mu):
            def one(i):
                if (lam, mu) not in steps:
                    steps[lam, mu] = gan.Graphed(lambda: self.iteration(B, lam, mu), self.ens)
                steps[lam, mu]()
            return one

        phases = [gan.Phase("autoencoder steps", sched["pretrain_epochs"] * per_epoch, lambda i: ae_step(), ae_cost),
                  gan.Phase("GAN iterations (phase 1)", sched["phase1_epochs"] * per_epoch, gan_step(0.0, 0.0),
                            it1_cost),
                  gan.Phase("GAN iterations (phase 2)", sched["phase2_epochs"] * per_epoch,
                            gan_step(self.cfg.lambda_, self.cfg.mu), it2_cost)]
        gan.announce(description, phases, name)
        self.G.train()
        data = hashlib.sha1(np.ascontiguousarray(X).tobytes() + np.asarray(y).tobytes() + np.asarray(s).tobytes())
        key = (f"fairgan|{self.cfg!r}|{self.groups}|{self.ens.E}|{self.seed}|{sched}|{self.ens.device}|"
               f"{data.hexdigest()}")
        gan.train_phases(phases, description, checkpoint=gan.Checkpoint(key, self.state_tensors(),
                                                                         self.ens.generators))
        return self

    @torch.no_grad()
    def generate(self, n: int, seed: int):
        """Soft records: v (E, n, vdim), y (E, n), s (E, n), with BN in inference mode."""
        self.G.eval()
        self.ens.reseed([seed] * len(self.ens.generators))
        vs, ys, ss = [], [], []
        for k in range(0, n, GEN_CHUNK):
            v, y, s = self.fake_batch(min(GEN_CHUNK, n - k))
            vs.append(v), ys.append(y), ss.append(s)
        self.G.train()
        return torch.cat(vs, 1), torch.cat(ys, 1), torch.cat(ss, 1)

    @torch.no_grad()
    def eta_proba(self, X: np.ndarray) -> np.ndarray:
        """(E, n) probabilities of eta."""
        Xt = torch.as_tensor(X, dtype=torch.float32, device=self.ens.device)
        return torch.sigmoid(self.eta(Xt.expand(self.ens.E, -1, -1))[..., 0]).cpu().numpy()


def discretise(v: np.ndarray, groups: list[int], how: str, rng: np.random.Generator) -> np.ndarray:
    """(n, len(groups)) codes from soft one-hot blocks: arg max per block, or one categorical draw per block."""
    out = np.empty((v.shape[0], len(groups)), dtype=np.int64)
    offset = 0
    for j, k in enumerate(groups):
        block = v[:, offset:offset + k]
        if how == "argmax":
            out[:, j] = block.argmax(1)
        else:
            p = block / np.maximum(block.sum(1, keepdims=True), 1e-12)
            out[:, j] = (rng.random((len(p), 1)) > np.cumsum(p, 1)).sum(1).clip(0, k - 1)
        offset += k
    return out


# ---------------------------------------------------------------------------------------------- plugins
class FairGANGenerator(Plugin):
    """The family's generators (fairgan, fairgan_plus_dp / eo / eop, acgan): one model, flags from the config."""

    kind = "generator"
    metric_sets = ("fair_data",)
    needs = ("discrete", "sensitive", "binary_label", "onehot")
    private = False
    guarantee = "none"
    cuda = True
    seed_batching = True
    Config = FairGANConfig

    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        self.enc = encoding_of(data)
        X = self.enc.onehot(data.frame)

        def build(seed, E: int, description: str):
            return FairGANModel(self.cfg, self.enc.sizes, E, device, seed).fit(X, data.y, data.s, description)

        key = (self.name, repr(self.cfg), device, hashlib.sha1(X.tobytes() + np.asarray(data.y).tobytes()
                                                               + np.asarray(data.s).tobytes()).hexdigest())
        self.model, self.member, share = gan.train_seeds(self, rng, key, build, self.cfg.threads, device)
        self.fit_seconds = time.perf_counter() - t0 + share  # a batched seed's runtime: its share of the training
        return self

    @staticmethod
    def _seed(rng) -> int:
        return int(np.random.default_rng(rng.integers(2**SEED_BITS)).integers(2**SEED_BITS))

    def sample(self, n, rng) -> pd.DataFrame:
        v, y, s = self.model.generate(int(n), int(rng.integers(2**SEED_BITS)))
        k = self.member
        v, y, s = v[k].cpu().numpy(), y[k].cpu().numpy(), s[k].cpu().numpy().astype(int)
        codes = discretise(v[:, :self.model.n_x], self.enc.sizes, self.cfg.discretise, rng)
        y = (y >= 0.5).astype(int)
        self.synthetic = self.enc.frame(codes, y, s)
        return self.synthetic

    def eta_predict(self, X) -> np.ndarray | None:
        """The co-trained classifier eta's 0/1 predictions on the one-hot X (FairGAN+ / ACGAN), None without one
        (FairGAN: the evaluation trains downstream LR on the release, C3)."""
        if self.model.eta is None:
            return None
        return (self.model.eta_proba(X)[self.member] >= 0.5).astype(int)

    def artifacts(self, run_dir) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.model.eta is not None:
            eta = {"inputs": [f"{a}={k}" for a, n in zip(self.enc.attributes, self.enc.sizes, strict=True)
                              for k in range(n)],
                   "w": self.model.eta.W.detach()[self.member, :, 0].tolist(),
                   "b": float(self.model.eta.b.detach()[self.member, 0, 0])}
            (run_dir / "eta.json").write_text(json.dumps(eta) + "\n")


variants(FairGANGenerator, __name__,
         fairgan="`fairgan`: FairGAN (§2), G(z | s) generates (x, y); D2 removes s from (x, y).",
         fairgan_plus_dp=("`fairgan_plus_dp`: FairGAN+ with the demographic-parity (not differential privacy) "
                          "classifier constraint."),
         fairgan_plus_eo="`fairgan_plus_eo`: FairGAN+ with the equality-of-odds classifier constraint.",
         fairgan_plus_eop=("`fairgan_plus_eop`: FairGAN+ with the equality-of-opportunity constraint (not evaluated in"
                           " the seed)."),
         acgan=("`acgan`: the FairGAN+ machinery with lambda = mu = 0 (conditional generator + co-trained LR, no "
                "fairness)."))


# ---------------------------------------------------------------------------------------------- classifiers
@dataclass(frozen=True)
class LRRealConfig:
    max_iter: int = field(metadata=bounds(ge=1))
    ber_eval: Literal["same"]
    # accepted and ignored: Tables 6.1 / 6.2 pin `algo.schedule: paper` for the GANs they sweep with this one
    # (privfair_cli/runid.py leaves the key at paper out of a run's identity)
    schedule: Literal["default", "paper"] = "paper"


class _RealClassifier(Plugin):
    kind = "classifier"
    metric_sets = ("rd_clf",)
    needs = ("label", "features", "sensitive")
    private = False
    guarantee = "none"


@register
class LRReal(_RealClassifier):
    """`lr_real` (C1 / D1): LogisticRegression(max_iter) on the real features; its run also reports the real
    table's data metrics rd_data and ber (D1-Real; dist is NA for the real data)."""

    name = "lr_real"
    Config = LRRealConfig
    metric_sets = ("rd_clf", "real_data")

    def fit(self, data, budget, ledger, rng, device="cpu"):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression(max_iter=self.cfg.max_iter).fit(data.X, data.y)
        return self

    def predict(self, X):
        return self.model.predict(X).astype(int)

    def predict_proba(self, X):
        return self.model.predict_proba(X)[:, 1]
