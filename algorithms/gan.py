"""The shared GAN trainer of privfair: networks and a training loop for tabular GANs (FairGAN family in
`fairgan.py`; written to be reused by the causal GAN and the private GAN baselines).

Every network is an *ensemble* of `E` independent members whose parameters are stacked along a leading axis:
a weight is a tensor `(E, fan_in, fan_out)`, an activation `(E, batch, width)`, and a layer is one batched matmul
(`torch.baddbmm`). E seeds are therefore trained together as one model: losses are summed over members, so every
member gets exactly its own gradient, and Adam (elementwise) on the stacked tensors is E independent Adams.
`E = 1` is an ordinary single model. (This is the stacked-parameter form of `torch.func.stack_module_state` +
`vmap`, written out, because batched matmuls avoid vmap's per-call overhead on networks this small.)

API (all tensors on one device, float32):

- `Ensemble(E, device, seed)`: holds the members' count, the device and seeded `torch.Generator`s (`randn`,
  `rand`, `randint` draw `(E, ...)` tensors). One int seed: one generator, so member k's numbers depend on the seed
  and on E. A list of E seeds: one generator per member, so member k draws what a solo model of its seed draws and
  E seeds batched are the E solo runs (the seed-batched sweeps of `privfair_cli.seedbatch`).
- `Linear(ens, fan_in, fan_out, bias=True)`: Glorot-uniform weights, zero bias; `layer(x)`.
- `MLP(ens, sizes, hidden="relu", out=None, minibatch_mean=False)`: `sizes = [in, h1, ..., out]`; with
  `minibatch_mean` the input is concatenated with its batch mean first (medGAN's minibatch averaging, so the
  first layer reads `2 * in` features). `mlp.many([x1, x2, ...])`: the same outputs as `[mlp(x1), mlp(x2), ...]`
  (each with its own batch mean) from one pass over the concatenated rows.
- `BatchNorm(ens, width, momentum)`: batch statistics in training mode, running statistics in eval mode
  (`momentum` = weight of the new batch, torch convention: TF decay 0.99 = 0.01).
- `ResidualGenerator(ens, noise_dim, n_conditions, layers=2, momentum=0.01)`: medGAN / FairGAN generator:
  `h0 = z * E_c[c]` (embedding U(-1, 1)), `h <- relu(BN(W h)) + h` per layer, output `tanh(BN(W h)) + h`,
  linear layers without bias. `gen(z, c)`.
- `Autoencoder(ens, dim, code)`: `encode(v) = tanh(W_e v + b_e)`, `decode_logits(e) = W_d e + b_d`,
  `decode(e) = sigmoid(...)`.
- `Module.parameters()` / `weights()` / `others()`: the stacked tensors (weights get the L2 decay).
- `adam(modules, lr, weight_decay)`: one Adam (`LeanAdam`: the fused kernel of `torch.optim.Adam(fused=True)`
  without its per-step Python bookkeeping) over the modules, weight decay (coupled L2, the gradient of
  `wd/2 ||W||^2` added to each weight's gradient, as medGAN adds the L2 term to every loss) on the weight matrices
  only. `step(optimizer, params, loss)`: one step on the gradients of `loss` w.r.t. `params` (an unused parameter
  gets a zero gradient, so only its weight decay moves it).
- `bce(logits, target, weight=None)`: per-member binary cross-entropy `(E,)`, mean over the batch, or the
  weighted sum with per-row `weight` (`balanced_weights(s)` gives the class-balanced weights of FairGAN's V2/V3).
- `batches(ens, n, batch)`: `(E, batch)` row indices, an independent uniform draw per member.
- `train_loop(total, step, description, unit="iterations")`: calls `step(i)` for i < total under the project's
  progress bar (`privfair_cli.progress`); `step` may return a short info string.
- Schedules and long runs (issue 47): `resolve_schedule(cfg, own, paper, default, profiles)`: the epochs a config
  trains (`schedule: default` replaces the paper's epochs by a short default schedule, `paper` keeps the configured
  ones, a `profile` fast / smoke replaces both). `calibrate(step)`: seconds per step of a throwaway model.
  `Phase(name, steps, fn, cost)`, `announce(description, phases, schedule)`: one line before training when the
  estimate exceeds `LONG_RUN_S` (5 minutes). `train_phases(phases, description, checkpoint=...)`: every phase under
  one progress bar weighted by the estimated costs, so its ETA covers the whole training. `Checkpoint(key, tensors,
  generators)`: inside `progress.checkpoints(folder)` (the runner's `<run folder>/.checkpoint/`), the training's
  tensors and generator states saved every `CHECKPOINT_EVERY_S` seconds and restored by the next attempt of the
  same training, which then ends as the uninterrupted one does (bit for bit on a CPU; on CUDA the graph replays
  draw in their own order, so a resumed CUDA run is an equally valid run, not the same numbers).
- `Graphed(fn, ens)`: on CUDA, `fn()` (a training step: no inputs, no host synchronisation) replayed as one CUDA
  graph: a few eager calls on a side stream, one capture, then replays. A step of these networks is hundreds of
  tiny kernels, so eagerly it is bound by Python's dispatch (`bench.fairgan cuda`); the graph launches them in one
  call. The ensemble's generators are registered with the graph, so each replay draws fresh numbers from the same
  seeded streams (the sequence differs from an eager CUDA run's, as a CUDA run's differs from a CPU run's). On a
  CPU, or where the capture fails (then with a warning), every call runs `fn` eagerly.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from privfair_cli import progress, seedbatch
from privfair_cli.threads import torch_threads
from privfair_cli.typed import bounds


@dataclass(frozen=True)
class GanSettings:
    """What FFPDG's private GANs share (dpwgan.Settings, pategan.Settings add their own): the generator's noise
    size and width, the batch and the step size."""

    noise_dim: int = 64
    hidden: int = 128
    batch: int = 64
    lr: float = 1e-4


@dataclass(frozen=True)
class FairGANKeys:
    """The typed config keys FairGAN's and CFGAN's configs share (each adds its own): the schedule `profile`, the
    batch, the noise size, the discriminator's hidden widths, the step size, the adversarial loss form and the CPU
    threads."""

    profile: Literal["full", "fast", "smoke"]
    schedule: Literal["default", "paper"]
    batch_size: int = field(metadata=bounds(ge=2))
    noise_dim: int = field(metadata=bounds(ge=1))
    d_hidden: list[int] = field(metadata=bounds(ge=1))
    lr: float = field(metadata=bounds(gt=0))
    adv_mode: Literal["minimax", "flip"]
    threads: int = field(metadata=bounds(ge=1))


def train_seeds(plugin, rng, key: tuple, build, threads: int, device: str):
    """The model of a seed-batching GAN plugin (FairGAN, CFGAN): trained on the run's seed (`plugin._seed(rng)`), or,
    in a seed group of a sweep (`plugin.peer_noise`: run seed -> its noise stream; privfair_cli.seedbatch), with the
    group's seeds as one ensemble keyed by `key`. `build(seed, E, description)` trains a model of E members (`seed`
    one int, or E ints); `threads` CPU threads on a CPU. Sets `plugin.seeds_batched`; returns (model, the run's
    member, the seconds that turn its wall time into its share of the group's training)."""
    seed = plugin._seed(rng)
    peers = getattr(plugin, "peer_noise", None) or {}
    seeds = [plugin._seed(p) for p in peers.values()] or [seed]

    def train(members: list[int]):
        E = len(members)
        return build(members if E > 1 else members[0], E,
                     plugin.name if E == 1 else f"{plugin.name}, {E} seeds batched")

    with torch_threads(threads if device == "cpu" else torch.get_num_threads()):
        model, member, used, share = seedbatch.train(key, seed, seeds, train)
    plugin.seeds_batched = [list(peers)[seeds.index(s)] for s in used] if len(used) > 1 else []
    return model, member, share


class Ensemble:
    """E members on one device. `seed` an int: one seeded torch generator for all members (their draws
    interleave, so member k's numbers depend on E). `seed` a sequence of ints: one generator per seed, each
    drawing for `E // len(seed)` consecutive members; with one seed per member, member k draws exactly what a
    1-member ensemble of its seed draws, so E seeds batched train the E solo models."""

    def __init__(self, E: int, device: str = "cpu", seed: int | Sequence[int] = 0):
        self.E, self.device = int(E), torch.device(device)
        seeds = [int(seed)] if isinstance(seed, int | np.integer) else [int(s) for s in seed]
        if not seeds or self.E % len(seeds):
            raise ValueError(f"{len(seeds)} seeds cannot seed {self.E} members evenly")
        self.generators = [torch.Generator(device=self.device) for _ in seeds]
        self.reseed(seeds)
        self.group = self.E // len(seeds)

    @property
    def generator(self) -> torch.Generator:
        """The generator of a single-generator ensemble."""
        if len(self.generators) != 1:
            raise ValueError("an ensemble seeded per member has one generator per seed: use `generators`")
        return self.generators[0]

    def reseed(self, seeds: Sequence[int]) -> None:
        for g, s in zip(self.generators, seeds, strict=True):
            g.manual_seed(int(s))

    def _draw(self, fn, shape) -> torch.Tensor:
        if len(self.generators) == 1:
            return fn((self.E, *shape), generator=self.generators[0], device=self.device)
        return torch.cat([fn((self.group, *shape), generator=g, device=self.device) for g in self.generators])

    def randn(self, *shape) -> torch.Tensor:
        return self._draw(torch.randn, shape)

    def rand(self, *shape) -> torch.Tensor:
        return self._draw(torch.rand, shape)

    def randint(self, high: int, *shape) -> torch.Tensor:
        return self._draw(lambda size, **kw: torch.randint(high, size, **kw), shape)


class Module:
    """A set of stacked parameter tensors (leading axis E) and sub-modules."""

    def _children(self):
        return [v for v in vars(self).values() if isinstance(v, Module)] + [
            m for v in vars(self).values() if isinstance(v, list) for m in v if isinstance(m, Module)]

    def _own(self) -> list[tuple[torch.Tensor, bool]]:
        return []

    def _all(self):
        out = list(self._own())
        for child in self._children():
            out += child._all()
        return out

    def parameters(self) -> list[torch.Tensor]:
        return [p for p, _ in self._all()]

    def weights(self) -> list[torch.Tensor]:
        return [p for p, w in self._all() if w]

    def others(self) -> list[torch.Tensor]:
        return [p for p, w in self._all() if not w]

    def train(self, mode: bool = True) -> Module:
        for child in self._children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)


