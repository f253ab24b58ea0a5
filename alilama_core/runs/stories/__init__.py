"""Procedural children's stories: Alilama's built-in, offline default corpus.

Every template and word list here was written for this project; nothing is
downloaded. Stories are short (5 to 15 sentences, a few paragraphs), told in
the past tense, with a small cast (people and animals, he/she/they), a place,
the weather, a problem or a wish, an attempt, a turn, a resolution, and
sometimes a moral. Dialogue uses straight double quotes.

``words`` holds the word lists, ``plots`` the nine plots as data (rows to draw
and steps to run), ``steps`` the steps and ``tell``, ``story`` the characters
and the ``Story`` that fills templates, ``corpus`` the stream and the file.

Output depends only on the seed (``random.Random(seed)``; no sets are ever
iterated), so the same seed gives a byte-identical corpus on every machine::

    >>> from alilama_core.runs.stories import generate_stories, corpus_stats
    >>> stories = generate_stories(3, seed=0)
    >>> stories == generate_stories(3, seed=0)
    True
    >>> corpus_stats(stories)["stories"]
    3

The corpus file format is the TinyStories one: each story's text, a newline,
a line holding only ``<|endoftext|>``, and a newline::

    >>> write_corpus("stories.txt", 20_000, seed=0)    # doctest: +SKIP
    12017646

From a shell: ``python -m alilama_core.app.stories out.txt --stories 20000 --seed 0``.
"""

from alilama_core.runs.stories.corpus import (
    MAX_SENTENCES,
    MIN_SENTENCES,
    corpus_stats,
    count_sentences,
    generate_stories,
    iter_stories,
    make_story,
    write_corpus,
)
from alilama_core.runs.stories.plots import PLOT_NAMES, PLOTS
from alilama_core.runs.stories.story import a

__all__ = [
    "MAX_SENTENCES",
    "MIN_SENTENCES",
    "PLOTS",
    "PLOT_NAMES",
    "a",
    "corpus_stats",
    "count_sentences",
    "generate_stories",
    "iter_stories",
    "make_story",
    "write_corpus",
]
