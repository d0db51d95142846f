"""PATE-GAN (Jordon, Yoon, van der Schaar 2019; ffpdg.md §5.2), in torch on the shared GAN trainer
(`algorithms/gan.py`): a private generator of the FFPDG pipeline (`algo.generator=pategan`, `algorithms/ffpdg.py`).

Model. The table's codes become one-hot blocks (`gan.onehot_codes`, the label included). The rows are split at
random into k (`teachers`) disjoint parts; the k teacher discriminators are ONE `gan.MLP` ensemble of k members
(member i sees only part i), so the k teachers train as one batched model. Per round:
1. `teacher_iters` teacher steps: member i separates a batch of part i (label 1) from generated rows (label 0);
2. `student_iters` student steps: for a batch of generated rows u, n_1(u) = the number of teachers voting "real"
   (logit > 0), n_0 = k - n_1; the noisy label is argmax_j (n_j + Lap(1 / lambda)) (`noisy_votes`, the Laplace
   noise from the run's noise source `add_laplace`); the student (one MLP) is trained on (u, label);
3. one generator step: the generator makes the student say "real".
Only the teachers read private rows, and only the noisy votes leave them.

Privacy: the PATE moments accountant with L (`moments`) moments, spec §5.2 (`privacy/pate.py`: the log moments
alpha[1..L] grow with each noisy label's vote gap; eps_hat = min_l (alpha[l] + log(1 / delta)) / l). A student batch
whose labels would take eps_hat beyond eps is not used and training stops (or after `max_rounds`); if not even the
first batch fits, no label is released, the ledger is not charged and the release is the untrained generator's (the
run warns). At the spec's lambda = 1, k = 10 and eps = 1 (delta = 1e-5) this is what happens: one label with
unanimous teachers already gives eps_hat > 1 (every moment l <= L: log(1/delta) / l + alpha_l / l > 1), so the seed's
PATE-GAN settings cannot release a label under this accountant. The ledger is charged with the final eps_hat at the
run's delta (`basic`), or, under `accountant: rdp`, with the moments' RDP curve (`pate.rdp_curve`).
`bound: data_dependent` is the paper's accountant: its bound reads the vote gaps of the private data, so eps_hat (and
the stopping time) are themselves data-dependent and the run claims `heuristic`; `bound: data_independent` keeps
only 2 lambda^2 l (l + 1) (valid for every data set): (eps, delta)-DP, but at lambda = 1 it affords very few labels.

Deviations and choices (ffpdg.md IDs):
- §5.2 teachers: logistic regression by default (`teacher_hidden: 0`) or an MLP; the student and the generator
  MLPs with `hidden` units [assumption]; Adam (lr `lr`) [assumption: the seed gives no optimiser].
- §5.2 lambda = 1.0, batch 64 [assumption, as the spec]; delta from the run (experiments: 1e-5 < 1/n_train).
- The parts have floor(n / k) rows each (up to k - 1 rows unused).
- F18: an approximate baseline; `max_rounds` caps training (a schedule that fits the machine; the YAML and
  comparison say so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from privfair_cli.algorithms import gan
from privfair_cli.algorithms.dpsgd_trainer import SEED_BITS
from privfair_cli.errors import ConfigError
from privfair_cli.privacy import pate
from privfair_cli.privacy.noise import noise_source
from privfair_cli.threads import torch_threads


@dataclass(frozen=True)
class Settings(gan.GanSettings, pate.Moments):
    """The GANs' shared settings, the moments accountant's and the teachers' and student's schedule."""

    teacher_hidden: int = 0
    teachers: int = 10
    teacher_iters: int = 5
    student_iters: int = 5
    max_rounds: int | None = None


def noisy_votes(n1: np.ndarray, k: int, lam: float, rng) -> np.ndarray:
    """PATE's noisy argmax: 1 where n_1 + Lap(1/lam) > n_0 + Lap(1/lam) (ties to 0), from the run's noise source."""
    counts = np.stack([k - n1, n1], axis=1).astype(float)
    noisy = noise_source(rng).add_laplace(counts, 1.0 / lam)
    return (noisy[:, 1] > noisy[:, 0]).astype(np.int64)


def charge(ledger, alpha: np.ndarray, eps_hat: float, delta: float, labels: int, s: Settings) -> None:
    note = f"PATE-GAN noisy votes: {labels} labels, {s.teachers} teachers, lambda={s.lam:g}, {s.bound} moments"
    if ledger.accountant == "rdp":
        ledger.spend_rdp("pate_laplace_votes", pate.rdp_curve(alpha, ledger.orders), note=note, labels=labels)
    else:
        ledger.spend_approx("pate_laplace_votes", eps_hat, delta, sensitivity=1.0, note=note)


def generate(X: np.ndarray, domain: list[int], n_out: int, eps: float, delta: float, settings: Settings,
             rng: np.random.Generator, ledger) -> tuple[np.ndarray, int]:
    """(n_out synthetic rows (codes over `domain`) from the codes X, the number of noisy labels released),
    spending eps_hat <= eps through the ledger. When eps does not cover the first batch of labels, no label is
    released, nothing is charged and the rows come from the untrained generator (the caller warns)."""
    s = settings
    n, k = len(X), s.teachers
    if n < k:
        raise ConfigError(f"generator=pategan needs at least algo.pategan_teachers={k} training rows, got {n}")
    if not delta > 0:
        raise ConfigError("generator=pategan gives (eps, delta)-DP: set delta > 0 (e.g. delta=1e-5, below "
                          "1/n_train)")
    part = n // k
    order = rng.permutation(n)[:part * k]
    seed = int(rng.integers(2**SEED_BITS))
    alpha = np.zeros(s.moments)
    labels = 0
    with torch_threads(1):
        real = gan.onehot_codes(X[order], domain).reshape(k, part, -1)  # (k, part, d): part i for teacher i
        d = real.shape[-1]
        ens1, ensk = gan.Ensemble(1, "cpu", seed), gan.Ensemble(k, "cpu", seed + 1)
        G = gan.MLP(ens1, [s.noise_dim, s.hidden, s.hidden, d], hidden="relu")
        T = gan.MLP(ensk, [d] + ([s.teacher_hidden] if s.teacher_hidden else []) + [1], hidden="relu")
        S = gan.MLP(ens1, [d, s.hidden, 1], hidden="relu")
        opt_g, opt_t, opt_s = gan.adam([G], s.lr), gan.adam([T], s.lr), gan.adam([S], s.lr)

        def fake(batch: int) -> torch.Tensor:  # (1, batch, d)
            return gan.block_softmax(G(ens1.randn(batch, s.noise_dim)), domain)

        rounds = s.max_rounds if s.max_rounds is not None else 10**9
        ones, zeros = torch.ones(k, s.batch, 1), torch.zeros(k, s.batch, 1)
        for _ in range(rounds):
            for _ in range(s.teacher_iters):
                idx = gan.batches(ensk, part, s.batch)
                x = torch.gather(real, 1, idx.unsqueeze(-1).expand(-1, -1, d))
                with torch.no_grad():
                    f = fake(k * s.batch).reshape(k, s.batch, d)
                loss = (gan.bce(T(x), ones) + gan.bce(T(f), zeros)).sum()
                gan.step(opt_t, T.parameters(), loss)
            stop = False
            for _ in range(s.student_iters):
                with torch.no_grad():
                    u = fake(s.batch)
                    n1 = (T(u.expand(k, -1, -1))[..., 0] > 0).sum(0).numpy()
                step_alpha = alpha + pate.moments_update(np.abs(k - 2 * n1), s.lam, s.moments, s.bound)
                if pate.epsilon(step_alpha, delta) > eps:
                    stop = True
                    break
                votes = noisy_votes(n1, k, s.lam, rng)
                alpha, labels = step_alpha, labels + len(votes)
                target = torch.as_tensor(votes, dtype=torch.float32).view(1, -1, 1)
                gan.step(opt_s, S.parameters(), gan.bce(S(u), target).sum())
            if stop:
                break
            gan.step(opt_g, G.parameters(), gan.bce(S(fake(s.batch)), torch.ones(1, s.batch, 1)).sum())
        if labels:  # no label released: the untrained generator reads no private row and costs nothing
            charge(ledger, alpha, pate.epsilon(alpha, delta), delta, labels, s)
        with torch.no_grad():
            out = torch.cat([fake(4096)[0] for _ in range(math.ceil(n_out / 4096))])[:n_out]
            codes = gan.decode_blocks(out, domain)
    return codes.numpy().astype(np.int64), labels
