"""How a story is put together: articles and capitals, the characters, and ``Story``, which fills templates.

A template is a sentence with ``{slot}`` names (``"{h} lost {h_his} {thing}."``)
filled from the story's context: ``h`` is the hero, ``f`` the friend, ``g`` a
grown-up (when the pronouns allow one), each with ``_he``, ``_him``, ``_his``,
``_was``, ``_noun`` and more beside the name (``Character.slots``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from alilama_core.runs.stories.words import (
    ANIMAL_NAMES,
    ANIMALS,
    CHILD_NOUNS,
    CONNECTORS_TIME,
    CONNECTORS_TURN,
    EVENING_LINES,
    FEELINGS_BAD,
    FEELINGS_GOOD,
    GROWNUPS,
    HAPPY_ACTIONS,
    NAMES,
    PERSON_HOMES,
    PRONOUN_WEIGHTS,
    PRONOUNS,
    SAD_ACTIONS,
    SAID_EXCLAIM,
    SAID_PLAIN,
    SAID_QUESTION,
    SAID_REPLY,
    SEASON_ORDER,
    SEASONS,
    TIMES_OF_DAY,
    TRAITS,
    WEATHER_LINES,
    Pronouns,
)

# ---------------------------------------------------------------------------
# Grammar helpers
# ---------------------------------------------------------------------------

# Words that start with a vowel letter but a consonant sound take "a"; words that
# start with a silent "h" take "an". Checked by prefix, lower case.
A_BEFORE_VOWEL = ("uni", "use", "usu", "uku", "one", "once", "eu", "ewe")
AN_BEFORE_H = ("hour", "honest", "honor", "heir")


def article(phrase: str) -> str:
    """``"a"`` or ``"an"`` for ``phrase`` (by sound, using the exception prefixes above)."""
    w = phrase.lower()
    if w.startswith(AN_BEFORE_H):
        return "an"
    if w.startswith(A_BEFORE_VOWEL):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


def a(phrase: str) -> str:
    """``phrase`` with its indefinite article: ``a("owl") == "an owl"``."""
    return f"{article(phrase)} {phrase}"


_SENTENCE_START = re.compile(r'(^"?|[.!?] )([a-z])')


def cap(text: str) -> str:
    """Capitalise the first letter of every sentence in ``text`` (after an opening quote, if any)."""
    return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), text)


# ---------------------------------------------------------------------------
# Characters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Character:
    name: str
    pronoun: str  # "he" | "she" | "they"
    kind: str  # "person" | "animal" | "grownup"
    noun: str  # "girl", "fox", "mom"
    trait: tuple[str, str]
    home: str
    moves: str = "ran"

    @property
    def p(self) -> Pronouns:
        return PRONOUNS[self.pronoun]

    def intro(self, rng: random.Random) -> str:
        """``a curious little fox named Pip`` and similar."""
        adj = self.trait[0]
        r = rng.random()
        if r < 0.45:
            desc = (
                f"{adj} little {self.noun}"
                if self.noun not in ("kid",) and "cub" not in self.noun
                else f"{adj} {self.noun}"
            )
        elif r < 0.8:
            desc = f"{adj} {self.noun}"
        else:
            desc = f"little {self.noun}" if "cub" not in self.noun else self.noun
        return f"{a(desc)} {rng.choice(('named', 'named', 'called'))} {self.name}"

    def slots(self, key: str) -> dict[str, str]:
        p = self.p
        return {
            key: self.name,
            f"{key}_he": p.he,
            f"{key}_him": p.him,
            f"{key}_his": p.his,
            f"{key}_was": p.was,
            f"{key}_noun": self.noun,
            f"{key}_trait": self.trait[0],
            f"{key}_who": self.trait[1],
            f"{key}_home": self.home,
            f"{key}_moves": self.moves,
        }


def _pick_pronoun(rng: random.Random, allowed: Sequence[str]) -> str:
    weights = [PRONOUN_WEIGHTS[x] for x in allowed]
    return rng.choices(list(allowed), weights=weights)[0]


def make_character(
    rng: random.Random,
    allowed: Sequence[str] = ("he", "she", "they"),
    avoid: Sequence[str] = (),
    kind: str | None = None,
) -> Character:
    """A random child or animal whose pronoun is one of ``allowed`` and whose name is not in ``avoid``."""
    kind = kind or ("person" if rng.random() < 0.5 else "animal")
    pron = _pick_pronoun(rng, allowed)
    trait = rng.choice(TRAITS)
    if kind == "person":
        name = rng.choice([n for n in NAMES[pron] if n not in avoid])
        return Character(name, pron, "person", rng.choice(CHILD_NOUNS[pron]), trait, rng.choice(PERSON_HOMES))
    noun, home, moves = rng.choice(ANIMALS)
    name = rng.choice([n for n in ANIMAL_NAMES if n not in avoid])
    return Character(name, pron, "animal", noun, trait, home, moves)


def make_grownup(rng: random.Random, allowed: Sequence[str]) -> Character | None:
    options = [g for g in GROWNUPS if g[1] in allowed]
    if not options:
        return None
    name, pron, noun = rng.choice(options)
    return Character(name, pron, "grownup", noun, ("kind", "always knew what to do"), "at home")


# ---------------------------------------------------------------------------
# Story builder
# ---------------------------------------------------------------------------


class Story:
    """Collects sentences into paragraphs; fills ``{slot}`` templates from a context."""

    def __init__(self, rng: random.Random, ctx: dict[str, str], hero: Character):
        self.rng = rng
        self.hero = hero
        self.ctx = ctx
        self.paragraphs: list[list[str]] = [[]]

    def add(self, template: str) -> None:
        if "{Turn}" in template:
            self.ctx["Turn"] = self.rng.choice(CONNECTORS_TURN)
        if "{After}" in template:
            self.ctx["After"] = self.rng.choice(CONNECTORS_TIME)
        self.paragraphs[-1].append(cap(template.format(**self.ctx)))

    def t(self, *templates: str) -> None:
        """Add one of ``templates`` at random."""
        self.add(self.rng.choice(templates))

    def maybe(self, prob: float, *templates: str) -> None:
        if self.rng.random() < prob:
            self.t(*templates)

    def par(self) -> None:
        if self.paragraphs[-1]:
            self.paragraphs.append([])

    def say(self, who: str, line: str, reply: bool = False) -> None:
        """Add a line of dialogue spoken by the character in slot ``who`` (``"h"``, ``"f"``, ...).

        The speech verb follows the punctuation (``asked`` for ``?``, ``shouted`` for ``!``;
        ``replied`` only when ``reply``); a statement's final ``.`` becomes ``,`` before
        the tag. The tag uses a pronoun only when the previous sentence named the speaker.
        """
        rng = self.rng
        text = cap(line.format(**self.ctx))
        end = text[-1]
        verbs = SAID_QUESTION if end == "?" else SAID_EXCLAIM if end == "!" else SAID_REPLY if reply else SAID_PLAIN
        verb = rng.choice(verbs)
        name = self.ctx[who]
        pron = self.ctx[f"{who}_he"]
        quoted = text[:-1] + "," if end == "." else text
        prev = self.paragraphs[-1][-1] if self.paragraphs[-1] else ""
        forms = {
            f'"{quoted}" {name} {verb}.': 2,  # "Let's go," Tom said.
            f'{name} {verb.split(" ")[0]}, "{text}"': 2,  # Tom said, "Let's go."
        }
        if " " not in verb:
            forms[f'"{quoted}" {verb} {name}.'] = 4  # "Let's go," said Tom.
        if name in prev:
            forms[f'"{quoted}" {pron} {verb}.'] = 2  # "Let's go," he said.
        self.paragraphs[-1].append(rng.choices(list(forms), weights=list(forms.values()))[0])

    def feel(self, who: str, good: bool) -> None:
        """Add a sentence saying how the character in slot ``who`` felt."""
        rng = self.rng
        feeling = rng.choice(FEELINGS_GOOD if good else FEELINGS_BAD)
        action = rng.choice(HAPPY_ACTIONS if good else SAD_ACTIONS)
        options = [
            f"{{{who}}} felt {feeling}.",
            f"{{{who}}} was so {feeling} that {{{who}_he}} {action}.",
            f"{{{who}}} {action} because {{{who}_he}} {{{who}_was}} {feeling}.",
        ]
        prev = self.paragraphs[-1][-1] if self.paragraphs[-1] else ""
        if self.ctx[who] in prev:  # a pronoun subject only right after the name
            options.append(f"{{{who}_he}} {{{who}_was}} very {feeling}.")
        self.t(*options)

    def text(self) -> str:
        return "\n".join(" ".join(p) for p in self.paragraphs if p)


# ---------------------------------------------------------------------------
# Story parts
# ---------------------------------------------------------------------------


def setting(rng: random.Random, ctx: dict[str, str], *, weather: str | None = None, tod: str | None = None) -> None:
    """Pick a season, a weather that fits it, and a time of day; fill ``season``, ``weather``,
    ``tod``, ``day`` and ``when`` (``one windy morning``) in ``ctx``."""
    season = rng.choice(SEASON_ORDER)
    if weather is not None and weather not in SEASONS[season]:
        season = rng.choice([s for s in SEASON_ORDER if weather in SEASONS[s]])
    ctx["season"] = season
    ctx["weather"] = weather or rng.choice(SEASONS[season])
    ctx["tod"] = tod or rng.choice(TIMES_OF_DAY)
    ctx["day"] = rng.choice(("day", "day", ctx["tod"], f"{season} day"))
    w, t, s = ctx["weather"], ctx["tod"], season
    ctx["when"] = rng.choice(
        (
            f"one {w} {t}",
            f"one {w} {t}",
            f"on a {w} {s} {t}",
            f"early one {s} morning" if t == "morning" else f"late one {s} {t}",
            f"one {w} {s} day",
        )
    )


def weather_line(s: Story) -> None:
    ctx = s.ctx
    if ctx["tod"] == "evening" and ctx["weather"] in ("sunny", "bright", "warm", "hot") and s.rng.random() < 0.6:
        s.t(*EVENING_LINES)
    else:
        s.t(*WEATHER_LINES[ctx["weather"]])


def opening(s: Story, hero: Character, *, at_place: bool = True) -> None:
    """First paragraph, two to four sentences: who, where, when."""
    rng = s.rng
    intro = hero.intro(rng)
    form = rng.random()
    if form < 0.3:
        s.add(
            rng.choice(
                ("Once upon a time, there was {intro}.", "There once was {intro}.", "Long ago, there lived {intro}.")
            ).replace("{intro}", intro)
        )
        s.maybe(
            0.5,
            "{h_he} lived {h_home}.",
            "{h} lived {h_home}.",
            "{h} loved to {hobby}.",
            "{h_he} {h_was} the kind of {h_noun} who {h_who}.",
        )
        if at_place:
            s.t("{When}, {h} went to the {place}.", "{When}, {h} {h_moves} to the {place} to play.")
    elif form < 0.65 and at_place:
        s.add(f"{{When}}, {intro} was playing {{at_place}}.")
        s.maybe(0.5, "{h} was the kind of {h_noun} who {h_who}.", "{h} loved to {hobby}.")
    else:
        s.add(f"{intro[0].upper()}{intro[1:]} lived {{h_home}}.")
        s.maybe(
            0.6,
            "{h_he} {h_was} the kind of {h_noun} who {h_who}.",
            "Every day, {h} liked to {hobby}.",
            "When the weather was nice, {h} loved to {hobby}.",
        )
        if at_place:
            s.t("{When}, {h} went to the {place}.", "{When}, {h} {h_moves} over to the {place}.")
    if rng.random() < 0.4:
        weather_line(s)
    elif rng.random() < 0.15:
        s.t("{h} could see {sight}.", "All around, {h} could see {sight}.")
