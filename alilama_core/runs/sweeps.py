"""A sweep's folder: its plan (the search space and the trials it expands to), each trial's status, the table.

A sweep is many ordinary runs that differ in a few ``section.field=value``
overrides. This module knows nothing of how trials are run; it reads and writes
what a sweep leaves on disk::

    SWEEP/sweep.json          the plan (base settings, space, search, seed) and each trial's status
    SWEEP/trials/NAME/        one ordinary run folder per trial (eval, generate, plot work on it)
    SWEEP/logs/NAME.log       what the trial printed
    SWEEP/trials/NAME/sweep-score.json   the scoring step's columns (``score:``), when the sweep has one
    SWEEP/results.csv, results.md, results.png (and results-seeds.csv, .md with a swept seed)

The rest of a sweep, from the space a user gives to the table: ``sweep_plan`` (a plan from a sweep YAML,
overrides and settings, every trial's config checked), ``sweep_ray`` (the trials on Ray Tune),
``sweep_trial`` (one trial in a Ray worker, and the scoring step), ``sweep_plot`` (results.png) and
``sweep_run.run_sweep``, the one call that does it all (``alilama sweep`` is a command over it).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alilama_core.base.errors import ConfigError
from alilama_core.base.files import atomic_write_text

SWEEP_JSON = "sweep.json"
TRIALS = "trials"
LOGS = "logs"
RESULTS_CSV, RESULTS_MD, RESULTS_PNG = "results.csv", "results.md", "results.png"
SEEDS_CSV, SEEDS_MD = "results-seeds.csv", "results-seeds.md"
"""The table of trials and its plot; the table over seeds, written when a field named ``*.seed`` is swept."""
SEARCHES = ("grid", "random", "optuna")
"""grid: every combination; random: ``samples`` points drawn with ``seed``; optuna: ``samples`` points that
Optuna's sampler (through Ray Tune) chooses one after another from the results so far."""
RANGES = ("uniform", "loguniform", "randint")
"""Continuous (or integer) ranges a field may be searched over, as ``{kind: [low, high]}``, both ends included."""
PENDING, RUNNING, DONE, STOPPED, FAILED = "pending", "running", "done", "stopped", "failed"
"""A trial's status; ``stopped``: ended early by the scheduler (ASHA), not trained again."""
FILE_KEYS = {
    "preset",
    "config",
    "data",
    "task",
    "overrides",
    "space",
    "points",
    "metric",
    "mode",
    "search",
    "samples",
    "seed",
    "max_concurrent",
    "cpus_per_trial",
    "gpus_per_trial",
    "scheduler",
    "logger",
    "score",
}
"""The keys a sweep YAML may hold (``configs/sweeps/*.yaml``)."""
POINT = "point"
"""The space key of a sweep's named points (``points:``): its values are their names, and a trial with
``point=NAME`` trains with that point's overrides. Points are trials that are not a product of fields (one
change at a time from a baseline; a few hand-picked recipes); the space's other fields multiply them."""
PRESET = "preset"
"""The other space key that is not a config field: sweeping it trains each trial from another preset."""
IDENTITY = ("preset", "config", "data", "task", "overrides", "space", "points", "search", "samples", "seed")
"""What makes a sweep the same sweep when it is run again (the rest may change between runs)."""


@dataclass
class Trial:
    """One point of the space: its folder name and its overrides (field -> value as written)."""

    name: str
    overrides: dict[str, str]
    status: str = PENDING
    metric: float | None = None
    step: int | None = None
    error: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    """The scoring step's columns (``exact@16``, ``bpb@256``, ...), once it ran on the trained trial."""

    def args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.overrides.items()]


@dataclass
class Plan:
    """A whole sweep: what every trial shares, what varies, how it is searched and scored."""

    preset: str | None = None
    config: str | None = None
    data: str | None = None
    task: str | None = None
    overrides: list[str] = field(default_factory=list)
    space: dict[str, list[str] | dict[str, list[float]]] = field(default_factory=dict)
    """Each swept field: a list of values as written, or a range ``{"loguniform": [1e-4, 1e-2]}``."""
    points: dict[str, dict[str, str]] = field(default_factory=dict)
    """Named sets of overrides, swept as the space's ``point`` field: name -> {field: value as written}."""
    metric: str | None = None
    mode: str | None = None
    search: str = "grid"
    samples: int | None = None
    seed: int = 0
    max_concurrent: int | None = None
    cpus_per_trial: float = 1
    gpus_per_trial: float = 0
    scheduler: str | None = None
    logger: str | None = None
    score: list[str] = field(default_factory=list)
    """Arguments of ``alilama eval`` that score each trained trial (e.g. ``--lengths 8,16,32``); empty: none."""
    trials: list[Trial] = field(default_factory=list)

    def fields(self, trial: Trial) -> dict[str, str]:
        """What ``trial`` sets: its overrides, a named point replaced by the point's own fields (in its place)."""
        out: dict[str, str] = {}
        for key, value in trial.overrides.items():
            out.update(self.points[value] if key == POINT else {key: value})
        return out

    def identity(self) -> dict[str, Any]:
        """What must match for a rerun to continue this sweep (an Optuna study may be given more samples)."""
        return {k: getattr(self, k) for k in IDENTITY if not (k == "samples" and self.search == "optuna")}


