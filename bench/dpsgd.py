"""DP-SGD step cost: the MNIST CNN (431,080 parameters) at batch 256 on CPU (issue 5, item 8).

Prints the time of one DP-SGD step (per-example norms by book-keeping clipping, clipping, noise, update) as a
ratio to one non-private SGD step of the same model and batch, and beside it Opacus' `make_private` step on the
same model when Opacus is installed (benchmark-only dependency). Target: DP step <= 1.3x the SGD step (issue 49;
3x before), faster than Opacus.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from privfair_cli.algorithms import dpsgd

BATCH, REPEATS = 256, 5


def _median_time(step, repeats=REPEATS) -> float:
    step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, 784, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def sgd_step(model, x, y, lr=0.01):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def ours_step(model, x, y, engine, gen, lr=0.01, C=1.0, sigma=0.8):
    _, nu = engine.compute(x, lambda out: F.cross_entropy(out, y, reduction="none"))
    summed = engine.clipped_sum((C / nu.clamp_min(1e-12)).clamp(max=1.0))
    with torch.no_grad():
        for p, s in zip(engine.params, summed, strict=True):
            p -= lr * (s + torch.randn(p.shape, generator=gen) * sigma * C) / BATCH


def opacus_step_fn(x, y):
    try:
        from opacus import PrivacyEngine
    except ImportError:
        return None
    model = dpsgd.build_model("cnn", 784, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=0.8, max_grad_norm=1.0,
        poisson_sampling=False)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def main() -> None:
    """Once at one thread and once at every thread of the machine: the ratio differs (the per-example work
    parallelises less well than the convolutions)."""
    for threads in sorted({1, torch.get_num_threads()}):
        torch.set_num_threads(threads)
        measure()


def measure() -> None:
    torch.manual_seed(0)
    x, y = _data()
    plain = dpsgd.build_model("cnn", 784, 10)
    t_sgd = _median_time(lambda: sgd_step(plain, x, y))
    model = dpsgd.build_model("cnn", 784, 10)
    engine = dpsgd.PerExampleGradients(model)
    gen = torch.Generator().manual_seed(1)
    t_dp = _median_time(lambda: ours_step(model, x, y, engine, gen))
    print(f"MNIST CNN, batch {BATCH}, CPU threads {torch.get_num_threads()}")
    print(f"  non-private SGD step      {t_sgd * 1e3:8.1f} ms   (1.00x)")
    print(f"  privfair DP-SGD step      {t_dp * 1e3:8.1f} ms   ({t_dp / t_sgd:.2f}x SGD; target <= 1.3x)")
    step = opacus_step_fn(x, y)
    if step is None:
        print("  Opacus: not installed (pip install -e '.[bench]')")
        return
    t_op = _median_time(step)
    print(f"  Opacus make_private step  {t_op * 1e3:8.1f} ms   ({t_op / t_sgd:.2f}x SGD)")
    print(f"  privfair / Opacus          {t_dp / t_op:.2f}x")


if __name__ == "__main__":
    main()
