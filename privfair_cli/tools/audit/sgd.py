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
  bound on eps from one more training run. Canary i adds sign_i C e_(k_i) to the summed gradient of the steps that
  sample it (in the run with probability 1/2, then Poisson at rate q); its score is the released noisy sums less
  the clipped sum of the real examples along its own coordinate, so its in and out laws differ only by the
  Gaussian noise. The right guesses among the most extreme scores are read with the f-DP analysis of
  `bounds.fdp_tail` against the claimed mechanism's family (`claim_family`: exactly mu-GDP for full batches, the
  PLD of the subsampled Gaussian otherwise), which is what makes the bound tight where the (eps, delta) analysis
  of Steinke, Nasr and Jagielski cannot be (a Gaussian's eps at delta lies in tails no count of guesses reaches).
  It fails when the entry's own mechanism is ruled out, which a correct training does with probability at most
  1 - `audit.confidence`. Observing the real examples' batches does not weaken the canaries' guarantee: their
  own sampling is independent of them.

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
DIRAC_CANARIES = 1_000_000  # audit.dirac_canaries=auto: one per parameter, at most this many


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
    rng = np.random.default_rng([opts["seed"], 51])  # not the fit's (seed, 48): its own stream
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
    """The white-box one-run audit (Steinke, Nasr and Jagielski 2023, with Dirac gradient canaries and the f-DP
    analysis of `bounds.fdp_tail`): one training run with `audit.dirac_canaries` canaries (at most one per
    parameter), the highest and lowest scores guessed in and out (how many: `plan_guesses`, from the claim alone),
    and the least private member of the claimed mechanism's family (`claim_family`) the right guesses rule out,
    reported as its eps at the ledger's delta. The check fails when the claimed member itself is ruled out (the
    training is less private than the subsampled Gaussian its ledger entry states), which a correct training
    does with probability at most 1 - `audit.confidence`. With the noise removed every guess is right, so a bound
    of 0 here is not a blind test."""
    from privfair_cli.tools.audit.bounds import fdp_largest_rejected

    if s.table.d + 1 < MIN_CANARIES:
        return Check("dpsgd_one_run", "skipped", f"a model of about {s.table.d + 1} parameters holds too few Dirac "
                     f"canaries (fewer than {MIN_CANARIES}) for a bound")
    # the canaries' coordinates, signs, inclusion and sampling: a stream independent of the fit's (seed, 49), as
    # the guarantee's game requires (the inclusion bits independent of the mechanism's randomness)
    rng = np.random.default_rng([opts["seed"], 52])
    want = opts.get("dirac_canaries", "auto")
    with dirac_canaries(DIRAC_CANARIES if want == "auto" else int(want), rng) as state:
        _, ledger = fit(s, s.table, (opts["seed"], 49))
    if state.get("momentum"):
        return Check("dpsgd_one_run", "skipped", "momentum: the update mixes the steps' noise")
    if "coords" not in state:
        return Check("dpsgd_one_run", "skipped", "no training step")
    entry = _gradient_entry(ledger)
    if entry is None or entry.extra.get("sampling", "poisson") != "poisson":
        return Check("dpsgd_one_run", "skipped", "the gradient entry is not a Poisson-subsampled Gaussian (the "
                     "canaries are sampled at the Poisson rate, a mechanism the entry does not describe)")
    eps, delta = ledger.spent()
    sigma, q, steps = float(entry.extra["sigma"]), float(entry.extra["q"]), int(entry.extra["steps"])
    family = claim_family(sigma, q, steps, delta)
    score, included = state["score"], state["included"]
    m = len(score)
    k = plan_guesses(m, family, opts["confidence"])
    order = np.argsort(score, kind="stable")
    v = int(included[order[-k:]].sum() + (~included[order[:k]]).sum())
    theta = fdp_largest_rejected(m, 2 * k, v, family.power, opts["confidence"], hi=family.claim, cap=family.cap)
    lb = family.eps(theta)
    tight = family.eps(family.claim)  # the claimed mechanism's own eps at delta (exact GDP, or its PLD)
    refuted = theta > family.claim * (1 + 1e-9)
    figs = {"canaries": m, "guesses": 2 * k, "correct": v, "eps_lb": lb, "eps_claimed": eps, "eps_exact": tight,
            "ratio": lb / eps if eps else 0.0, "ratio_exact": lb / tight if tight else 0.0,
            "steps": state["steps"], "q": q, "family": family.name, "theta_lb": theta, "theta_claimed": family.claim}
    what = (f"{m} Dirac gradient canaries, {v} of {2 * k} guesses right: the training is not as private as "
            f"{family.member(theta)} (the ledger's entry: {family.member(family.claim)}), so eps >= {lb:.3f} at "
            f"delta = {delta:.3g} against the claim {eps:.4g} ({lb / eps if eps else 0:.2f} of it; the entry's "
            f"exact eps is {tight:.4g})")
    if refuted:
        what += "; the entry's own mechanism is ruled out"
    return Check("dpsgd_one_run", "fail" if refuted else "pass", what, figs)


@dataclass
class Family:
    """The claimed mechanism as one member of a family of trade-off curves indexed by theta (less private as theta
    grows): `power(theta)` (F, `bounds`), `eps(theta)` its eps at the ledger's delta, `claim` the member the ledger
    states, `shifts` the law of an included canary's score in units of the noise's sd over the T steps (a list of
    (weight, shift): Binomial(T, q) steps of the canary, each shifting it by 1 / (sigma sqrt(T))), `cap` the largest
    theta searched, `member(theta)` in words."""

    name: str
    claim: float
    power: object
    eps: object
    shifts: list
    cap: float
    member: object


def claim_family(sigma: float, q: float, steps: int, delta: float) -> Family:
    """Full batches (q = 1): T Gaussian steps of multiplier sigma are exactly mu-GDP with mu = sqrt(T) / sigma
    (Dong, Roth and Su 2022): the family mu. Poisson rate q < 1: the T-fold composition of the subsampled Gaussian,
    the family theta = 1 / sigma' at the same q and T, its trade-off curve from dp-accounting's PLD (pessimistic, so
    F is an upper bound and the tail bound stays valid)."""
    from scipy import stats as st

    from privfair_cli.tools.audit.bounds import gdp_eps, gdp_power, profile_power

    per = 1 / (sigma * math.sqrt(steps))
    if q >= 1:
        return Family("GDP", math.sqrt(steps) / sigma, gdp_power, lambda mu: gdp_eps(mu, delta),
                      [(1.0, steps * per)], 1e3, lambda mu: f"mu-GDP with mu = {mu:.4g}")
    b = np.arange(steps + 1)
    w = st.binom.pmf(b, steps, q)
    keep = w > 1e-12
    cache: dict = {}

    def pld(theta):
        key = float(theta)
        if key not in cache:
            cache[key] = subsampled_pld(1 / theta, q, steps)
        return cache[key]

    def power(theta):
        return profile_power(PROFILE_EPS, np.asarray(pld(theta).get_delta_for_epsilon(PROFILE_EPS), dtype=float))

    return Family("subsampled Gaussian", 1 / sigma, power,
                  lambda theta: float(pld(theta).get_epsilon_for_delta(delta)) if theta > 0 else 0.0,
                  list(zip(w[keep], b[keep] * per, strict=True)), 20.0,
                  lambda theta: f"the {steps}-step subsampled Gaussian at q = {q:.4g} with sigma = "
                                f"{1 / theta if theta else math.inf:.4g}")


PROFILE_EPS = np.concatenate([np.linspace(0, 10, 1001), np.linspace(10.1, 40, 300)])  # the profile's eps grid


def subsampled_pld(sigma: float, q: float, steps: int):
    """dp-accounting's PLD (add/remove, pessimistic) of `steps` Poisson-subsampled Gaussians."""
    from dp_accounting.pld import privacy_loss_distribution as pl

    return pl.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-3).self_compose(steps)


