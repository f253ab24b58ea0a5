"""Procedural children's stories: Alilama's built-in, offline default corpus.

Every template and word list below was written for this project; nothing is
downloaded. Stories are short (5 to 15 sentences, a few paragraphs), told in
the past tense, with a small cast (people and animals, he/she/they), a place,
the weather, a problem or a wish, an attempt, a turn, a resolution, and
sometimes a moral. Dialogue uses straight double quotes.

Output depends only on the seed (``random.Random(seed)``; no sets are ever
iterated), so the same seed gives a byte-identical corpus on every machine::

    >>> from alilama_core.app.stories import generate_stories, corpus_stats
    >>> stories = generate_stories(3, seed=0)
    >>> stories == generate_stories(3, seed=0)
    True
    >>> corpus_stats(stories)["stories"]
    3

The corpus file format is the TinyStories one: each story's text, a newline,
a line holding only ``<|endoftext|>``, and a newline::

    >>> write_corpus("stories.txt", 20_000, seed=0)    # doctest: +SKIP
    12018041

From a shell: ``python -m alilama_core.app.stories out.txt --stories 20000 --seed 0``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from alilama_core.base.files import atomic_open
from alilama_core.runs.data import SEPARATOR

# ---------------------------------------------------------------------------
# Data tables
# ---------------------------------------------------------------------------
# Laid out by hand (one entry per line would make the tables ten times longer).
# fmt: off


@dataclass(frozen=True)
class Pronouns:
    he: str
    him: str
    his: str
    was: str


PRONOUNS = {
    "he": Pronouns("he", "him", "his", "was"),
    "she": Pronouns("she", "her", "her", "was"),
    "they": Pronouns("they", "them", "their", "were"),
}
PRONOUN_WEIGHTS = {"he": 4, "she": 4, "they": 1}

NAMES = {
    "he": [
        "Tom", "Ben", "Max", "Leo", "Jack", "Finn", "Omar", "Hugo", "Liam", "Noah",
        "Theo", "Ravi", "Oscar", "Felix", "Arlo", "Kofi", "Milo", "Eli", "Luca", "Ned",
        "Ivan", "Jonah", "Pablo", "Tariq",
    ],
    "she": [
        "Mia", "Lily", "Anna", "Zoe", "Emma", "Lucy", "Ella", "Rosa", "Nina", "Ivy",
        "Ruby", "Maya", "Hana", "Sara", "Amy", "Lena", "Tara", "Jade", "Nora", "Ada",
        "Iris", "Eva", "Priya", "Olga",
    ],
    "they": ["Alex", "Robin", "Kit", "Sky", "Jo", "Remy", "Ash", "Rowan", "Quinn", "Sage", "Eden", "Jules"],
}
CHILD_NOUNS = {"he": ["boy"], "she": ["girl"], "they": ["child", "kid"]}
ANIMAL_NAMES = [
    "Pip", "Bobo", "Nibbles", "Fluffy", "Patch", "Biscuit", "Pepper", "Coco", "Benny",
    "Daisy", "Rosie", "Toby", "Hazel", "Button", "Ziggy", "Sunny", "Maple", "Pudding",
    "Wiggles", "Dot", "Bramble", "Clover", "Puddle", "Socks", "Peanut", "Tumble",
    "Waffles", "Juniper", "Noodle", "Pebble",
]

# (noun, home, how it moves)
ANIMALS = [
    ("fox", "in a den under the hill", "trotted"),
    ("rabbit", "in a cozy burrow", "hopped"),
    ("bunny", "in a burrow under the roots of a tree", "hopped"),
    ("bear cub", "in a big cave", "padded"),
    ("cat", "in a warm house with a kind family", "padded"),
    ("puppy", "in a little house with a red door", "ran"),
    ("kitten", "in a basket by the fire", "scampered"),
    ("duck", "by a quiet pond", "waddled"),
    ("owl", "in a hollow tree", "flew"),
    ("mouse", "in a tiny hole under the stairs", "scurried"),
    ("squirrel", "in a tall oak tree", "scampered"),
    ("frog", "by a green pond", "hopped"),
    ("turtle", "near a slow river", "crawled"),
    ("hedgehog", "under a pile of leaves", "trotted"),
    ("pig", "on a big farm", "trotted"),
    ("goat", "on a rocky hill", "trotted"),
    ("lamb", "on a green farm", "skipped"),
    ("pony", "in a red barn", "trotted"),
    ("elephant", "on a hot, dusty plain", "walked"),
    ("monkey", "in a tall jungle tree", "swung"),
    ("penguin", "on the cold, white ice", "waddled"),
    ("otter", "by a fast river", "slid"),
    ("beaver", "in a lodge on the river", "waddled"),
    ("badger", "in a deep hole in the woods", "trotted"),
    ("deer", "in a quiet forest", "ran"),
    ("lion cub", "on a wide, grassy plain", "padded"),
    ("giraffe", "on a wide, grassy plain", "walked"),
    ("zebra", "on a wide, grassy plain", "trotted"),
    ("hen", "in a little coop", "walked"),
    ("sparrow", "in a nest high in a tree", "flew"),
    ("raccoon", "in the woods behind the town", "scurried"),
    ("koala", "in a tall gum tree", "climbed"),
    ("panda", "in a green bamboo forest", "walked"),
    ("seal", "on a rocky beach", "slid"),
    ("wolf cub", "in a den in the hills", "ran"),
    ("mole", "in a tunnel under the garden", "crawled"),
]
PERSON_HOMES = [
    "in a small house near the sea", "in a blue house on a hill", "in a busy town",
    "in a quiet village", "on a farm with many animals", "in an old house by the river",
    "in a flat above a bakery", "in a little cottage near the woods", "in a yellow house at the end of the road",
    "in a tall building in the city", "in a village between two mountains",
]

# (adjective, relative clause that follows "who")
TRAITS = [
    ("brave", "never ran away from a problem"),
    ("curious", "always wanted to know how things worked"),
    ("kind", "always shared with others"),
    ("shy", "often hid when visitors came"),
    ("clever", "could solve almost any puzzle"),
    ("silly", "made everyone laugh with funny faces"),
    ("gentle", "never stepped on a flower"),
    ("cheerful", "hummed a happy tune all day long"),
    ("careful", "always checked everything twice"),
    ("playful", "loved games more than anything"),
    ("sleepy", "could take a nap almost anywhere"),
    ("busy", "never sat still for long"),
    ("helpful", "liked to help everyone nearby"),
    ("grumpy", "did not smile very often"),
    ("proud", "liked to show off new things"),
    ("quiet", "liked to listen more than talk"),
    ("messy", "left crumbs everywhere"),
    ("noisy", "loved to sing very loudly"),
    ("honest", "always told the truth"),
    ("eager", "always wanted to be first"),
    ("lonely", "wished for more friends"),
    ("tiny", "had very big dreams"),
]
HOBBIES = [
    "play in the mud", "sing songs", "build towers with blocks", "look at the stars",
    "read books about the sea", "dance in the rain", "climb trees", "collect shiny stones",
    "draw pictures of animals", "watch the clouds", "splash in puddles", "count the birds",
    "pick flowers", "run races", "tell jokes", "play hide and seek", "listen to the wind",
    "make up songs", "look for bugs under rocks", "jump in piles of leaves",
]


@dataclass(frozen=True)
class Place:
    name: str          # "park"
    prep: str          # "in" -> "in the park"
    spots: tuple[str, ...]   # where something could hide
    sights: tuple[str, ...]  # what one could see there


PLACES = [
    Place("park", "in", ("under the slide", "behind a bench", "near the swings", "in the sandbox", "under a big tree"),
          ("children playing on the swings", "ducks swimming in the pond", "a man selling ice cream")),
    Place("garden", "in", ("under a big leaf", "behind the flower pots", "next to the carrots", "by the old gate",
                           "under the rose bush"),
          ("bees buzzing around the flowers", "red tomatoes on the vines", "a worm wiggling in the soil")),
    Place("forest", "in", ("under a pile of leaves", "inside a hollow log", "behind an old oak tree", "near a mossy rock",
                           "under a fern"),
          ("tall trees and soft green moss", "a deer drinking from a stream", "mushrooms growing by the path")),
    Place("beach", "at", ("behind a sand castle", "under some seaweed", "near the rock pools", "next to a big shell",
                          "under a striped towel"),
          ("waves rolling onto the sand", "crabs running sideways", "seagulls flying over the water")),
    Place("farm", "on", ("in the barn", "behind the hay", "near the pig pen", "under the tractor", "by the water trough"),
          ("cows eating grass", "a rooster on the fence", "piglets rolling in the mud")),
    Place("meadow", "in", ("in the tall grass", "under a bush", "near a patch of daisies", "behind a fallen log"),
          ("butterflies dancing over the flowers", "rabbits hopping in the grass", "a hawk high in the sky")),
    Place("pond", "by", ("among the reeds", "behind a wet rock", "next to the little bridge", "under a willow tree"),
          ("frogs sitting on lily pads", "ducks swimming in a line", "dragonflies zooming over the water")),
    Place("hill", "on", ("behind a big rock", "in a patch of thistles", "under a thorny bush", "near the top"),
          ("the whole town below", "clouds drifting by", "kites dancing in the sky")),
    Place("playground", "at", ("under the seesaw", "behind the climbing frame", "next to the sandbox", "by the fence"),
          ("children sliding down the slide", "a boy on the monkey bars", "a girl spinning on the roundabout")),
    Place("town square", "in", ("under a bench", "by the fountain", "near the bakery", "behind the flower stall"),
          ("people buying fresh bread", "a clock on a tall tower", "pigeons pecking at crumbs")),
    Place("backyard", "in", ("under the porch", "behind the shed", "in the vegetable patch", "near the fence"),
          ("laundry flapping on the line", "a cat sleeping on the wall", "a robin hopping on the grass")),
    Place("river", "by", ("among the tall reeds", "under the old bridge", "behind a pile of stones", "in a hollow stump"),
          ("fish jumping in the water", "boats floating by", "a heron standing on one leg")),
    Place("orchard", "in", ("under an apple tree", "behind a wooden ladder", "in the long grass", "next to a basket"),
          ("apples hanging from the branches", "birds singing in the trees", "a farmer picking pears")),
]
INDOOR_SPOTS = [
    "under the bed", "behind the sofa", "in the toy box", "under a pile of laundry", "on the kitchen table",
    "behind the curtains", "inside a boot", "under a cushion", "on the top shelf", "in the laundry basket",
]


@dataclass(frozen=True)
class Thing:
    noun: str
    adjs: tuple[str, ...]
    uses: tuple[tuple[str, str], ...]  # (base form, past form) of something to do with it
    outdoor: bool = False


THINGS = [
    Thing("ball", ("red", "blue", "bouncy", "striped", "shiny"),
          (("kick it across the grass", "kicked it across the grass"), ("bounce it high in the air", "bounced it high in the air"),
           ("throw it back and forth", "threw it back and forth"))),
    Thing("kite", ("red", "yellow", "rainbow", "long", "paper"),
          (("fly it high above the trees", "flew it high above the trees"), ("run with it in the wind", "ran with it in the wind")),
          outdoor=True),
    Thing("teddy bear", ("soft", "brown", "old", "fluffy", "little"),
          (("hug it tight", "hugged it tight"), ("take it everywhere", "took it everywhere"))),
    Thing("toy boat", ("little", "wooden", "blue", "red"),
          (("sail it on the pond", "sailed it on the pond"), ("float it in the stream", "floated it in the stream"))),
    Thing("picture book", ("big", "old", "new", "favorite"),
          (("read it from start to finish", "read it from start to finish"), ("look at the pictures", "looked at the pictures"))),
    Thing("drum", ("little", "red", "shiny", "loud"),
          (("play it loudly", "played it loudly"), ("march around with it", "marched around with it"))),
    Thing("hat", ("green", "floppy", "yellow", "warm", "tall"),
          (("wear it all day", "wore it all day"), ("wave it in the air", "waved it in the air"))),
    Thing("scarf", ("long", "woolly", "striped", "purple", "warm"),
          (("wear it all day", "wore it all day"), ("wave it like a flag", "waved it like a flag"))),
    Thing("whistle", ("silver", "little", "shiny", "wooden"),
          (("blow it very loudly", "blew it very loudly"), ("play a tune on it", "played a tune on it"))),
    Thing("toy car", ("red", "fast", "little", "green"),
          (("race it along the path", "raced it along the path"), ("push it up and down the hill", "pushed it up and down the hill"))),
    Thing("yo-yo", ("blue", "shiny", "wooden", "orange"),
          (("spin it up and down", "spun it up and down"), ("do tricks with it", "did tricks with it"))),
    Thing("marble", ("glass", "green", "shiny", "swirly"),
          (("roll it across the floor", "rolled it across the floor"), ("hold it up to the light", "held it up to the light"))),
    Thing("umbrella", ("yellow", "spotty", "big", "red"),
          (("open it in the rain", "opened it in the rain"), ("twirl it around and around", "twirled it around and around")),
          outdoor=True),
    Thing("shell", ("pink", "shiny", "spiky", "smooth"),
          (("hold it up to listen to the sea", "held it up to listen to the sea"), ("show it to everyone", "showed it to everyone"))),
    Thing("toy robot", ("silver", "little", "noisy", "old"),
          (("make it walk and beep", "made it walk and beep"), ("wind it up", "wound it up"))),
    Thing("wagon", ("red", "wooden", "squeaky", "little"),
          (("pull it around the yard", "pulled it around the yard"), ("fill it with leaves", "filled it with leaves")),
          outdoor=True),
    Thing("flute", ("wooden", "silver", "little"),
          (("play a little song on it", "played a little song on it"),)),
    Thing("ukulele", ("small", "wooden", "blue"),
          (("play a happy song on it", "played a happy song on it"),)),
    Thing("bell", ("little", "golden", "silver", "tiny"),
          (("ring it", "rang it"), ("shake it to make music", "shook it to make music"))),
    Thing("toy unicorn", ("white", "sparkly", "soft", "little"),
          (("hug it tight", "hugged it tight"), ("brush its pink mane", "brushed its pink mane"))),
    Thing("blanket", ("soft", "woolly", "patchwork", "blue"),
          (("cuddle up under it", "cuddled up under it"), ("build a fort with it", "built a fort with it"))),
    Thing("box of crayons", ("new", "big", "little"),
          (("draw pictures with it", "drew pictures with it"), ("color a big rainbow", "colored a big rainbow"))),
    Thing("jump rope", ("long", "red", "stripy", "new"),
          (("skip with it", "skipped with it"), ("count the jumps out loud", "counted the jumps out loud")), outdoor=True),
    Thing("puppet", ("funny", "little", "sock", "woolly"),
          (("put on a puppet show", "put on a puppet show"), ("make it talk in a funny voice", "made it talk in a funny voice"))),
]

FOODS = [
    "apple", "orange", "pear", "peach", "plum", "banana", "carrot", "cookie", "muffin", "cupcake",
    "sandwich", "honey cake", "egg", "piece of cheese", "slice of bread", "bowl of berries",
    "ice cream cone", "jam tart", "oat biscuit", "bunch of grapes", "slice of melon",
]
FOOD_ADJS = ["big", "sweet", "fresh", "juicy", "tasty", "warm", "small", "shiny"]
SNACK_TREATS = ["cookies", "muffins", "little cakes", "pancakes", "jam tarts", "honey buns"]

# (season, weather words allowed in it)
SEASONS = {
    "spring": ("sunny", "rainy", "windy", "warm", "bright", "cloudy"),
    "summer": ("sunny", "hot", "warm", "bright", "cloudy"),
    "autumn": ("windy", "rainy", "cool", "cloudy", "foggy", "crisp"),
    "winter": ("snowy", "cold", "frosty", "foggy", "gray"),
}
SEASON_ORDER = ("spring", "summer", "autumn", "winter")
TIMES_OF_DAY = ("morning", "afternoon", "evening")
WEATHER_LINES = {
    "sunny": ("The sun was shining, and the birds were singing.", "The sky was blue, and there was not a cloud in sight.",
              "Warm sunshine made everything sparkle."),
    "rainy": ("Rain was falling, and there were puddles everywhere.", "Gray clouds covered the sky, and rain tapped on the roofs.",
              "It had been raining all night, so the ground was wet and shiny."),
    "windy": ("The wind was blowing the leaves around.", "A strong wind was bending the tall grass.",
              "The wind was so strong that hats flew off people's heads."),
    "warm": ("The air was warm and soft.", "It was a warm day, and the flowers smelled sweet."),
    "bright": ("Everything looked bright and new.", "Bright light shone through the trees."),
    "cloudy": ("Big white clouds drifted across the sky.", "The clouds were thick, but it was not raining."),
    "hot": ("It was so hot that even the dogs lay in the shade.", "The sun was hot, and the ground was dry."),
    "cool": ("The air was cool and fresh.", "A cool breeze came down from the hills."),
    "foggy": ("Thick fog hid the trees and the houses.", "The fog was so thick that everything looked gray and soft."),
    "crisp": ("The air was crisp, and the leaves were red and gold.", "Crunchy leaves covered the ground."),
    "snowy": ("Soft snow was falling on the roofs.", "Snow covered the ground like a white blanket.",
              "Everything was white with fresh snow."),
    "cold": ("It was very cold, and everyone wore warm coats.", "The cold wind made noses turn pink."),
    "frosty": ("Frost made the grass white and crunchy.", "Every window was covered with frost."),
    "gray": ("The sky was gray and low.", "It was a gray and quiet day."),
}
EVENING_LINES = ("The sun was going down, and the sky was pink and gold.", "Long shadows stretched across the ground.")

FEELINGS_GOOD = ["happy", "glad", "proud", "excited", "cheerful"]
FEELINGS_BAD = ["sad", "upset", "worried", "unhappy", "gloomy"]
HAPPY_ACTIONS = ["jumped up and down", "did a little dance", "clapped", "laughed out loud", "smiled from ear to ear",
                 "spun around in a circle"]
SAD_ACTIONS = ["sat down on the ground", "felt a tear roll down", "looked at the ground", "let out a big sigh"]

SAID_PLAIN = ["said", "said", "said", "whispered", "said softly", "said with a smile"]
SAID_REPLY = ["replied", "answered", "said"]
SAID_QUESTION = ["asked", "asked", "asked", "whispered", "asked quietly"]
SAID_EXCLAIM = ["shouted", "cried", "called", "yelled", "exclaimed"]

CONNECTORS_TIME = ["After a while", "Soon", "A little later", "Before long", "After that", "Later that day"]
CONNECTORS_TURN = ["Just then", "Suddenly", "All at once", "At that moment"]

ENDINGS = [
    "From that day on, {h} and {f} were the best of friends.",
    "That night, {h} fell asleep with a big smile.",
    "It was the best day {h} had ever had.",
    "{h} never forgot that {day}.",
    "When the sun went down, {h} walked home feeling warm inside.",
    "{h} and {f} promised to meet again the next {day}.",
    "And every {season} after that, {h} remembered that {day}.",
    "{h} hummed a happy song all the way home.",
]

# ---------------------------------------------------------------------------
# Plot tables
# ---------------------------------------------------------------------------

# Creatures that need help: (description, what the hero first tries, the fix, the thank-you action)
TROUBLES = [
    ("a small kitten stuck high up in a tree", "{h} reached up, but the branch was too high.",
     "{f} held a soft blanket under the tree, and the kitten jumped down into it.", "The kitten purred and rubbed against {h_his} legs."),
    ("a baby bird that had fallen out of its nest", "{h} wanted to help, but the nest was far above {h_his} head.",
     "{f} found a long, flat board, and together they gently lifted the bird back into its nest.", "The mother bird sang a sweet song."),
    ("a little duckling who had lost its mother", "{h} looked all around, but there were no other ducks nearby.",
     "They walked along the water until they heard a loud quack. It was the mother duck!", "The duckling paddled happily after its mother."),
    ("a beetle lying on its back", "{h} did not want to hurt it, so {h_he} did not touch it at first.",
     "{f} held out a leaf, and the beetle grabbed it and turned over.", "The beetle waved its little legs and walked away."),
    ("a puppy with its paw caught under a branch", "{h} pulled the branch, but it was too heavy to move alone.",
     "{h} and {f} pushed together, and the branch rolled away.", "The puppy licked {h_his} face and wagged its tail."),
    ("a tiny snail in the middle of the busy path", "{h} was afraid that someone might step on it.",
     "{f} found a big, wet leaf, and they carried the snail to a safe, shady spot.", "The snail slowly poked out its eyes as if to say thank you."),
    ("a butterfly caught in a spider web", "{h} knew that the wings of a butterfly were very delicate.",
     "{f} held the web still while {h} gently pulled the butterfly free.", "The butterfly flapped its bright wings and flew up into the sky."),
    ("a lost lamb crying by the fence", "{h} called out, but nobody came.",
     "They followed the sound of bells until they found the rest of the flock on the next hill.", "The lamb ran to its mother and bleated happily."),
]

# Things that are hard to learn: (wish, first failure, advice, success)
CHALLENGES = [
    ("climb to the top of the big hill", "Halfway up, {h_his} legs got tired, and {h_he} had to sit down.",
     "Take small steps and rest when you need to.", "Step by step, {h} climbed all the way to the top."),
    ("build the tallest tower of blocks", "The tower wobbled and fell down with a crash.",
     "Put the big blocks at the bottom and the small blocks at the top.", "Block by block, the tower grew taller than ever before."),
    ("learn to whistle", "{h} puffed and puffed, but only air came out.",
     "Make your lips small and round, and blow very gently.", "At last, a clear little whistle came out."),
    ("jump over the stream", "{h} ran and jumped, but {h_he} landed with a splash in the cold water.",
     "Start from further back and look at the other side, not at the water.", "{h} ran fast, jumped high, and landed safely on the other side."),
    ("learn to swim", "{h} kicked {h_his} legs, but {h_he} sank and swallowed some water.",
     "Stretch out your arms and kick slowly, like a frog.", "Slowly and carefully, {h} swam across the pool."),
    ("learn to ride a bike", "The bike wobbled, and {h} fell into a bush.",
     "Look ahead and keep pedaling, and the bike will stay up.", "{h} pedaled and pedaled, and the bike rolled straight down the path."),
    ("bake a cake all alone", "The first cake came out flat and burnt on top.",
     "Read the recipe slowly and watch the clock.", "This time the cake rose up tall and golden."),
    ("catch a fish in the river", "{h} waited and waited, but the fish swam away every time.",
     "Sit very still and be patient.", "After a long wait, {h} felt a tug and pulled out a shiny fish."),
    ("write {h_his} own name", "The letters came out crooked, and some were backwards.",
     "Go slowly and look at each letter before you write it.", "Letter by letter, {h} wrote {h_his} name neatly across the page."),
    ("tie {h_his} own shoes", "The laces got all tangled up in a big knot.",
     "Make two loops, like bunny ears, and cross them over.", "With a little pull, the bow was done."),
]

# Night noises: (what was heard, what it really was)
NIGHT_NOISES = [
    ("a tapping sound at the window", "it was only a branch tapping on the glass in the wind"),
    ("a scratching sound under the bed", "it was only the cat playing with a ball of yarn"),
    ("a long, low hoot outside", "it was only an owl sitting on the fence"),
    ("a creaking sound in the hall", "it was only the old floor creaking as the house cooled down"),
    ("a big, scary shadow on the wall", "it was only the shadow of a coat hanging on the door"),
    ("a rumbling sound far away", "it was only thunder, and the storm was far away"),
    ("a soft thumping in the kitchen", "it was only the dog wagging its tail against the cupboard"),
    ("a whooshing sound in the chimney", "it was only the wind blowing over the roof"),
]

# Rainy-day indoor ideas: (idea in base form, past form, what it made)
INDOOR_IDEAS = [
    ("build a fort out of blankets and chairs", "built a fort out of blankets and chairs", "It was the coziest fort in the whole world."),
    ("bake some {treat}", "baked some {treat}", "The whole house smelled sweet and warm."),
    ("paint pictures of the sunny {place}", "painted pictures of the sunny {place}", "Soon the table was covered with bright pictures."),
    ("put on a puppet show", "put on a puppet show", "They laughed so much that their tummies hurt."),
    ("have a picnic on the living room floor", "had a picnic on the living room floor", "It was almost as good as a real picnic."),
    ("make a tent under the kitchen table", "made a tent under the kitchen table", "They pretended they were camping in the woods."),
    ("play a game of hide and seek in the house", "played a game of hide and seek in the house", "Nobody could find {f} behind the curtains."),
]

# Things that can be made as a gift: (base, past, mishap, fix)
GIFTS = [
    ("draw a picture", "drew a picture", "{h} knocked over a cup of water, and the colors ran together.",
     "{h} turned the wet colors into a beautiful sunset."),
    ("make a card", "made a card", "The wind blew the card right out of {h_his} hands.",
     "{h} chased it across the grass and caught it just in time."),
    ("pick a bunch of flowers", "picked a bunch of flowers", "On the way, the flowers started to droop in the heat.",
     "{h} put them in a jar of cool water, and they stood up straight again."),
    ("bake some cookies", "baked some cookies", "The first cookies were burnt around the edges.",
     "{h} tried again and took them out of the oven just in time."),
    ("make a necklace of shells", "made a necklace of shells", "The string broke, and the shells rolled everywhere.",
     "{h} found every shell and tied them on a stronger string."),
    ("knit a little hat", "knitted a little hat", "The hat came out much too small.",
     "{h} added more rows until it was just right."),
    ("write a song", "wrote a song", "{h} could not think of a word that rhymed with orange.",
     "{h} changed the last line, and the song sounded even better."),
]

# Exploring: (what they found, where it led, the surprise)
DISCOVERIES = [
    ("a row of tiny footprints in the mud", "They followed the footprints past the bushes.",
     "At the end, they found a family of hedgehogs sleeping in a nest of leaves."),
    ("an old map under a stone", "The map showed a path and a big X.",
     "Under the X, there was a box full of shiny buttons and old coins."),
    ("a tiny door at the bottom of a tree", "They knocked on the door three times.",
     "A little mouse opened it and invited them in for a cup of tea."),
    ("a narrow path they had never seen before", "They walked along the path, holding hands.",
     "It led to a hidden pond where the water was as clear as glass."),
    ("a trail of yellow feathers", "They picked up the feathers one by one.",
     "At the end of the trail sat a yellow bird with a brand new nest."),
    ("a big hole under a hedge", "They peeked inside very carefully.",
     "Inside, a mother rabbit was feeding three tiny babies."),
    ("a sound of music coming from the trees", "They tiptoed toward the music.",
     "In a clearing, a group of crickets was singing in the grass."),
]

MORALS = {
    "lost": ["{h} learned to always put {h_his} things away.", "{h} learned that friends make every job easier.",
             "It is always easier to find things when friends help."],
    "friend": ["{h} learned that a new friend is a great gift.", "Saying hello is the first step to a new friendship.",
               "{h} learned that being brave can be as easy as saying hello."],
    "help": ["{h} learned that even small helpers can do big things.", "Helping others makes everyone feel good.",
             "{h} learned that kindness is never wasted."],
    "try": ["{h} learned that it is okay to fail if you keep trying.", "Practice makes things easier, one step at a time.",
            "{h} learned that patience is a kind of magic."],
    "rain": ["{h} learned that a rainy day can be fun too.", "A good idea can turn a bad day into a good one."],
    "share": ["{h} learned that sharing makes fun last longer.", "Taking turns is better than fighting.",
              "{h} and {f} learned that things are better when you share them."],
    "night": ["{h} learned that many scary things are not scary at all.", "It is always good to tell someone when you are scared."],
    "gift": ["{h} learned that the best gifts are made with love.", "A gift does not need to be perfect to be special."],
    "explore": ["{h} learned that there are wonders close to home.", "Adventures are more fun with a friend."],
}

# fmt: on

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


GROWNUPS = [("Mom", "she", "mom"), ("Dad", "he", "dad"), ("Grandma", "she", "grandma"), ("Grandpa", "he", "grandpa")]


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


def ending(s: Story, moral_key: str, avoid: tuple[str, ...] = ()) -> None:
    """One closing sentence, sometimes two: a moral, a happy ending, or both.
    Endings containing any of ``avoid`` are skipped (no second trip home)."""
    r = s.rng.random()
    if r < 0.45:
        s.t(*MORALS[moral_key])
    if r > 0.35:
        s.t(*[e for e in ENDINGS if not any(w in e for w in avoid)])


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def plot_lost(s: Story) -> None:
    """A favorite thing is lost, a friend helps to find it."""
    rng, c = s.rng, s.ctx
    opening(s, s.hero)
    s.t(
        "{h} had brought {h_his} {thing}.",
        "{h} had {a_thing} that {h_he} loved very much.",
        "{h_his} favorite thing in the world was {a_thing}.",
        "{h} had {a_thing}, and {h_he} loved to {use}.",
    )
    s.par()
    s.t(
        "But when it was time to go home, the {thing} was gone.",
        "{After}, {h} looked down, and the {thing} was not there.",
        "When {h} turned around, {h_his} {thing} had disappeared.",
    )
    s.say("h", rng.choice(("Oh no! Where is my {thing}?", "Where did my {thing} go?", "My {thing} is lost!")))
    c["spot1"], c["spot2"], c["spot3"] = rng.sample(c["spots"], 3)
    s.t(
        "{h} looked {spot1}, but it was not there.",
        "First, {h} looked {spot1}. It was not there.",
        "{h} searched {spot1} and {spot2}, but {h_he} could not find it.",
    )
    if rng.random() < 0.3:
        s.feel("h", good=False)
    s.par()
    s.t("{Turn}, {f_intro} came by.", "{Turn}, {h_his} friend {f} came along.", "{Turn}, {h} saw {h_his} friend {f}.")
    if rng.random() < 0.5:
        s.say("f", rng.choice(("Why are you sad, {h}?", "What is wrong?", "What are you looking for?")))
        s.say(
            "h",
            reply=True,
            line=rng.choice(
                ("I lost my {thing}.", "I cannot find my {thing}.", "My {thing} is gone, and I looked everywhere.")
            ),
        )
    else:
        s.say(
            "f",
            rng.choice(
                (
                    "Let's look together.",
                    "Don't worry. Two pairs of eyes are better than one.",
                    "I will help you find it.",
                )
            ),
        )
    s.maybe(
        0.2,
        "They looked {spot2} and {spot1} again.",
        "So they looked together, slowly and carefully.",
        "They searched for almost an hour.",
    )
    s.t(
        "At last, {f} found the {thing} {spot3}!",
        "Then {h} spotted something {spot3}. It was the {thing}!",
        "When {f} looked {spot3}, there was the {thing}!",
    )
    s.par()
    r = rng.random()
    if r < 0.3:
        s.feel("h", good=True)
    elif r < 0.6:
        s.say("h", rng.choice(("Thank you, {f}!", "Thank you for helping me, {f}.", "You are a good friend, {f}.")))
    s.t(
        "Then {h} and {f} {use_past_the} together.",
        "They {use_past_the} until the sun went down.",
        "After that, {h} and {f} {use_past_the}.",
    )
    ending(s, "lost", avoid=("sun went down",))


def plot_friend(s: Story) -> None:
    """A shy hero meets a newcomer."""
    rng = s.rng
    opening(s, s.hero)
    s.par()
    s.t(
        "{Turn}, {h} saw {f_intro} sitting alone {at_place}.",
        "That day, {h} saw {a_new} {at_place}.",
        "{After}, {h} noticed {f_intro} standing all by {f_himself}.",
    )
    s.t(
        "{h} wanted to say hello, but {h_he} felt shy.",
        "{h} did not know what to say, so {h_he} just watched.",
        "{h} wanted to play with the {f_noun}, but {h_he} {h_was} a little nervous.",
    )
    s.maybe(0.6, "The {f_noun} had {a_thing}.", "The {f_noun} was holding {a_thing}.")
    s.par()
    s.t(
        "At last, {h} took a deep breath and walked over.",
        "Then {h} remembered that everyone feels shy sometimes.",
        "{h} counted to three and walked over.",
    )
    s.say(
        "h",
        rng.choice(
            ("Hello! My name is {h}. What is your name?", "Hi! Can I play with you?", "Hello! That is a nice {thing}.")
        ),
    )
    s.say(
        "f",
        reply=True,
        line=rng.choice(
            (
                "My name is {f}. I am new here.",
                "I am {f}. Do you want to play with me?",
                "Thank you! My name is {f}. We just moved here.",
            )
        ),
    )
    s.maybe(
        0.5,
        "{f} smiled, and {h} smiled back.",
        "Soon they were talking and laughing.",
        "{h} and {f} sat down together.",
    )
    s.par()
    s.t(
        "They {use_past_the} together.",
        "Together they {use_past_the}.",
        "First they {use_past_the}, and then they played tag.",
    )
    s.maybe(
        0.4,
        "{f} showed {h} how to {use}.",
        "When {h} fell down, {f} helped {h_him} up.",
        "They shared {a_food} because they were both hungry.",
    )
    if rng.random() < 0.5:
        s.feel("h", good=True)
    ending(s, "friend")


def plot_help(s: Story) -> None:
    """A creature is in trouble; the hero and a friend help it."""
    rng, c = s.rng, s.ctx
    trouble, first_try, fix, thanks = rng.choice(TROUBLES)
    c["trouble"] = trouble
    opening(s, s.hero)
    s.par()
    if rng.random() < 0.5:
        s.t("{Turn}, {h} heard a small cry.", "{After}, {h} heard a strange noise.", "On the way, {h} saw something.")
        s.t("It was {trouble}.", "There was {trouble}.", "{h} looked closer and saw {trouble}.")
    else:
        s.t("{Turn}, {h} saw {trouble}.", "{After}, {h} found {trouble}.", "On the way home, {h} noticed {trouble}.")
    s.say("h", rng.choice(("Don't be scared. I will help you.", "Oh, you poor thing!", "How can I help you?")))
    s.add(first_try)
    s.par()
    s.t("{Turn}, {h_his} friend {f} came by.", "{h} called {h_his} friend {f}.", "Luckily, {f_intro} was nearby.")
    s.maybe(
        0.6,
        '{f} said, "I have an idea!"',
        '"Let\'s help it together," said {f}.',
        '"Don\'t worry, I know what to do," {f} said.',
    )
    s.add(fix)
    s.maybe(0.7, thanks)
    s.par()
    if rng.random() < 0.5:
        s.feel("h", good=True)
    else:
        s.say("h", rng.choice(("We did it!", "Helping feels good.", "Thank you, {f}. I could not do it alone.")))
    ending(s, "help")


def plot_try(s: Story) -> None:
    """The hero wants to learn something hard, fails, gets advice and succeeds."""
    rng, c = s.rng, s.ctx
    wish, fail, advice, success = rng.choice(CHALLENGES)
    c["wish"] = wish.format(**c)
    opening(s, s.hero, at_place=rng.random() < 0.5)
    s.par()
    s.t(
        "{h} wanted to {wish}.",
        "More than anything, {h} wanted to {wish}.",
        "{h} had a big wish. {h_he} wanted to {wish}.",
    )
    s.maybe(
        0.5, '"Today I will {wish}!" shouted {h}.', '"I can do it!" {h} shouted.', '{h} said, "I want to try today."'
    )
    s.add(fail)
    if rng.random() < 0.5:
        s.feel("h", good=False)
    s.par()
    helper = "g" if "g" in c and rng.random() < 0.5 else "f"
    if helper == "g":
        s.t("{h_his} {g_noun} saw {h_him} and came over.", "Then {g} came to see what was wrong.")
    else:
        s.t("{Turn}, {h_his} friend {f} came by.", "{f} saw {h} and came over.")
    s.say(helper, rng.choice(("Don't give up. ", "", "Try again. ")) + advice)
    s.t("{h} nodded and tried again.", "So {h} tried one more time.", "{h} took a deep breath and tried again.")
    s.add(success)
    s.par()
    if rng.random() < 0.5:
        s.say("h", rng.choice(("I did it!", "Look, I did it!", "It worked!")))
    else:
        s.feel("h", good=True)
    s.maybe(0.3, "{h} thanked {" + helper + "} for the good advice.")
    ending(s, "try")


def plot_rain(s: Story) -> None:
    """Rain spoils a plan; an indoor idea saves the day."""
    rng, c = s.rng, s.ctx
    idea_base, idea_past, idea_result = rng.choice(INDOOR_IDEAS)
    c["treat"] = rng.choice(SNACK_TREATS)
    c["idea"] = idea_base.format(**c)
    c["idea_past"] = idea_past.format(**c)
    opening(s, s.hero, at_place=False)
    s.t(
        "{h} and {f} wanted to have a picnic {at_place}.",
        "{h} and {f} planned to play {at_place} all day.",
        "That morning, {h} and {f} got ready to go to the {place}.",
    )
    s.maybe(
        0.5, "They packed {a_food}, {a_food2} and a big blanket.", "{h} packed {a_food}, and {f} brought {f_his_thing}."
    )
    s.par()
    s.t(
        "But just as they opened the door, it began to rain.",
        "But then dark clouds came, and rain poured down.",
        "But when they looked outside, big drops of rain were falling.",
    )
    s.say(
        "h",
        rng.choice(
            ("Now we cannot go outside!", "Oh no! The rain will spoil everything.", "Why does it have to rain today?")
        ),
    )
    if rng.random() < 0.5:
        s.feel("h", good=False)
    s.par()
    s.maybe(0.6, "{f} thought for a moment.", "{f} looked around the room.", "Then {f} had an idea.")
    s.say("f", rng.choice(("Let's {idea}!", "We can {idea} instead.", "Why don't we {idea}?")))
    s.t("So they {idea_past}.", "That is just what they did. They {idea_past}.")
    s.add(idea_result)
    s.par()
    s.t(
        "When the rain stopped, a rainbow appeared in the sky.",
        "Later, the sun came out again.",
        "The rain kept falling, but they did not mind at all.",
    )
    if rng.random() < 0.4:
        s.feel("h", good=True)
    ending(s, "rain")


def plot_share(s: Story) -> None:
    """Two friends want the same thing and learn to take turns."""
    rng, c = s.rng, s.ctx
    opening(s, s.hero)
    s.t("{h} was playing with {h_his} friend {f}.", "{h_his} friend {f} was there too.")
    s.par()
    s.t(
        "Then they both saw {a_adj_thing} lying on the ground.",
        "There was only one {thing}, and they both wanted it.",
        "{f} had {a_adj_thing}, and {h} wanted it too.",
    )
    s.say("h", rng.choice(("It is my turn!", "I want the {thing}!", "Give it to me!")))
    s.say("f", reply=True, line=rng.choice(("No, it is mine!", "I had it first!", "You can have it later.")))
    s.t(
        "They pulled and pulled.",
        "They both grabbed the {thing} at the same time.",
        "{h} pulled one way, and {f} pulled the other way.",
    )
    s.maybe(
        0.6,
        "{Turn}, the {thing} slipped and fell into a puddle.",
        "Soon they were both angry, and nobody was having fun.",
        "The {thing} fell on the ground, and they both started to cry.",
    )
    s.par()
    if "g" in c and rng.random() < 0.5:
        s.maybe(0.5, "{g} came over and knelt down.", "{h_his} {g_noun} heard the noise and came outside.")
        s.say(
            "g",
            rng.choice(
                (
                    "Why don't you take turns?",
                    "If you share, you can both have fun.",
                    "Fighting only makes everyone sad.",
                )
            ),
        )
    else:
        s.maybe(0.5, "{h} looked at {f} and felt sorry.", "{f} wiped {f_his} eyes and thought for a moment.")
        s.say(
            "f",
            rng.choice(("Let's take turns.", "Maybe we can play with it together.", "I am sorry. You can go first.")),
        )
    s.t("So they took turns.", "{h} went first, and then {f} had a turn.", "So they played with it together.")
    s.t("They {use_past}, and it was much more fun.", "Together they {use_past} and laughed.")
    s.par()
    if rng.random() < 0.5:
        s.feel("h", good=True)
    ending(s, "share")


def plot_night(s: Story) -> None:
    """A noise at night turns out to be nothing scary."""
    rng, c = s.rng, s.ctx
    noise, truth = rng.choice(NIGHT_NOISES)
    c["noise"], c["truth"] = noise, truth
    helper = "g" if "g" in c else "f"
    opening(s, s.hero, at_place=False)
    s.t(
        "One night, {h} was lying in bed.",
        "Late one night, {h} could not sleep.",
        "It was late, and everyone was asleep.",
        "That night, {h} went to bed early.",
    )
    s.par()
    s.t("{Turn}, {h} heard {noise}.", "Then {h} heard {noise}.", "In the dark, {h} noticed {noise}.")
    s.maybe(
        0.7,
        "{h} pulled the blanket up to {h_his} nose.",
        "{h_his} heart went thump, thump, thump.",
        "{h} was scared and held {h_his} pillow very tight.",
    )
    s.say("h", rng.choice(("Who is there?", "What was that?", "Is somebody there?")))
    s.par()
    if helper == "g":
        s.t("{h} ran to {h_his} {g_noun}.", "{h} called for {g}.")
        s.say(
            "g",
            rng.choice(
                ("Let's go and look together.", "Don't be afraid. I am here.", "Come, we will find out what it is.")
            ),
        )
    else:
        s.t("{h_his} friend {f} was sleeping over that night.", "{f} was staying over, so {h} woke {f_him} up.")
        s.say(
            "f", rng.choice(("Let's go and look together.", "I will hold the flashlight.", "Two is braver than one."))
        )
    s.maybe(
        0.6,
        "They turned on a lamp and looked.",
        "With a flashlight, they tiptoed to see.",
        "They opened the door very slowly.",
    )
    s.t("It turned out that {truth}.", "They laughed, because {truth}.")
    s.par()
    s.maybe(0.6, "{h} was not scared anymore.", "{h} felt silly and giggled.", "{h} let out a big yawn.")
    s.t(
        "{h} climbed back into bed and closed {h_his} eyes.",
        "Soon {h} was fast asleep.",
        "{h} snuggled under the blanket and fell asleep.",
    )
    s.maybe(0.4, *MORALS["night"])


def plot_gift(s: Story) -> None:
    """The hero makes a present; something goes wrong and gets fixed."""
    rng, c = s.rng, s.ctx
    base, past, mishap, fix = rng.choice(GIFTS)
    c["gift"], c["gift_past"] = base, past
    receiver = "g" if "g" in c and rng.random() < 0.5 else "f"
    c["recv"] = c[receiver]
    c["recv_him"] = c[f"{receiver}_him"]
    c["recv_he"] = c[f"{receiver}_he"]
    c["recv_ref"] = f"{c['h_his']} {c['g_noun']}" if receiver == "g" else f"{c['h_his']} friend {c['f']}"
    opening(s, s.hero, at_place=False)
    s.par()
    s.t(
        "Tomorrow was a special day for {recv_ref}.",
        "It was almost the birthday of {recv_ref}.",
        "{h} wanted to surprise {recv_ref}.",
    )
    s.t(
        "{h} wanted to {gift} for {recv_him}.",
        "{h} decided to {gift} as a present.",
        "{h} had an idea. {h_he} would {gift}!",
        "That afternoon, {h} {gift_past} for {recv_him}.",
    )
    s.add(mishap)
    s.say("h", rng.choice(("Oh no! Now it is ruined.", "What will I do now?", "This is not going well!")))
    s.par()
    s.maybe(0.6, "But {h} did not give up.", "{h} thought hard.", "Then {h} had a new idea.")
    s.add(fix)
    s.maybe(
        0.5, "{h} wrapped the present in paper and tied it with a ribbon.", "{h} hid the present behind {h_his} back."
    )
    s.par()
    s.t("When {recv} saw the gift, {recv_he} smiled.", "{recv} opened the gift very slowly.")
    s.say(
        receiver,
        rng.choice(("This is the best present ever!", "Did you make this for me?", "Thank you, {h}! I love it.")),
    )
    if rng.random() < 0.5:
        s.feel("h", good=True)
    ending(s, "gift")


def plot_explore(s: Story) -> None:
    """Two friends follow a clue and find something wonderful."""
    rng = s.rng
    found, follow, surprise = rng.choice(DISCOVERIES)
    s.ctx["found"] = found
    opening(s, s.hero)
    s.t("{h} and {h_his} friend {f} wanted to explore.", "{f} came along, and they decided to go exploring.")
    s.par()
    s.t("{Turn}, {f} pointed at the ground.", "{After}, {h} stopped.", "Near a bush, they noticed something.")
    s.t("There was {found}.", "They saw {found}.")
    s.say("h", rng.choice(("Look at this!", "What could it be?", "Let's find out where it goes!")))
    s.maybe(
        0.5,
        '"Let\'s be careful," said {f}.',
        '"Come on, let\'s see!" {f} shouted.',
        '{f} whispered, "I am a little scared, but let\'s go."',
    )
    s.add(follow)
    s.add(surprise)
    s.par()
    s.maybe(
        0.6,
        "{h} and {f} watched quietly for a long time.",
        "They could not believe their eyes.",
        "They stayed there until it got late.",
    )
    s.t("Then they walked home, talking about everything they had seen.", "When it began to get dark, they went home.")
    ending(s, "explore", avoid=("home", "sun went down"))


PLOTS = (plot_lost, plot_friend, plot_help, plot_try, plot_rain, plot_share, plot_night, plot_gift, plot_explore)
PLOT_WEIGHTS = (3, 2, 3, 3, 2, 2, 2, 2, 2)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


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
            "f_himself": {"he": "himself", "she": "herself", "they": "themself"}[friend.pronoun],
        }
    )
    ctx["use_past_the"] = re.sub(r"\bit\b", f"the {thing.noun}", use_past, count=1)
    ctx["f_his_thing"] = f"{friend.p.his} {thing.noun}"
    fn = rng.choices(PLOTS, weights=PLOT_WEIGHTS)[0] if plot is None else globals()[f"plot_{plot}"]
    # a rainy-day story has to start with weather that can still turn to rain
    setting(rng, ctx, weather=rng.choice(("sunny", "cloudy", "warm", "bright")) if fn is plot_rain else None)
    ctx["When"] = ctx["when"]
    s = Story(rng, ctx, hero)
    fn(s)
    return s.text()


_QUOTE = re.compile(r'"[^"]*"')
_END = re.compile(r"[.!?](?=\s|$)")


def count_sentences(story: str) -> int:
    """Sentences in ``story``, a quotation and its speech tag counting as one sentence."""
    flat = _QUOTE.sub("Q", story)
    return len(_END.findall(flat)) + flat.count(", Q")


MIN_SENTENCES, MAX_SENTENCES = 5, 15

PLOT_NAMES = tuple(fn.__name__[len("plot_") :] for fn in PLOTS)


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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m alilama_core.app.stories", description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="corpus file to write (omit to print samples)")
    ap.add_argument("--stories", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=3, help="stories to print when no output file is given")
    args = ap.parse_args(argv)
    if args.out is None:
        for story in generate_stories(args.samples, args.seed):
            print(story, SEPARATOR, sep="\n")
        return 0
    t0 = time.perf_counter()
    nbytes = write_corpus(args.out, args.stories, args.seed)
    print(f"wrote {args.stories} stories, {nbytes} bytes to {args.out} in {time.perf_counter() - t0:.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
