"""The plots, as data: each a table of rows to draw from and the steps that tell it (``steps.tell``).

Nine plots: something lost and found with a friend's help, a new friend, a
creature in trouble, a hard thing learnt, a rainy day, two friends learning to
share, a noise at night, a handmade present, and a walk that follows a clue.
A row table's order, each step's place and each phrase's position in its
step are part of the corpus (the stories draw by position).
"""

from __future__ import annotations

from alilama_core.runs.stories.steps import (
    PAR,
    Add,
    Branch,
    Cast,
    Ending,
    Feel,
    Maybe,
    Opening,
    Plot,
    Sample,
    Say,
    T,
    chance,
    either,
)
from alilama_core.runs.stories.words import SNACK_TREATS

# Laid out by hand, like the word lists.
# fmt: off

# ---------------------------------------------------------------------------
# Row tables
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

# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------

# A favorite thing is lost, a friend helps to find it.
LOST = Plot("lost", 3, (
    Opening(),
    T("{h} had brought {h_his} {thing}.", "{h} had {a_thing} that {h_he} loved very much.",
      "{h_his} favorite thing in the world was {a_thing}.", "{h} had {a_thing}, and {h_he} loved to {use}."),
    PAR,
    T("But when it was time to go home, the {thing} was gone.", "{After}, {h} looked down, and the {thing} was not there.",
      "When {h} turned around, {h_his} {thing} had disappeared."),
    Say("h", "Oh no! Where is my {thing}?", "Where did my {thing} go?", "My {thing} is lost!"),
    Sample("spots", "spot1", "spot2", "spot3"),
    T("{h} looked {spot1}, but it was not there.", "First, {h} looked {spot1}. It was not there.",
      "{h} searched {spot1} and {spot2}, but {h_he} could not find it."),
    chance(0.3, Feel("h", good=False)),
    PAR,
    T("{Turn}, {f_intro} came by.", "{Turn}, {h_his} friend {f} came along.", "{Turn}, {h} saw {h_his} friend {f}."),
    either(0.5, (
        Say("f", "Why are you sad, {h}?", "What is wrong?", "What are you looking for?"),
        Say("h", "I lost my {thing}.", "I cannot find my {thing}.", "My {thing} is gone, and I looked everywhere.",
            reply=True),
    ), (
        Say("f", "Let's look together.", "Don't worry. Two pairs of eyes are better than one.", "I will help you find it."),
    )),
    Maybe(0.2, "They looked {spot2} and {spot1} again.", "So they looked together, slowly and carefully.",
          "They searched for almost an hour."),
    T("At last, {f} found the {thing} {spot3}!", "Then {h} spotted something {spot3}. It was the {thing}!",
      "When {f} looked {spot3}, there was the {thing}!"),
    PAR,
    Branch((0.3, (Feel("h", good=True),)),
           (0.6, (Say("h", "Thank you, {f}!", "Thank you for helping me, {f}.", "You are a good friend, {f}."),))),
    T("Then {h} and {f} {use_past_the} together.", "They {use_past_the} until the sun went down.",
      "After that, {h} and {f} {use_past_the}."),
    Ending("{h} learned to always put {h_his} things away.", "{h} learned that friends make every job easier.",
           "It is always easier to find things when friends help.", avoid=("sun went down",)),
))

