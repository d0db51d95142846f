"""The `privfair` command: run | list | report | reproduce | audit.

`run` hands its arguments to Hydra (every Hydra override, `-m/--multirun`, `hydra.run.dir=`, ...). Before
Hydra starts, the overrides are checked and the config composed and validated once per swept value, so a bad
value fails in a fraction of a second with one line, before any data is touched. Errors print one line and
exit non-zero; `--debug` (or HYDRA_FULL_ERROR=1) shows the traceback.

A sweep with more than one job runs on the joblib launcher unless another is chosen (`threads.launcher_plan`).
A bad value at some points of a sweep is named up front, and those jobs are recorded as failed while the others
run. The sweep exits 1 if any job failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import signal
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from pathlib import Path

from privfair_cli import compose, results, runid, threads  # noqa: F401 (runid: the ${run_id:} resolver)
from privfair_cli.config import (
    canonical_overrides,
    config_dir,
    data_options,
    experiment_name,
    group_options,
    searchpath_override,
    user_configs,
)
from privfair_cli.errors import ConfigError, PrivfairError, ResultsError
from privfair_cli.tools import watch
from privfair_cli.tools.sweep import Outcome, summary_line

EXIT_ERROR = 2


# ------------------------------------------------------------------------------------------ run
def run_hydra(args: list[str], debug: bool) -> int:
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    multirun = any(a in ("-m", "--multirun") for a in args)
    args = user_configs(args)  # --config-dir DIR, data=<card>.yaml: the user's own configs
    overrides = canonical_overrides([a for a in args if a not in ("-m", "--multirun")])  # older names, data.recipe
    if any(a.startswith("-") and "=" not in a for a in overrides):
        bad = next(a for a in overrides if a.startswith("-") and "=" not in a)
        raise ConfigError(f"unknown option {bad}; `privfair run` takes Hydra overrides key=value and -m")
    bad_points = compose.prevalidate(overrides, multirun)
    if multirun and not bad_points and (done := _complete_sweep(overrides)) is not None:
        for i, (record, run_dir) in enumerate(done, 1):
            print(f"[{i}/{len(done)}] skip (complete): {summary_line(record)}  -> {run_dir}")
        print(f"sweep: {len(done)}/{len(done)} runs complete ({len(done)} already were) in "
              f"{_sweep_folder(overrides)}")
        return 0
    env = {"HYDRA_FULL_ERROR": "1"}  # Hydra re-raises what it cannot do (create the run folder): one line here
    outcome = None
    if multirun:
        for point in bad_points:
            print(f"privfair: warning: {point}; its runs will be recorded as failed", file=sys.stderr)
        n_jobs = len(compose.expand(overrides))
        overrides, cap = threads.launcher_plan(overrides, n_jobs)
        handle, outcome = tempfile.mkstemp(prefix="privfair-sweep-", suffix=".json")
        os.close(handle)
        env |= threads.thread_env(cap) | {"PRIVFAIR_SWEEP_TOTAL": str(n_jobs), "PRIVFAIR_SWEEP_PID": str(os.getpid()),
                                          watch.OUTCOME_ENV: outcome}
    job = Job(multirun, debug)
    task = hydra.main(config_path=str(config_dir()), config_name="config", version_base=None)(job)

    GlobalHydra.instance().clear()
    try:
        with _environment(env, ["privfair"] + (["--multirun"] if multirun else []) + overrides
                          + searchpath_override()), \
                watch.prevalidated_sweep():
            task()
        if job.error is not None:
            raise job.error
        return 1 if outcome and _swept(outcome).failed else 0
    except KeyboardInterrupt as err:
        raise Interrupted(getattr(err, "signal", "SIGINT"), _kept(outcome)) from None
    except (OSError, ValueError) as err:
        # raised by Hydra before any job ran: the run or sweep folder, or the log in it, cannot be made (logging's
        # configuration wraps the log file's OSError in a ValueError)
        cause = err if isinstance(err, OSError) else err.__cause__
        if job.started or not isinstance(cause, OSError):
            raise  # not a results folder's fault: shown as any other unexpected error
        raise ResultsError(f"cannot write {cause.filename or 'the run folder'}: {cause.strerror or cause}; any "
                           "complete result already there is kept") from None
    finally:
        GlobalHydra.instance().clear()
        if outcome:
            os.unlink(outcome)


def _sweep_folder(overrides: list[str]) -> str | None:
    """The sweep's folder when the command fixes it (`hydra.sweep.dir=DIR`, one literal value), else None."""
    folder = next((o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.dir=")), None)
    return folder if folder and "," not in folder and "$" not in folder else None


def _complete_sweep(overrides: list[str]) -> list[tuple[dict, Path]] | None:
    """Each job's record and folder when a sweep with a fixed `hydra.sweep.dir` is complete already (every run
    folder holds its config's result, `overwrite` off): then nothing needs Hydra's launcher and its workers; else
    None (a sweep folder named by the time, one missing run, or any doubt: Hydra runs the sweep)."""
    from privfair_cli import runner
    from privfair_cli.tools.sweep import run_dir_of

    folder = _sweep_folder(overrides)
    if not folder or any(o.split("=", 1)[0].lstrip("+") == "overwrite" for o in overrides):
        return None
    done = []
    for job in compose.expand(overrides):
        try:
            cfg = compose.job_config(job)
            run_dir = run_dir_of(Path(folder), cfg, job)
            record = runner.stored_result(run_dir, cfg, False, log=lambda *_: None)
        except (PrivfairError, OSError, ValueError):
            return None
        if record is None:
            return None
        done.append((record, run_dir))
    return done


@contextlib.contextmanager
def _environment(env: dict[str, str], argv: list[str]):
    """`env` in os.environ and `argv` as sys.argv (what hydra.main reads) within the block."""
    saved = {k: os.environ.get(k) for k in env} | {"argv": sys.argv}
    os.environ.update(env)
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved.pop("argv")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def _swept(outcome: str) -> Outcome:
    try:
        return Outcome.load(outcome)
    except ValueError:  # the file is still empty
        raise ResultsError("the sweep's outcome was not recorded: configs/config.yaml must keep "
                           "hydra.callbacks.sweep_watch") from None


def _kept(outcome: str | None) -> str:
    """What an interrupted run leaves: every complete result, and for a sweep how many there are and where."""
    try:
        sweep = Outcome.load(outcome) if outcome else None
    except (OSError, ValueError):  # interrupted before the sweep started: the file is still empty
        return "no run had started"
    if sweep is None:
        return "any complete earlier result in its folder is kept"
    done = len(results.complete_runs(sweep.sweep_dir))
    return f"{done}/{sweep.total} runs complete in {sweep.sweep_dir} are kept"


class Job:
    """The task Hydra runs once per job, in this process or (joblib, submitit) in another, where unpickling it
    imports this module (and with it `runid`'s `${run_id:}` resolver, which names the run folder). In a multirun
    a job never raises: a failure is written to the run's folder and to the sweep's job records, and the sweep
    goes on."""

    def __init__(self, multirun: bool, debug: bool):
        self.multirun, self.debug = multirun, debug
        self.error: PrivfairError | None = None  # a single run's error, raised again by run_hydra
        self.started = False  # whether Hydra got as far as calling a job in this process

    def __call__(self, cfg) -> None:
        from hydra.core.hydra_config import HydraConfig

        from privfair_cli import runner
        from privfair_cli.tools import plots

        self.started = True
        hc = HydraConfig.get()
        run_dir, task = Path(hc.runtime.output_dir), list(hc.overrides.task)
        if not self.multirun:
            try:
                _print_record(runner.run(cfg, run_dir, overrides=task, draw=plots.run_figures), run_dir)
            except PrivfairError as err:  # not raised through Hydra, which would print more than its one line
                if self.debug:
                    raise
                self.error = err
            return
        threads.limit_threads()
        if os.environ.get("PRIVFAIR_SWEEP_PID", str(os.getpid())) != str(os.getpid()):
            # a sweep's worker process: Ctrl-C reaches the whole process group, and the launching process answers
            # it (it stops the sweep and its workers); a worker that raised on its own could do so outside a job
            # (between jobs, in joblib's loop) and print a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        messages: list[str] = []
        try:
            record = runner.run(cfg, run_dir, log=messages.append, overrides=task, draw=plots.run_figures)
            status = "skipped" if any(m.startswith("skip") for m in messages) else "done"
            line = summary_line(record)
        except Exception as err:  # one bad point or one crashing algorithm must not take the sweep down
            status, line = "failed", f"{' '.join(task)}: {type(err).__name__}: {err}"
            if self.debug:
                messages.append("".join(traceback.format_exception(err)))
        watch.record_job(Path(hc.sweep.dir), hc.job.num, status, run_dir, line, messages)


def _print_record(record: dict, run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from privfair_cli.privacy.ledger import from_json

    m = record["metrics"]
    keys = [k for k in ("accuracy", "risk_difference", "dtpr", "dfpr", "tvd_1way", "tvd_2way",
                        "edge_tpr", "edge_fdr", "shd") if k in m]
    eps, spent = from_json(record["eps"]), from_json(record["privacy"]["eps_spent"])
    table = Table(title=f"{record['algo']} on {record['data']}, eps={eps:g}, seed={record['seed']}")
    for k in keys + ["eps_spent", "seconds"]:
        table.add_column(k, justify="right")
    fmt = ["nan" if m[k] is None else f"{m[k]:.4f}" for k in keys]
    table.add_row(*fmt, f"{spent:.4g}", f"{record['timings']['total']:.2f}")
    Console().print(table)
    if "guarantee" in record:  # a resumed result written before it was recorded has none
        print(f"guarantee: {record['guarantee']} (noise: {record['privacy'].get('noise', 'seeded')})")
    for warning in record.get("warnings", []):
        print(f"warning: {warning}")
    print(f"results: {run_dir}")


# ------------------------------------------------------------------------------------------ list / report
WIDTH = 118  # the compact `privfair list` fits a 120-column terminal


def _about(name: str, width: int) -> str:
    """`configs/algo/<name>.yaml`'s opening comment, cut to `width` characters."""
    from privfair_cli.config import find_config

    path = find_config("algo", name)
    lines = path.read_text().splitlines() if path else []
    text = " ".join(ln.lstrip("# ").strip() for ln in itertools.takewhile(lambda ln: ln.startswith("#"), lines))
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _sources_key() -> str:
    """A digest of what `privfair list` reads: the path, size and mtime of every file of the package (its plugins
    and loaders included), of the config folders searched (the user's first) and of WIDTH."""
    import hashlib

    from privfair_cli.config import search_dirs

    h = hashlib.sha256(f"{WIDTH} {sys.version}".encode())
    for root in [Path(__file__).resolve().parent, *search_dirs()]:
        for folder, dirs, files in os.walk(root, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                st = os.stat(os.path.join(folder, name))
                h.update(f"{folder}/{name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def cmd_list(args) -> int:
    """One line per algorithm config and per dataset, then the other config groups (remembered under the cache
    folder, keyed by `_sources_key`: listing imports every plugin, about 7 s, so the same listing is printed from the
    cache until a source or config file changes); `--detail`: the tables of the views each algorithm needs, the
    guarantees, and the views each card provides with what runs on it."""
    if args.detail:
        return _list_compact(detail=True)
    from privfair_cli.datasets import cache_root, write_cache

    cached = cache_root() / "list" / f"{_sources_key()}.txt"
    if cached.is_file():
        print(cached.read_text(), end="")
        return 0
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _list_compact(detail=False)
    print(buffer.getvalue(), end="")
    write_cache(cached, lambda f: f.write(buffer.getvalue().encode()))
    return 0


def _list_compact(detail: bool) -> int:
    from privfair_cli import registry, schema
    from privfair_cli.config import load_card, load_node, recipes

    plugins = registry.load_plugins()
    needs = {a: plugins[a].requirements(registry.defaults(a)) for a in plugins}
    if detail:
        return _list_detail(plugins, needs)
    from privfair_cli.tools.docs import guarantee_rows

    claims = {name: claim for name, claim, _ in guarantee_rows()}
    algos = group_options("algo")
    wide, family = max(map(len, algos)), max(len(registry.info(c).module) for c in plugins.values())
    print(textwrap.fill("algorithms (algo=NAME): kind, guarantee at its defaults, family, what it is; `privfair "
                        "list --detail`: the views each needs and the datasets each runs on", WIDTH))
    for name in algos:
        cls = plugins.get(str(load_node("algo", name).get("name", name)))  # a config names its plugin
        if cls is None:
            continue
        i = registry.info(cls)
        head = f"  {name:<{wide}}  {i.kind:<15} {claims.get(cls.name, 'none'):<15} {i.module:<{family}} " \
               + ("CUDA " if i.cuda else "     ")
        print(head + _about(name, max(20, WIDTH - len(head))))
    datasets = group_options("data")
    wide = max(map(len, datasets))
    print("\ndatasets (data=NAME; a paper's recipe of it: data=NAME data.recipe=RECIPE; your own: data=card.yaml)")
    for name in datasets:
        views = schema.card_views(load_card(name))
        runs = sum(not schema.missing_views(needs[a], views) for a in plugins)
        own = recipes(name)
        line = f"  {name:<{wide}}  {runs:>2} algorithms" + (f"; recipes: {', '.join(own)}" if own else "")
        print(textwrap.fill(line, WIDTH, subsequent_indent=" " * (wide + 18)))
    for group in ("mechanism", "budget", "experiment"):
        print("\n" + textwrap.fill(f"{group}= " + ", ".join(group_options(group)), WIDTH, subsequent_indent="  "))
    return 0


def _list_detail(plugins: dict, needs: dict) -> int:
    from rich.console import Console
    from rich.table import Table

    from privfair_cli import registry, schema
    from privfair_cli.config import load_card
    from privfair_cli.tools.docs import guarantee_rows

    console = Console(width=max(Console().width, 110))
    t = Table(title="algorithms (algo=)")
    for col in ("name", "task kind", "needs (dataset views)", "mechanisms", "needs delta", "CUDA", "module"):
        t.add_column(col)
    for name in sorted(plugins):
        i = registry.info(plugins[name])
        t.add_row(i.name, i.kind, ", ".join(n.replace("|", " or ") for n in i.needs),
                  ", ".join(i.mechanisms) or "none (non-private)", "yes" if i.needs_delta else "no",
                  "yes" if i.cuda else "no", i.module)
    console.print(t)
    g = Table(title="guarantees of the private algorithms (the others: none) and what changes them "
                    "(docs/privacy.md)")
    for col in ("name", "at its defaults", "settings that change it"):
        g.add_column(col)
    for name, claim, note in guarantee_rows():
        if claim != "none" or note != "non-private":
            g.add_row(name, claim, note or "-")
    console.print(g)
    console.print("[bold]every private algorithm:[/bold] " + "; ".join(registry.GENERAL_GUARANTEE_RULES))
    d = Table(title="datasets (data=<dataset>; a paper's recipe of it: data=<dataset> data.recipe=<recipe>, written "
                    "<dataset>/<recipe> here): the views each card provides (derived: built on demand when an "
                    "algorithm needs them, datasets/views.py), and the algorithms that run on it with their defaults")
    for col in ("name", "provides", "runs"):
        d.add_column(col)
    for name in data_options():
        card = load_card(name)
        views, declared = schema.card_views(card), schema.declared_views(card)
        runs = [a for a in sorted(plugins) if not schema.missing_views(needs[a], views)]
        shown = ", ".join(sorted(declared)) + (f"; derived: {', '.join(sorted(views - declared))}"
                                               if views - declared else "")
        d.add_row(name, shown, ", ".join(runs) or "-")
    console.print(d)
    console.print("[bold]views:[/bold] " + "; ".join(f"{v}: {what} (card key {key})"
                                                     for v, (what, key) in registry.VIEWS.items()))
    for group in ("mechanism", "budget", "experiment"):
        console.print(f"[bold]{group}=[/bold] " + ", ".join(group_options(group)))
    return 0


def cmd_report(args) -> int:
    from privfair_cli.tools import report

    report.report(Path(args.path), metrics=args.metrics.split(",") if args.metrics else None, plot=args.plot,
                  by_group=args.by_group)
    return 0


def cmd_reproduce(args) -> int:
    from privfair_cli.tools import reproduce

    args.name = experiment_name(args.name)
    names = group_options("experiment") if args.name == "all" else [args.name]
    if args.name != "all" and args.name not in group_options("experiment"):
        raise ConfigError(f"experiment {args.name!r} is unknown; allowed: all, "
                          f"{', '.join(group_options('experiment'))}")
    check, jobs, update, no_run, overrides = _reproduce_options(args)
    if check:
        if update or no_run:
            raise ConfigError(f"--check re-runs recorded runs and never writes the committed comparison; use "
                              f"--check or {'--update' if update else '--no-run'}, not both")
        if overrides:
            raise ConfigError(f"--check re-runs a sample of the recorded runs as they ran; it takes no overrides "
                              f"(got {' '.join(overrides)})")
        return _check(names)
    if no_run and not overrides:
        update = True  # the runs here measure only part of a long table: merge, never turn the rest into not_run
    failed, times = [], {}
    for name in names:
        start = time.perf_counter()
        comparison = reproduce.reproduce(name, overrides, run=not no_run, jobs=jobs, update_canonical=update)
        times[name] = time.perf_counter() - start
        if comparison is not None and comparison.attrs["failed"]:
            failed.append(name)
    if args.name == "all":
        _print_summary(times)
    if failed:
        print(f"privfair: error: runs failed in {', '.join(failed)} (see failed.json in their folders)",
              file=sys.stderr)
    return 1 if failed else 0


def _reproduce_options(args) -> tuple[bool, int, bool, bool, list[str]]:
    """--check, --jobs N, --update and --no-run, also where they follow the experiment's overrides (which take the
    rest of the line)."""
    check, jobs, update, no_run = args.check, _jobs(args.jobs), args.update, args.no_run
    overrides, rest = [], list(args.overrides)
    while rest:
        item = rest.pop(0)
        if item == "--check":
            check = True
        elif item == "--update":
            update = True
        elif item == "--no-run":
            no_run = True
        elif item == "--jobs" or item.startswith("--jobs="):
            value = item.split("=", 1)[1] if "=" in item else (rest.pop(0) if rest else "")
            jobs = _jobs(value)
        elif item.startswith("-"):
            raise ConfigError(f"unknown option {item}; `privfair reproduce` takes NAME, --check, --jobs N, --update, "
                              f"--no-run and Hydra overrides key=value")
        else:
            overrides.append(item)
    return check, jobs, update, no_run, overrides


def _jobs(value) -> int:
    """`--jobs N`: runs side by side, N >= 1 (0: one per core)."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise ConfigError(f"--jobs {value!r}; allowed: a whole number >= 1 (runs side by side), or 0 for one per core")
    return n or (os.cpu_count() or 1)


def _check(names: list[str]) -> int:
    """`reproduce NAME --check`: the exact regression guard (privfair_cli.tools.regress); exit 1 when a comparison
    is not what its run record gives or a re-run metric differs from its record."""
    from privfair_cli.tools import regress

    outcomes = [regress.check(name) for name in names]
    print(regress.summary(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def _print_summary(times: dict[str, float]) -> None:
    """The summary of docs/reproduction.md, from the comparisons just written, with the wall time of each."""
    from privfair_cli.tools import docs, reproduce

    exps = docs.experiments(config_dir().parent, results_root=reproduce.RESULTS_ROOT)
    print("\nReproduction summary (the table of docs/reproduction.md; run `make docs` to update it):\n")
    print(docs.summary_table(exps, times=times))


def cmd_audit(args) -> int:
    from privfair_cli.tools import audit

    return audit.cmd_audit(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="privfair", description="experiment runner for private and fair ML")
    p.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one run, or a sweep with -m (Hydra overrides: key=value ...)")
    r.add_argument("overrides", nargs=argparse.REMAINDER)
    ls = sub.add_parser("list", help="algorithms, datasets, mechanisms, experiments (one line each)")
    ls.add_argument("--detail", action="store_true", help="the views each algorithm needs, the guarantees, and "
                    "the views each dataset provides with the algorithms that run on it")
    rep = sub.add_parser("report", help="aggregate the runs under PATH into mean ± std tables")
    rep.add_argument("path")
    rep.add_argument("--metrics", help="comma-separated metric names (default: the main ones)")
    rep.add_argument("--plot", metavar="KEY", help="also plot the metrics against KEY (eps, or another swept key): "
                     "tradeoff_KEY.png, one line per algorithm, mean ± std over seeds")
    rep.add_argument("--by-group", action="store_true", help="also every group's rates (summary_groups.csv) and, "
                     "with --plot, each group's accuracy and TPR against KEY (tradeoff_KEY_by_group.png)")
    rp = sub.add_parser("reproduce", help="run a paper-table experiment and compare with the published numbers")
    rp.add_argument("name", help="experiment name (see `privfair list`) or `all`")
    rp.add_argument("--check", action="store_true", help="exact regression guard: re-derive the comparison from its "
                    "run record and re-run a sample of the recorded runs in a fresh folder; fail on any difference "
                    "(never writes the comparison)")
    rp.add_argument("--jobs", default="1", help="runs side by side on this machine's cores (each with its share of "
                    "the threads; 0 = one per core); default 1")
    rp.add_argument("--update", action="store_true", help="also recompute the canonical comparison's cells that "
                    "the full sweep's runs here measure; the other cells keep their committed rows")
    rp.add_argument("--no-run", action="store_true", help="train nothing: compare the runs already here (the "
                    "canonical comparison as with --update, a subset's under subsets/)")
    rp.add_argument("overrides", nargs=argparse.REMAINDER, help="extra Hydra overrides, e.g. seed='range(3)'")
    au = sub.add_parser("audit", help="empirical lower bound on an algorithm's eps: algo=A data=D eps=E [audit.*]")
    au.add_argument("overrides", nargs=argparse.REMAINDER, help="algo=, data=, eps= and other run overrides; "
                    "audit.trials=N, audit.canary=extreme|row, audit.mode=auto|distinguish|one_run, ...")
    return p


class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM: stop, a sweep's worker processes with it (joblib kills its workers when the
    launching process raises), keep every complete result, and say how to resume."""

    def __init__(self, signal_name: str = "SIGINT", kept: str = ""):
        super().__init__(signal_name)
        self.signal, self.kept = signal_name, kept


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup that follows must not be cut short
    raise Interrupted("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return _main(argv)
    except KeyboardInterrupt as err:
        from privfair_cli import progress

        progress.close()
        name = getattr(err, "signal", "SIGINT")
        kept = getattr(err, "kept", "") or "complete results are kept"
        print(f"privfair: interrupted by {name}: {kept}; run the same command again to resume", file=sys.stderr)
        return 128 + signal.Signals[name].value
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if argv and argv[0] == "run" and not {"-h", "--help"} & set(argv[1:]):
        args = argparse.Namespace(command="run", overrides=argv[1:])  # Hydra's -m passes through
    else:
        args = build_parser().parse_args(argv)
    args.debug = debug
    try:
        if args.command == "run":
            return run_hydra(args.overrides, debug)
        return {"list": cmd_list, "report": cmd_report, "reproduce": cmd_reproduce,
                "audit": cmd_audit}[args.command](args)
    except PrivfairError as err:
        if debug:
            raise
        print(f"privfair: error: {err}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
