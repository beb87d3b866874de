"""A seeded toy language pair with real translation phenomena (the `translate` task).

The source side is English-like; the target side is a made-up, verb-final language whose
words are drawn from a seeded syllable generator. Both sentences of a pair are produced
from one shared derivation, so the target is a deterministic function of the source, yet
a word-by-word lookup gets most of it wrong (its BLEU stays far below 40). What changes
between the two sides:

- Word order: source Subject-Verb-Object-PP-Adverb becomes target
  Subject-PP-Object-Adverb-(neg)-Verb (verb-final, SOV).
- Adjectives follow the noun in the target, in mirror order ("the big red dog" ->
  "lo kanu rudo grando"), and agree with it in gender and number.
- Prepositions become postpositions ("in the house" -> "la domuna ine").
- Grammatical gender: every target noun is masculine or feminine (a lexical property,
  invisible in the source); articles, demonstratives, possessives, adjectives and the noun's
  own plural ending agree with gender and number.
- Verb agreement: one target ending per tense x subject number, while English shows
  number only in the present tense ("saw" is both), so the model must read the subject.
- Negation: "does not" / "do not" / "did not" + base form -> one particle "ne" before the
  inflected verb (many-to-one), and English "a"/"an" vs "some" become one indefinite stem.
- Differential object marking: a definite object (the/this/that/my) takes the particle
  "ta" after it; an indefinite or bare object does not.

Sentences have 3-15 words on both sides. The lexicon (stems, genders) comes from
`lang_seed`; the sentences from `seed`. 50,000 pairs take about a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minitransformer.errors import ConfigError

# --- source lexicon (English-like) -------------------------------------------------------

NOUNS = {  # singular: plural
    "dog": "dogs", "cat": "cats", "bird": "birds", "horse": "horses", "duck": "ducks",
    "child": "children", "woman": "women", "man": "men", "king": "kings", "queen": "queens",
    "farmer": "farmers", "teacher": "teachers", "doctor": "doctors", "soldier": "soldiers",
    "girl": "girls", "boy": "boys", "friend": "friends", "neighbor": "neighbors",
    "baker": "bakers", "sailor": "sailors", "house": "houses", "tree": "trees",
    "river": "rivers", "mountain": "mountains", "city": "cities", "village": "villages",
    "garden": "gardens", "road": "roads", "bridge": "bridges", "table": "tables",
    "book": "books", "letter": "letters", "apple": "apples", "bread": "breads",
    "stone": "stones", "ship": "ships", "door": "doors", "window": "windows",
    "field": "fields", "forest": "forests", "cow": "cows", "wolf": "wolves", "fox": "foxes",
    "lion": "lions", "box": "boxes", "key": "keys", "song": "songs", "coin": "coins",
    "shoe": "shoes", "cup": "cups",
}  # fmt: skip
TRANSITIVE = [  # base, 3rd person singular, past
    ("see", "sees", "saw"), ("find", "finds", "found"), ("take", "takes", "took"),
    ("carry", "carries", "carried"), ("build", "builds", "built"),
    ("follow", "follows", "followed"), ("help", "helps", "helped"),
    ("love", "loves", "loved"), ("watch", "watches", "watched"), ("hold", "holds", "held"),
    ("open", "opens", "opened"), ("buy", "buys", "bought"), ("sell", "sells", "sold"),
    ("paint", "paints", "painted"), ("visit", "visits", "visited"),
    ("call", "calls", "called"), ("break", "breaks", "broke"), ("push", "pushes", "pushed"),
    ("know", "knows", "knew"), ("want", "wants", "wanted"),
]  # fmt: skip
INTRANSITIVE = [
    ("sleep", "sleeps", "slept"), ("run", "runs", "ran"), ("sing", "sings", "sang"),
    ("laugh", "laughs", "laughed"), ("fall", "falls", "fell"), ("wait", "waits", "waited"),
    ("swim", "swims", "swam"), ("dance", "dances", "danced"),
]  # fmt: skip
ADJECTIVES = (
    "big small old young red green blue white black happy sad tall short quiet loud brave "
    "clever strong poor rich new warm cold dark bright"
).split()
ADVERBS = "today yesterday often quickly slowly again here there silently early".split()
PREPOSITIONS = "in on under near behind with from to".split()
# determiner kind -> (singular form, plural form); None = not used with that number
DETERMINERS = {
    "def": ("the", "the"),
    "indef": ("a", "some"),
    "this": ("this", "these"),
    "that": ("that", "those"),
    "my": ("my", "my"),
    "bare": (None, ""),
}
DEFINITE = {"def", "this", "that", "my"}

# --- target morphology --------------------------------------------------------------------

AGREE = {("m", "sg"): "o", ("f", "sg"): "a", ("m", "pl"): "i", ("f", "pl"): "e"}
DET_STEMS = {"def": "l", "indef": "un", "this": "est", "that": "kel", "my": "mej"}
NOUN_ENDINGS = {("m", "sg"): "", ("m", "pl"): "en", ("f", "sg"): "a", ("f", "pl"): "ar"}
VERB_ENDINGS = {
    ("pres", "sg"): "et",
    ("pres", "pl"): "en",
    ("past", "sg"): "ot",
    ("past", "pl"): "on",
}
NEG, OBJ = "ne", "ta"
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


class _Draws:
    """Fast uniform draws from `numpy.random.default_rng(seed)`, taken in chunks."""

    def __init__(self, seed: int | Sequence[int], chunk: int = 1 << 16) -> None:
        self._rng = np.random.default_rng(seed)
        self._chunk = chunk
        self._buf: list[float] = []
        self._pos = 0

    def random(self) -> float:
        if self._pos == len(self._buf):
            self._buf = self._rng.random(self._chunk).tolist()
            self._pos = 0
        self._pos += 1
        return self._buf[self._pos - 1]

    def choice(self, seq: Sequence):
        return seq[int(self.random() * len(seq))]

    def chance(self, p: float) -> bool:
        return self.random() < p


class ToyLanguage:
    """The lexicon of the target language (from `lang_seed`) and a sentence-pair sampler."""

    def __init__(self, lang_seed: int = 0) -> None:
        draws = _Draws([lang_seed, 7])
        used = {NEG, OBJ, *(DET_STEMS[k] + e for k in DET_STEMS for e in AGREE.values())}

        def new_stem(n_syllables: int, forms) -> str:
            while True:
                stem = "".join(
                    draws.choice(_CONSONANTS) + draws.choice(_VOWELS) for _ in range(n_syllables)
                )
                stem += draws.choice(_CONSONANTS)
                words = {stem + e for e in forms}
                if not words & used:
                    used.update(words)
                    return stem

        self.noun = {}  # English singular -> (target stem, gender)
        for sg in NOUNS:
            gender = draws.choice("mf")
            endings = [NOUN_ENDINGS[(gender, n)] for n in ("sg", "pl")]
            self.noun[sg] = (new_stem(1 + int(draws.chance(0.5)), endings), gender)
        self.verb = {v[0]: new_stem(2, VERB_ENDINGS.values()) for v in TRANSITIVE + INTRANSITIVE}
        self.adj = {a: new_stem(1 + int(draws.chance(0.4)), AGREE.values()) for a in ADJECTIVES}
        self.adv = {a: new_stem(2, ["ul"]) + "ul" for a in ADVERBS}
        self.post = {p: new_stem(0, ["e"]) + "e" for p in PREPOSITIONS}

    # --- one phrase at a time: (source words, target words) --------------------------------

    def noun_phrase(self, d: _Draws, *, obj: bool = False) -> tuple[list[str], list[str], str]:
        """A noun phrase; returns source words, target words and its number."""
        number = "pl" if d.chance(0.35) else "sg"
        kind = d.choice(["def", "def", "def", "indef", "indef", "this", "that", "my", "bare"])
        if kind == "bare" and number == "sg":
            kind = "def"
        sg = d.choice(list(NOUNS))
        adjs = [d.choice(ADJECTIVES) for _ in range(d.choice([0, 0, 0, 1, 1, 2]))]
        stem, gender = self.noun[sg]
        det = DETERMINERS[kind][number == "pl"]
        head = NOUNS[sg] if number == "pl" else sg
        src = [*adjs, head]
        if det == "a" and src[0][0] in "aeiou":
            det = "an"
        if det:
            src.insert(0, det)
        tgt = [stem + NOUN_ENDINGS[(gender, number)]]
        tgt += [self.adj[a] + AGREE[(gender, number)] for a in reversed(adjs)]
        if kind != "bare":
            tgt.insert(0, DET_STEMS[kind] + AGREE[(gender, number)])
        if obj and kind in DEFINITE:
            tgt.append(OBJ)
        return src, tgt, number

    def sentence(self, d: _Draws) -> tuple[list[str], list[str]]:
        """One sentence pair (not yet length-filtered)."""
        subj_src, subj_tgt, number = self.noun_phrase(d)
        transitive = d.chance(0.7)
        base, third, past = d.choice(TRANSITIVE if transitive else INTRANSITIVE)
        tense = "past" if d.chance(0.5) else "pres"
        negated = d.chance(0.2)
        if negated:
            aux = "did" if tense == "past" else ("does" if number == "sg" else "do")
            verb_src = [aux, "not", base]
        else:
            verb_src = [past if tense == "past" else (third if number == "sg" else base)]
        verb_tgt = ([NEG] if negated else []) + [self.verb[base] + VERB_ENDINGS[(tense, number)]]

        obj_src, obj_tgt = [], []
        if transitive:
            obj_src, obj_tgt, _ = self.noun_phrase(d, obj=True)
        pp_src, pp_tgt = [], []
        if d.chance(0.4):
            prep = d.choice(PREPOSITIONS)
            np_src, np_tgt, _ = self.noun_phrase(d)
            pp_src, pp_tgt = [prep, *np_src], [*np_tgt, self.post[prep]]
        adv_src, adv_tgt = [], []
        if d.chance(0.3):
            adv = d.choice(ADVERBS)
            adv_src, adv_tgt = [adv], [self.adv[adv]]
        src = subj_src + verb_src + obj_src + pp_src + adv_src
        tgt = subj_tgt + pp_tgt + obj_tgt + adv_tgt + verb_tgt
        return src, tgt

    def sample(
        self, n: int, seed: int | Sequence[int], min_words: int = 3, max_words: int = 15
    ) -> list[tuple[str, str]]:
        """`n` sentence pairs as text, both sides with min_words..max_words words."""
        if not 3 <= min_words <= max_words:
            raise ConfigError(
                f"toy sentences need 3 <= min_words <= max_words; got {min_words}, {max_words}."
            )
        d = _Draws(seed)
        out: list[tuple[str, str]] = []
        while len(out) < n:
            src, tgt = self.sentence(d)
            if min_words <= len(src) <= max_words and min_words <= len(tgt) <= max_words:
                out.append((" ".join(src), " ".join(tgt)))
        return out

    def source_types(self) -> set[str]:
        """Every source word the grammar can produce."""
        verbs = {w for v in TRANSITIVE + INTRANSITIVE for w in v}
        dets = {w for pair in DETERMINERS.values() for w in pair if w} | {"an"}
        return (
            set(NOUNS) | set(NOUNS.values()) | verbs | set(ADJECTIVES) | set(ADVERBS)
            | set(PREPOSITIONS) | dets | {"does", "do", "did", "not"}
        )  # fmt: skip

    def target_types(self) -> set[str]:
        """Every target word the grammar can produce."""
        nouns = {s + NOUN_ENDINGS[(g, n)] for s, g in self.noun.values() for n in ("sg", "pl")}
        verbs = {s + e for s in self.verb.values() for e in VERB_ENDINGS.values()}
        adjs = {s + e for s in self.adj.values() for e in AGREE.values()}
        dets = {s + e for s in DET_STEMS.values() for e in AGREE.values()}
        particles = {NEG, OBJ, *self.adv.values(), *self.post.values()}
        return nouns | verbs | adjs | dets | particles


def make_translation_pairs(
    n_train: int = 50_000,
    n_valid: int = 1_000,
    n_test: int = 1_000,
    seed: int = 0,
    lang_seed: int = 0,
    min_words: int = 3,
    max_words: int = 15,
) -> dict[str, list[tuple[str, str]]]:
    """Train/valid/test text pairs; no valid or test source sentence occurs in train, and
    valid and test share no source sentence either."""
    lang = ToyLanguage(lang_seed)
    train = lang.sample(n_train, [seed, 0], min_words, max_words)
    seen = {s for s, _ in train}
    held: list[tuple[str, str]] = []
    for attempt in range(1, 100):
        for s, t in lang.sample(n_valid + n_test, [seed, attempt], min_words, max_words):
            if s not in seen and len(held) < n_valid + n_test:
                seen.add(s)
                held.append((s, t))
        if len(held) == n_valid + n_test:
            break
    else:
        raise ConfigError(
            f"could not find {n_valid + n_test} held-out sentences unseen in train; "
            "lower n_valid/n_test or raise max_words."
        )
    return {"train": train, "valid": held[:n_valid], "test": held[n_valid:]}
