"""Adversarial debiasing (Zhang, Lemoine, Mitchell 2018, as AIF360 implements it), the classifier baseline of the
FairGAN chapter's Tables 6.1 / 6.2 (fairgan.md §5, C4; seed: Xu thesis ch. 6). Not differentially private
(guarantee `none`).

`adv_debias`: a logistic-regression predictor trained on the real features against an adversary that predicts the
sensitive attribute from the predictor's output (`adversary: eo`, the default (A14): from [p, p y, p (1 - y)];
`dp`: from p alone); each step projects the predictor's gradient off the adversary's (AIF360's per-variable
projection) and subtracts `alpha` times the adversary's gradient. Metrics as FairGAN's classifiers (metric set
`rd_clf`, evaluate.py).

Choices (spec IDs):
- AIF360's schedule: Adam, lr 1e-3 decayed x0.96 every 1000 steps (staircase); 50 epochs of batch 128 over a
  per-epoch permutation; initial weights N(0, 0.1^2) from the run's seed.
- Training flushes denormal floats to zero (`threads.torch_threads`), as FairGAN's trainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from privfair_cli.algorithms import gan
from privfair_cli.algorithms.fairgan import SEED_BITS
from privfair_cli.registry import Plugin, register
from privfair_cli.threads import torch_threads
from privfair_cli.typed import bounds


@dataclass(frozen=True)
class AdvDebiasConfig:
    adversary: Literal["eo", "dp"]
    alpha: float = field(metadata=bounds(ge=0))
    epochs: int = field(metadata=bounds(ge=1))
    batch_size: int = field(metadata=bounds(ge=1))
    lr: float = field(metadata=bounds(gt=0))
    decay_rate: float = field(metadata=bounds(gt=0, le=1))
    decay_steps: int = field(metadata=bounds(ge=1))
    threads: int = field(metadata=bounds(ge=1))
    # accepted and ignored: Table 6.2 pins `algo.schedule: paper` for the GANs it sweeps with this one
    # (privfair_cli/runid.py leaves the key at paper out of a run's identity)
    schedule: Literal["default", "paper"] = "paper"


def adversarial_debiasing(X, y, s, cfg: AdvDebiasConfig, seed: int, device: str = "cpu", progress: bool = True):
    """Zhang, Lemoine, Mitchell (2018) as AIF360 implements it (fairgan.md §5), LR predictor. Returns (w, b)."""
    g = torch.Generator().manual_seed(int(seed))
    Xt = torch.as_tensor(X, dtype=torch.float32, device=device)
    yt = torch.as_tensor(y, dtype=torch.float32, device=device)
    st = torch.as_tensor(s, dtype=torch.float32, device=device)
    d = Xt.shape[1]
    w = (torch.randn(d, 1, generator=g) * 0.1).to(device).requires_grad_()
    b = torch.zeros(1, device=device, requires_grad=True)
    c = torch.ones(1, device=device, requires_grad=True)
    k = 3 if cfg.adversary == "eo" else 1
    W2 = (torch.randn(k, 1, generator=g) * 0.1).to(device).requires_grad_()
    b2 = torch.zeros(1, device=device, requires_grad=True)
    pred, adv = [w, b], [c, W2, b2]
    opt_p = torch.optim.Adam(pred, lr=cfg.lr)
    opt_a = torch.optim.Adam(adv, lr=cfg.lr)
    n = len(Xt)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    sched = [torch.optim.lr_scheduler.LambdaLR(
        o, lambda t: cfg.decay_rate ** (t // cfg.decay_steps)) for o in (opt_p, opt_a)]

    def epoch(e):
        perm = torch.randperm(n, generator=g).to(device)
        for i in range(steps_per_epoch):
            idx = perm[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            xb, yb, sb = Xt[idx], yt[idx], st[idx]
            logit = (xb @ w)[:, 0] + b
            loss_p = F.binary_cross_entropy_with_logits(logit, yb)
            p = torch.sigmoid((1 + c.abs()) * logit)
            feats = torch.stack([p, p * yb, p * (1 - yb)], 1) if k == 3 else p[:, None]
            loss_a = F.binary_cross_entropy_with_logits((feats @ W2)[:, 0] + b2, sb)
            gp = torch.autograd.grad(loss_p, pred, retain_graph=True)
            ga = torch.autograd.grad(loss_a, pred, retain_graph=True)
            for param, gpi, gai in zip(pred, gp, ga, strict=True):
                unit = gai / (gai.norm() + 1e-8)
                param.grad = gpi - (gpi * unit).sum() * unit - cfg.alpha * gai
            opt_p.step()
            gadv = torch.autograd.grad(loss_a, adv)
            for param, gi in zip(adv, gadv, strict=True):
                param.grad = gi
            opt_a.step()
            for sc in sched:
                sc.step()

    with torch_threads(cfg.threads):
        if progress:
            gan.train_loop(cfg.epochs, epoch, "adv_debias", unit="epochs", every=1)
        else:
            for e in range(cfg.epochs):
                epoch(e)
    return w.detach().cpu().numpy()[:, 0], float(b.detach())


@register
class AdvDebias(Plugin):
    """`adv_debias` (C4): adversarial debiasing with an LR predictor on the real data (§5)."""

    name = "adv_debias"
    Config = AdvDebiasConfig
    kind = "classifier"
    metric_sets = ("rd_clf",)
    needs = ("label", "features", "sensitive")
    private = False
    guarantee = "none"

    def fit(self, data, budget, ledger, rng, device="cpu"):
        seed = int(np.random.default_rng(rng.integers(2**SEED_BITS)).integers(2**31))
        self.w, self.b = adversarial_debiasing(data.X, data.y, data.s, self.cfg, seed)
        return self

    def predict_proba(self, X):
        return 1 / (1 + np.exp(-(np.asarray(X, float) @ self.w + self.b)))

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)
