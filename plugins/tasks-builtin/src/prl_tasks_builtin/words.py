"""A small fixed vocabulary for procedurally generated tasks (no downloads)."""

WORDS = (
    "apple river stone cloud lamp garden window orange silver forest candle mirror "
    "rocket pepper violin harbor meadow pencil tiger basket marble castle desert "
    "feather ginger hammer island jacket kettle ladder magnet needle olive pirate "
    "quilt rabbit saddle tunnel umbrella valley walnut yellow zebra anchor bridge "
    "copper dragon engine falcon glacier hollow ivory jungle kitten lemon mango "
    "nickel oyster parrot quartz rhythm salmon thunder velvet wizard yogurt amber "
    "bamboo cactus dolphin ember fossil galaxy horizon igloo jasmine koala lantern "
    "maple nectar orbit pebble quiver raven spiral tulip urchin vortex willow"
).split()

NAMES = (
    "Ada Bruno Clara Dmitri Elena Farid Greta Hiro Ines Jonas Kira Liam Mara Nils "
    "Olga Pablo Quinn Rosa Sven Tara Umar Vera Wes Xena Yuki Zane Aria Boris Cora "
    "Dario Esme Felix Gwen Hugo Iris Jude Kai Lena Milo Nora Otto Pia Remy Sage Theo"
).split()
