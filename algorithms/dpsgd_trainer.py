"""The one trainer of the DP-SGD family (dpsgd_f.md §1; foundations.md §2.6), shared by `sgd`, `dpsgd`,
`dpsgd_f` and `dpsgd_naive` (plugins in `dpsgd.py`, accounting in `privacy/dpsgd.py`).

Every step samples a batch, computes the per-example losses and per-example gradient norms `nu_i` (all
parameters flattened), turns them into per-example clip factors `c_i` and a noise sensitivity `C` by the
algorithm's rule (`CLIP_RULES`), and applies `w <- w - r (sum_i c_i g_i + N(0, sigma^2 C^2 I)) / b` with the
nominal batch size `b`. A private algorithm draws the Gaussian vector at every step, whatever the values (the
config refuses a non-positive C or sigma before anything runs); only `sgd` draws none.

Per-example norms without a loop over examples ("book-keeping" clipping): forward hooks keep every trainable
layer's input `a` and one backward pass gives the gradients `g` of the summed loss w.r.t. the layer outputs.
Linear layer: `||g_i a_i^T||^2 = ||g_i||^2 ||a_i||^2` (ghost norm, nothing per example is materialised).
Conv layer: per-example weight gradients `G_i A_i^T` from the input's patches (cheap: conv weights are small).
The clipped sum `sum_i c_i g_i` is then formed from the same `a`, `g` (one weighted matmul / einsum per
layer); no second backward pass and no per-example gradient of the large linear layers.

What a run records (`TrainLog`, arrays of epochs x groups, no Python loop over examples): per group the summed
loss and gradient norm before clipping and the example count (Table 9.3, Figures 9.1/9.2/9.4), DPSGD-F's
epoch-average C^k (Figure 9.5), optionally the norm of each group's mean gradient, the step count at the end of
every epoch and, with `keep_weights`, the parameters at the end of every epoch (what `predictions_by_epoch`
evaluates for the per-epoch history). These diagnostics read the training data without noise, as in the thesis:
they are written to files, never used to train.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from privfair_cli import progress
from privfair_cli.errors import ConfigError

ALGORITHMS = ("sgd", "dpsgd", "dpsgd_f", "dpsgd_naive")
# Spec §3's CNN reads 28 x 28 grey images (MNIST); after two 5x5 convolutions and two 2x2 poolings
# (28 -> 24 -> 12 -> 8 -> 4) its 50 channels flatten to 50 * 4 * 4 = 800 inputs of a 500-unit hidden layer.
CNN_INPUT = (1, 28, 28)
CNN_FLAT, CNN_HIDDEN = 50 * 4 * 4, 500
NORM_FLOOR = 1e-12    # divisor floor of C / nu_i: a zero gradient gets c_i = 1 (nothing to clip)
SEED_BITS = 62        # torch seeds drawn from the run's numpy stream (below 2**63, torch's limit)
PREDICT_CHUNK = 4096  # rows per forward pass when predicting: bounded memory on MNIST-size sets


BINARY_MODELS = ("logistic", "fasttext")  # one logit, BCE-with-logits loss, threshold 1/2
FASTTEXT_DIM = 100    # early_stopping.md ambiguity 15: 100-d embeddings (GloVe-100's width)
UNK, PAD = 0, 1       # vocabulary rows of the IMDB card (datasets/imdb.py): zero-initialised as in the tutorial


# --------------------------------------------------------------------------------------------- models
class MeanBag(nn.Module):
    """Mean-pooled embedding (FastText, early_stopping.md ambiguity 15) of a bag `x = [ids | weights]` of width
    2 `width` (datasets/imdb.py: each text's distinct token ids and count / length weights, padded with weight 0):
    h_i = sum_t w_it E[id_it], i.e. the mean of the text's token embeddings. A batch is cut to its widest bag."""

    def __init__(self, vocab: int, dim: int, width: int):
        super().__init__()
        self.width = int(width)
        self.weight = nn.Parameter(torch.randn(vocab, dim))
        with torch.no_grad():
            self.weight[[UNK, PAD]] = 0.0

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids, w = x[:, :self.width], x[:, self.width:]
        k = int((w > 0).sum(1).max()) if len(x) else 0
        return ids[:, :k].long(), w[:, :k]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids, w = self.split(x)
        return F.embedding_bag(ids, self.weight, per_sample_weights=w, mode="sum")


class FastText(nn.Sequential):
    """MeanBag -> Linear(dim -> 1). Its per-epoch summary is u = E v (one score per vocabulary row) and the bias:
    the logit of a bag is sum_t w_t u[id_t] + b, so the history of 100 epochs keeps 100 x V numbers, not the
    100 x V x dim embeddings."""

    def compact(self) -> np.ndarray:
        bag, out = self[0], self[1]
        with torch.no_grad():
            u = bag.weight @ out.weight[0]
            return torch.cat([u, out.bias]).float().cpu().numpy()

    def predict_compact(self, summary: np.ndarray, X: torch.Tensor) -> np.ndarray:
        bag = self[0]
        u = torch.as_tensor(summary, device=X.device)
        out = []
        for i in range(0, len(X), PREDICT_CHUNK):
            ids, w = bag.split(X[i:i + PREDICT_CHUNK])
            out.append(((u[:-1][ids] * w).sum(1) + u[-1] >= 0).long())
        return torch.cat(out).cpu().numpy() if out else np.zeros(0, np.int64)


def build_model(kind: str, d: int, classes: int, meta: dict | None = None) -> nn.Sequential:
    """`cnn`: the spec's 431,080-parameter MNIST CNN; `logistic`: Linear(d -> 1) + bias, zero-initialised (C8);
    `fasttext`: MeanBag(V x 100) -> Linear(100 -> 1), V from the card (`vocab_size`, `bag_width` in its meta)."""
    if kind == "fasttext":
        meta = meta or {}
        if "vocab_size" not in meta or "bag_width" not in meta:
            raise ConfigError("algo.model=fasttext reads bags of tokens (a card with the `tokens` view, e.g. imdb)")
        return FastText(MeanBag(int(meta["vocab_size"]), FASTTEXT_DIM, int(meta["bag_width"])),
                        nn.Linear(FASTTEXT_DIM, 1))
    if kind == "cnn":
        return nn.Sequential(
            nn.Unflatten(1, CNN_INPUT), nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(CNN_FLAT, CNN_HIDDEN), nn.ReLU(), nn.Linear(CNN_HIDDEN, classes))
    if kind == "logistic":
        model = nn.Sequential(nn.Linear(d, 1))
        nn.init.zeros_(model[0].weight)
        nn.init.zeros_(model[0].bias)
        return model
    raise ConfigError(f"algo.model={kind!r}; allowed: auto, cnn, logistic, fasttext")


def per_example_loss(model_kind: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if model_kind in BINARY_MODELS:
        return F.binary_cross_entropy_with_logits(out[:, 0], y.to(out.dtype), reduction="none")
    return F.cross_entropy(out, y, reduction="none")  # log-softmax + NLL


def predict_scores(model: nn.Module, X: torch.Tensor, chunk: int = PREDICT_CHUNK) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(X[i:i + chunk]) for i in range(0, len(X), chunk)]) if len(X) else X[:0]