# -- reading a sweep from the command line and from a YAML file --------------------------------------------


def split_values(text: str) -> list[str]:
    """``alibi,rope`` -> ``["alibi", "rope"]``; commas inside ``[...]``, ``{...}`` or quotes do not split."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items]


_RANGE = re.compile(r"^\s*(uniform|loguniform|randint)\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$")


def parse_range(where: str, kind: str, bounds: Any) -> dict[str, list[float]]:
    """``{kind: [low, high]}`` checked: a known kind, two numbers, low < high (both > 0 for loguniform)."""
    if kind not in RANGES:
        raise ConfigError(f"{where}: unknown range {kind!r}; choose one of {', '.join(RANGES)} (or give a list)")
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {kind} needs two numbers, [low, high]; got {bounds!r}") from None
    if kind == "randint":
        if low != int(low) or high != int(high):
            raise ConfigError(f"{where}: randint needs two integers, got {bounds!r}")
        low, high = int(low), int(high)
    if not low < high or (kind == "loguniform" and low <= 0):
        need = "0 < low < high" if kind == "loguniform" else "low < high"
        raise ConfigError(f"{where}: {kind}({low}, {high}) is empty; give {need}")
    return {kind: [low, high]}


def is_range(values: Any) -> bool:
    return isinstance(values, dict)


def split_overrides(args: list[str]) -> tuple[list[str], dict[str, list[str] | dict[str, list[float]]]]:
    """Command-line overrides as (fixed ones, swept ones): ``field=a,b`` sweeps ``field`` over a and b,
    ``field=loguniform(1e-4,1e-2)`` over a range."""
    fixed, space = [], {}
    for item in args:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value or section.field=a,b,c")
        found = _RANGE.match(raw)
        if found:
            if key in space:
                raise ConfigError(f"{key} is swept twice on the command line; give it once")
            space[key] = parse_range(item, found[1], [found[2], found[3]])
            continue
        values = split_values(raw)
        if len(values) == 1:
            fixed.append(f"{key}={raw}")
            continue
        if any(v == "" for v in values):
            raise ConfigError(f"{item!r}: an empty value in the list; write the values as {key}=a,b,c")
        if key in space:
            raise ConfigError(f"{key} is swept twice on the command line; give its values once, as {key}=a,b,c")
        space[key] = values
    return fixed, space


def _as_override(value: Any) -> str:
    """A YAML value as the text of a ``field=value`` override."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def read_sweep_file(path: str | Path) -> dict[str, Any]:
    """A sweep YAML as plain settings; every mistake is one ``ConfigError`` naming the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the sweep file {str(path)!r}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        raise ConfigError(
            f"the sweep file {str(path)!r} is not valid YAML ({line.strip() or 'unreadable'}): "
            f"{getattr(exc, 'problem', None) or exc}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the sweep file {str(path)!r} must be a mapping (space:, metric:, ...), not a list or text")
    unknown = sorted(set(data) - FILE_KEYS)
    if unknown:
        raise ConfigError(
            f"the sweep file {str(path)!r} has unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(FILE_KEYS))}"
        )
    space = data.get("space") or {}
    if not isinstance(space, dict):
        raise ConfigError(f"{str(path)!r}: space must map section.field to a list of values")
    out_space = {}
    for key, values in space.items():
        if isinstance(values, dict):  # a range: {loguniform: [1e-4, 1e-2]}
            if len(values) != 1:
                raise ConfigError(f"{str(path)!r}: space.{key} must be a list or one range, e.g. {{uniform: [0, 1]}}")
            ((kind, bounds),) = values.items()
            out_space[str(key)] = parse_range(f"{str(path)!r}: space.{key}", str(kind), bounds)
            continue
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{str(path)!r}: space.{key} is an empty list; give it at least one value")
        out_space[str(key)] = [_as_override(v) for v in values]
    points = data.get("points")
    if points is not None:
        data["points"] = read_points(points, str(path))
        if POINT not in out_space:  # every point, first: the table's and the plot's first column
            out_space = {POINT: list(data["points"]), **out_space}
    data["space"] = out_space
    overrides = data.get("overrides") or []
    if isinstance(overrides, dict):  # overrides: {train.max_steps: 100}
        overrides = [f"{k}={_as_override(v)}" for k, v in overrides.items()]
    if not isinstance(overrides, list):
        raise ConfigError(f"{str(path)!r}: overrides must be a list of section.field=value (or a mapping)")
    data["overrides"] = [str(o) for o in overrides]
    if "score" in data:
        data["score"] = score_args(data["score"], str(path))
    return data


def read_points(points: Any, where: str) -> dict[str, dict[str, str]]:
    """``points:`` checked: a mapping of names to mappings of section.field to a value (empty: the base)."""
    if not isinstance(points, dict) or not points:
        raise ConfigError(
            f"{where}: points must map a name to its overrides, e.g. points: {{base: {{}}, muon: {{train.optimizer: muon}}}}"
        )
    out = {}
    for name, fields in points.items():
        name = str(name)
        if not name or name != _short(name):
            raise ConfigError(f"{where}: point name {name!r} may hold only letters, digits, '.', '_' and '-'")
        fields = {} if fields is None else fields
        if not isinstance(fields, dict) or any(
            not isinstance(k, str) or isinstance(v, dict) for k, v in fields.items()
        ):
            raise ConfigError(f"{where}: points.{name} must map section.field to one value, e.g. {{train.lr: 0.006}}")
        if POINT in fields:
            raise ConfigError(f"{where}: points.{name} sets {POINT!r}; a point cannot name another point")
        out[name] = {k: _as_override(v) for k, v in fields.items()}
    return out


def check_points(points: dict[str, dict[str, str]], space: dict[str, Any]) -> None:
    """The space's ``point`` values name defined points, which set no field the space sweeps too."""
    if POINT not in space:
        return
    values = space[POINT]
    if is_range(values) or not points:
        raise ConfigError(f"{POINT!r} is swept, but the sweep defines no points: give points: in the sweep file")
    unknown = [v for v in values if v not in points]
    if unknown:
        raise ConfigError(f"{POINT}={','.join(unknown)}: no such point; the sweep defines {', '.join(points)}")
    for name in values:
        both = sorted(set(points[name]) & set(space))
        if both:
            raise ConfigError(
                f"point {name} sets {', '.join(both)}, which the space sweeps too; give it one or the other"
            )