def _param(t: torch.Tensor) -> torch.Tensor:
    return t.requires_grad_(True)


class Linear(Module):
    def __init__(self, ens: Ensemble, fan_in: int, fan_out: int, bias: bool = True):
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        self.W = _param((ens.rand(fan_in, fan_out) * 2 - 1) * bound)
        self.b = _param(torch.zeros(ens.E, 1, fan_out, device=ens.device)) if bias else None

    def _own(self):
        return [(self.W, True)] + ([(self.b, False)] if self.b is not None else [])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.b, x, self.W) if self.b is not None else torch.bmm(x, self.W)


ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, None: lambda x: x}
ACTIVATIONS["leaky_relu"] = lambda x: F.leaky_relu(x, 0.2)  # CausalGAN's leaky ReLU(0.2)


class MLP(Module):
    def __init__(self, ens: Ensemble, sizes: list[int], hidden: str = "relu", out: str | None = None,
                 minibatch_mean: bool = False):
        self.minibatch_mean = minibatch_mean
        first = sizes[0] * (2 if minibatch_mean else 1)
        dims = [first, *sizes[1:]]
        self.layers = [Linear(ens, a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        self.hidden, self.out = ACTIVATIONS[hidden], ACTIVATIONS[out]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.layers
        if self.minibatch_mean:  # [x, mean(x)] W = x W_top + mean(x) W_bottom: the batch-mean half once per batch
            first, k = layers[0], x.shape[-1]
            top = torch.bmm(x, first.W[:, :k])
            bottom = torch.baddbmm(first.b, x.mean(1, keepdim=True), first.W[:, k:])
            x = self.hidden(top + bottom) if len(layers) > 1 else top + bottom
            layers = layers[1:]
            if not layers:
                return self.out(x)
        for layer in layers[:-1]:
            x = self.hidden(layer(x))
        return self.out(layers[-1](x))


    def many(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """`[self(x) for x in xs]` as one pass over the rows of all of them (each x keeps its own batch mean)."""
        if len(xs) == 1:
            return [self(xs[0])]
        sizes = [x.shape[1] for x in xs]
        x = torch.cat(xs, 1)
        layers = self.layers
        if self.minibatch_mean:
            first, k = layers[0], x.shape[-1]
            top = torch.bmm(x, first.W[:, :k])
            means = torch.cat([xi.mean(1, keepdim=True) for xi in xs], 1)  # (E, len(xs), k)
            bottom = torch.baddbmm(first.b, means, first.W[:, k:])
            # each part's row broadcast over its rows (no host-to-device copy of the sizes: CUDA graphs refuse one)
            x = top + torch.cat([bottom[:, i:i + 1].expand(-1, n, -1) for i, n in enumerate(sizes)], 1)
            x = self.hidden(x) if len(layers) > 1 else x
            layers = layers[1:]
        if layers:
            for layer in layers[:-1]:
                x = self.hidden(layer(x))
            x = layers[-1](x)
        return list(torch.split(self.out(x), sizes, 1))


class BatchNorm(Module):
    def __init__(self, ens: Ensemble, width: int, momentum: float = 0.01, eps: float = 1e-3):
        self.scale = _param(torch.ones(ens.E, 1, width, device=ens.device))
        self.shift = _param(torch.zeros(ens.E, 1, width, device=ens.device))
        self.mean = torch.zeros(ens.E, 1, width, device=ens.device)
        self.var = torch.ones(ens.E, 1, width, device=ens.device)
        self.momentum, self.eps, self.training = momentum, eps, True

    def _own(self):
        return [(self.scale, False), (self.shift, False)]

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:  # centred second moment (torch.var_mean is ~6x slower on (E, B, W) over the batch axis)
            mean = x.mean(1, keepdim=True)
            xc = x - mean
            var = (xc * xc).mean(1, keepdim=True)
            with torch.no_grad():
                self.mean.lerp_(mean, self.momentum)
                self.var.lerp_(var, self.momentum)
            return torch.addcmul(self.shift, xc, torch.rsqrt(var + self.eps) * self.scale)
        return torch.addcmul(self.shift, x - self.mean, torch.rsqrt(self.var + self.eps) * self.scale)


class ResidualGenerator(Module):
    """medGAN's generator with FairGAN's condition embedding (fairgan.md §1.3)."""

    def __init__(self, ens: Ensemble, noise_dim: int, n_conditions: int, layers: int = 2, momentum: float = 0.01):
        self.embedding = _param(ens.rand(n_conditions, noise_dim) * 2 - 1)
        self.linears = [Linear(ens, noise_dim, noise_dim, bias=False) for _ in range(layers + 1)]
        self.norms = [BatchNorm(ens, noise_dim, momentum) for _ in range(layers + 1)]
        self.noise_dim = noise_dim

    def _own(self):
        return [(self.embedding, True)]

    def __call__(self, z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """z: (E, B, noise_dim); c: (E, B) condition codes."""
        emb = torch.gather(self.embedding, 1, c.unsqueeze(-1).expand(-1, -1, self.noise_dim))
        h = z * emb
        for lin, bn in zip(self.linears[:-1], self.norms[:-1], strict=True):
            h = torch.relu(bn(lin(h))) + h
        return torch.tanh(self.norms[-1](self.linears[-1](h))) + h


class Autoencoder(Module):
    """medGAN's autoencoder without hidden layers: tanh encoder, sigmoid decoder."""

    def __init__(self, ens: Ensemble, dim: int, code: int):
        self.enc = Linear(ens, dim, code)
        self.dec = Linear(ens, code, dim)

    def encode(self, v: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.enc(v))

    def decode_logits(self, e: torch.Tensor) -> torch.Tensor:
        return self.dec(e)

    def decode(self, e: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.dec(e))


def adam(modules: list[Module], lr: float = 1e-3, weight_decay: float = 0.0,
         betas: tuple[float, float] = (0.9, 0.999)) -> LeanAdam:
    weights = [p for m in modules for p in m.weights()]
    others = [p for m in modules for p in m.others()]
    groups = [{"params": weights, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
    return LeanAdam([g for g in groups if g["params"]], lr=lr, betas=betas)


class LeanAdam:
    """Adam with coupled L2 per group, the arithmetic of `torch.optim.Adam(fused=True)` (same kernel,
    `torch._fused_adam_`, one call per group) without its per-step Python bookkeeping (about 0.45 ms a step on
    these networks). `apply(grads)` steps with the gradients of `params` in order (None = zero); `step()` reads
    `p.grad` (None = skipped) like a torch optimiser; `param_groups` holds `lr`, `betas`, `weight_decay`."""

    def __init__(self, groups: list[dict], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.param_groups = [{"params": list(g["params"]), "weight_decay": float(g.get("weight_decay", 0.0)),
                              "lr": float(lr), "betas": tuple(betas), "eps": float(eps)} for g in groups]
        self.params = [p for g in self.param_groups for p in g["params"]]
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        dev = self.params[0].device if self.params else torch.device("cpu")
        self.steps = torch.zeros((), dtype=torch.float32, device=dev)  # one counter: every parameter steps together
        self._fused = hasattr(torch, "_fused_adam_") and dev.type in ("cpu", "cuda")

    @torch.no_grad()
    def apply(self, grads: list[torch.Tensor | None]) -> None:
        self.steps += 1
        k = 0
        for g in self.param_groups:
            n = len(g["params"])
            ps, ms, vs = g["params"], self.exp_avg[k:k + n], self.exp_avg_sq[k:k + n]
            gs = [gr if gr is not None else torch.zeros_like(p) for p, gr in zip(ps, grads[k:k + n], strict=True)]
            k += n
            self._update(ps, gs, ms, vs, g)

    def _update(self, ps, gs, ms, vs, g) -> None:
        beta1, beta2 = g["betas"]
        if self._fused:
            torch._fused_adam_(ps, gs, ms, vs, [], [self.steps] * len(ps), lr=g["lr"], beta1=beta1, beta2=beta2,
                               weight_decay=g["weight_decay"], eps=g["eps"], amsgrad=False, maximize=False)
            return
        t = float(self.steps)
        for p, gr, m, v in zip(ps, gs, ms, vs, strict=True):
            gr = gr.add(p, alpha=g["weight_decay"]) if g["weight_decay"] else gr
            m.lerp_(gr, 1 - beta1)
            v.mul_(beta2).addcmul_(gr, gr, value=1 - beta2)
            denom = (v / (1 - beta2 ** t)).sqrt_().add_(g["eps"])
            p.addcdiv_(m, denom, value=-g["lr"] / (1 - beta1 ** t))

    @torch.no_grad()
    def step(self) -> None:
        """A torch-optimiser step: the parameters whose `.grad` is set (others are left as they are)."""
        self.steps += 1
        k = 0
        for g in self.param_groups:
            n = len(g["params"])
            sel = [i for i in range(k, k + n) if self.params[i].grad is not None]
            k += n
            if sel:
                self._update([self.params[i] for i in sel], [self.params[i].grad for i in sel],
                             [self.exp_avg[i] for i in sel], [self.exp_avg_sq[i] for i in sel], g)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def step(optimizer, params: list[torch.Tensor], loss: torch.Tensor) -> None:
    """One optimiser step on `params` only: their gradients of `loss` (no gradient of any other tensor)."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    if isinstance(optimizer, LeanAdam) and len(params) == len(optimizer.params):
        if all(a is b for a, b in zip(params, optimizer.params, strict=True)):
            optimizer.apply(list(grads))
            return
        by_id = {id(p): g for p, g in zip(params, grads, strict=True)}
        if all(id(p) in by_id for p in optimizer.params):
            optimizer.apply([by_id[id(p)] for p in optimizer.params])
            return
    for p, g in zip(params, grads, strict=True):
        p.grad = g if g is not None else torch.zeros_like(p)
    optimizer.step()


def bce(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Per-member BCE with logits, (E,): batch mean, or sum of `weight * bce` over the batch."""
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    loss = loss.flatten(1) if loss.dim() > 2 else loss
    return loss.mean(1) if weight is None else (loss * weight).sum(1)


def balanced_weights(s: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Row weights (E, B) making a batch sum the average of the two group means (s = 1 and s = 0), within `mask`
    (rows outside get 0); an empty group contributes 0."""
    m = torch.ones_like(s) if mask is None else mask.to(s.dtype)
    n1 = (s * m).sum(1, keepdim=True).clamp_min(1.0)
    n0 = ((1 - s) * m).sum(1, keepdim=True).clamp_min(1.0)
    return m * (s / (2 * n1) + (1 - s) / (2 * n0))


def batches(ens: Ensemble, n: int, batch: int) -> torch.Tensor:
    """(E, batch) row indices drawn uniformly with replacement, independently per member."""
    return ens.randint(n, batch)


def train_loop(total: int, step_fn, description: str, unit: str = "iterations", every: int = 50,
               start: int = 0) -> None:
    """`step_fn(i)` for i = start .. total - 1 under one progress bar of `total` steps (`start` already taken)."""
    with progress.Bar(total, description, unit=unit, transient=True) as bar:
        for i in range(start, total):
            info = step_fn(i)
            if (i + 1) % every == 0 or i + 1 == total:
                bar.update(i + 1, info or "")


# -- schedules, whole-run progress and the first-line estimate ----------------------------------------------------
LONG_RUN_S = 300.0  # a training estimated above this says so before it starts


def resolve_schedule(cfg, own: dict[str, int], paper: dict[str, int], default: dict[str, int],
                     profiles: dict[str, dict[str, int]]) -> tuple[dict[str, int], str]:
    """The schedule a GAN config trains (its keys -> values) and its name: a named `profile` other than `full`
    (fast, smoke) replaces the configured values; else `schedule: default` replaces them by `default` (the
    <= 5-minute schedule) while they are the paper's (`paper`), so epochs a user sets are kept; `schedule: paper`
    trains the configured values (the spec's unless changed)."""
    if cfg.profile in profiles:
        return own | profiles[cfg.profile], cfg.profile
    if own == paper:
        return (dict(default), "default") if cfg.schedule == "default" else (dict(own), "paper")
    return dict(own), "configured"


@dataclass
class Phase:
    """`steps` calls of `fn(i)` (i within the phase), each estimated at `cost` seconds (`calibrate`)."""

    name: str
    steps: int
    fn: object
    cost: float


def calibrate(step, n: int = 3, warm: int = 1, device: torch.device | None = None) -> float:
    """Seconds per call of `step()` (a step of a throwaway model: never the trained one, whose random streams
    and state must not move), the mean of `n` calls after `warm`."""
    sync = torch.cuda.synchronize if device is not None and device.type == "cuda" else (lambda: None)
    for _ in range(warm):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync()
    return max((time.perf_counter() - t0) / n, 1e-6)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, m = divmod(seconds // 60, 60)
    return f"{h} h {m:02d} min" if h else (f"{m} min {seconds % 60:02d} s" if m else f"{seconds} s")


def announce(description: str, phases: list[Phase], schedule: str, switch: str = "algo.schedule=default") -> float:
    """Print one line before training when the phases are estimated to take longer than LONG_RUN_S (the
    estimate, the schedule and the key for the short one); returns the estimate in seconds."""
    estimate = sum(p.steps * p.cost for p in phases)
    if estimate > LONG_RUN_S:
        steps = ", ".join(f"{p.steps:,} {p.name}" for p in phases if p.steps)
        hint = f"; {switch} trains the <= 5-minute schedule" if schedule != "default" else ""
        print(f"{description}: the {schedule} schedule ({steps}) is estimated at {_duration(estimate)} of training "
              f"on this machine (from timed steps){hint}", flush=True)
    return estimate


CHECKPOINT_EVERY_S = 180.0  # seconds of training between two checkpoints (PRIVFAIR_CHECKPOINT_S overrides it)


class Checkpoint:
    """The state of a training (`tensors`: parameters, running statistics, optimiser moments and step counters;
    `generators`: the seeded random streams) saved into the enclosing `progress.checkpoints` folder at most every
    `every` seconds, with the phase and step reached; `load()` restores the latest one saved under the same `key`
    (the config, the data, the seeds and the schedule), so training resumes where it stopped and ends as an
    uninterrupted run does, bit for bit on a CPU. Outside a `checkpoints` block (tests, benchmarks) nothing is
    saved or loaded."""

    def __init__(self, key: str, tensors: list[torch.Tensor], generators: list[torch.Generator],
                 every: float | None = None):
        import hashlib

        folder = progress.checkpoint_dir()
        self.key = key
        self.path = folder / f"gan-{hashlib.sha1(key.encode()).hexdigest()[:16]}.pt" if folder else None
        self.tensors, self.generators = tensors, generators
        self.every = float(os.environ.get("PRIVFAIR_CHECKPOINT_S", CHECKPOINT_EVERY_S)) if every is None else every
        self.last = time.perf_counter()

    def load(self) -> tuple[int, int] | None:
        """(phase, step) to continue from, with the state restored, or None (no checkpoint of this training)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            blob = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception:  # a torn or foreign file: train from the start
            return None
        if blob.get("key") != self.key or len(blob["tensors"]) != len(self.tensors):
            return None
        with torch.no_grad():
            for t, saved in zip(self.tensors, blob["tensors"], strict=True):
                t.copy_(saved)
        for g, state in zip(self.generators, blob["generators"], strict=True):
            g.set_state(state)
        return int(blob["phase"]), int(blob["step"])

    def maybe_save(self, phase: int, step: int) -> None:
        if self.path is not None and time.perf_counter() - self.last >= self.every:
            self.save(phase, step)

    def save(self, phase: int, step: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        blob = {"key": self.key, "phase": phase, "step": step,
                "tensors": [t.detach().cpu().clone() for t in self.tensors],
                "generators": [g.get_state() for g in self.generators]}
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        torch.save(blob, tmp)
        os.replace(tmp, self.path)  # a checkpoint is whole or absent
        self.last = time.perf_counter()


def optimiser_state(optimisers: list[LeanAdam]) -> list[torch.Tensor]:
    """The tensors of LeanAdam optimisers a checkpoint holds: moments and step counters."""
    return [t for opt in optimisers for t in (*opt.exp_avg, *opt.exp_avg_sq, opt.steps)]


def train_phases(phases: list[Phase], description: str, every: int = 50, checkpoint: Checkpoint | None = None) -> None:
    """Run the phases in order under one progress bar for the whole training: progress is each phase's steps
    weighted by its estimated cost, so the ETA covers every phase (not only the current one). With a `checkpoint`,
    training starts where its last checkpoint stopped and saves one every few minutes (at a multiple of `every`
    steps)."""
    total = sum(p.steps * p.cost for p in phases) or 1.0
    start = checkpoint.load() if checkpoint is not None else None
    k0, i0 = start if start is not None else (0, 0)
    with progress.Bar(100, f"{description} training", unit="%", transient=True) as bar:
        if start is not None:
            done = sum(p.steps * p.cost for p in phases[:k0]) + i0 * phases[min(k0, len(phases) - 1)].cost
            bar.log(f"{description}: resuming from its checkpoint at {int(100 * done / total)}% of training "
                    f"({phases[min(k0, len(phases) - 1)].name} {i0:,})")
        before = 0.0
        for k, p in enumerate(phases):
            for i in range(i0 if k == k0 else 0, p.steps) if k >= k0 else ():
                p.fn(i)
                if (i + 1) % every == 0 or i + 1 == p.steps:
                    bar.update(min(100, int(100 * (before + (i + 1) * p.cost) / total)),
                               f"{p.name} {i + 1:,}/{p.steps:,}")
                    if checkpoint is not None:
                        checkpoint.maybe_save(k, i + 1)
            before += p.steps * p.cost


class Graphed:
    """`fn()` as one CUDA graph on a CUDA ensemble, else eagerly (module docstring). `warm` eager calls precede the
    capture (autograd, cuBLAS and the allocator initialise on the side stream, as torch's graph recipe asks)."""

    def __init__(self, fn, ens: Ensemble, warm: int = 3):
        self.fn, self.ens, self.warm = fn, ens, warm
        self.enabled = ens.device.type == "cuda" and hasattr(torch.cuda, "CUDAGraph")
        self.graph, self.calls = None, 0

    def __call__(self) -> None:
        if not self.enabled:
            self.fn()
        elif self.graph is not None:
            self.graph.replay()
        elif self.calls < self.warm:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn()
            torch.cuda.current_stream().wait_stream(side)
            self.calls += 1
        else:
            self._capture()

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            for g in self.ens.generators:
                graph.register_generator_state(g)
            with torch.cuda.graph(graph):
                self.fn()  # recorded, not run
        except Exception as err:  # pragma: no cover - CUDA only
            warnings.warn(f"CUDA graph capture failed ({type(err).__name__}: {err}); training eagerly", stacklevel=2)
            self.enabled = False
            torch.cuda.synchronize()
            self.fn()
            return
        self.graph = graph
        graph.replay()  # this call's step


# -- tabular codes <-> one-hot blocks (added for the private GAN baselines; any tabular GAN can use them) --------
def onehot_codes(X, domain: list[int], device: str = "cpu") -> torch.Tensor:
    """(n, sum(domain)) float32 one-hot blocks of the integer codes X (n, k), one block of width domain[j] per
    column (two-level columns too), in column order."""
    X = torch.tensor(np.asarray(X), dtype=torch.long, device=device)
    offsets = torch.as_tensor([0, *list(torch.tensor(domain).cumsum(0)[:-1].tolist())], device=device)
    out = torch.zeros(X.shape[0], int(sum(domain)), device=device)
    out.scatter_(1, X + offsets, 1.0)
    return out


def block_softmax(logits: torch.Tensor, domain: list[int]) -> torch.Tensor:
    """Softmax within each one-hot block of the last axis (widths `domain`)."""
    return torch.cat([torch.softmax(part, -1) for part in torch.split(logits, list(domain), -1)], -1)


def decode_blocks(values: torch.Tensor, domain: list[int]) -> torch.Tensor:
    """Integer codes (..., k): the argmax of each block of the last axis (widths `domain`)."""
    return torch.stack([part.argmax(-1) for part in torch.split(values, list(domain), -1)], -1)
