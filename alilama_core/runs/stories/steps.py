"""The steps a plot is written in, and ``tell``, which runs a plot's steps on a ``Story``.

A plot (``plots.PLOTS``) is data: a row table it draws one row from, and a
tuple of steps such as ``T(...)`` (one sentence of several), ``Say(...)`` (a
line of dialogue), ``Maybe(...)`` and ``chance(...)`` (something that happens
only sometimes). Each step draws from the story's ``random.Random`` in a fixed
order, so a plot and a seed always give the same story.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from alilama_core.runs.stories.story import Story, opening
from alilama_core.runs.stories.words import ENDINGS


class Step:
    """One thing a plot does to its story."""

    def run(self, s: Story) -> None:
        raise NotImplementedError


Steps = Sequence[Step]


def run(s: Story, steps: Steps) -> None:
    """Run ``steps`` on ``s`` in order."""
    for step in steps:
        step.run(s)


class Par(Step):
    """Start a new paragraph."""

    def run(self, s: Story) -> None:
        s.par()


PAR = Par()


class T(Step):
    """One of ``templates``, at random."""

    def __init__(self, *templates: str) -> None:
        self.templates = templates

    def run(self, s: Story) -> None:
        s.t(*self.templates)


class Maybe(T):
    """One of ``templates`` with probability ``p``, else nothing."""

    def __init__(self, p: float, *templates: str) -> None:
        super().__init__(*templates)
        self.p = p

    def run(self, s: Story) -> None:
        s.maybe(self.p, *self.templates)


class Add(Step):
    """``template``, always (no draw): a row's sentence such as ``{fix}``."""

    def __init__(self, template: str) -> None:
        self.templates = (template,)

    def run(self, s: Story) -> None:
        s.add(self.templates[0])


class Say(Step):
    """One of ``lines``, spoken by the character in slot ``who`` (``Story.say``)."""

    def __init__(self, who: str, *lines: str, reply: bool = False) -> None:
        self.who, self.lines, self.reply = who, lines, reply

    def run(self, s: Story) -> None:
        s.say(self.who, s.rng.choice(self.lines), reply=self.reply)


class Feel(Step):
    """A sentence saying how the character in slot ``who`` felt (``Story.feel``)."""

    def __init__(self, who: str, good: bool) -> None:
        self.who, self.good = who, good

    def run(self, s: Story) -> None:
        s.feel(self.who, good=self.good)


class Branch(Step):
    """One draw ``r``; the first arm ``(bound, steps)`` with ``r < bound`` runs, or none."""

    def __init__(self, *arms: tuple[float, Steps]) -> None:
        self.arms = arms

    def run(self, s: Story) -> None:
        r = s.rng.random()
        for bound, steps in self.arms:
            if r < bound:
                run(s, steps)
                return


def chance(p: float, *steps: Step) -> Branch:
    """``steps`` with probability ``p``, else nothing."""
    return Branch((p, steps))


def either(p: float, then: Steps, otherwise: Steps) -> Branch:
    """``then`` with probability ``p``, else ``otherwise``."""
    return Branch((p, then), (1.0, otherwise))


class Cast(Step):
    """Give slot ``role`` to the grown-up ``g`` or to the friend ``f``, then run that one's steps.

    The grown-up is taken when the story has one and, if ``p`` is given, a draw
    falls under ``p``. ``role`` gets every slot of the one taken (``role_he``,
    ``role_his``, ...) and ``role_ref``, how the hero speaks of them (``her dad``,
    ``his friend Mia``).
    """

    def __init__(self, role: str, p: float | None = None, *, g: Steps = (), f: Steps = ()) -> None:
        self.role, self.p, self.arms = role, p, {"g": g, "f": f}

    def run(self, s: Story) -> None:
        ctx = s.ctx
        who = "g" if "g" in ctx and (self.p is None or s.rng.random() < self.p) else "f"
        for key in [k for k in ctx if k == who or k.startswith(who + "_")]:
            ctx[self.role + key[len(who) :]] = ctx[key]
        ctx[self.role + "_ref"] = (
            f"{ctx['h_his']} {ctx['g_noun']}" if who == "g" else f"{ctx['h_his']} friend {ctx['f']}"
        )
        run(s, self.arms[who])


class Sample(Step):
    """Fill the slots ``names`` with distinct entries of the context's list ``source``."""

    def __init__(self, source: str, *names: str) -> None:
        self.source, self.names = source, names

    def run(self, s: Story) -> None:
        s.ctx.update(zip(self.names, s.rng.sample(s.ctx[self.source], len(self.names))))


class Opening(Step):
    """The first paragraph (``story.opening``); ``at_place`` may be a probability, drawn here."""

    def __init__(self, at_place: bool | float = True) -> None:
        self.at_place = at_place

    def run(self, s: Story) -> None:
        at_place = self.at_place if isinstance(self.at_place, bool) else s.rng.random() < self.at_place
        opening(s, s.hero, at_place=at_place)


class Ending(Step):
    """One closing sentence, sometimes two: one of ``morals``, an ending from ``ENDINGS``, or both.

    Endings containing any of ``avoid`` are skipped (no second trip home).
    """

    def __init__(self, *morals: str, avoid: tuple[str, ...] = ()) -> None:
        self.templates, self.avoid = morals, avoid

    def run(self, s: Story) -> None:
        r = s.rng.random()
        if r < 0.45:
            s.t(*self.templates)
        if r > 0.35:
            s.t(*[e for e in ENDINGS if not any(w in e for w in self.avoid)])


@dataclass(frozen=True)
class Plot:
    """A plot as data: its ``steps``, and the table of ``rows`` it draws one row from first.

    The drawn row's entries fill the slots ``fields`` (after ``draws``, each a slot
    and the list it is drawn from, so a row may name them), formatted from the
    context as it is then. ``start_weather``, when given, lists the weathers the
    story may begin in. ``weight`` is how often the plot is chosen.
    """

    name: str
    weight: int
    steps: tuple[Step, ...]
    rows: Sequence[tuple[str, ...]] = ()
    fields: tuple[str, ...] = ()
    draws: tuple[tuple[str, Sequence[str]], ...] = ()
    start_weather: tuple[str, ...] = ()


def tell(s: Story, plot: Plot) -> None:
    """Draw ``plot``'s row into ``s``'s context, then run its steps."""
    rng: random.Random = s.rng
    if plot.rows:
        row = rng.choice(plot.rows)
        for slot, options in plot.draws:
            s.ctx[slot] = rng.choice(options)
        s.ctx.update({field: text.format(**s.ctx) for field, text in zip(plot.fields, row, strict=True)})
    run(s, plot.steps)