def score_args(value: Any, where: str = "--score") -> list[str]:
    """The scoring step's ``alilama eval`` arguments from a YAML list or a string (``--lengths 8,16,32``)."""
    import shlex

    if value is None:
        return []
    if isinstance(value, str):
        args = shlex.split(value)
    elif isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        args = [str(v) for v in value]
    else:
        raise ConfigError(f"{where}: score must be `alilama eval` arguments, e.g. score: --lengths 8,16,32")
    taken = sorted({a.split("=")[0] for a in args} & {"--json", "--out", "--progress", "--no-progress", "--log"})
    if taken:
        raise ConfigError(f"{where}: score sets {', '.join(taken)} itself; leave it out")
    return args


# -- the trials of a space -------------------------------------------------------------------------------


def _short(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:40] or "x"


def trial_name(overrides: dict[str, str]) -> str:
    """A trial's folder name from its overrides: ``positional-alibi_seed-0``; unique, stable across runs."""
    parts = [f"{_short(k.rsplit('.', 1)[-1])}-{_short(v)}" for k, v in overrides.items()]
    readable = "_".join(parts) or "base"
    digest = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:6]
    return f"{readable[:100]}-{digest}"


def format_value(value: float | int) -> str:
    """A drawn number as the text of its override (what the trial trains with, and its folder's name)."""
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def draw(values: list[str] | dict[str, list[float]], rng: random.Random) -> str:
    """One value of a field: a list's item, or a number from its range (log-uniform on a log scale)."""
    if not is_range(values):
        return rng.choice(values)
    ((kind, (low, high)),) = values.items()
    if kind == "randint":
        return format_value(rng.randint(low, high))
    if kind == "loguniform":
        return format_value(math.exp(rng.uniform(math.log(low), math.log(high))))
    return format_value(rng.uniform(low, high))


