"""Fair graph-based SSL family (fair_ssl.md).

`health`: one Health-size run (the substitute card `health_fair_ssl`: 4,000 labelled + 12,000 unlabelled rows, DI,
mixed scope, c = 0.1): the float32 graph, the one Cholesky factorisation of L_uu and each outer iteration's y_u
solve with the reused factor, against the baseline measured in this process: one dense float64 `numpy.linalg.solve`
of L_uu (what an implementation that does not keep the factor pays in every outer iteration).

`titanic RUNS [JOBS]`: the Titanic tables (5.2: DI, 6 c x 4 scopes; 5.4: OMR, 11 c x 4 scopes) for RUNS seeds
each, run the way `privfair reproduce --jobs JOBS` runs them (into a temporary folder), wall time per table.
`make bench` (no argument) runs the 2-run subset: one run of each Titanic table (c = 0, labelled scope), and `wstep`.

`ccp`: a binding OMR w-step of a Titanic and of a Bank run, the convex-concave loop with proximal-Newton subproblems
against the same loop with cvxpy's conic subproblems (the baseline, measured in this process).

`wstep`: the w-steps of one Titanic run (600 training rows, the Table 5.2 / 5.4 settings), solved by the run's
`WStep` (the cvxpy problem compiled once, labels and linearisation points re-set as Parameters) against the baseline
measured in this process: the same solves each built and compiled from scratch (`solve_w`, what every w-step cost
before); CPU seconds (the machine is shared), the same solutions. Then the unconstrained LR (the convex-concave
start, a non-binding constraint) by `newton_logistic`, and a binding DI w-step (c = 0) by Newton over the choices
of active constraints (`_di_newton`), each against the baseline in this process: Clarabel on the same compiled
problem.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _have(name: str) -> bool:
    from privfair_cli.config import load_card

    card = load_card(name)
    ok = (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir()
    if not ok:
        print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
    return ok


def health(seed: int = 0) -> None:
    from privfair_cli import datasets, evaluate, registry, runner, schema
    from privfair_cli.algorithms import fair_ssl
    from privfair_cli.config import load_card
    from privfair_cli.privacy import Budget

    if not _have("health_fair_ssl"):
        return
    card = schema.validate_card(load_card("health_fair_ssl"))
    prepared = runner.prepare(card, seed, log=lambda *_: None)
    train, test = prepared.train, prepared.test
    seen = datasets.hide_labels(train)
    plugin = registry.make("fair_ssl_lr", c=0.1, constraint_scope="mixed")
    t0 = time.perf_counter()
    runner.fit_plugin(plugin, train, Budget(1.0), np.random.default_rng(seed))
    fit_s = time.perf_counter() - t0
    out = evaluate.metrics_for(plugin, train, test, None)
    lab = seen.y >= 0
    n_l, n_u = int(lab.sum()), int((~lab).sum())
    # the y_u solve with the kept factor vs a dense solve from scratch, on the same graph
    X = plugin._standardise(np.r_[seen.X[lab], seen.X[~lab]])
    A, _ = fair_ssl.gaussian_graph(X[:, :-1], plugin.cfg.graph.sigma)
    t1 = time.perf_counter()
    graph = fair_ssl.Propagator.build(A, n_l, plugin.cfg.graph.ridge)
    t2 = time.perf_counter()
    rhs_score = X[n_l:] @ plugin.w
    graph.propagate(seen.y[lab], rhs_score, 1.0)
    t3 = time.perf_counter()
    L = -A[n_l:, n_l:].astype(np.float64)
    L[np.diag_indices_from(L)] += graph.degree[n_l:] + (plugin.cfg.graph.ridge if graph.ridge_used else 0.0)
    np.linalg.solve(L, A[n_l:, :n_l] @ seen.y[lab].astype(float) + rhs_score / 2)
    t4 = time.perf_counter()
    print(f"health_fair_ssl: {n_l:,} labelled + {n_u:,} unlabelled, d = {X.shape[1] - 1}: fit {fit_s:.1f} s "
          f"(graph + factorisation {plugin.graph_seconds:.1f} s, {plugin.outer} outer iterations), accuracy "
          f"{out['accuracy']:.4f}, Dis {out['discrimination']:.4f}, zero-degree fraction "
          f"{plugin.zero_degree:.3f}; factorisation alone {t2 - t1:.1f} s, y_u solve with the kept factor "
          f"{t3 - t2:.2f} s vs a dense solve {t4 - t3:.1f} s ({(t4 - t3) / max(t3 - t2, 1e-9):.0f}x) per outer "
          f"iteration")


def titanic(runs: int = 1, extra: tuple[str, ...] = (), jobs: int = 1) -> None:
    from privfair_cli.tools import reproduce

    if not _have("titanic_fair_ssl"):
        return
    for name in ("zhang2022_table5_2", "zhang2022_table5_4"):
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                t0 = time.perf_counter()
                import contextlib
                import io

                with contextlib.redirect_stdout(io.StringIO()):
                    comp = reproduce.reproduce(name, [f"seed=range({runs})", *extra], sweep_dir=Path(tmp) / "runs",
                                               jobs=jobs)
                wall = time.perf_counter() - t0
            finally:
                os.chdir(cwd)
        counts = comp["verdict"].value_counts().to_dict()
        print(f"{name}: {runs} run(s) per cell{' (' + ' '.join(extra) + ')' if extra else ''}, {jobs} job(s) side by "
              f"side, wall {wall:.1f} s; "
              f"verdicts {counts}")


def wstep(seed: int = 0, repeats: int = 5) -> None:
    from privfair_cli import datasets, registry, runner, schema
    from privfair_cli.algorithms import fair_ssl
    from privfair_cli.config import load_card

    if not _have("titanic_fair_ssl"):
        return
    import cvxpy  # noqa: F401  (imported before timing)

    card = schema.validate_card(load_card("titanic_fair_ssl"))
    train = runner.prepare(card, seed, log=lambda *_: None).train
    seen = datasets.hide_labels(train)
    lab = seen.y >= 0
    graph = {"sigma": 0.1, "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 6.0}
    for fairness, c in (("di", 0.05), ("omr", 0.0), ("omr", 1.0)):
        plugin = registry.make("fair_ssl_lr", fairness=fairness, c=c, constraint_scope="mixed", graph=graph)
        plugin._fit_scaler(seen.X)
        X = plugin._standardise(np.r_[seen.X[lab], seen.X[~lab]])
        z = np.r_[seen.s[lab], seen.s[~lab]].astype(float)
        labels = [np.r_[seen.y[lab], np.random.default_rng(k).integers(0, 2, int((~lab).sum()))]
                  for k in range(repeats)]  # a different y_u each solve, as in the outer iterations
        t0 = time.process_time()
        step = fair_ssl.WStep(X, [(X, z, c)], plugin.cfg)
        kept = [step.solve(y, [y]) for y in labels]
        t1 = time.process_time()
        fresh = [fair_ssl.solve_w(X, y, [(X, z, y, c)], plugin.cfg) for y in labels]
        t2 = time.process_time()
        same = max(float(np.max(np.abs(a.w - b.w))) for a, b in zip(kept, fresh, strict=True))
        print(f"wstep {fairness} c={c:g} (600 rows, mixed scope): {repeats} w-steps {t1 - t0:.2f} s CPU compiled once "
              f"vs {t2 - t1:.2f} s built each time ({(t2 - t1) / max(t1 - t0, 1e-9):.1f}x); solutions agree to "
              f"{same:.1e}; statuses {sorted({k.status for k in kept})}")
    # the unconstrained LR of a w-step (the CCP start, a non-binding constraint), and a binding DI w-step (c = 0) by
    # Newton over the choices of active constraints, each against the conic solve of the same compiled problem
    _newton_vs_clarabel("unconstrained LR", step, step.free, labels,
                        lambda y: fair_ssl.newton_logistic(step.Xr, y))
    plugin = registry.make("fair_ssl_lr", fairness="di", c=0.0, constraint_scope="mixed", graph=graph)
    binding = fair_ssl.WStep(X, [(X, z, 0.0)], plugin.cfg)
    _newton_vs_clarabel("DI w-step, c = 0", binding, binding.problem, labels, binding._di_newton)


def _newton_vs_clarabel(name: str, step, problem, labels: list[np.ndarray], newton) -> None:
    """CPU seconds of `newton(y)` for each label vector against Clarabel on `problem` (the compiled w-step `step`)."""
    t0 = time.process_time()
    by_newton = [newton(y.astype(float)) for y in labels]
    t1 = time.process_time()
    conic = []
    for y in labels:
        step.target.value = y.astype(float)
        step._run(problem)
        conic.append(np.asarray(step.w.value))
    t2 = time.process_time()
    same = max(float(np.max(np.abs(a - b))) for a, b in zip(by_newton, conic, strict=True))
    print(f"{name} ({len(step.Xr)} rows): {len(labels)} solves {t1 - t0:.3f} s CPU by Newton vs {t2 - t1:.2f} s by "
          f"Clarabel ({(t2 - t1) / max(t1 - t0, 1e-9):.0f}x); solutions agree to {same:.1e}")


def ccp(seed: int = 0, only: str = "") -> None:
    """A binding OMR w-step (labelled scope, summed covariance: the tables' default) of a Titanic run (600 rows) and
    of a Bank run (bank-additional-full, 8,000 rows, c = 1): the convex-concave loop with proximal-Newton subproblems
    (`ccp_solver: newton_qp`) against the baseline in this process, the same loop with cvxpy's conic subproblems
    (`conic`, compiled once per w-step); CPU seconds, statuses, and how far apart the two w are."""
    import cvxpy  # noqa: F401  (imported before timing)

    from privfair_cli import datasets, registry, runner, schema
    from privfair_cli.algorithms import fair_ssl
    from privfair_cli.config import load_card

    for name, sigma, tau, c in (("titanic/zhang2022_fair_ssl", 0.1, 1.0, 1.0),
                                ("bank/zhang2022_fair_ssl_additional", 0.5, 0.05, 1.0)):
        raw = load_card(name)
        if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / raw["subdir"]).is_dir():
            print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
            continue
        if only and only not in name:
            continue
        card = schema.validate_card(raw)
        seen = datasets.hide_labels(runner.prepare(card, seed, log=lambda *_: None).train)
        lab = seen.y >= 0
        order = np.r_[np.flatnonzero(lab), np.flatnonzero(~lab)]
        n_l = int(lab.sum())
        graph = {"sigma": sigma, "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 6.0}
        out = {}
        for solver in ("newton_qp", "conic"):
            plugin = registry.make("fair_ssl_lr", fairness="omr", c=c, tau=tau, constraint_scope="labeled",
                                   graph=graph, ccp_solver=solver)
            plugin._fit_scaler(seen.X[order])
            X = plugin._standardise(seen.X[order])
            z = seen.s[order].astype(float)
            y_l = seen.y[order][:n_l].astype(int)
            _, g = fair_ssl.factorised_graph(X[:, :-1], n_l, plugin.cfg.graph)
            y = np.r_[y_l, (g.harmonic(y_l) >= 0.5).astype(int)]
            t0 = time.process_time()
            step = fair_ssl.WStep(X, [(X[:n_l], z[:n_l], c)], plugin.cfg)
            out[solver] = (step.solve(y, [y[:n_l]]), time.process_time() - t0)
        (qp, t_qp), (conic, t_conic) = out["newton_qp"], out["conic"]
        apart = float(np.max(np.abs(qp.w - conic.w))) if conic.ok and qp.ok else float("nan")
        print(f"ccp {raw['name']} ({len(y):,} rows, labelled scope, c = {c:g}): newton_qp {t_qp:.1f} s CPU "
              f"({qp.status}, {qp.iterations} CCP iterations) vs conic {t_conic:.1f} s CPU ({conic.status}, "
              f"{conic.iterations}): {t_conic / max(t_qp, 1e-9):.1f}x; w apart by {apart:.1e}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "titanic":
        titanic(int(argv[1]) if len(argv) > 1 else 1, jobs=int(argv[2]) if len(argv) > 2 else 1)
    elif argv and argv[0] == "health":
        health()
    elif argv and argv[0] == "wstep":
        wstep()
    elif argv and argv[0] == "ccp":  # `ccp titanic` / `ccp bank`: one of the two
        ccp(only=argv[1] if len(argv) > 1 else "")
    else:  # CI: the 2-run subset and the w-step comparison
        titanic(1, ("algo=fair_ssl_lr", "algo.c=0.0", "algo.constraint_scope=labeled"))
        wstep()


if __name__ == "__main__":
    main()