# A shy hero meets a newcomer.
FRIEND = Plot("friend", 2, (
    Opening(),
    PAR,
    T("{Turn}, {h} saw {f_intro} sitting alone {at_place}.", "That day, {h} saw {a_new} {at_place}.",
      "{After}, {h} noticed {f_intro} standing all by {f_himself}."),
    T("{h} wanted to say hello, but {h_he} felt shy.", "{h} did not know what to say, so {h_he} just watched.",
      "{h} wanted to play with the {f_noun}, but {h_he} {h_was} a little nervous."),
    Maybe(0.6, "The {f_noun} had {a_thing}.", "The {f_noun} was holding {a_thing}."),
    PAR,
    T("At last, {h} took a deep breath and walked over.", "Then {h} remembered that everyone feels shy sometimes.",
      "{h} counted to three and walked over."),
    Say("h", "Hello! My name is {h}. What is your name?", "Hi! Can I play with you?", "Hello! That is a nice {thing}."),
    Say("f", "My name is {f}. I am new here.", "I am {f}. Do you want to play with me?",
        "Thank you! My name is {f}. We just moved here.", reply=True),
    Maybe(0.5, "{f} smiled, and {h} smiled back.", "Soon they were talking and laughing.", "{h} and {f} sat down together."),
    PAR,
    T("They {use_past_the} together.", "Together they {use_past_the}.",
      "First they {use_past_the}, and then they played tag."),
    Maybe(0.4, "{f} showed {h} how to {use}.", "When {h} fell down, {f} helped {h_him} up.",
          "They shared {a_food} because they were both hungry."),
    chance(0.5, Feel("h", good=True)),
    Ending("{h} learned that a new friend is a great gift.", "Saying hello is the first step to a new friendship.",
           "{h} learned that being brave can be as easy as saying hello."),
))

# A creature is in trouble; the hero and a friend help it.
HELP = Plot("help", 3, rows=TROUBLES, fields=("trouble", "first_try", "fix", "thanks"), steps=(
    Opening(),
    PAR,
    either(0.5, (
        T("{Turn}, {h} heard a small cry.", "{After}, {h} heard a strange noise.", "On the way, {h} saw something."),
        T("It was {trouble}.", "There was {trouble}.", "{h} looked closer and saw {trouble}."),
    ), (
        T("{Turn}, {h} saw {trouble}.", "{After}, {h} found {trouble}.", "On the way home, {h} noticed {trouble}."),
    )),
    Say("h", "Don't be scared. I will help you.", "Oh, you poor thing!", "How can I help you?"),
    Add("{first_try}"),
    PAR,
    T("{Turn}, {h_his} friend {f} came by.", "{h} called {h_his} friend {f}.", "Luckily, {f_intro} was nearby."),
    Maybe(0.6, '{f} said, "I have an idea!"', '"Let\'s help it together," said {f}.',
          '"Don\'t worry, I know what to do," {f} said.'),
    Add("{fix}"),
    Maybe(0.7, "{thanks}"),
    PAR,
    either(0.5, (Feel("h", good=True),), (
        Say("h", "We did it!", "Helping feels good.", "Thank you, {f}. I could not do it alone."),
    )),
    Ending("{h} learned that even small helpers can do big things.", "Helping others makes everyone feel good.",
           "{h} learned that kindness is never wasted."),
))

# The hero wants to learn something hard, fails, gets advice and succeeds.
TRY = Plot("try", 3, rows=CHALLENGES, fields=("wish", "fail", "advice", "success"), steps=(
    Opening(at_place=0.5),
    PAR,
    T("{h} wanted to {wish}.", "More than anything, {h} wanted to {wish}.", "{h} had a big wish. {h_he} wanted to {wish}."),
    Maybe(0.5, '"Today I will {wish}!" shouted {h}.', '"I can do it!" {h} shouted.', '{h} said, "I want to try today."'),
    Add("{fail}"),
    chance(0.5, Feel("h", good=False)),
    PAR,
    Cast("helper", 0.5,
         g=(T("{h_his} {g_noun} saw {h_him} and came over.", "Then {g} came to see what was wrong."),),
         f=(T("{Turn}, {h_his} friend {f} came by.", "{f} saw {h} and came over."),)),
    Say("helper", "Don't give up. {advice}", "{advice}", "Try again. {advice}"),
    T("{h} nodded and tried again.", "So {h} tried one more time.", "{h} took a deep breath and tried again."),
    Add("{success}"),
    PAR,
    either(0.5, (Say("h", "I did it!", "Look, I did it!", "It worked!"),), (Feel("h", good=True),)),
    Maybe(0.3, "{h} thanked {helper} for the good advice."),
    Ending("{h} learned that it is okay to fail if you keep trying.", "Practice makes things easier, one step at a time.",
           "{h} learned that patience is a kind of magic."),
))

