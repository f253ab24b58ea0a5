"""``alilama sweep``: many runs that differ in a few overrides, on Ray Tune, with the table and the plot.

A command over ``alilama_core.runs.sweep_run.run_sweep``, which plans the sweep, trains its trials on Ray
Tune (each an ordinary run folder under ``SWEEP/trials/``, trained by ``alilama train`` in a child process of
a Ray worker), scores them and writes the table and the plot; this module parses the options and prints.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from alilama_core.app.common import ConfigOpt, PresetOpt, console, examples, plain_line
from alilama_core.base.errors import AlilamaError
from alilama_core.runs import sweeps


@examples(
    "alilama sweep --data d/ --out sw model.positional=alibi,rope,learned",
    "alilama sweep configs/sweeps/positional.yaml --data d/ --out sw",
    "alilama sweep sweep.yaml --data d/ --out sw --max-concurrent 2",
    "alilama sweep sweep.yaml --data d/ --out sw --address HEAD:6379",
    # unknown options are overrides too, as for train
    context_settings={"ignore_unknown_options": True},
)
def sweep_cmd(
    args: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="An optional sweep YAML, then overrides: section.field=a,b,c sweeps the field, "
            "section.field=value sets it for every trial."
        ),
    ] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="The sweep's folder (trials, table, plot).")] = None,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Prepared data folder.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="Train every trial on a generated task.")] = None,
    metric: Annotated[
        Optional[str], typer.Option("--metric", help="metrics.jsonl key to rank by (val_bpb; val_exact for a task).")
    ] = None,
    mode: Annotated[
        Optional[str],
        typer.Option(
            "--mode", help="min or max (default: max for accuracies such as val_exact and exact@N, else min)."
        ),
    ] = None,
    search: Annotated[
        Optional[str],
        typer.Option(
            "--search", help="grid (every combination), random (seeded draws) or optuna (Optuna's sampler on Ray Tune)."
        ),
    ] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", help="Trials a random or optuna search draws.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of a random search.")] = None,
    max_concurrent: Annotated[
        Optional[int], typer.Option("--max-concurrent", help="Trials at once (default: as the CPUs allow).")
    ] = None,
    cpus_per_trial: Annotated[
        Optional[float], typer.Option("--cpus-per-trial", help="CPUs Ray gives a trial (its train.threads).")
    ] = None,
    gpus_per_trial: Annotated[Optional[float], typer.Option("--gpus-per-trial", help="GPUs Ray gives a trial.")] = None,
    scheduler: Annotated[
        Optional[str], typer.Option("--scheduler", help="fifo (every trial to its end) or asha (early stopping).")
    ] = None,
    logger: Annotated[
        Optional[str],
        typer.Option("--logger", help="Every trial also into one tracker: tensorboard, csv, mlflow or wandb."),
    ] = None,
    address: Annotated[
        Optional[str],
        typer.Option("--address", help="An existing Ray cluster (else RAY_ADDRESS; else Ray starts here)."),
    ] = None,
    num_cpus: Annotated[
        Optional[int], typer.Option("--num-cpus", help="CPUs of the local Ray instance (default: all).")
    ] = None,
    max_failures: Annotated[
        int, typer.Option("--max-failures", help="Retries of a trial whose worker failed (from its checkpoint).")
    ] = 3,
    score: Annotated[
        Optional[str],
        typer.Option(
            "--score",
            help="`alilama eval` arguments that score each trained trial, e.g. --score='--lengths 8,16,32'; "
            "their columns (exact@16, bpb@256, ...) join the table and --metric may name one.",
        ),
    ] = None,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="Rewrite the table and plot from the sweep folder; train nothing.")
    ] = False,
) -> None:
    """Train many runs that differ in a few overrides (a grid or a random search) on Ray Tune; table and plot."""
    from alilama_core.runs.sweep_run import run_sweep

    if not out:
        raise AlilamaError("give --out DIR, the sweep's folder (run the same command again to continue it)")
    result = run_sweep(
        out,
        args or [],
        preset=preset,
        config=config,
        data=data,
        task=task,
        metric=metric,
        mode=mode,
        search=search,
        samples=samples,
        seed=seed,
        max_concurrent=max_concurrent,
        cpus_per_trial=cpus_per_trial,
        gpus_per_trial=gpus_per_trial,
        scheduler=scheduler,
        logger=logger,
        score=score,
        address=address,
        num_cpus=num_cpus,
        max_failures=max_failures,
        report_only=report_only,
        echo=lambda text: console.print(text, highlight=False),
        on_trial=plain_line,
    )
    show(result)
    if result.failed and not report_only:
        names = ", ".join(t.name for t in result.failed)
        raise AlilamaError(f"{len(result.failed)} trial(s) failed: {names}; see {result.folder / sweeps.LOGS}")


def show(result) -> None:
    """Print the table, then the best trial with the command that trains it on its own, and the files."""
    sys.stdout.write(result.table)
    best, folder = result.best, result.folder
    if best is None:
        console.print("no trial has a value of " + str(result.plan.metric) + " yet", highlight=False)
        return
    console.print(
        f"best: {best.name} {result.plan.metric} {best.metric:.4f} ({' '.join(best.args()) or 'no overrides'}); "
        f"reproduce: {result.reproduce(best)}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    console.print(
        f"table: {folder / sweeps.RESULTS_MD}, {folder / sweeps.RESULTS_CSV}"
        + (f"; over seeds: {result.seeds_table}" if result.seeds_table is not None else "")
        + f"; plot: {folder / sweeps.RESULTS_PNG}",
        highlight=False,
        markup=False,
    )