GUESS_FRACTIONS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)  # shares of canaries guessed (in and out)


def plan_guesses(m: int, family: Family, confidence: float) -> int:
    """How many canaries to guess in (and out): the k whose expected right guesses, were the training exactly the
    claimed mechanism (out scores N(0, 1), in scores `family.shifts`), give the largest bound. It reads the claim
    only, never the scores, so the choice costs no confidence."""
    from scipy.optimize import brentq
    from scipy.special import ndtr

    from privfair_cli.tools.audit.bounds import fdp_largest_rejected

    w = np.array([x for x, _ in family.shifts])
    sh = np.array([x for _, x in family.shifts])
    best = (-1.0, max(1, int(0.01 * m)))
    for f in GUESS_FRACTIONS:
        k = int(f * m / 2)
        if k < 1:
            continue
        share = k / m
        hi = brentq(lambda t, a=share: 0.5 * (np.sum(w * ndtr(sh - t)) + ndtr(-t)) - a, -60, 60)
        lo = brentq(lambda t, a=share: 0.5 * (np.sum(w * ndtr(t - sh)) + ndtr(t)) - a, -60, 60)
        c = min(2 * k, int(m / 2 * (np.sum(w * ndtr(sh - hi)) + ndtr(lo))))
        theta = fdp_largest_rejected(m, 2 * k, c, family.power, confidence, hi=family.claim, cap=family.cap,
                                     iters=12)
        if theta > best[0]:
            best = (theta, k)
    return best[1]