# Rain spoils a plan; an indoor idea saves the day.
RAIN = Plot("rain", 2, rows=INDOOR_IDEAS, fields=("idea", "idea_past", "idea_result"), draws=(("treat", SNACK_TREATS),),
            start_weather=("sunny", "cloudy", "warm", "bright"), steps=(
    Opening(at_place=False),
    T("{h} and {f} wanted to have a picnic {at_place}.", "{h} and {f} planned to play {at_place} all day.",
      "That morning, {h} and {f} got ready to go to the {place}."),
    Maybe(0.5, "They packed {a_food}, {a_food2} and a big blanket.", "{h} packed {a_food}, and {f} brought {f_his_thing}."),
    PAR,
    T("But just as they opened the door, it began to rain.", "But then dark clouds came, and rain poured down.",
      "But when they looked outside, big drops of rain were falling."),
    Say("h", "Now we cannot go outside!", "Oh no! The rain will spoil everything.", "Why does it have to rain today?"),
    chance(0.5, Feel("h", good=False)),
    PAR,
    Maybe(0.6, "{f} thought for a moment.", "{f} looked around the room.", "Then {f} had an idea."),
    Say("f", "Let's {idea}!", "We can {idea} instead.", "Why don't we {idea}?"),
    T("So they {idea_past}.", "That is just what they did. They {idea_past}."),
    Add("{idea_result}"),
    PAR,
    T("When the rain stopped, a rainbow appeared in the sky.", "Later, the sun came out again.",
      "The rain kept falling, but they did not mind at all."),
    chance(0.4, Feel("h", good=True)),
    Ending("{h} learned that a rainy day can be fun too.", "A good idea can turn a bad day into a good one."),
))

# Two friends want the same thing and learn to take turns.
SHARE = Plot("share", 2, (
    Opening(),
    T("{h} was playing with {h_his} friend {f}.", "{h_his} friend {f} was there too."),
    PAR,
    T("Then they both saw {a_adj_thing} lying on the ground.", "There was only one {thing}, and they both wanted it.",
      "{f} had {a_adj_thing}, and {h} wanted it too."),
    Say("h", "It is my turn!", "I want the {thing}!", "Give it to me!"),
    Say("f", "No, it is mine!", "I had it first!", "You can have it later.", reply=True),
    T("They pulled and pulled.", "They both grabbed the {thing} at the same time.",
      "{h} pulled one way, and {f} pulled the other way."),
    Maybe(0.6, "{Turn}, the {thing} slipped and fell into a puddle.",
          "Soon they were both angry, and nobody was having fun.",
          "The {thing} fell on the ground, and they both started to cry."),
    PAR,
    Cast("peacemaker", 0.5, g=(
        Maybe(0.5, "{g} came over and knelt down.", "{h_his} {g_noun} heard the noise and came outside."),
        Say("g", "Why don't you take turns?", "If you share, you can both have fun.", "Fighting only makes everyone sad."),
    ), f=(
        Maybe(0.5, "{h} looked at {f} and felt sorry.", "{f} wiped {f_his} eyes and thought for a moment."),
        Say("f", "Let's take turns.", "Maybe we can play with it together.", "I am sorry. You can go first."),
    )),
    T("So they took turns.", "{h} went first, and then {f} had a turn.", "So they played with it together."),
    T("They {use_past}, and it was much more fun.", "Together they {use_past} and laughed."),
    PAR,
    chance(0.5, Feel("h", good=True)),
    Ending("{h} learned that sharing makes fun last longer.", "Taking turns is better than fighting.",
           "{h} and {f} learned that things are better when you share them."),
))

