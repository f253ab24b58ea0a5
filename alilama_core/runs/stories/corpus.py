"""Stories drawn from a seed, and the corpus file the quickstart trains on.

A story is drawn again, from the same ``random.Random``, until it has
MIN_SENTENCES to MAX_SENTENCES sentences, so the stream stays deterministic.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from alilama_core.base.files import atomic_open
from alilama_core.runs.data import SEPARATOR
from alilama_core.runs.stories.plots import PLOTS
from alilama_core.runs.stories.steps import tell
from alilama_core.runs.stories.story import Story, a, make_character, make_grownup, setting
from alilama_core.runs.stories.words import CONNECTORS_TIME, CONNECTORS_TURN, FOOD_ADJS, FOODS, HOBBIES, PLACES, THINGS

MIN_SENTENCES, MAX_SENTENCES = 5, 15
PLOTS_BY_NAME = {plot.name: plot for plot in PLOTS}
PLOT_WEIGHTS = tuple(plot.weight for plot in PLOTS)
REFLEXIVE = {"he": "himself", "she": "herself", "they": "themself"}


def make_story(rng: random.Random, pronouns: Sequence[str] = ("he", "she", "they"), plot: str | None = None) -> str:
    """One story drawn with ``rng``. ``pronouns`` limits which pronouns characters may have
    (grown-ups included); ``plot`` picks a plot by name (``"lost"``, ``"night"``, ...).

    A draw outside MIN_SENTENCES..MAX_SENTENCES is thrown away and drawn again
    (from the same ``rng``, so this stays deterministic).
    """
    for _ in range(1000):
        text = _draw_story(rng, pronouns, plot)
        if MIN_SENTENCES <= count_sentences(text) <= MAX_SENTENCES:
            return text
    raise RuntimeError("could not draw a story of the right length")  # pragma: no cover


def _draw_story(rng: random.Random, pronouns: Sequence[str], plot: str | None) -> str:
    """The cast, place, thing and food of one story, then its plot told with them."""
    hero = make_character(rng, pronouns)
    friend = make_character(rng, pronouns, avoid=(hero.name,))
    grown = make_grownup(rng, pronouns)
    place = rng.choice(PLACES)
    thing = rng.choice(THINGS)
    adj = rng.choice(thing.adjs)
    use_base, use_past = rng.choice(thing.uses)
    food, food2 = rng.sample(FOODS, 2)
    ctx: dict[str, str] = {}
    ctx.update(hero.slots("h"))
    ctx.update(friend.slots("f"))
    if grown is not None:
        ctx.update(grown.slots("g"))
    ctx.update(
        {
            "place": place.name,
            "at_place": f"{place.prep} the {place.name}",
            "spots": place.spots,  # type: ignore[dict-item]
            "sight": rng.choice(place.sights),
            "thing": thing.noun,
            "adj": adj,
            "a_thing": a(f"{adj} {thing.noun}" if rng.random() < 0.7 else thing.noun),
            "a_adj_thing": a(f"{adj} {thing.noun}"),
            "use": use_base,
            "use_past": use_past,
            "a_food": a(f"{rng.choice(FOOD_ADJS)} {food}" if rng.random() < 0.4 else food),
            "a_food2": a(food2),
            "hobby": rng.choice(HOBBIES),
            "Turn": rng.choice(CONNECTORS_TURN),
            "After": rng.choice(CONNECTORS_TIME),
            "f_intro": friend.intro(rng),
            "a_new": a(f"new {friend.noun}"),
            "f_himself": REFLEXIVE[friend.pronoun],
        }
    )
    ctx["use_past_the"] = re.sub(r"\bit\b", f"the {thing.noun}", use_past, count=1)
    ctx["f_his_thing"] = f"{friend.p.his} {thing.noun}"
    chosen = rng.choices(PLOTS, weights=PLOT_WEIGHTS)[0] if plot is None else PLOTS_BY_NAME[plot]
    # a rainy-day story has to start with weather that can still turn to rain
    setting(rng, ctx, weather=rng.choice(chosen.start_weather) if chosen.start_weather else None)
    ctx["When"] = ctx["when"]
    s = Story(rng, ctx, hero)
    tell(s, chosen)
    return s.text()


_QUOTE = re.compile(r'"[^"]*"')
_END = re.compile(r"[.!?](?=\s|$)")


def count_sentences(story: str) -> int:
    """Sentences in ``story``, a quotation and its speech tag counting as one sentence."""
    flat = _QUOTE.sub("Q", story)
    return len(_END.findall(flat)) + flat.count(", Q")


def iter_stories(seed: int = 0, pronouns: Sequence[str] = ("he", "she", "they")) -> Iterator[str]:
    """An endless, deterministic stream of stories for ``seed``."""
    rng = random.Random(seed)
    while True:
        yield make_story(rng, pronouns)


def generate_stories(n: int, seed: int = 0) -> list[str]:
    """The first ``n`` stories of ``iter_stories(seed)``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return list(islice(iter_stories(seed), n))


_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")


def corpus_stats(texts: Iterable[str]) -> dict[str, int]:
    """``stories``, ``words``, ``distinct_words`` (case-folded) and ``bytes`` (UTF-8, stories only)."""
    n = words = nbytes = 0
    vocab: dict[str, None] = {}
    for t in texts:
        n += 1
        nbytes += len(t.encode("utf-8"))
        ws = _WORD.findall(t)
        words += len(ws)
        for w in ws:
            vocab[w.lower()] = None
    return {"stories": n, "words": words, "distinct_words": len(vocab), "bytes": nbytes}


def write_corpus(path: str | os.PathLike[str], n_stories: int, seed: int = 0, separator: str = SEPARATOR) -> int:
    """Write ``n_stories`` stories, each followed by a line holding only ``separator``.

    The file is written to a temporary file in the same folder and moved into
    place with ``os.replace``, so a failed write leaves any old file intact.
    Returns the number of bytes written.
    """
    if n_stories < 0:
        raise ValueError(f"n_stories must be >= 0, got {n_stories}")
    if not separator or "\n" in separator or "\r" in separator:
        raise ValueError("separator must be a non-empty single line")
    total = 0
    with atomic_open(path, "wb") as f:
        tail = f"\n{separator}\n".encode("utf-8")
        for story in islice(iter_stories(seed), n_stories):
            data = story.encode("utf-8") + tail
            f.write(data)
            total += len(data)
    return total