def labels(model_kind: str, scores: torch.Tensor) -> np.ndarray:
    """Predicted labels: logit >= 0 (probability >= 1/2) for logistic regression, the arg max otherwise."""
    if model_kind in BINARY_MODELS:
        return (scores[:, 0] >= 0).long().cpu().numpy()
    return scores.argmax(1).cpu().numpy()


def predictions_by_epoch(model: nn.Module, model_kind: str, weights: np.ndarray, X: torch.Tensor) -> np.ndarray:
    """Predicted labels (epochs x rows) of the model with the parameters logged at the end of each epoch (a
    model with a `compact` summary is evaluated from it)."""
    if hasattr(model, "predict_compact"):
        out = [model.predict_compact(w, X) for w in weights]
        return np.stack(out) if out else np.zeros((0, len(X)), np.int64)
    probe = copy.deepcopy(model)
    out = []
    for w in weights:
        vector_to_parameters(torch.as_tensor(w, device=X.device), probe.parameters())
        out.append(labels(model_kind, predict_scores(probe, X)))
    return np.stack(out) if out else np.zeros((0, len(X)), np.int64)


# --------------------------------------------------------------------------------------------- per-example norms
def patches(a: torch.Tensor, m: nn.Conv2d) -> torch.Tensor:
    """The input patches of every output position of `m`, (B, L, Cin k k) in `F.unfold`'s order (its transpose),
    from strided views and one copy. Not `F.unfold`: its im2col kernel, at 2 threads on a machine whose cores are
    busy, took 4 s where this takes 30 ms (the same numbers, bit for bit)."""
    if m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str):
        raise ConfigError("per-example gradients support Conv2d with groups=1 and numeric zero padding only")
    (kh, kw), (dh, dw), (sh, sw), (ph, pw) = m.kernel_size, m.dilation, m.stride, m.padding
    if ph or pw:
        a = F.pad(a, (pw, pw, ph, ph))
    p = a.unfold(2, (kh - 1) * dh + 1, sh).unfold(3, (kw - 1) * dw + 1, sw)[..., ::dh, ::dw]  # B C Ho Wo kh kw
    b, c, ho, wo = p.shape[:4]
    return p.permute(0, 2, 3, 1, 4, 5).reshape(b, ho * wo, c * kh * kw)


