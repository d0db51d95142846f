"""White-box checks of DP-SGD (issue 46): its releases are the noisy clipped gradient sums the trainer draws with
torch, so they are observed inside the trainer (`privfair_cli.algorithms.dpsgd_trainer`) while an audited fit
runs: the batches it draws (`batches`), the per-example gradient norms and clip factors (`clip_factors`) and the
parameters before and after every update (`_update`), from which the noise actually added is recovered exactly
(noise = (w_before - w_after) b / lr - sum_i c_i g_i; weight decay after the noise is undone first).

- `dpsgd_clipping`: every clipped per-example norm c_i |g_i| <= C, the sensitivity the step's noise is scaled to.
- `dpsgd_noise`: the noise of every step divided by C follows N(0, sigma^2) with the multiplier sigma the ledger
  entry states (Kolmogorov-Smirnov on all coordinates of all steps, and the ratio of the measured to the claimed
  standard deviation).
- `dpsgd_batches`: under the Poisson accountant (the entry states no other sampling) the batch sizes are
  Binomial(n, q) at the entry's rate q: a two-sided test of their total and of their dispersion
  (sum (|B_t| - nq)^2 / (nq(1-q)) against chi-square with T degrees of freedom); shuffled or fixed-size batches
  have no dispersion and fail.
- `accounting`: the ledger against dp-accounting's PLD and RDP composition of its subsampled Gaussians
  (`whitebox.check_accounting`).

- `dpsgd_one_run`: the white-box one-run audit with Dirac gradient canaries (`one_run_white_box`), a lower
  bound on eps from one more training run; above the claim it fails.

Runs with momentum are checked except for the noise and the one-run audit (the update is no longer a function of
one step's noise).
The noisy group counts of DPSGD-F and Naive are drawn from numpy and are not checked.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from privfair_cli.tools.audit.fitting import Setup, fit
from privfair_cli.tools.audit.whitebox import PVALUE, REL_TOL, Check, check_accounting

MAX_NOISE = 500_000  # noise coordinates kept for the goodness-of-fit test (a random subset beyond)
MIN_CANARIES = 100  # the one-run audit is skipped where the model has fewer parameters (one canary each)


def applies(s: Setup) -> bool:
    """Whether the configuration trains with the DP-SGD trainer (the `rdp` accountant's classifiers)."""
    return s.cls.accountant == "rdp" and s.cls.kind == "classifier"


@dataclass
class SgdLog:
    n: int = 0
    cfg: object = None
    sizes: list[int] = field(default_factory=list)
    excess: float = 0.0  # largest c_i |g_i| / C over all steps
    noise: list[np.ndarray] = field(default_factory=list)  # per step: noise / C, all coordinates
    momentum: bool = False


@contextlib.contextmanager
def instrumented():
    """Within the block the trainer's batches, clip factors and updates are observed (`SgdLog`)."""
    import torch

    from privfair_cli.algorithms import dpsgd_trainer as tr

    log = SgdLog()
    real_batches, real_clip, real_update = tr.batches, tr.clip_factors, tr._update

    def batches(n, cfg, rng):
        log.n, log.cfg = n, cfg
        for idx in real_batches(n, cfg, rng):
            log.sizes.append(len(idx))
            yield idx

    def clip_factors(cfg, nu, k, rng):
        c, C, Ck = real_clip(cfg, nu, k, rng)
        if len(nu):
            ratio = (torch.as_tensor(c, dtype=torch.float64) * nu.detach().double()).max().item() / max(C, 1e-300)
            log.excess = max(log.excess, ratio)
        return c, C, Ck

    def update(params, summed, C, cfg, gen, velocity=None):
        before = [p.detach().double().clone() for p in params]
        real_update(params, summed, C, cfg, gen, velocity)
        if velocity is not None:
            log.momentum = True
            return
        if not cfg.private or C <= 0:
            return
        decay = cfg.l2 if cfg.l2_mode == "after_noise" else 0.0
        parts = []
        for p, b, s in zip(params, before, summed, strict=True):
            after = p.detach().double()
            if decay and p.dim() > 1:
                after = after / (1 - cfg.lr * decay)
            parts.append(((b - after) * cfg.batch_size / cfg.lr - s.detach().double()).ravel().cpu().numpy() / C)
        log.noise.append(np.concatenate(parts))

    tr.batches, tr.clip_factors, tr._update = batches, clip_factors, update
    try:
        yield log
    finally:
        tr.batches, tr.clip_factors, tr._update = real_batches, real_clip, real_update


def _gradient_entry(ledger):
    for e in ledger.entries:
        if e.mechanism == "subsampled_gaussian":
            return e
    return None


def checks(s: Setup, opts: dict) -> list[Check]:
    """One instrumented training run on D and the checks of the module docstring."""
    rng = np.random.default_rng([opts["seed"], 48])
    with instrumented() as log:
        _, ledger = fit(s, s.table, (opts["seed"], 48))
    entry = _gradient_entry(ledger)
    out = [check_accounting(ledger), one_run_white_box(s, opts)]
    if entry is None or not log.sizes:
        return out + [Check("dpsgd", "skipped", "no subsampled Gaussian in the ledger or no training step")]
    sigma, q = float(entry.extra["sigma"]), float(entry.extra["q"])
    if log.excess > 1 + REL_TOL:
        out.append(Check("dpsgd_clipping", "fail", f"a clipped per-example gradient norm is {log.excess:.4g} C, "
                         "above the bound C the noise is scaled to", {"largest_norm_over_C": log.excess}))
    else:
        out.append(Check("dpsgd_clipping", "pass", f"every clipped per-example norm <= C over {len(log.sizes)} "
                         f"steps (largest {log.excess:.4g} C)", {"largest_norm_over_C": log.excess}))
    if log.momentum:
        out.append(Check("dpsgd_noise", "skipped", "momentum: the update mixes the steps' noise"))
    elif not log.noise:
        out.append(Check("dpsgd_noise", "fail", "no step drew noise"))
    else:
        z = np.concatenate(log.noise)
        if len(z) > MAX_NOISE:
            z = rng.choice(z, MAX_NOISE, replace=False)
        ratio = float(np.std(z) / sigma) if sigma > 0 else math.inf
        p = float(stats.kstest(z / sigma, "norm").pvalue) if sigma > 0 else 0.0
        figs = {"sigma_claimed": sigma, "std_ratio": ratio, "ks_p": p, "coordinates": len(z)}
        if p < PVALUE:
            out.append(Check("dpsgd_noise", "fail", f"the gradient noise / C has std {ratio:.3g} sigma (claimed "
                             f"sigma = {sigma:.4g}); not N(0, sigma^2): Kolmogorov-Smirnov p = {p:.2g}", figs))
        else:
            out.append(Check("dpsgd_noise", "pass", f"gradient noise / C ~ N(0, sigma^2), sigma = {sigma:.4g} "
                             f"(measured {ratio:.4f} sigma, KS p = {p:.2g}, {len(z)} coordinates)", figs))
    sampling = entry.extra.get("sampling", "poisson")
    if sampling != "poisson":
        out.append(Check("dpsgd_batches", "skipped", f"the ledger states {sampling} batches (no amplification "
                         "by sampling claimed)"))
        return out
    sizes, n = np.asarray(log.sizes, dtype=float), log.n
    T, mean = len(sizes), n * q
    p_total = float(stats.binomtest(int(sizes.sum()), int(n * T), q).pvalue)
    disp = float(np.sum((sizes - mean) ** 2) / (mean * (1 - q))) if 0 < q < 1 else 0.0
    p_disp = float(2 * min(stats.chi2.cdf(disp, T), stats.chi2.sf(disp, T))) if 0 < q < 1 else 1.0
    figs = {"steps": T, "n": n, "q": q, "mean_size": float(sizes.mean()), "p_total": p_total,
            "dispersion": disp / T, "p_dispersion": p_disp}
    if min(p_total, p_disp) < PVALUE:
        out.append(Check("dpsgd_batches", "fail", f"the Poisson accountant assumes Binomial(n={n}, q={q:.4g}) "
                         f"batches; the {T} batches have mean {sizes.mean():.4g} (p = {p_total:.2g}) and "
                         f"dispersion {disp / T:.3g} of the binomial's (p = {p_disp:.2g})", figs))
    else:
        out.append(Check("dpsgd_batches", "pass", f"{T} batch sizes consistent with Binomial(n={n}, q={q:.4g}) "
                         f"(total p = {p_total:.2g}, dispersion p = {p_disp:.2g})", figs))
    return out


# ------------------------------------------------------------------------------------------ white-box one run
@contextlib.contextmanager
def dirac_canaries(m: int, rng: np.random.Generator):
    """Within the block, every update of the trainer carries `m` gradient canaries (Nasr et al. 2023's Dirac
    canaries): canary i is the gradient sign_i C e_{k_i} on its own coordinate k_i of the parameters, a clipped
    per-example gradient like any other; it is in the training set with probability 1/2 and, when in, in each
    batch with the run's Poisson rate q. The released noisy sums (recovered from the parameters before and after
    each update, as in `instrumented`) less the clipped sum of the real examples, which a white-box auditor
    knows, give each canary its score sum_t sign_i (g_t - sum_t)[k_i]: its own contributions plus the noise."""
    import torch

    from privfair_cli.algorithms import dpsgd_trainer as tr

    state: dict = {"n": 0}
    real_batches, real_update = tr.batches, tr._update

    def batches(n, cfg, rng_):
        state["n"] = n
        yield from real_batches(n, cfg, rng_)

    def update(params, summed, C, cfg, gen, velocity=None):
        if velocity is not None:
            state["momentum"] = True
            return real_update(params, summed, C, cfg, gen, velocity)
        sizes = [p.numel() for p in params]
        if "coords" not in state:
            k = min(m, sum(sizes))
            state.update({"coords": rng.choice(sum(sizes), k, replace=False), "signs": rng.choice([-1.0, 1.0], k),
                          "included": rng.random(k) < 0.5, "score": np.zeros(k), "steps": 0})
        q = cfg.batch_size / max(state["n"], 1)
        sampled = state["included"] & (rng.random(len(state["coords"])) < q)
        clean = torch.cat([s.detach().reshape(-1).double() for s in summed])
        flat = clean.clone()
        flat[torch.as_tensor(state["coords"][sampled])] += torch.as_tensor(state["signs"][sampled] * C)
        parts = list(torch.split(flat, sizes))
        injected = [x.reshape(s.shape).to(s.dtype) for x, s in zip(parts, summed, strict=True)]
        before = torch.cat([p.detach().reshape(-1).double() for p in params])
        real_update(params, injected, C, cfg, gen, velocity)
        decay = cfg.l2 if cfg.l2_mode == "after_noise" else 0.0
        after = torch.cat([(p.detach().double() / (1 - cfg.lr * decay) if decay and p.dim() > 1 else
                            p.detach().double()).reshape(-1) for p in params])
        g = ((before - after) * cfg.batch_size / cfg.lr - clean).cpu().numpy()  # noise + canaries
        state["score"] += state["signs"] * g[state["coords"]]
        state["steps"] += 1

    tr.batches, tr._update = batches, update
    try:
        yield state
    finally:
        tr.batches, tr._update = real_batches, real_update


def one_run_white_box(s: Setup, opts: dict) -> Check:
    """The white-box one-run audit (Steinke, Nasr and Jagielski 2023 with Dirac gradient canaries): one training
    run with `audit.canaries` canaries (at most one per parameter), the highest and lowest
    `audit.guess_fraction` of scores guessed in and out, `bounds.one_run_eps` on the correct guesses. With the
    noise removed every included canary is told apart, so a bound of 0 here is not a blind test."""
    from privfair_cli.tools.audit.bounds import one_run_eps, refutes

    if s.table.d + 1 < MIN_CANARIES:
        return Check("dpsgd_one_run", "skipped", f"a model of about {s.table.d + 1} parameters holds too few Dirac "
                     f"canaries (fewer than {MIN_CANARIES}) for a bound")
    rng = np.random.default_rng([opts["seed"], 49])
    with dirac_canaries(opts["canaries"], rng) as state:
        _, ledger = fit(s, s.table, (opts["seed"], 49))
    if state.get("momentum"):
        return Check("dpsgd_one_run", "skipped", "momentum: the update mixes the steps' noise")
    if "coords" not in state:
        return Check("dpsgd_one_run", "skipped", "no training step")
    eps, delta = ledger.spent()
    score, included = state["score"], state["included"]
    m = len(score)
    k = max(1, int(opts["guess_fraction"] * m))
    order = np.argsort(score, kind="stable")
    v = int(included[order[-k:]].sum() + (~included[order[:k]]).sum())
    lb = one_run_eps(m, 2 * k, v, delta, opts["confidence"])
    from privfair_cli.tools.audit.whitebox import independent_eps

    tight = min(independent_eps(ledger).values())  # the composition's own tight figure (PLD) where it has one
    figs = {"canaries": m, "guesses": 2 * k, "correct": v, "eps_lb": lb, "eps_claimed": eps, "eps_pld": tight,
            "ratio": lb / eps if eps else 0.0, "steps": state["steps"]}
    what = (f"{m} Dirac gradient canaries, {v} of {2 * k} guesses right: eps >= {lb:.3f} against the claim "
            f"{eps:.4g} ({lb / eps if eps else 0:.2f} of it; the PLD composition of the same steps: {tight:.4g})")
    return Check("dpsgd_one_run", "fail" if refutes(lb, eps) else "pass", what, figs)
