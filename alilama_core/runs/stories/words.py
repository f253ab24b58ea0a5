"""The word lists every story draws from: its cast, places, things, food, weather, speech verbs and endings.

Each entry was written for Alilama. A list's order is part of the corpus: the
stories pick entries by position, so reordering or inserting an entry changes
every story after the first draw that reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass

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
# (name, pronoun, noun): the grown-ups a story may have
GROWNUPS = [("Mom", "she", "mom"), ("Dad", "he", "dad"), ("Grandma", "she", "grandma"), ("Grandpa", "he", "grandpa")]
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

# fmt: on