class PerExampleGradients:
    """Per-example gradient norms and clipped sums of an `nn.Sequential` of Linear / Conv2d (+ parameter-free)
    layers, from one forward and one backward pass (see the module docstring)."""

    def __init__(self, model: nn.Module, l2_in_loss: float = 0.0):
        self.model = model
        self.l2 = float(l2_in_loss)
        self.layers = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d | MeanBag)]
        owned = sum(p.numel() for m in self.layers for p in m.parameters(recurse=False))
        if owned != sum(p.numel() for p in model.parameters()):
            raise ConfigError("per-example gradients support models whose parameters are Linear/Conv2d/MeanBag only")
        if self.l2 and any(isinstance(m, MeanBag) for m in self.layers):
            raise ConfigError("algo.l2_mode=in_loss is not supported by the fasttext model; allowed: after_noise")
        self.params = [p for m in self.layers for p in (m.weight, getattr(m, "bias", None)) if p is not None]
        self._records: list = []
        for m in self.layers:
            m.register_forward_hook(self._keep)

    def _keep(self, module, inputs, output):
        if torch.is_grad_enabled():
            self._records.append((module, inputs[0].detach(), output))

    def compute(self, x: torch.Tensor, loss_fn) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-example losses and gradient norms for the batch `x`; keeps what `clipped_sum` needs."""
        self._records = []
        losses = loss_fn(self.model(x))
        outs = [r[2] for r in self._records]
        grads = torch.autograd.grad(losses.sum(), outs)
        self._terms = [self._layer(m, a, g.detach()) for (m, a, _), g in zip(self._records, grads, strict=True)]
        self._records = []
        norm2 = torch.stack([t[0] for t in self._terms]).sum(0)
        return losses.detach(), norm2.clamp_min(0).sqrt()

    def _layer(self, m, a, g):
        w = m.weight
        if isinstance(m, MeanBag):  # dL/dE[t] = sum over the text's slots of id t: w_t g_i (distinct ids per bag)
            ids, wt = m.split(a)
            return (g * g).sum(1) * (wt * wt).sum(1), ("bag", (ids, wt), g)
        if isinstance(m, nn.Linear):
            gg = (g * g).sum(1)
            norm2 = gg * (a * a).sum(1) + (gg if m.bias is not None else 0)
            if self.l2:
                norm2 = norm2 + 2 * self.l2 * ((a @ w.detach().T) * g).sum(1) + self.l2**2 * w.detach().pow(2).sum()
            return norm2, ("linear", a, g)
        G = g.flatten(2)  # (B, Cout, L)
        per = torch.bmm(G, patches(a, m))  # (B, Cout, Cin k k): per-example weight gradients
        gb = G.sum(2)
        norm2 = per.pow(2).sum((1, 2)) + (gb.pow(2).sum(1) if m.bias is not None else 0)
        if self.l2:
            wf = w.detach().flatten(1)
            norm2 = norm2 + 2 * self.l2 * (per * wf).sum((1, 2)) + self.l2**2 * wf.pow(2).sum()
        return norm2, ("conv", per, gb)

    def clipped_sum(self, c: torch.Tensor) -> list[torch.Tensor]:
        """sum_i c_i g_i, per parameter (in `self.params` order)."""
        out = []
        for m, (_, (kind, u, v)) in zip(self.layers, self._terms, strict=True):
            if kind == "linear":
                gc = v * c[:, None]
                gw, gb = gc.T @ u, gc.sum(0)
            elif kind == "bag":
                ids, wt = u
                rows = (wt[:, :, None] * (v * c[:, None])[:, None, :]).reshape(-1, v.shape[1])
                out.append(torch.zeros_like(m.weight).index_add_(0, ids.reshape(-1), rows))
                continue
            else:
                gw = torch.einsum("b,bod->od", c, u).view_as(m.weight)
                gb = (v * c[:, None]).sum(0)
            if self.l2:
                gw = gw + self.l2 * m.weight.detach() * c.sum()
            out.append(gw)
            if m.bias is not None:
                out.append(gb)
        return out


# --------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class TrainConfig:
    """The resolved settings of one training run (the plugin builds it from its typed Config and the data).

    `sigma` is the gradient noise multiplier (sigma2 of DPSGD-F / Naive), `sigma1` the count noise std.
    `sigma1 = 0` (no count noise) exists for spec §8's check that DPSGD-F with equal clipped fractions is DP-SGD
    at twice the bound; the plugins never set it (their config requires sigma1_ratio > 0)."""

    algorithm: str
    steps: int
    epochs: int
    batch_size: int
    lr: float
    C: float
    sigma: float
    sigma1: float
    l2: float
    l2_mode: str
    batch_sampling: str
    groups: int
    empty_group_fraction: str
    denominator: str
    group_mean_grad: bool
    keep_weights: bool
    momentum: float = 0.0

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown DP-SGD algorithm {self.algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        checks = {"batch_size": self.batch_size >= 1, "epochs": self.epochs >= 1, "steps": self.steps >= 0,
                  "groups": self.groups >= 1, "lr": self.lr >= 0, "sigma": self.sigma >= 0,
                  "sigma1": self.sigma1 >= 0, "l2": self.l2 >= 0,
                  "C": self.C > 0 or not self.private, "momentum": 0 <= self.momentum < 1}
        for key, ok in checks.items():
            if not (ok and np.isfinite(getattr(self, key))):
                raise ConfigError(f"{key}={getattr(self, key)!r} is out of range for {self.algorithm}")

    @property
    def private(self) -> bool:
        return self.algorithm != "sgd"


# --------------------------------------------------------------------------------------------- clipping rules
def _clip_to(bound, nu: torch.Tensor) -> torch.Tensor:
    return (bound / nu.clamp_min(NORM_FLOOR)).clamp(max=1.0)


def _count_noise(cfg: TrainConfig, rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.normal(0.0, cfg.sigma1, size) if cfg.sigma1 > 0 else np.zeros(size)


def _clip_sgd(cfg, nu, k, rng):
    return torch.ones_like(nu), 0.0, None


def _clip_dpsgd(cfg, nu, k, rng):
    return _clip_to(cfg.C, nu), cfg.C, None


def _clip_dpsgd_f(cfg, nu, k, rng):
    """Algorithm 7 lines 8-19 with the C2 guards: noisy clipped / unclipped counts per group give C^k."""
    K, b, C0 = cfg.groups, cfg.batch_size, cfg.C
    clipped = (nu > C0).long()
    counts = torch.bincount(k * 2 + clipped, minlength=2 * K).reshape(K, 2).cpu().numpy().astype(float)
    o_t = np.maximum(counts[:, 0] + _count_noise(cfg, rng, K), 0)
    m_t = np.maximum(counts[:, 1] + _count_noise(cfg, rng, K), 0)
    m_tot, b_k = m_t.sum(), m_t + o_t
    fill = {"one": 1.0, "neutral": m_tot / b, "zero": 0.0}[cfg.empty_group_fraction]
    f = np.where(b_k > 0, m_t / np.where(b_k > 0, b_k, 1), fill)
    denom = m_tot / b if cfg.denominator == "batch_fraction" else f.mean()
    Ck = C0 * (1 + f / denom) if m_tot > 0 and denom > 0 else np.full(K, C0)
    bound = torch.as_tensor(Ck, dtype=nu.dtype, device=nu.device)[k]
    return _clip_to(bound, nu), float(Ck.max()), Ck


def _clip_naive(cfg, nu, k, rng):
    """Algorithm 8: weights theta^k from noisy group sizes (clamped at 1, C11), clipping at C0."""
    K, b, C0 = cfg.groups, cfg.batch_size, cfg.C
    sizes = torch.bincount(k, minlength=K).cpu().numpy().astype(float)
    theta = (b / K) / np.maximum(sizes + _count_noise(cfg, rng, K), 1.0)
    t = torch.as_tensor(theta, dtype=nu.dtype, device=nu.device)[k]
    return t * _clip_to(C0, nu), float(C0 * theta.max()), None


CLIP_RULES = {"sgd": _clip_sgd, "dpsgd": _clip_dpsgd, "dpsgd_f": _clip_dpsgd_f, "dpsgd_naive": _clip_naive}


def clip_factors(cfg: TrainConfig, nu: torch.Tensor, k: torch.Tensor, rng: np.random.Generator):
    """Per-example clip factors c_i (applied as c_i g_i), the noise sensitivity C and the group bounds C^k."""
    return CLIP_RULES[cfg.algorithm](cfg, nu, k, rng)


# --------------------------------------------------------------------------------------------- batches and epochs
def batches(n: int, cfg: TrainConfig, rng: np.random.Generator):
    """Index arrays of the T batches: Poisson at q = b/n, epoch-wise shuffle, or b distinct uniform draws."""
    b = cfg.batch_size
    if cfg.batch_sampling == "poisson":
        for _ in range(cfg.steps):
            yield np.flatnonzero(rng.random(n) < b / n)
    elif cfg.batch_sampling == "shuffle":
        t = 0
        while t < cfg.steps:
            perm = rng.permutation(n)
            for j in range(max(n // b, 1)):
                if t == cfg.steps:
                    return
                yield np.sort(perm[j * b:(j + 1) * b])
                t += 1
    elif cfg.batch_sampling == "fixed_uniform":
        for _ in range(cfg.steps):
            yield np.sort(rng.choice(n, size=min(b, n), replace=False))
    else:
        raise ConfigError(f"algo.batch_sampling={cfg.batch_sampling!r}; allowed: poisson, shuffle, fixed_uniform")


def epoch_of_steps(cfg: TrainConfig, n: int) -> np.ndarray:
    """Epoch (0-based) of every step: step t belongs to epoch floor(t b / n); steps beyond the last epoch (none,
    as T = floor(epochs n / b)) count in the last one."""
    return np.minimum(np.arange(cfg.steps) * cfg.batch_size // n, cfg.epochs - 1)


# --------------------------------------------------------------------------------------------- the log
@dataclass
class TrainLog:
    """Per-epoch (rows) and per-group (columns) records of a training run (see the module docstring)."""

    loss: np.ndarray                         # sum of per-example losses
    norm: np.ndarray                         # sum of per-example gradient norms before clipping
    count: np.ndarray                        # examples processed
    epoch_steps: np.ndarray                  # (epochs,) steps taken by the end of each epoch
    clip_bound: np.ndarray | None = None     # DPSGD-F: epoch-average C^k
    mean_grad_norm: np.ndarray | None = None  # ||sum_i g_i|| / n_k over the group's examples of each epoch
    weights: np.ndarray | None = None        # (epochs, parameters): the flattened parameters at each epoch's end
    #                                          (fasttext: its compact summary, FastText.compact)

    @property
    def steps(self) -> int:
        return int(self.epoch_steps[-1]) if len(self.epoch_steps) else 0


class _EpochSums:
    """The per-epoch, per-group accumulators of `train` (on the training device)."""

    def __init__(self, cfg: TrainConfig, engine: PerExampleGradients, device: str):
        E, K = cfg.epochs, cfg.groups
        self.cfg, self.engine = cfg, engine
        self.loss = torch.zeros(E * K, dtype=torch.float64, device=device)
        self.norm, self.count = torch.zeros_like(self.loss), torch.zeros_like(self.loss)
        self.ck_sum, self.ck_steps = np.zeros((E, K)), np.zeros(E)
        self.gsum = [[torch.zeros_like(p, dtype=torch.float64) for p in engine.params] for _ in range(K)]
        self.mean_grad_sq = np.zeros((E, K))
        self.weights: list[np.ndarray] = []

    def tensors(self) -> list[torch.Tensor]:
        """Every accumulator but the kept weights, as tensors sharing their memory (what a checkpoint holds)."""
        arrays = [torch.from_numpy(a) for a in (self.ck_sum, self.ck_steps, self.mean_grad_sq)]
        return [self.loss, self.norm, self.count, *(v for group in self.gsum for v in group), *arrays]

    def add(self, epoch: int, losses, nu, kb, Ck) -> None:
        K = self.cfg.groups
        if len(nu):
            slot = epoch * K + kb
            self.loss.index_add_(0, slot, losses.double())
            self.norm.index_add_(0, slot, nu.double())
            self.count.index_add_(0, slot, torch.ones_like(nu, dtype=torch.float64))
            if self.cfg.group_mean_grad:  # unclipped per-group sums: a non-private diagnostic like the norms
                for k in range(K):
                    for acc, v in zip(self.gsum[k], self.engine.clipped_sum((kb == k).to(nu.dtype)), strict=True):
                        acc += v.double()
        if Ck is not None:
            self.ck_sum[epoch] += Ck
            self.ck_steps[epoch] += 1

    def close(self, epoch: int) -> None:
        """End of an epoch: the squared norm of each group's gradient sum (then reset), the weights."""
        if self.cfg.group_mean_grad:
            for k in range(self.cfg.groups):
                self.mean_grad_sq[epoch, k] = sum(float(v.pow(2).sum()) for v in self.gsum[k])
                for v in self.gsum[k]:
                    v.zero_()
        if self.cfg.keep_weights:
            model = self.engine.model
            self.weights.append(model.compact() if hasattr(model, "compact") else
                                parameters_to_vector(model.parameters()).detach().float().cpu().numpy())

    def log(self, epoch_steps: np.ndarray) -> TrainLog:
        E, K = self.cfg.epochs, self.cfg.groups
        loss, norm, count = (v.reshape(E, K).cpu().numpy() for v in (self.loss, self.norm, self.count))
        ck = self.ck_sum / np.maximum(self.ck_steps, 1)[:, None] if self.cfg.algorithm == "dpsgd_f" else None
        mg = np.sqrt(self.mean_grad_sq) / np.maximum(count, 1) if self.cfg.group_mean_grad else None
        weights = np.stack(self.weights) if self.cfg.keep_weights else None
        return TrainLog(loss, norm, count, epoch_steps, clip_bound=ck, mean_grad_norm=mg, weights=weights)