def expand(
    space: dict[str, list[str] | dict[str, list[float]]],
    search: str = "grid",
    samples: int | None = None,
    seed: int = 0,
) -> list[Trial]:
    """The trials of ``space``: every combination (grid), ``samples`` distinct ones drawn with ``seed``
    (random), or none yet (optuna: its sampler chooses them as results come in)."""
    if search not in SEARCHES:
        raise ConfigError(f"unknown search {search!r}; choose one of {', '.join(SEARCHES)}")
    if search != "grid" and (not samples or samples < 1):
        raise ConfigError(f"a {search} search needs samples: N (how many trials to draw), N >= 1")
    ranges = [k for k, v in space.items() if is_range(v)]
    if search == "grid" and ranges:
        raise ConfigError(
            f"{', '.join(ranges)} is a range, which a grid cannot enumerate; use --search random or optuna "
            "(with --samples N), or give a list of values"
        )
    if search == "optuna":
        return []
    keys = list(space)
    if ranges:  # independent draws, the seed decides them; a point drawn twice is drawn once
        rng, points = random.Random(seed), []
        for _ in range(samples * 20):
            point = {k: draw(space[k], rng) for k in keys}
            if point not in points:
                points.append(point)
            if len(points) == samples:
                break
        return [Trial(trial_name(p), p) for p in points]
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(space[k] for k in keys))]
    if search == "random":
        points = random.Random(seed).sample(points, min(samples, len(points)))
    trials = [Trial(trial_name(p), p) for p in points]
    names = [t.name for t in trials]
    if len(set(names)) != len(names):
        raise ConfigError("two trials of the space are the same point; give each value of a field once")
    return trials


# -- the sweep's folder ----------------------------------------------------------------------------------


def read_plan(folder: str | Path) -> Plan | None:
    """The plan recorded in ``folder/sweep.json``, or ``None`` when the folder holds no sweep yet."""
    path = Path(folder) / SWEEP_JSON
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        trials = [Trial(**t) for t in data.pop("trials")]
        return Plan(**data, trials=trials)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{str(path)!r} is not a sweep record Alilama wrote ({exc}); move it away") from None


def write_plan(folder: str | Path, plan: Plan) -> None:
    atomic_write_text(Path(folder) / SWEEP_JSON, json.dumps(asdict(plan), indent=1) + "\n")


def check_same_sweep(folder: str | Path, old: Plan, new: Plan) -> None:
    """Refuse to continue a sweep folder with another plan: a rerun must be the same sweep."""
    diff = [k for k in new.identity() if old.identity().get(k) != new.identity()[k]]
    if diff:
        what = "; ".join(f"{k}: {old.identity()[k]!r} there, {new.identity()[k]!r} now" for k in diff)
        raise ConfigError(
            f"{str(folder)!r} holds another sweep ({what}). Give the same settings to continue it, "
            "or another --out for a new sweep"
        )


SCORE_FILE = "sweep-score.json"


def score_columns(result: Any) -> dict[str, float]:
    """``alilama eval --json`` output as named columns: a task run's ``exact@L`` and ``token_acc@L`` per length,
    a text run's ``bpb@C`` per context length (``FILE:bpb@C`` when it scored more than one file)."""
    columns: dict[str, float] = {}
    if isinstance(result, dict) and isinstance(result.get("rows"), list):  # a task run
        for row in result["rows"]:
            if row.get("exact_match") is not None:
                columns[f"exact@{row['length']}"] = float(row["exact_match"])
                columns[f"token_acc@{row['length']}"] = float(row["token_accuracy"])
        return columns
    if isinstance(result, list):  # a text run: one row per file and context length
        files = {Path(r["file"]).stem for r in result}
        for r in result:
            if r.get("bpb") is not None:
                prefix = f"{Path(r['file']).stem}:" if len(files) > 1 else ""
                columns[f"{prefix}bpb@{r['context_length']}"] = float(r["bpb"])
        return columns
    raise ConfigError("the scoring step's output is not `alilama eval --json` output")


def read_score(run: str | Path, args: list[str]) -> dict[str, float] | None:
    """The columns the scoring step wrote for ``run`` with these ``args``; ``None`` when it has not run so."""
    path = Path(run) / SCORE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("args") != list(args) or not isinstance(data.get("columns"), dict):
        return None
    return {str(k): float(v) for k, v in data["columns"].items()}


def write_score(run: str | Path, args: list[str], columns: dict[str, float]) -> None:
    atomic_write_text(Path(run) / SCORE_FILE, json.dumps({"args": list(args), "columns": columns}, indent=1) + "\n")


def last_value(rows: list[dict], metric: str) -> tuple[float | None, int | None]:
    """The last logged value of ``metric`` in a run's metrics rows, and its step."""
    for row in reversed(rows):
        value = row.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value), row.get("step")
    return None, None


# -- results ---------------------------------------------------------------------------------------------


