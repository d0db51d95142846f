"""Thread planning: which launcher a multirun uses, and how many BLAS / OpenMP / torch threads each job may use
so that jobs running side by side share the machine's cores instead of oversubscribing them; and `torch_threads`,
the context in which the small torch networks of the plugins train (GANs, adversarial debiasing, the attacked MLPs
of the adversarial-fairness chapter, DP-SGD's logistic model).

`torch_threads(n)` sets torch's intra-op threads (1 for these tiny networks on a CPU: more threads only add
synchronisation, and on a loaded machine their spin-waits cost 20x) and flushes denormal floats to zero, as
TensorFlow (the seeds' GAN code) does on a CPU by default: FairGAN's training drifts into denormal activations after
about a thousand iterations, where each CPU matmul becomes several times slower (an ACGAN iteration at batch 500:
30 ms, then 67 ms at iteration 900 and ~200 ms later; flushed: 30 ms throughout). Values below 1.2e-38 become 0;
nothing these networks compute depends on them. Nested contexts keep the flush until the outermost one ends.
"""

from __future__ import annotations

import contextlib
import os
import sys

from privfair_cli.compose import compose, first_values


def launcher_plan(overrides: list[str], n_jobs: int) -> tuple[list[str], int | None]:
    """The launcher overrides of a multirun and the BLAS / torch threads each job may use.

    Without a `hydra/launcher=` choice, a sweep of more than one job runs on the joblib launcher (local processes;
    `hydra.launcher.n_jobs` defaults to the machine's cores). Jobs running side by side on this machine share its
    cores; a Slurm job uses the CPUs Slurm gave it (None here: decided in the job)."""
    given = any(o.lstrip("+").startswith("hydra/launcher=") for o in overrides)
    if not given and (n_jobs > 1 or any(o.startswith("hydra.launcher.") for o in overrides)):
        overrides = [*overrides, "hydra/launcher=joblib"]
    launcher = compose(first_values(overrides), with_hydra=True).hydra.launcher
    cores = os.cpu_count() or 1
    target = str(launcher.get("_target_", ""))
    if target.endswith("BasicLauncher"):
        parallel = 1
    elif target.endswith("JoblibLauncher"):
        k = int(launcher.get("n_jobs") or 1)
        parallel = k if k > 0 else max(1, cores + 1 + k)  # joblib: -1 = every core, -2 = all but one, ...
        if str(launcher.get("batch_size")) == "auto" and not any("hydra.launcher.batch_size=" in o for o in overrides):
            # the launcher ships Hydra's context and the sweep's config with every task; a batch ships them once.
            # A quarter of each worker's share (Table 8.2 on 2 workers: 39 s with joblib's automatic batching,
            # 33 s with 30 a batch) still lets the workers end together
            overrides = [*overrides, f"hydra.launcher.batch_size={max(1, n_jobs // (4 * parallel))}"]
    elif target.endswith("submitit_launcher.LocalLauncher"):
        parallel = int(launcher.get("array_parallelism") or n_jobs)
    else:
        return overrides, None  # a cluster: each job has the CPUs its scheduler gave it
    return overrides, max(1, cores // max(1, min(parallel, n_jobs)))


def thread_cap() -> int:
    """The BLAS / OpenMP / torch threads a job of this process may use: $PRIVFAIR_THREADS (set by the launching
    process for jobs that share a machine), else $SLURM_CPUS_PER_TASK, else every core."""
    return int(os.environ.get("PRIVFAIR_THREADS") or os.environ.get("SLURM_CPUS_PER_TASK") or 0) or \
        (os.cpu_count() or 1)


def limit_threads() -> int:
    """Apply `thread_cap()` to this process's thread pools, once per process (a worker runs many jobs)."""
    threads = thread_cap()
    if _limited.get(os.getpid()) != threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch when it is first imported
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
        _limited[os.getpid()] = threads
    return threads


_limited: dict[int, int] = {}  # process id -> the thread cap already applied


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment for job processes started after this point (read by BLAS / OpenMP at import)."""
    if not threads:
        return {}
    keys = ("PRIVFAIR_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    return dict.fromkeys(keys, str(threads))


_FLUSH_DEPTH = [0]  # open `torch_threads` contexts: the outermost one turns the flush on and off


@contextlib.contextmanager
def torch_threads(n: int):
    """Torch's intra-op threads set to `n`, and denormal floats flushed to zero (module docstring) inside."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    flushed = torch.set_flush_denormal(True)
    _FLUSH_DEPTH[0] += 1
    try:
        yield
    finally:
        _FLUSH_DEPTH[0] -= 1
        torch.set_num_threads(before)
        if flushed and not _FLUSH_DEPTH[0]:
            torch.set_flush_denormal(False)