# --------------------------------------------------------------------------------------------- training
def _update(params, summed, C: float, cfg: TrainConfig, gen: torch.Generator, velocity: list | None = None) -> None:
    """w <- w - r (sum_i c_i g_i + N(0, sigma^2 C^2 I)) / b, then weight decay (C7, `after_noise`). A private
    algorithm draws the noise at every step. With `momentum` m > 0 the step direction is the heavy-ball buffer
    v <- m v + (sum_i c_i g_i + noise) / b (torch.optim.SGD's rule, v = the first direction at step 1) and
    w <- w - r v: post-processing of the released noisy gradients, so the guarantee is unchanged."""
    decay = cfg.l2 if cfg.l2_mode == "after_noise" else 0.0
    with torch.no_grad():
        for i, (p, s) in enumerate(zip(params, summed, strict=True)):
            noisy = torch.randn(p.shape, generator=gen, device=p.device, dtype=p.dtype).mul_(cfg.sigma * C).add_(s) \
                if cfg.private else None
            if velocity is None:  # plain SGD (momentum 0)
                # in place on one fresh tensor, the same operations in the same order as
                # p -= lr * (s + noise * sigma C) / b (bit for bit): one buffer instead of four on the 2.5M FastText
                # weights
                step = noisy.mul_(cfg.lr) if cfg.private else s * cfg.lr
                p.sub_(step.div_(cfg.batch_size))
            else:
                g = (noisy if cfg.private else s.clone()).div_(cfg.batch_size)
                p.sub_(velocity[i].mul_(cfg.momentum).add_(g), alpha=cfg.lr)
            if decay and p.dim() > 1:
                p -= cfg.lr * decay * p