# A noise at night turns out to be nothing scary.
NIGHT = Plot("night", 2, rows=NIGHT_NOISES, fields=("noise", "truth"), steps=(
    Opening(at_place=False),
    T("One night, {h} was lying in bed.", "Late one night, {h} could not sleep.", "It was late, and everyone was asleep.",
      "That night, {h} went to bed early."),
    PAR,
    T("{Turn}, {h} heard {noise}.", "Then {h} heard {noise}.", "In the dark, {h} noticed {noise}."),
    Maybe(0.7, "{h} pulled the blanket up to {h_his} nose.", "{h_his} heart went thump, thump, thump.",
          "{h} was scared and held {h_his} pillow very tight."),
    Say("h", "Who is there?", "What was that?", "Is somebody there?"),
    PAR,
    Cast("helper", g=(
        T("{h} ran to {h_his} {g_noun}.", "{h} called for {g}."),
        Say("g", "Let's go and look together.", "Don't be afraid. I am here.", "Come, we will find out what it is."),
    ), f=(
        T("{h_his} friend {f} was sleeping over that night.", "{f} was staying over, so {h} woke {f_him} up."),
        Say("f", "Let's go and look together.", "I will hold the flashlight.", "Two is braver than one."),
    )),
    Maybe(0.6, "They turned on a lamp and looked.", "With a flashlight, they tiptoed to see.",
          "They opened the door very slowly."),
    T("It turned out that {truth}.", "They laughed, because {truth}."),
    PAR,
    Maybe(0.6, "{h} was not scared anymore.", "{h} felt silly and giggled.", "{h} let out a big yawn."),
    T("{h} climbed back into bed and closed {h_his} eyes.", "Soon {h} was fast asleep.",
      "{h} snuggled under the blanket and fell asleep."),
    Maybe(0.4, "{h} learned that many scary things are not scary at all.",
          "It is always good to tell someone when you are scared."),
))

# The hero makes a present; something goes wrong and gets fixed.
GIFT = Plot("gift", 2, rows=GIFTS, fields=("gift", "gift_past", "mishap", "fix"), steps=(
    Cast("recv", 0.5),
    Opening(at_place=False),
    PAR,
    T("Tomorrow was a special day for {recv_ref}.", "It was almost the birthday of {recv_ref}.",
      "{h} wanted to surprise {recv_ref}."),
    T("{h} wanted to {gift} for {recv_him}.", "{h} decided to {gift} as a present.", "{h} had an idea. {h_he} would {gift}!",
      "That afternoon, {h} {gift_past} for {recv_him}."),
    Add("{mishap}"),
    Say("h", "Oh no! Now it is ruined.", "What will I do now?", "This is not going well!"),
    PAR,
    Maybe(0.6, "But {h} did not give up.", "{h} thought hard.", "Then {h} had a new idea."),
    Add("{fix}"),
    Maybe(0.5, "{h} wrapped the present in paper and tied it with a ribbon.", "{h} hid the present behind {h_his} back."),
    PAR,
    T("When {recv} saw the gift, {recv_he} smiled.", "{recv} opened the gift very slowly."),
    Say("recv", "This is the best present ever!", "Did you make this for me?", "Thank you, {h}! I love it."),
    chance(0.5, Feel("h", good=True)),
    Ending("{h} learned that the best gifts are made with love.", "A gift does not need to be perfect to be special."),
))

# Two friends follow a clue and find something wonderful.
EXPLORE = Plot("explore", 2, rows=DISCOVERIES, fields=("found", "follow", "surprise"), steps=(
    Opening(),
    T("{h} and {h_his} friend {f} wanted to explore.", "{f} came along, and they decided to go exploring."),
    PAR,
    T("{Turn}, {f} pointed at the ground.", "{After}, {h} stopped.", "Near a bush, they noticed something."),
    T("There was {found}.", "They saw {found}."),
    Say("h", "Look at this!", "What could it be?", "Let's find out where it goes!"),
    Maybe(0.5, '"Let\'s be careful," said {f}.', '"Come on, let\'s see!" {f} shouted.',
          '{f} whispered, "I am a little scared, but let\'s go."'),
    Add("{follow}"),
    Add("{surprise}"),
    PAR,
    Maybe(0.6, "{h} and {f} watched quietly for a long time.", "They could not believe their eyes.",
          "They stayed there until it got late."),
    T("Then they walked home, talking about everything they had seen.", "When it began to get dark, they went home."),
    Ending("{h} learned that there are wonders close to home.", "Adventures are more fun with a friend.",
           avoid=("home", "sun went down")),
))

# fmt: on

PLOTS = (LOST, FRIEND, HELP, TRY, RAIN, SHARE, NIGHT, GIFT, EXPLORE)
PLOT_NAMES = tuple(plot.name for plot in PLOTS)