def ranked(plan: Plan) -> list[Trial]:
    """Trials best first by ``plan.metric`` (``plan.mode``); those without a value last, in plan order."""
    scored = [t for t in plan.trials if t.metric is not None and not math.isnan(t.metric)]
    scored.sort(key=lambda t: t.metric if plan.mode == "min" else -t.metric)
    return scored + [t for t in plan.trials if t not in scored]


def table_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    """The results table: header and rows (rank, the metric, each swept field, step, status, trial folder). A
    value a finished trial does not have is ``n/a`` (a learned position table at a length it has no positions
    for), one it does not have yet is empty."""
    extra = score_names(plan)
    header = ["rank", plan.metric or "metric", *plan.space, *extra, "step", "status", "trial"]
    rows = []
    for rank, t in enumerate(ranked(plan), 1):
        missing = "n/a" if t.status == DONE else ""
        value = missing if t.metric is None else f"{t.metric:.4f}"
        scores = [f"{t.scores[k]:.4f}" if k in t.scores else missing for k in extra]
        rows.append(
            [
                str(rank),
                value,
                *(t.overrides.get(k, "") for k in plan.space),
                *scores,
                str(t.step or ""),
                t.status,
                t.name,
            ]
        )
    return header, rows


def score_names(plan: Plan) -> list[str]:
    """The scoring step's columns other than the ranking metric, in the order the trials have them."""
    names: dict[str, None] = {}
    for t in plan.trials:
        names.update(dict.fromkeys(k for k in t.scores if k != plan.metric))
    return list(names)


def table_csv(plan: Plan) -> str:
    return as_csv(*table_rows(plan))


def table_markdown(plan: Plan) -> str:
    return as_markdown(*table_rows(plan))


def as_csv(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def as_markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; counts (rank, step, seeds) right-aligned."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if h in ("rank", "step", "seeds") else "---" for h in header) + "|",
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def seed_table_rows(plan: Plan) -> tuple[list[str], list[list[str]]] | None:
    """The results over seeds: one row per combination of the other swept fields (in the space's order), the
    number of seeds that finished, and each value column as ``mean (lowest–highest)`` over them; ``n/a`` where
    no seed has the value (a learned position table at a length it has no positions for). ``None`` when no
    field named ``*.seed`` is swept."""
    if not any(is_seed(k) for k in plan.space):
        return None
    fields = [k for k in plan.space if not is_seed(k) and not is_range(plan.space[k])]
    columns = [plan.metric or "metric", *score_names(plan)]
    groups: dict[tuple[str, ...], list[Trial]] = {}
    for t in plan.trials:
        groups.setdefault(tuple(t.overrides.get(k, "") for k in fields), []).append(t)

    def order(key: tuple[str, ...]) -> list[int]:
        return [list(plan.space[k]).index(v) if v in plan.space[k] else len(plan.space[k]) for k, v in zip(fields, key)]

    def cell(trials: list[Trial], column: str) -> str:
        values = [t.metric if column == plan.metric else t.scores.get(column) for t in trials]
        values = [v for v in values if v is not None and not math.isnan(v)]
        if not values:
            return "n/a"
        return f"{sum(values) / len(values):.4f} ({min(values):.4f}–{max(values):.4f})"

    rows = []
    for key in sorted(groups, key=order):
        trials = groups[key]
        done = [t for t in trials if t.status == DONE]
        rows.append([*key, str(len(done)), *(cell(done, c) for c in columns)])
    return [*fields, "seeds", *columns], rows


def is_seed(field_name: str) -> bool:
    return field_name.rsplit(".", 1)[-1] == "seed"


def field_values(plan: Plan, swept: str) -> list[str]:
    """The values of a swept field to plot: its list, or for a range the values its trials drew, in order."""
    if not is_range(plan.space[swept]):
        return list(plan.space[swept])
    return sorted({t.overrides[swept] for t in plan.trials if swept in t.overrides}, key=float)


def series(plan: Plan, swept: str) -> dict[tuple, dict[str, list[float]]]:
    """For one swept field: per combination of the other non-seed fields, its value -> the metrics over seeds.
    (The other fields that are ranges are left out of the key: their values rarely repeat.)"""
    others = [k for k in plan.space if k != swept and not is_seed(k) and not is_range(plan.space[k])]
    values = field_values(plan, swept)
    out: dict[tuple, dict[str, list[float]]] = {}
    for t in plan.trials:
        if t.metric is None or math.isnan(t.metric):
            continue
        key = tuple(f"{k.rsplit('.', 1)[-1]}={t.overrides[k]}" for k in others)
        out.setdefault(key, {v: [] for v in values})[t.overrides[swept]].append(t.metric)
    return out