def _rng_words(rng: np.random.Generator) -> torch.Tensor:
    """The state of a PCG64 numpy generator as 6 int64 words (state and increment: 128 bits each), so that a
    checkpoint can hold it as a tensor; `_set_rng` restores it."""
    st = rng.bit_generator.state
    words = [(st["state"][k] >> shift) & (2**64 - 1) for k in ("state", "inc") for shift in (64, 0)]
    return torch.tensor([w - 2**64 if w >= 2**63 else w for w in words] + [st["has_uint32"], st["uinteger"]],
                        dtype=torch.int64)


def _set_rng(rng: np.random.Generator, words: torch.Tensor) -> None:
    w = [int(v) % 2**64 for v in words.tolist()]
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (w[0] << 64) | w[1],
                                                                   "inc": (w[2] << 64) | w[3]},
                               "has_uint32": w[4], "uinteger": w[5]}


def _checkpoint(model_kind: str, X: torch.Tensor, cfg: TrainConfig, rng: np.random.Generator, tensors: list,
                gen: torch.Generator):
    """A `gan.Checkpoint` of this training (inside a run's `progress.checkpoints` block), or None where it cannot
    resume exactly: epoch-wise shuffling (a batch depends on the epoch's permutation), kept per-epoch weights (a
    list that grows), a generator other than PCG64. The key: the settings, the data's shape and sums, and the
    generator's state at the start (the seed)."""
    if progress.checkpoint_dir() is None or cfg.batch_sampling == "shuffle" or cfg.keep_weights \
            or rng.bit_generator.state.get("bit_generator") != "PCG64":
        return None
    from privfair_cli.algorithms import gan

    key = repr((cfg, model_kind, tuple(X.shape), float(X.double().sum()), rng.bit_generator.state))
    return gan.Checkpoint(f"dpsgd {key}", tensors, [gen])


