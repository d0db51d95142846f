"""The `privfair` command: run | list | report | reproduce.

`run` hands its arguments to Hydra (every Hydra override, `-m/--multirun`, `hydra.run.dir=`, ...). Before
Hydra starts, the overrides are checked and the config composed and validated once per swept value, so a bad
value fails in a fraction of a second with one line, before any data is touched. Errors print one line and
exit non-zero; `--debug` (or HYDRA_FULL_ERROR=1) shows the traceback.

A sweep with more than one job runs on the joblib launcher unless another is chosen (`sweep.launcher_plan`).
A bad value at some points of a sweep is named up front, and those jobs are recorded as failed while the others
run. The sweep exits 1 if any job failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from privfair_cli import sweep
from privfair_cli.config import config_dir, group_options
from privfair_cli.errors import ConfigError, PrivfairError

EXIT_ERROR = 2


# ------------------------------------------------------------------------------------------ run
def run_hydra(args: list[str], debug: bool) -> int:
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    if any(a.startswith("-") and "=" not in a for a in overrides):
        bad = next(a for a in overrides if a.startswith("-") and "=" not in a)
        raise ConfigError(f"unknown option {bad}; `privfair run` takes Hydra overrides key=value and -m")
    bad_points = sweep.prevalidate(overrides, multirun)
    env = {}
    if multirun:
        for point in bad_points:
            print(f"privfair: warning: {point}; its runs will be recorded as failed", file=sys.stderr)
        n_jobs = len(sweep.expand(overrides))
        overrides, threads = sweep.launcher_plan(overrides, n_jobs)
        env = sweep.thread_env(threads) | {"PRIVFAIR_SWEEP_TOTAL": str(n_jobs), "PRIVFAIR_SWEEP_PID": str(os.getpid())}
    job = hydra.main(config_path=str(config_dir()), config_name="config", version_base=None)(
        _job_function(multirun, debug))

    GlobalHydra.instance().clear()
    saved = {k: os.environ.get(k) for k in env} | {"argv": sys.argv}
    os.environ.update(env)
    sys.argv = ["privfair"] + (["--multirun"] if multirun else []) + overrides
    sweep.LAST = None
    try:
        with sweep.prevalidated_sweep():
            job()
    finally:
        sys.argv = saved.pop("argv")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
        GlobalHydra.instance().clear()
    return 1 if sweep.LAST is not None and sweep.LAST.failed else 0


def _job_function(multirun: bool, debug: bool):
    """The task Hydra runs once per job, in this process or (joblib, submitit) in another. In a multirun a job
    never raises: a failure is written to the run's folder and to the sweep's job records, and the sweep goes on."""

    def job(cfg):
        from hydra.core.hydra_config import HydraConfig

        from privfair_cli import results, runner

        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        if not multirun:
            try:
                record = runner.run(cfg, run_dir)
            except Exception as err:
                results.write_failure(run_dir, err, list(hc.overrides.task))
                if debug or not isinstance(err, PrivfairError):
                    raise
                print(f"privfair: error: {err}", file=sys.stderr)
                raise SystemExit(EXIT_ERROR) from None
            _print_record(record, run_dir)
            return
        sweep.limit_threads()
        messages: list[str] = []
        try:
            record = runner.run(cfg, run_dir, log=messages.append)
            status = "skipped" if any(m.startswith("skip") for m in messages) else "done"
            line = sweep.summary_line(record)
        except Exception as err:  # one bad point or one crashing algorithm must not take the sweep down
            results.write_failure(run_dir, err, list(hc.overrides.task))
            status, line = "failed", f"{' '.join(hc.overrides.task)}: {type(err).__name__}: {err}"
            if debug:
                messages.append(results.failures(run_dir)[0]["traceback"])
        sweep.record_job(Path(hc.sweep.dir), hc.job.num, status, run_dir, line, messages)

    return job


def _print_record(record: dict, run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    m = record["metrics"]
    keys = [k for k in ("accuracy", "risk_difference", "dtpr", "dfpr", "tvd_1way", "tvd_2way",
                        "edge_tpr", "edge_fdr", "shd") if k in m]
    table = Table(title=f"{record['algo']} on {record['data']}, eps={record['eps']:g}, seed={record['seed']}")
    for k in keys + ["eps_spent", "seconds"]:
        table.add_column(k, justify="right")
    fmt = ["nan" if m[k] is None else f"{m[k]:.4f}" for k in keys]
    table.add_row(*fmt, f"{record['privacy']['eps_spent']:.4g}", f"{record['timings']['total']:.2f}")
    Console().print(table)
    print(f"guarantee: {record['guarantee']} (noise: {record['privacy'].get('noise', 'seeded')})")
    for warning in record["warnings"]:
        print(f"warning: {warning}")
    print(f"results: {run_dir}")


# ------------------------------------------------------------------------------------------ list / report
def cmd_list(_args) -> int:
    from rich.console import Console
    from rich.table import Table

    from privfair_cli import registry

    console = Console(width=max(Console().width, 110))
    plugins = registry.load_plugins()
    t = Table(title="algorithms (algo=)")
    for col in ("name", "task kind", "mechanisms", "needs delta", "CUDA", "module"):
        t.add_column(col)
    for name in sorted(plugins):
        i = registry.info(plugins[name])
        t.add_row(i.name, i.kind, ", ".join(i.mechanisms) or "none (non-private)",
                  "yes" if i.needs_delta else "no", "yes" if i.cuda else "no", i.module)
    console.print(t)
    for group in ("data", "mechanism", "budget", "experiment"):
        console.print(f"[bold]{group}=[/bold] " + ", ".join(group_options(group)))
    return 0


def cmd_report(args) -> int:
    from privfair_cli import report

    report.report(Path(args.path), metrics=args.metrics.split(",") if args.metrics else None, plot=args.plot)
    return 0


def cmd_reproduce(args) -> int:
    from privfair_cli import reproduce

    names = group_options("experiment") if args.name == "all" else [args.name]
    if args.name != "all" and args.name not in group_options("experiment"):
        raise ConfigError(f"experiment {args.name!r} is unknown; allowed: all, "
                          f"{', '.join(group_options('experiment'))}")
    failed = []
    for name in names:
        comparison = reproduce.reproduce(name, args.overrides)
        if comparison is not None and comparison.attrs["failed"]:
            failed.append(name)
    if failed:
        print(f"privfair: error: runs failed in {', '.join(failed)} (see failed.json in their folders)",
              file=sys.stderr)
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="privfair", description="experiment runner for private and fair ML")
    p.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one run, or a sweep with -m (Hydra overrides: key=value ...)")
    r.add_argument("overrides", nargs=argparse.REMAINDER)
    sub.add_parser("list", help="algorithms, datasets, mechanisms, experiments")
    rep = sub.add_parser("report", help="aggregate the runs under PATH into mean ± std tables")
    rep.add_argument("path")
    rep.add_argument("--metrics", help="comma-separated metric names (default: the main ones)")
    rep.add_argument("--plot", metavar="KEY", help="also plot the metrics against KEY (eps, or another swept key): "
                     "tradeoff_KEY.png, one line per algorithm, mean ± std over seeds")
    rp = sub.add_parser("reproduce", help="run a paper-table experiment and compare with the published numbers")
    rp.add_argument("name", help="experiment name (see `privfair list`) or `all`")
    rp.add_argument("overrides", nargs=argparse.REMAINDER, help="extra Hydra overrides, e.g. seed='range(3)'")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if argv and argv[0] == "run" and not {"-h", "--help"} & set(argv[1:]):
        args = argparse.Namespace(command="run", overrides=argv[1:])  # Hydra's own flags (-m) pass through
    else:
        args = build_parser().parse_args(argv)
    args.debug = debug
    try:
        if args.command == "run":
            return run_hydra(args.overrides, debug)
        return {"list": cmd_list, "report": cmd_report, "reproduce": cmd_reproduce}[args.command](args)
    except PrivfairError as err:
        if debug:
            raise
        print(f"privfair: error: {err}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
