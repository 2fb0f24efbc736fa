#!/usr/bin/env python3
"""Generate the research-lite world: a fictional corpus plus multi-hop questions.

Everything here is invented: names are built from syllables, so a pretrained
model cannot know any of the facts and has to look them up with the
environment's `search` and `open` tools.

One world model (people, towns, regions, rivers, mountains, organisations,
artefacts and events, each with typed relations) is generated first. Every
document is then rendered from that model, so every fact is stated the same
way wherever it appears. Questions are compositions of functional relations
("the birthplace of the founder of X"), which gives each one exactly one
answer; the gold hops are the documents of the entities along the chain.

Usage:
    python3 make_world.py [--seed 0] [--out DIR]

Writes corpus.jsonl, train.jsonl and eval.jsonl to DIR (default: the data/
folder next to this script). Output is a pure function of --seed and of the
text of this file (generated names avoid every word written here, so editing
even a comment can rename entities): no clock, no environment, no hash-order
dependence. Python 3.11, standard library only. All self-checks run on every
generation; a failed check aborts before anything is written.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

# ---------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------

# (core, distractor) entity counts per type. Core entities are the ones that
# questions are built from; distractors are entities with the same roles that
# no question ever touches. They make up about a fifth of the corpus.
COUNTS = {
    "region": (10, 0),
    "mountain": (18, 4),
    "river": (16, 2),
    "city": (64, 14),
    "person": (180, 48),
    "org": (70, 20),
    "artefact": (60, 16),
    "event": (62, 16),
}

QUESTIONS_PER_HOP = {"train": 90, "eval": 30}
EVAL_START_FRACTION = 0.25  # share of core entities reserved as eval question starts
MIN_WORDS, MAX_WORDS = 60, 180
TOP_K = 3  # a gold doc must rank within the top TOP_K for its gold query
BM25_K1, BM25_B = 1.2, 0.75

# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

ONSETS = "b d f g h k l m n p r s t v z th br dr gr kr tr st sk".split() + ["", "", ""]
VOWELS = "a e i o u a e o a i ae ei y".split()
CODAS = ["", "", "", "", "", "n", "r", "l", "s", "m", "th", "st", "nd", "rn", "k", "x"]

PLACE_SUFFIXES = ["holt", "mar", "vik", "dun", "stad", "mere", "gard", "thal", "lin", "wen", "brek", "moor"]
REGION_SUFFIXES = ["ia", "mark", "and", "ane", "eth", "oria", "avy", "ene"]

# Invented words that turned out to be real words (in English or another
# language), real places or common names, found by checking the names of many
# seeds against a word list. Generated words matching one are rejected.
BLOCKLIST = set(
    """
    abel adam ada adrian agra ala alan alba alma amen amend ana anna ares aria arid
    arno aron arson aster astra avon baden bali banda bandit baron basil bask bast
    bath bela bern besom beta bias bios bora boron brand bravo brest bria brim brin
    brio brisk bristol broad broth brun bruno daman dana dandy daren darn dart debt
    delft delta demo denver derma devon diana dido dinar dino dior dirk disk diva
    dogma doha dolma doma domain dora dorm draft drama drat dread dream drest drum
    dublin duma dumas eden edith egret eider elba elan elgin elm elsa emir emma
    enid enrol erin eris ernst essen etna ethan eva evan farm farad fargo faro fast
    fatal fend fern fest fetal feta fiat fido final firth fiona fist flora frond
    gala gamma gander garden garland gaston gem genoa gent gerda gill gilda gilt
    gimbal gist goa gold golem gorgon grand grant gravel grind grist groan haven
    havana hand harem harm harness hart hasten heron herod hilda himalaya hind
    hint holm homer honda horn hosta hydra ilia inca india indra ion iris irma
    isis islam istanbul ivan ivanhoe kali karma kent kilt kind kiosk kira kirov
    kismet koala kobe kona kors krill lamb lana land lander lara larva laser lasso
    lava leda lemon lena leon lesson levi lima linda lint lisa lista lodestar
    lord lorna lotus luna lusk lydia madras magma malta mamba mana manna maori
    mara margin maria mars martin maser mast mata maya medina melba melon menad
    mend mesa meta milan mild mina mind minor mint miso mist moira mona monad mono
    moran morn moron morsel mosel motor mural nadir nana nara natal navel nemo
    nero nest nevada nina nirvana nomad nora norm nova oasis odin oman omen omega
    opal opera orbit orca oslo otto ova oval pasta pastel patron pedal penal
    pima pinta pisa plasma polka pondo porto praxis prism prost pyre rabbi radar
    rami ramp rand randall rasta raven reno resin rhine riga rind rinse roma roman
    romeo rosa rumba sabre saga saint salem salon salsa salvo samba sand sandal
    santa sara saran satin saturn sedan senna serum seth siena sierra silva sima
    sinead sitar skald skid skim skirt slav soda sofa sola solar sonata sonar
    stand starve stern stoma strand stint sultan sumo tabor tahoe talon tamil
    tampa tandem tanda tara taro tarot tempo tenor terra thames thor thorn tiber
    tina tirana toga tokyo tomb tonga torah torso tosca trend trim trio troth
    tundra turin ulster ultra umbra vandal vanda vase vasa venom vera verona vesta
    veto vida vienna vila villa vista viva vodka volga volta vulcan xerox yoga
    yukon zara zebra zeta zorn
    these there param einval hamel paste datum story modra tradu nasty breve etest mende
    kodak endast ranma epath visar drake zosta stato takri lasti hanson binom berkas
    trevi lunar trove krovak maxmind dinfo metro saner valin heine geral merlin pathe
    dataend binar arten hubarn masao lendar nemen trandom fatha ohorn tarde breno pasto
    sister grava sizer patra makro ryzen erdal lenir reiser sotho nolan anpath musta
    nagra daebe heiner belma stora grader fisel patak fondo volte sasha helin trustad
    hanwen polin ustom pasre napis tantos andes marka basak karan haves tomar samym
    petro iltin diger girlin dalvik landa arbol stole meste borel mykind falhas ganda
    dogri grobe beldi suren taker mubin pesky leidel drove kovar durand mimom tende
    teste sohom kamal baena tride tugra marge mindex sidik dolak poten levom lamak salta
    tirin rathi grado sarath mudando morty skate trata gowen hilko broman thorne horel
    rater mawen bande givon kronos folta reina mathi biter kuska grafo labrys karta
    grape valde skasal arwen diver nuwen basta patha arver golda lethal asgard anoth
    gaeta viral ather makra kragen atone stoke detox muses ogres bombo trama taher
    nitros kaththy bystand stide urtest portom
    favor infer anand arith kristho forma sobre fazer likes estas serem drole votre therein
    mises groves engel gamla deras sonra nelem timere meros korte tomei dinge otarn limpa
    levar besti skala fabae vokal heval oskar pytho stokhos mobil pyste komar sushi kobras
    perex agust firma fisend zirak valer kabir stalin numvar lingard torun feite geholt
    ragan lorlist iland samar paves ratha bolmo palkan drugi helas drane asind skoda gasta
    asmar abrir lesta maesi tomis zodra dalath bizon muden minal pusta maler dosum meily
    listarn bybin fopin parin emond dumpa gadal katrin irand drevo tresu molex maska krane
    nostar ilarn akmuk harle estad metres listad kapan brana agren thevas gidra mexhost
    maran logen unpar seron tolen trapa
    grote letra sisir solal vidir
    varis krasna rokok vasta kroko tralal nanan kentar
    """.split()
)


class Namer:
    """Hands out invented words, never the same word twice."""

    def __init__(self, rng: random.Random, reserved: set[str]):
        self.rng = rng
        self.used: set[str] = set()
        self.reserved = reserved  # lowercase words used by the templates

    def _syllable(self, first: bool) -> str:
        onset = self.rng.choice(ONSETS)
        if not first and onset == "":
            onset = self.rng.choice(["l", "r", "n", "m", "v", "d", "s", "th", "k"])
        return onset + self.rng.choice(VOWELS) + self.rng.choice(CODAS)

    def _ok(self, w: str) -> bool:
        lw = w.lower()
        if not 5 <= len(lw) <= 9:
            return False
        flat = lw.replace("th", "0")  # count "th" as one consonant
        if re.search(r"[^aeiouy]{3}", flat) or re.search(r"[aeiouy]{3}", lw):
            return False
        if re.search(r"(.)\1", lw) or re.search(r"(ae|ei|y)[aeiou]", lw):
            return False
        if lw.count("y") + lw.count("x") > 1 or lw.startswith("y"):
            return False
        if lw.endswith(("v", "h")) and not lw.endswith("th"):
            return False
        if lw in BLOCKLIST or lw in self.reserved or lw in self.used:
            return False
        # Keep words far apart so that no name is a prefix of another name.
        if any(lw.startswith(u) or u.startswith(lw) for u in self.used):
            return False
        return True

    def word(self, style: str) -> str:
        for _ in range(10000):
            if style == "given":
                w = self._syllable(True) + self._syllable(False)
                if self.rng.random() < 0.4:
                    w += self.rng.choice(["a", "in", "el", "is", "o", "e", "an"])
            elif style == "surname":
                n = self.rng.choice([2, 2, 3])
                w = "".join(self._syllable(i == 0) for i in range(n))
            elif style == "place":
                w = self._syllable(True) + self.rng.choice(PLACE_SUFFIXES)
                if self.rng.random() < 0.35:
                    w = self._syllable(True) + self._syllable(False)
            elif style == "region":
                w = self._syllable(True) + self._syllable(False) + self.rng.choice(REGION_SUFFIXES)
            else:
                w = self._syllable(True) + self._syllable(False)
            w = w.capitalize()
            if self._ok(w):
                self.used.add(w.lower())
                return w
        raise RuntimeError("ran out of names")


# ---------------------------------------------------------------------------
# Vocabulary used by the templates
# ---------------------------------------------------------------------------

OCCUPATIONS = [
    "cartographer", "glassmaker", "astronomer", "physician", "engineer", "merchant",
    "poet", "surveyor", "clockmaker", "architect", "navigator", "botanist",
    "bellfounder", "printer", "mathematician", "jurist", "composer", "mason",
    "scholar", "explorer",
]
PERSON_ADJ = ["noted", "itinerant", "celebrated", "self-taught", "prolific", "respected"]
TOPICS = [
    "the grinding of lenses", "river navigation", "the measurement of time",
    "dyes and mordants", "the keeping of accounts", "the care of orchards",
    "the surveying of boundaries", "bell casting", "the motions of the planets",
    "the medicinal use of herbs", "the drainage of marshes", "the tuning of organs",
]
TRAITS = [
    "patient", "exacting", "quarrelsome", "generous", "reserved", "ambitious",
    "meticulous", "restless", "witty", "devout", "cautious", "stubborn",
]
MEDIA = ["oils", "charcoal", "tempera", "silverpoint"]

CITY_KINDS = ["town", "city", "market town", "river port", "walled town", "cathedral town"]
CITY_ORIGINS = [
    " as a ferry crossing", " around a salt spring", " as a fortified camp",
    " beside an older fishing village", " as a toll station", " around a monastery",
    " as a mining settlement", " at a ford used by drovers",
]
TRADES = [
    "wool", "salt", "amber", "copper", "timber", "glass", "leather", "cheese",
    "wine", "tin", "pottery", "linen", "rope", "honey", "paper",
]
LANDMARKS = [
    "a covered market hall", "a stone bridge of seven arches", "a tall clock tower",
    "its painted town gates", "a long riverside quay", "a hilltop citadel",
    "a walled botanical garden", "a circular council chamber", "a row of old granaries",
]
STONES = ["grey limestone", "red sandstone", "dark basalt", "pale granite", "brick and timber"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

BOATS = ["flat-bottomed barges", "small sailing craft", "timber rafts", "shallow ferries"]
RIVER_LANDS = ["narrow wooded gorges", "broad water meadows", "reed marshes", "terraced vineyards", "open heath"]
FISH = ["trout", "eels", "pike", "salmon", "perch"]

VEGETATION = ["pine forest", "juniper scrub", "high meadows", "bare scree", "birch woods"]

LANDSCAPES = [
    "rolling hills and river valleys", "high moorland", "forested uplands",
    "fertile lowlands", "lakes and marshes", "wide grassy plains", "steep valleys and ridges",
]
CLIMATES = ["mild and wet", "cold in winter and dry in summer", "temperate", "windy and changeable"]
CROPS = ["barley and flax", "rye and turnips", "grapes and olives", "oats and hops", "apples and pears"]
HERDS = ["sheep", "goats", "cattle", "horses"]

ORG_KINDS = {
    "guild": ["Guild"],
    "company": ["Company", "Trading House"],
    "school": ["School", "Academy", "College"],
}
CRAFTS = ["glassmakers", "weavers", "bellfounders", "clockmakers", "dyers", "masons", "printers", "tanners", "ropemakers", "coopers"]
GOODS = ["amber", "salt", "timber", "wool", "copper", "furs", "wine", "tin", "dried fish", "silk"]
SUBJECTS = ["navigation", "medicine", "law", "astronomy", "music", "surveying", "rhetoric", "mathematics", "botany", "architecture"]

OBJECTS = [
    "Astrolabe", "Orrery", "Loom", "Clock", "Lens", "Compass", "Press", "Lantern",
    "Sextant", "Telescope", "Pump", "Barometer", "Kiln", "Quadrant", "Bellows", "Sundial",
]
MATERIALS = {
    "Astrolabe": ["brass", "bronze", "silver"], "Orrery": ["brass", "bronze", "walnut"],
    "Loom": ["oak", "walnut", "pearwood"], "Clock": ["brass", "iron", "walnut"],
    "Lens": ["glass", "rock crystal"], "Compass": ["brass", "silver", "bronze"],
    "Press": ["oak", "iron"], "Lantern": ["brass", "copper", "tin"],
    "Sextant": ["brass", "bronze"], "Telescope": ["brass", "walnut"],
    "Pump": ["bronze", "iron", "copper"], "Barometer": ["glass and brass", "walnut and glass"],
    "Kiln": ["brick", "clay", "stone"], "Quadrant": ["brass", "pearwood"],
    "Bellows": ["leather and oak", "leather and walnut"], "Sundial": ["bronze", "slate", "marble"],
}
DISPLAYS = [
    "the town museum", "a glass case in the council hall", "the library of a local school",
    "a chapel treasury", "the old customs house",
]

EVENT_KINDS = {
    "siege": ["Siege"],
    "festival": ["Festival", "Fair"],
    "accord": ["Accord", "Compact", "Treaty"],
    "expedition": ["Expedition"],
}
DURATIONS = ["several weeks", "nearly a year", "three months", "a single winter", "two summers"]
FEST_ACTS = [
    "processions, music and a boat race", "a horse fair and wrestling contests",
    "lantern parades and dancing", "a cheese market and singing competitions",
    "archery contests and a night market",
]
SEASONS = ["early spring", "midsummer", "late autumn", "the first week of winter", "the harvest season"]
ACCORD_TOPICS = ["river tolls", "grazing rights", "trade routes", "fishing waters", "border markers", "timber rights"]


def template_vocabulary() -> set[str]:
    """Every lowercase word written in this script (templates, filler sentences,
    vocabulary lists). Generated names must not collide with any of them."""
    return set(re.findall(r"[a-z]+", Path(__file__).read_text(encoding="utf-8").lower()))


# ---------------------------------------------------------------------------
# World model
# ---------------------------------------------------------------------------


class Entity:
    __slots__ = ("key", "type", "name", "article", "core", "a", "doc_id", "words")

    def __init__(self, key: str, etype: str, name: str, article: bool, core: bool, words: list[str]):
        self.key = key
        self.type = etype
        self.name = name  # as the answer is written, e.g. "Ildren River"
        self.article = article  # referred to as "the Ildren River"
        self.core = core
        self.a: dict = {}
        self.doc_id = ""
        self.words = words  # the invented words in the name

    @property
    def ref(self) -> str:
        return ("the " if self.article else "") + self.name


def build_world(rng: random.Random) -> dict[str, list[Entity]]:
    namer = Namer(rng, template_vocabulary())
    W: dict[str, list[Entity]] = {t: [] for t in COUNTS}

    def make(etype: str, core: bool, idx: int) -> Entity:
        key = f"{etype}:{'c' if core else 'x'}{idx}"
        if etype == "person":
            g, s = namer.word("given"), namer.word("surname")
            return Entity(key, etype, f"{g} {s}", False, core, [g, s])
        if etype == "city":
            w = namer.word("place")
            return Entity(key, etype, w, False, core, [w])
        if etype == "region":
            w = namer.word("region")
            return Entity(key, etype, w, False, core, [w])
        if etype == "river":
            w = namer.word("plain")
            return Entity(key, etype, f"{w} River", True, core, [w])
        if etype == "mountain":
            w = namer.word("plain")
            return Entity(key, etype, f"{w} {rng.choice(['Peak', 'Fell', 'Spire', 'Crag'])}", False, core, [w])
        if etype == "org":
            w = namer.word("plain")
            kind = rng.choice(sorted(ORG_KINDS))
            e = Entity(key, etype, f"{w} {rng.choice(ORG_KINDS[kind])}", True, core, [w])
            e.a["kind"] = kind
            return e
        if etype == "artefact":
            w = namer.word("plain")
            obj = rng.choice(OBJECTS)
            e = Entity(key, etype, f"{w} {obj}", True, core, [w])
            e.a["object"] = obj.lower()
            return e
        if etype == "event":
            w = namer.word("plain")
            kind = rng.choice(sorted(EVENT_KINDS))
            e = Entity(key, etype, f"{w} {rng.choice(EVENT_KINDS[kind])}", True, core, [w])
            e.a["kind"] = kind
            return e
        raise ValueError(etype)

    for etype, (n_core, n_dis) in COUNTS.items():
        for i in range(n_core):
            W[etype].append(make(etype, True, i))
        for i in range(n_dis):
            W[etype].append(make(etype, False, i))

    def core(t: str) -> list[Entity]:
        return [e for e in W[t] if e.core]

    regions = W["region"]
    for g in regions:
        g.a.update(landscape=rng.choice(LANDSCAPES), climate=rng.choice(CLIMATES),
                   crops=rng.choice(CROPS), herds=rng.choice(HERDS))

    # Mountains: every region gets at least one core mountain; heights unique
    # and above any year, so a height never reads as a date.
    heights = rng.sample(range(1700, 4400), len(W["mountain"]))
    for i, m in enumerate(W["mountain"]):
        m.a["region"] = regions[i] if (m.core and i < len(regions)) else rng.choice(regions)
        m.a["height"] = heights[i]
        m.a["vegetation"] = rng.choice(VEGETATION)

    # Rivers: flow through 1-3 regions, rise on a mountain of the first one.
    for i, r in enumerate(W["river"]):
        first = regions[i] if (r.core and i < len(regions)) else rng.choice(regions)
        others = [g for g in regions if g is not first]
        r.a["regions"] = [first] + rng.sample(others, rng.choice([0, 1, 1, 2]))
        pool = [m for m in W["mountain"] if m.a["region"] is first and (m.core or not r.core)]
        r.a["source"] = rng.choice(pool)
        r.a["length"] = rng.randint(40, 290)
        r.a.update(boats=rng.choice(BOATS), land=rng.choice(RIVER_LANDS), fish=rng.choice(FISH))

    # Cities: every region gets at least one core city; a city stands on a
    # river that flows through its region.
    for i, c in enumerate(W["city"]):
        g = regions[i] if (c.core and i < len(regions)) else rng.choice(regions)
        rivers = [r for r in W["river"] if g in r.a["regions"] and (r.core or not c.core)]
        c.a.update(region=g, river=rng.choice(rivers), founded=rng.randint(300, 950),
                   kind=rng.choice(CITY_KINDS), origin=rng.choice(CITY_ORIGINS),
                   trades=rng.sample(TRADES, 2), landmark=rng.choice(LANDMARKS),
                   stone=rng.choice(STONES), day=rng.choice(WEEKDAYS), seat_of=None)
    for g in regions:
        seat = next(c for c in core("city") if c.a["region"] is g)
        g.a["seat"] = seat
        seat.a["seat_of"] = g
        in_region = [m for m in W["mountain"] if m.a["region"] is g]
        g.a["highest"] = max(in_region, key=lambda m: m.a["height"])
        g.a["rivers"] = [r for r in W["river"] if g in r.a["regions"]]
    for r in W["river"]:
        r.a["cities"] = [c for c in W["city"] if c.a["river"] is r]

    # People, oldest first; a mentor is 15-45 years older than the pupil.
    people = W["person"]
    for p in people:
        city_pool = core("city") if p.core else W["city"]
        p.a.update(born=rng.randint(1000, 1450), birthplace=rng.choice(city_pool),
                   occupation=rng.choice(OCCUPATIONS), adj=rng.choice(PERSON_ADJ),
                   topic=rng.choice(TOPICS), traits=rng.sample(TRAITS, 2),
                   medium=rng.choice(MEDIA), mentor=None, works=[], ascents=[])
    by_age = sorted(people, key=lambda p: (p.a["born"], p.key))
    for p in by_age:
        pool = [q for q in people if 15 <= p.a["born"] - q.a["born"] <= 45 and (q.core or not p.core)]
        if pool and rng.random() < (0.75 if p.core else 0.6):
            p.a["mentor"] = rng.choice(pool)

    def pick_person(core_only: bool) -> Entity:
        pool = [p for p in people if p.core == core_only and len(p.a["works"]) < 2]
        return rng.choice(pool)

    for o in W["org"]:
        f = pick_person(o.core)
        f.a["works"].append(o)
        city_pool = core("city") if o.core else W["city"]
        o.a.update(founder=f, hq=rng.choice(city_pool), founded=f.a["born"] + rng.randint(22, 60),
                   craft=rng.choice(CRAFTS), goods=rng.choice(GOODS), subject=rng.choice(SUBJECTS))
    for art in W["artefact"]:
        inv = pick_person(art.core)
        inv.a["works"].append(art)
        city_pool = core("city") if art.core else W["city"]
        art.a.update(inventor=inv, kept=rng.choice(city_pool), year=inv.a["born"] + rng.randint(20, 60),
                     material=rng.choice(MATERIALS[art.a["object"].capitalize()]), display=rng.choice(DISPLAYS))
    for ev in W["event"]:
        lead = pick_person(ev.core)
        lead.a["works"].append(ev)
        city_pool = core("city") if ev.core else W["city"]
        ev.a.update(leader=lead, location=rng.choice(city_pool), year=lead.a["born"] + rng.randint(20, 55),
                    duration=rng.choice(DURATIONS), acts=rng.choice(FEST_ACTS), season=rng.choice(SEASONS),
                    topic=rng.choice(ACCORD_TOPICS), outcome=rng.random() < 0.5)
    for m in W["mountain"]:
        m.a["climber"] = None
        if rng.random() < 0.6:
            pool = [p for p in people if p.core == m.core and not p.a["ascents"]]
            cl = rng.choice(pool)
            cl.a["ascents"].append(m)
            m.a["climber"] = cl
            m.a["ascent"] = cl.a["born"] + rng.randint(18, 45)

    # Death years come last so that they follow every dated act of a life,
    # and a mentor outlives the start of each pupil's training.
    pupils = defaultdict(list)
    for p in people:
        if p.a["mentor"] is not None:
            pupils[p.a["mentor"].key].append(p)
    for p in people:
        acts = [p.a["born"] + rng.randint(45, 80)]
        for w in p.a["works"]:
            acts.append((w.a.get("founded") or w.a.get("year")) + rng.randint(1, 12))
        for m in p.a["ascents"]:
            acts.append(m.a["ascent"] + rng.randint(1, 12))
        for q in pupils[p.key]:
            acts.append(q.a["born"] + rng.randint(16, 25))
        p.a["died"] = max(acts)
    return W


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def and_list(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def fill(rng: random.Random, parts: list[str], fillers: list[str], lo: int) -> str:
    """Add filler sentences (in a random order) until the text has lo words."""
    fillers = list(fillers)
    rng.shuffle(fillers)
    target = rng.randint(lo, lo + 30)
    while fillers and len(" ".join(parts).split()) < target:
        parts.append(fillers.pop())
    return " ".join(parts)


def person_doc(rng: random.Random, p: Entity) -> str:
    a = p.a
    sur = p.words[1]
    city = a["birthplace"].name
    an = "an" if a["adj"][0] in "aeiou" else "a"
    if rng.random() < 0.5:
        parts = [f"{p.name} was {an} {a['adj']} {a['occupation']} born in {city} in {a['born']}.",
                 f"{sur} died in {a['died']}."]
    else:
        parts = [f"{p.name} ({a['born']}\u2013{a['died']}) was {an} {a['adj']} {a['occupation']}.",
                 f"{sur} was born in {city}."]
    m = a["mentor"]
    if m is not None:
        parts.append(rng.choice([
            f"As a young {a['occupation']}, {sur} trained under {m.name}, who remained {sur}'s mentor for many years.",
            f"{sur} was a pupil of {m.name}, the mentor who shaped {sur}'s early work.",
            f"{sur}'s mentor was {m.name}, under whom {sur} studied for several years.",
        ]))
    else:
        parts.append(f"Little is recorded of {sur}'s early teachers.")
    for w in a["works"]:
        if w.type == "org":
            parts.append(rng.choice([f"{sur} founded {w.ref}.", f"{sur} was the founder of {w.ref}."]))
        elif w.type == "artefact":
            parts.append(rng.choice([f"{sur} is credited with inventing {w.ref}.", f"{sur} invented {w.ref}."]))
        elif w.a["kind"] == "siege":
            parts.append(f"{sur} commanded {w.ref}.")
        elif w.a["kind"] == "festival":
            parts.append(f"{sur} established {w.ref}.")
        elif w.a["kind"] == "accord":
            parts.append(f"{sur} brokered {w.ref}.")
        else:
            parts.append(f"{sur} led {w.ref}.")
    for mt in a["ascents"]:
        parts.append(f"{sur} made the first ascent of {mt.name}.")
    t1, t2 = a["traits"]
    fillers = [
        f"{sur} wrote a short treatise on {a['topic']} that circulated in manuscript.",
        f"Contemporaries described {sur} as {t1} and {t2}.",
        f"Several letters written by {sur} survive in private archives.",
        f"{sur} spent some years travelling as a journeyman before settling down.",
        f"A portrait of {sur} in {a['medium']} hung for many years in a guildhall.",
        f"Later chroniclers compiled accounts of {sur}'s life and work.",
        f"In later life {sur} took on apprentices and taught {a['topic']}.",
    ]
    return fill(rng, parts, fillers, 70)


def city_doc(rng: random.Random, c: Entity) -> str:
    a = c.a
    n = c.name
    parts = [f"{n} is a {a['kind']} in {a['region'].name}, on {a['river'].ref}.",
             f"{n} was founded in {a['founded']}{a['origin']}."]
    if a["seat_of"] is not None:
        parts.append(f"{n} is the seat of {a['seat_of'].name}.")
    t1, t2 = a["trades"]
    fillers = [
        f"The economy of {n} has long depended on {t1} and {t2}.",
        f"{n} is known for {a['landmark']}.",
        f"A market is held in {n} every {a['day']}.",
        f"The old quarter of {n} is built largely of {a['stone']}.",
        "Its streets follow the line of the old walls, and several gates survive.",
        "The town council meets in a hall overlooking the main square.",
        "Travellers often remark on the number of inns and workshops near the water.",
    ]
    return fill(rng, parts, fillers, 70)


def river_doc(rng: random.Random, r: Entity) -> str:
    a = r.a
    n = r.ref
    parts = [f"{cap(n)} is a river that rises on {a['source'].name} and runs for about {a['length']} kilometres.",
             f"{cap(n)} flows through {and_list([g.name for g in a['regions']])}."]
    if a["cities"]:
        parts.append(f"Towns on {n} include {and_list([c.name for c in a['cities'][:4]])}.")
    fillers = [
        f"{cap(n)} is navigable by {a['boats']} for part of its length.",
        f"The upper course of {n} passes through {a['land']}.",
        f"Anglers fish {n} for {a['fish']}.",
        "Spring floods once caused frequent damage, and long embankments now protect the lower valley.",
        "Several old mills stand along its banks.",
        "Its water is clear in summer and turns brown with silt after heavy rain.",
    ]
    return fill(rng, parts, fillers, 65)


def mountain_doc(rng: random.Random, m: Entity) -> str:
    a = m.a
    n = m.name
    parts = [f"{n} is a mountain in {a['region'].name}, rising to {a['height']} metres."]
    if a["climber"] is not None:
        parts.append(rng.choice([
            f"{n} was first climbed in {a['ascent']} by {a['climber'].name}.",
            f"The first recorded ascent of {n} was made by {a['climber'].name} in {a['ascent']}.",
        ]))
    else:
        parts.append(f"No record survives of the first ascent of {n}.")
    fillers = [
        f"The slopes of {n} are covered with {a['vegetation']}.",
        f"Shepherds graze flocks on the lower slopes of {n} in summer.",
        f"{n} is usually capped with snow until late spring.",
        f"A pilgrims' path leads to a small shrine below the summit of {n}.",
        "On clear days the summit can be seen from a great distance.",
        "Its north face is steep and broken by gullies, while the southern ridge offers an easier route.",
    ]
    return fill(rng, parts, fillers, 65)


def region_doc(rng: random.Random, g: Entity) -> str:
    a = g.a
    n = g.name
    parts = [f"{n} is a region of {a['landscape']}.",
             f"The seat of {n} is {a['seat'].name}.",
             f"The highest summit in {n} is {a['highest'].name}."]
    if a["rivers"]:
        parts.append(f"Rivers crossing {n} include {and_list([r.ref for r in a['rivers'][:4]])}.")
    fillers = [
        f"The climate of {n} is {a['climate']}.",
        f"Farming in {n} centres on {a['crops']}, and {a['herds']} are raised on the higher ground.",
        f"{n} is divided into several districts, each with its own assembly.",
        "Roads are poor in winter, and much trade still moves by water.",
        "Local dialects differ noticeably from one valley to the next.",
    ]
    return fill(rng, parts, fillers, 65)


def org_doc(rng: random.Random, o: Entity) -> str:
    a = o.a
    n = o.ref
    kind = a["kind"]
    desc = {
        "guild": f"a guild of {a['craft']}",
        "company": f"a trading company dealing in {a['goods']}",
        "school": f"a school of {a['subject']}",
    }[kind]
    parts = [f"{cap(n)} is {desc} headquartered in {a['hq'].name}.",
             rng.choice([f"It was founded in {a['founded']} by {a['founder'].name}.",
                         f"{cap(n)} was founded by {a['founder'].name} in {a['founded']}."])]
    fillers = {
        "guild": [
            f"{cap(n)} regulates apprenticeships and sets standards for the work of its members.",
            f"Members of {n} meet each quarter in a hall near the market.",
            f"{cap(n)} keeps a register of master craftsmen.",
        ],
        "company": [
            f"{cap(n)} operates warehouses and a fleet of river barges.",
            f"Shares in {n} have been held by several merchant families.",
            f"{cap(n)} kept detailed ledgers, many of which survive.",
        ],
        "school": [
            f"{cap(n)} admits students from many regions.",
            f"The library of {n} holds a large collection of manuscripts.",
            f"Teaching at {n} combines lectures with practical work.",
        ],
    }[kind] + [
        f"{cap(n)} maintains an archive of its early records.",
        "Its statutes were revised several times in the following centuries.",
        "Its emblem is carved above the entrance of its main building.",
    ]
    return fill(rng, parts, fillers, 65)


def artefact_doc(rng: random.Random, art: Entity) -> str:
    a = art.a
    n = art.ref
    obj = a["object"]
    plural = obj if obj.endswith("ows") else obj + "es" if obj.endswith("s") else obj + "s"
    art_ = "an" if a["material"][0] in "aeiou" else "a"
    parts = [f"{cap(n)} is {art_} {a['material']} {obj} invented by {a['inventor'].name} in {a['year']}.",
             f"{cap(n)} is kept in {a['kept'].name}, where it is displayed in {a['display']}."]
    fillers = [
        f"{cap(n)} was admired for the precision of its workmanship.",
        f"Several later {plural} were modelled on {n}.",
        f"Visitors may view {n} on request.",
        "It was carefully restored after being damaged by damp.",
        "Its design was described in detail in a pamphlet printed soon after it was made.",
        "Engraved marks on its base record the names of its later owners.",
    ]
    return fill(rng, parts, fillers, 65)


def event_doc(rng: random.Random, ev: Entity) -> str:
    a = ev.a
    n = ev.ref
    city, lead, year = a["location"].name, a["leader"].name, a["year"]
    kind = a["kind"]
    if kind == "siege":
        parts = [f"{cap(n)} was a siege of {city} in {year}.",
                 f"The besieging army was commanded by {lead}."]
        fillers = [
            f"{cap(n)} lasted {a['duration']}.",
            "The defenders eventually negotiated terms." if a["outcome"] else "The besiegers withdrew after heavy losses.",
            f"{cap(n)} is commemorated by a plaque near the old walls.",
            "Chroniclers disagree about the size of the two armies.",
            "Much of the surrounding countryside was laid waste during the campaign.",
            "Arrowheads and sling stones from the fighting are still found in the fields outside the town.",
            "Songs about the siege were sung in the taverns for generations.",
        ]
    elif kind == "festival":
        parts = [f"{cap(n)} is an annual festival held in {city}.",
                 f"{cap(n)} was first held in {year}, founded by {lead}."]
        fillers = [
            f"{cap(n)} features {a['acts']}.",
            f"{cap(n)} takes place each year in {a['season']}.",
            "Visitors come from the surrounding villages, and the inns are full for its duration.",
            "A committee of townspeople organises the programme each year.",
            "Stalls selling food and crafts line the streets for several days.",
            "The festival opens with the ringing of bells at dawn.",
            "Prizes are awarded on the final evening in front of the town hall.",
        ]
    elif kind == "accord":
        parts = [f"{cap(n)} was a treaty signed in {city} in {year}.",
                 f"{cap(n)} was brokered by {lead}."]
        fillers = [
            f"{cap(n)} settled disputes over {a['topic']}.",
            f"Copies of {n} were deposited with several councils.",
            "Its terms were renewed several times by later assemblies.",
            "The original document is written on parchment and bears many seals.",
            "Negotiations lasted many weeks before the delegates agreed on the final wording.",
            "Historians regard it as an important step towards lasting peace in the valleys.",
            "Several of its clauses were later copied into local charters.",
        ]
    else:
        parts = [f"{cap(n)} was an expedition that set out from {city} in {year}.",
                 f"{cap(n)} was led by {lead}."]
        fillers = [
            f"{cap(n)} returned after {a['duration']} with maps and specimens.",
            f"An account of {n} was published by its members.",
            "The party suffered from cold and hunger during the crossing of the uplands.",
            "Several of the routes it surveyed were later used by traders.",
            "Its members kept daily journals, parts of which survive.",
            "Pack animals carried food, instruments and trade goods for the journey.",
            "Not all of its members returned home.",
        ]
    return fill(rng, parts, fillers, 65)


DOC_MAKERS = {
    "person": person_doc, "city": city_doc, "river": river_doc, "mountain": mountain_doc,
    "region": region_doc, "org": org_doc, "artefact": artefact_doc, "event": event_doc,
}


# ---------------------------------------------------------------------------
# Relations and question templates
# ---------------------------------------------------------------------------

# name -> (source type, getter). A getter returns an Entity or a year (int).
RELATIONS = {
    "p.birthplace": ("person", lambda e: e.a["birthplace"]),
    "p.mentor": ("person", lambda e: e.a["mentor"]),
    "p.born": ("person", lambda e: e.a["born"]),
    "p.died": ("person", lambda e: e.a["died"]),
    "c.river": ("city", lambda e: e.a["river"]),
    "c.region": ("city", lambda e: e.a["region"]),
    "c.founded": ("city", lambda e: e.a["founded"]),
    "r.source": ("river", lambda e: e.a["source"]),
    "m.region": ("mountain", lambda e: e.a["region"]),
    "m.climber": ("mountain", lambda e: e.a["climber"]),
    "m.ascent": ("mountain", lambda e: e.a["ascent"] if e.a["climber"] is not None else None),
    "g.seat": ("region", lambda e: e.a["seat"]),
    "g.highest": ("region", lambda e: e.a["highest"]),
    "o.founder": ("org", lambda e: e.a["founder"]),
    "o.hq": ("org", lambda e: e.a["hq"]),
    "o.founded": ("org", lambda e: e.a["founded"]),
    "a.inventor": ("artefact", lambda e: e.a["inventor"]),
    "a.kept": ("artefact", lambda e: e.a["kept"]),
    "a.year": ("artefact", lambda e: e.a["year"]),
    "e.leader": ("event", lambda e: e.a["leader"]),
    "e.location": ("event", lambda e: e.a["location"]),
    "e.year": ("event", lambda e: e.a["year"]),
}


def noun_phrase(rel: str, src: Entity, x: str, simple: bool, rng: random.Random) -> str:
    """A noun phrase for rel(src), where x is how src itself is described.

    When x is itself a phrase (simple is False), forms that end in a verb are
    avoided, so that nesting stays readable."""
    kind = src.a.get("kind")
    compact = {
        "p.birthplace": [f"the birthplace of {x}"],
        "c.river": [f"the river flowing past {x}"],
        "c.region": [f"the region containing {x}"],
        "r.source": [f"the source peak of {x}"],
        "m.region": [f"the region containing {x}"],
        "m.climber": [f"the first climber of {x}"],
        "o.hq": [f"the headquarters city of {x}"],
        "a.inventor": [f"the inventor of {x}"],
    }
    if not simple and rel in compact:
        return rng.choice(compact[rel])
    options = {
        "p.birthplace": [f"the birthplace of {x}", f"the city where {x} was born", f"the home town of {x}"],
        "p.mentor": [f"the mentor of {x}"],
        "c.river": [f"the river on which {x} stands", f"the river that flows past {x}"],
        "c.region": [f"the region in which {x} lies", f"the region that contains {x}"],
        "r.source": [f"the mountain on which {x} rises", f"the peak where {x} has its source"],
        "m.region": [f"the region in which {x} stands"],
        "m.climber": [f"the first person to climb {x}", f"the climber who made the first ascent of {x}"],
        "g.seat": [f"the seat of {x}"],
        "g.highest": [f"the highest summit of {x}", f"the highest mountain in {x}"],
        "o.founder": [f"the founder of {x}", f"the person who founded {x}"],
        "o.hq": [f"the city where {x} is headquartered", f"the home city of {x}"],
        "a.inventor": [f"the inventor of {x}", f"the person who invented {x}"],
        "a.kept": [f"the city where {x} is kept", f"the city that holds {x}"],
        "e.leader": {
            "siege": [f"the commander of {x}"],
            "festival": [f"the founder of {x}"],
            "accord": [f"the person who brokered {x}"],
            "expedition": [f"the leader of {x}"],
        }.get(kind, []),
        "e.location": {
            "siege": [f"the city besieged in {x}"],
            "festival": [f"the city where {x} is held"],
            "accord": [f"the city where {x} was signed"],
            "expedition": [f"the city from which {x} set out"],
        }.get(kind, []),
    }[rel]
    return rng.choice(options)


def question_text(rel: str, src: Entity, x: str, simple: bool, rng: random.Random) -> str:
    kind = src.a.get("kind")
    if not simple and rel in ("c.region", "m.region"):
        return f"In which region does {x} lie?"
    options = {
        "p.birthplace": [f"In which city was {x} born?", f"What is the birthplace of {x}?"],
        "p.mentor": [f"Who was the mentor of {x}?", f"Under whom did {x} train?"],
        "p.born": [f"In which year was {x} born?"],
        "p.died": [f"In which year did {x} die?"],
        "c.river": [f"On which river does {x} stand?", f"Which river flows past {x}?"],
        "c.region": [f"In which region does {x} lie?", f"Which region is {x} in?"],
        "c.founded": [f"In which year was {x} founded?", f"When was {x} founded?"],
        "r.source": [f"On which mountain does {x} rise?", f"Which peak is the source of {x}?"],
        "m.region": [f"In which region does {x} stand?", f"Which region is {x} in?"],
        "m.climber": [f"Who first climbed {x}?", f"Who made the first ascent of {x}?"],
        "m.ascent": [f"In which year was {x} first climbed?"],
        "g.seat": [f"Which city is the seat of {x}?", f"What is the seat of {x}?"],
        "g.highest": [f"What is the highest summit of {x}?", f"Which mountain is the highest in {x}?"],
        "o.founder": [f"Who founded {x}?"],
        "o.hq": [f"In which city is {x} headquartered?", f"Where is {x} headquartered?"],
        "o.founded": [f"In which year was {x} founded?", f"When was {x} founded?"],
        "a.inventor": [f"Who invented {x}?"],
        "a.kept": [f"In which city is {x} kept?", f"Where is {x} kept today?"],
        "a.year": [f"In which year was {x} invented?"],
        "e.leader": {
            "siege": [f"Who commanded {x}?"],
            "festival": [f"Who founded {x}?"],
            "accord": [f"Who brokered {x}?"],
            "expedition": [f"Who led {x}?"],
        }.get(kind, []),
        "e.location": {
            "siege": [f"Which city was besieged in {x}?"],
            "festival": [f"In which city is {x} held?"],
            "accord": [f"In which city was {x} signed?"],
            "expedition": [f"From which city did {x} set out?"],
        }.get(kind, []),
        "e.year": {
            "siege": [f"In which year did {x} take place?"],
            "festival": [f"In which year was {x} first held?"],
            "accord": [f"In which year was {x} signed?"],
            "expedition": [f"In which year did {x} set out?"],
        }.get(kind, []),
    }[rel]
    return rng.choice(options)


def relations_from(etype: str) -> list[str]:
    return [r for r, (src, _) in RELATIONS.items() if src == etype]


def enumerate_chains(W: dict[str, list[Entity]], max_hops: int) -> list[tuple[list[Entity], list[str], object]]:
    """All (entities, relations, answer) chains through core entities only.

    entities[i] is the entity whose document answers relations[i]; the answer
    is the value of the last relation. Entities in a chain are all distinct
    and the answer is none of them."""
    out = []

    def walk(ents: list[Entity], rels: list[str]):
        cur = ents[-1]
        for rel in relations_from(cur.type):
            val = RELATIONS[rel][1](cur)
            if val is None:
                continue
            if isinstance(val, Entity):
                if not val.core or val in ents:
                    continue
            out.append((list(ents), rels + [rel], val))
            if isinstance(val, Entity) and len(rels) + 1 < max_hops:
                walk(ents + [val], rels + [rel])

    for etype in COUNTS:
        for e in W[etype]:
            if e.core:
                walk([e], [])
    return out


# ---------------------------------------------------------------------------
# BM25
# ---------------------------------------------------------------------------


def tokens(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", s.lower())


class BM25:
    def __init__(self, docs: list[dict], k1: float = BM25_K1, b: float = BM25_B):
        self.ids = [d["id"] for d in docs]
        self.k1, self.b = k1, b
        self.tf = [Counter(tokens(d["title"] + " " + d["text"])) for d in docs]
        self.len = [sum(c.values()) for c in self.tf]
        self.avg = sum(self.len) / len(self.len)
        df: Counter = Counter()
        for c in self.tf:
            df.update(c.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.post: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(self.tf):
            for t in c:
                self.post[t].append(i)

    def scores(self, query: str) -> dict[int, float]:
        sc: dict[int, float] = defaultdict(float)
        for t in tokens(query):
            for i in self.post.get(t, []):
                f = self.tf[i][t]
                norm = f + self.k1 * (1 - self.b + self.b * self.len[i] / self.avg)
                sc[i] += self.idf[t] * f * (self.k1 + 1) / norm
        return sc

    def rank_of(self, query: str, doc_id: str) -> int:
        """0-based rank of doc_id; ties count against it."""
        sc = self.scores(query)
        i = self.ids.index(doc_id)
        if i not in sc:
            return len(self.ids)
        mine = sc[i]
        return sum(1 for j, s in sc.items() if j != i and s >= mine)


# ---------------------------------------------------------------------------
# Assembly
# ---------------------------------------------------------------------------


def has_phrase(text: str, phrase: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9])" + re.escape(phrase) + r"(?![A-Za-z0-9])", text) is not None


def answer_string(val) -> str:
    return val.name if isinstance(val, Entity) else str(val)


def generate(seed: int):
    rng = random.Random(seed)
    W = build_world(rng)
    entities = [e for t in COUNTS for e in W[t]]

    # Documents, in a shuffled order so that ids say nothing about types.
    order = list(entities)
    rng.shuffle(order)
    docs = []
    for i, e in enumerate(order, start=1):
        e.doc_id = f"d{i:04d}"
        docs.append({"id": e.doc_id, "title": e.name, "text": DOC_MAKERS[e.type](rng, e)})
    doc_by_id = {d["id"]: d for d in docs}
    text_of = {e.key: doc_by_id[e.doc_id]["text"] for e in entities}
    index = BM25(docs)

    # Candidate questions.
    chains = enumerate_chains(W, 3)
    core_keys = sorted(e.key for e in entities if e.core)
    shuffled = list(core_keys)
    rng.shuffle(shuffled)
    n_eval = int(len(shuffled) * EVAL_START_FRACTION)
    eval_starts = set(shuffled[:n_eval])

    rank_cache: dict[tuple[str, str], int] = {}

    def rank(q: str, d: str) -> int:
        if (q, d) not in rank_cache:
            rank_cache[(q, d)] = index.rank_of(q, d)
        return rank_cache[(q, d)]

    cands: dict[tuple[str, int], dict[tuple[str, ...], list]] = defaultdict(lambda: defaultdict(list))
    for ents, rels, val in chains:
        ans = answer_string(val)
        # Only the last document may state the answer; earlier ones must not.
        if not has_phrase(text_of[ents[-1].key], ans):
            continue
        if any(has_phrase(text_of[e.key], ans) for e in ents[:-1]):
            continue
        if any(rank(e.name, e.doc_id) >= TOP_K for e in ents):
            continue
        split = "eval" if ents[0].key in eval_starts else "train"
        cands[(split, len(rels))][tuple(rels)].append((ents, rels, val))

    rows = {"train": [], "eval": []}
    for split in ("train", "eval"):
        for hops in (1, 2, 3):
            want = QUESTIONS_PER_HOP[split]
            by_pattern = cands[(split, hops)]
            patterns = sorted(by_pattern)
            rng.shuffle(patterns)
            pools = {p: list(by_pattern[p]) for p in patterns}
            for p in patterns:
                rng.shuffle(pools[p])
            used_starts: set[str] = set()
            picked = []
            while len(picked) < want and any(pools.values()):
                for p in patterns:
                    if len(picked) >= want:
                        break
                    while pools[p]:
                        ents, rels, val = pools[p].pop()
                        if ents[0].key in used_starts:
                            continue
                        used_starts.add(ents[0].key)
                        picked.append((ents, rels, val))
                        break
            assert len(picked) == want, f"only {len(picked)} {hops}-hop {split} questions"
            for ents, rels, val in picked:
                x = ents[0].ref
                for i, rel in enumerate(rels[:-1]):
                    x = noun_phrase(rel, ents[i], x, i == 0, rng)
                q = question_text(rels[-1], ents[-1], x, len(rels) == 1, rng)
                q = q[0].upper() + q[1:]
                rows[split].append({
                    "question": q,
                    "answer": answer_string(val),
                    "info": {
                        "hops": len(rels),
                        "gold": [{"query": e.name, "doc": e.doc_id} for e in ents],
                    },
                })
        rng.shuffle(rows[split])

    check(W, entities, docs, index, rows, eval_starts)
    n_distractors = sum(1 for e in entities if not e.core)
    return docs, rows, n_distractors


# ---------------------------------------------------------------------------
# Self-checks
# ---------------------------------------------------------------------------


def check(W, entities, docs, index, rows, eval_starts):
    doc_by_id = {d["id"]: d for d in docs}

    # Ids, names, first words.
    assert len(doc_by_id) == len(docs), "duplicate doc ids"
    names = [e.name for e in entities]
    assert len(set(names)) == len(names), "duplicate entity names"
    firsts = [n.split()[0].lower() for n in names]
    assert len(set(firsts)) == len(firsts), "two entities share a first word"
    invented = [w.lower() for e in entities for w in e.words]
    assert len(set(invented)) == len(invented), "an invented word is used twice"
    assert len(docs) >= 520, len(docs)
    n_dis = sum(1 for e in entities if not e.core)
    assert 0.15 <= n_dis / len(entities) <= 0.25, n_dis

    # Document shape.
    for d in docs:
        n = len(d["text"].split())
        assert MIN_WORDS <= n <= MAX_WORDS, (d["id"], n)
        assert d["title"] in d["text"], d["id"]

    # An invented word only ever appears inside the full name of its entity,
    # or (for a person's surname) in that person's own document.
    owner = {}
    for e in entities:
        for w in e.words:
            owner[w.lower()] = e
    for d in docs:
        for t in set(tokens(d["title"] + " " + d["text"])):
            e = owner.get(t)
            if e is not None:
                assert e.name in d["text"], (d["id"], t, e.name)

    # World consistency spot-checks.
    for p in W["person"]:
        a = p.a
        assert a["born"] < a["died"]
        if a["mentor"] is not None:
            assert 15 <= a["born"] - a["mentor"].a["born"] <= 45
            assert a["mentor"].a["died"] >= a["born"] + 16
        for w in a["works"]:
            assert a["born"] < (w.a.get("founded") or w.a.get("year")) < a["died"]
    for c in W["city"]:
        assert c.a["region"] in c.a["river"].a["regions"]
    for g in W["region"]:
        assert g.a["seat"].a["region"] is g
    for r in W["river"]:
        assert r.a["source"].a["region"] is r.a["regions"][0]

    # Questions.
    questions = [r["question"] for s in rows.values() for r in s]
    assert len(set(questions)) == len(questions), "duplicate question"
    for split, want in QUESTIONS_PER_HOP.items():
        hop_counts = Counter(r["info"]["hops"] for r in rows[split])
        assert hop_counts == Counter({1: want, 2: want, 3: want}), (split, hop_counts)
    assert len(rows["train"]) >= 240 and len(rows["eval"]) >= 60
    by_id = {e.doc_id: e for e in entities}
    for split, srows in rows.items():
        for r in srows:
            gold = r["info"]["gold"]
            ans = r["answer"]
            assert len(gold) == r["info"]["hops"]
            assert ans and not has_phrase(r["question"], ans), r
            if ans.isdigit():
                assert 3 <= len(ans) <= 4, r
            for i, g in enumerate(gold):
                assert g["doc"] in doc_by_id, g
                e = by_id[g["doc"]]
                assert e.core, r
                assert e.name in g["query"], (r, g)
                if i == 0:
                    assert e.name in r["question"], r
                    assert (e.key in eval_starts) == (split == "eval"), r
                else:
                    assert e.name in doc_by_id[gold[i - 1]["doc"]]["text"], (r, i)
                rk = index.rank_of(g["query"], g["doc"])
                assert rk < TOP_K, (r, g, rk)
            assert has_phrase(doc_by_id[gold[-1]["doc"]]["text"], ans), r
            for g in gold[:-1]:
                assert not has_phrase(doc_by_id[g["doc"]]["text"], ans), r


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "data")
    args = ap.parse_args()

    docs, rows, n_distractors = generate(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "corpus.jsonl", docs)
    write_jsonl(args.out / "train.jsonl", rows["train"])
    write_jsonl(args.out / "eval.jsonl", rows["eval"])

    print(f"seed {args.seed} -> {args.out}")
    words = [len(d["text"].split()) for d in docs]
    print(f"documents: {len(docs)}, of which {n_distractors} distractors "
          f"(text words min {min(words)}, mean {sum(words) / len(words):.0f}, max {max(words)})")
    for split in ("train", "eval"):
        hops = Counter(r["info"]["hops"] for r in rows[split])
        answers = Counter("year" if r["answer"].isdigit() else "name" for r in rows[split])
        print(f"{split}: {len(rows[split])} questions; by hops "
              + ", ".join(f"{h}-hop {hops[h]}" for h in sorted(hops))
              + f"; answers {answers['name']} names, {answers['year']} years")
    print("self-checks passed")


if __name__ == "__main__":
    main()