def train(model: nn.Module, model_kind: str, X: torch.Tensor, y: torch.Tensor, groups: torch.Tensor,
          cfg: TrainConfig, rng: np.random.Generator, device: str = "cpu") -> TrainLog:
    """Run `cfg.steps` steps of the algorithm in place on `model`; numpy `rng` drives sampling and count noise,
    a torch generator seeded from it the gradient noise. Inside a run (`progress.checkpoints`) the whole state
    (weights, momentum, epoch sums, both generators) is saved every few minutes and a run started again resumes at
    the step it reached, ending as an uninterrupted run does (`_checkpoint` says where it cannot)."""
    n = len(y)
    engine = PerExampleGradients(model, cfg.l2 if cfg.l2_mode == "in_loss" else 0.0)
    gen = torch.Generator(device=device)
    start_rng = copy.deepcopy(rng)
    gen.manual_seed(int(rng.integers(2**SEED_BITS)))
    epoch_of = epoch_of_steps(cfg, n)
    epoch_steps = np.searchsorted(epoch_of, np.arange(cfg.epochs), side="right")
    sums = _EpochSums(cfg, engine, device)
    # heavy-ball buffers (`momentum`): zero before the first step, where m * 0 + g = g is the first direction
    velocity = [torch.zeros_like(p) for p in engine.params] if cfg.momentum > 0 else None
    words = _rng_words(rng) if rng.bit_generator.state.get("bit_generator") == "PCG64" else None
    checkpoint = _checkpoint(model_kind, X, cfg, start_rng, [*engine.params, *(velocity or []), *sums.tensors(),
                                                             words], gen) if words is not None else None
    start = 0
    if checkpoint is not None and (found := checkpoint.load()) is not None:
        start = found[1]
        _set_rng(rng, words)
    closed = int(np.searchsorted(epoch_steps, start, side="right"))  # epochs complete before `start`
    steps = batches(n, dataclasses.replace(cfg, steps=cfg.steps - start), rng)
    with progress.Bar(cfg.steps, cfg.algorithm, unit="steps", transient=True) as bar:  # a line / 30 s off a terminal
        if start:
            bar.log(f"{cfg.algorithm}: resuming from its checkpoint at step {start} of {cfg.steps}")
        for t, idx in enumerate(steps, start=start):
            epoch = int(epoch_of[t])
            bar.update(t, info=f"epoch {epoch + 1}/{cfg.epochs}")
            sel = torch.as_tensor(idx, device=device)
            xb, yb, kb = X[sel], y[sel], groups[sel]
            if len(idx):
                losses, nu = engine.compute(xb, lambda out, yb=yb: per_example_loss(model_kind, out, yb))
                c, C, Ck = clip_factors(cfg, nu, kb, rng)
                summed = engine.clipped_sum(c)
            else:  # an empty Poisson batch still releases noise
                losses = nu = torch.zeros(0, device=device)
                c, C, Ck = clip_factors(cfg, nu, kb, rng)
                summed = [torch.zeros_like(p) for p in engine.params]
            sums.add(epoch, losses, nu, kb, Ck)
            _update(engine.params, summed, C, cfg, gen, velocity)
            while closed < cfg.epochs and epoch_steps[closed] == t + 1:
                sums.close(closed)
                closed += 1
            if checkpoint is not None and t + 1 < cfg.steps:
                words.copy_(_rng_words(rng))
                checkpoint.maybe_save(0, t + 1)
        bar.update(cfg.steps, info=f"epoch {cfg.epochs}/{cfg.epochs}")
    for epoch in range(closed, cfg.epochs):  # epochs without steps (none unless T = 0)
        sums.close(epoch)
    return sums.log(epoch_steps)
