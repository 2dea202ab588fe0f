"""Prefill-heavy tasks in the style of RULER (Hsieh et al., 2024), generated locally from the
seed at a chosen prompt length (--length, tokens): needle in a haystack (single, multi-key,
multi-value, multi-query), variable tracking, common- and frequent-word extraction. Scored as
RULER scores them: string_match_all, the fraction of the reference strings that appear in the
output (case-insensitive).

Length control is tokenizer-free: the endpoint may not expose a tokenizer, so a prompt of L
tokens gets about L / tokens_per_word words; the real count (usage.prompt_tokens) is recorded
with every item and reported."""
import random
import string
from collections import Counter

from .base import PREFILL, Task, response_text

NOISE = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
         "again.").split(". ")
NOISE = [s if s.endswith(".") else s + "." for s in NOISE]

ADJECTIVES = (
    "able acid aged airy ancient angry bitter black bold brave brief bright broad busy calm "
    "cheap clean clever cold cool crisp curly damp dark dear deep dense dizzy dry dull eager "
    "early easy empty even faint fancy fast fierce flat fond fresh friendly funny gentle giant "
    "glad golden grand great green happy hard heavy hidden high hollow huge humble hungry icy "
    "jolly juicy keen kind large late lazy light little lively long loud lucky mellow mighty "
    "modern narrow neat new nice noble odd old orange pale plain polite proud purple quick "
    "quiet rapid rare raw red rich ripe rough round royal rural rusty sad safe salty sharp shiny "
    "short shy silent silly silver simple slow small smooth soft solid sour spicy steep sticky "
    "stormy strange strong sunny sweet swift tall tame tender thin tidy tiny tough urban vast "
    "warm wet white wide wild windy wise witty young").split()
NOUNS = (
    "acorn actor anchor apple arrow artist badge bakery ball banana barn basket beach bear bell "
    "bicycle bird blanket boat book bottle bridge brush bucket butter button cabin cable camera "
    "candle canoe canyon carpet castle cat cello chair cherry circle city clock cloud coat coffee "
    "comet cookie copper cotton crayon desert diamond dinner dog dolphin door dragon drum eagle "
    "engine falcon farm feather fence field finger flag flute forest fountain fox garden "
    "garlic ghost glacier glove goat guitar hammer harbor hat helmet honey horse island jacket "
    "jungle kettle kitten ladder lake lamp lemon letter library lion lizard magnet mango map "
    "marble meadow mirror monkey moon mountain needle ocean olive onion orchard owl paddle "
    "painter panda paper parrot peach pencil pepper piano pillow pirate planet pocket pond "
    "potato puzzle rabbit radio rain river robot rocket saddle sail sandal scarf shadow shell "
    "ship shoe signal silk skate sled snake soup spider spoon squirrel star stone storm sugar "
    "table teapot temple tiger timber tomato tower tractor train tree tulip turtle umbrella "
    "valley violin wagon wall walnut whale window wizard wolf yacht zebra").split()
COMMON_WORDS = sorted(set(ADJECTIVES + NOUNS))


def words_for(opts, overhead_words):
    """How many filler words a prompt of opts.length tokens has room for."""
    return max(50, int(opts.length / opts.tokens_per_word) - overhead_words)


def haystack_sentences(n_words):
    out, count, i = [], 0, 0
    while count < n_words:
        s = NOISE[i % len(NOISE)]
        out.append(s)
        count += len(s.split())
        i += 1
    return out


def insert_at_depths(rng, sentences, needles):
    """Puts each needle between sentences at a random depth; needles keep their order."""
    positions = sorted(rng.randrange(len(sentences) + 1) for _ in needles)
    out = list(sentences)
    for k, (pos, needle) in enumerate(zip(positions, needles)):
        out.insert(pos + k, needle)
    return out, [p / max(1, len(sentences)) for p in positions]


def unique_keys(rng, n):
    keys = set()
    while len(keys) < n:
        keys.add(f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}")
    keys = sorted(keys)
    rng.shuffle(keys)
    return keys


def string_match_all(pred, refs):
    """RULER's metric for the synthetic tasks: the fraction of refs found in pred."""
    p = pred.lower()
    return sum(1.0 for r in refs if r.lower() in p) / len(refs)


def join_and(xs):
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + ", and " + xs[-1]


class RulerTask(Task):
    family = PREFILL
    default_max_tokens = 64

    def items(self, opts, limit):
        n = 100 if limit is None else limit
        rng = random.Random(f"{self.name}/{opts.seed}/{opts.length}/{opts.tokens_per_word}")
        out = []
        for i in range(n):
            item = self.make(rng, opts, i)
            item["id"] = f"{self.name}-{opts.length}-{i}"
            item["meta"]["length"] = opts.length
            budget = item.pop("max_tokens", None)
            item["requests"] = [self.generation_request(
                opts, [{"role": "user", "content": item.pop("prompt")}], budget)]
            out.append(item)
        return out

    def score(self, item, responses):
        text = response_text(responses[0])
        return {"score": string_match_all(text, item["gold"]), "pred": text.strip()[:400]}


NIAH_VARIANTS = {
    # name: (keys, values per key, queried keys, output tokens)
    "single": (1, 1, 1, 32),
    "multikey": (4, 1, 1, 32),
    "multivalue": (1, 4, 1, 64),
    "multiquery": (4, 1, 4, 64),
}


def make_niah(rng, opts, variant):
    n_keys, n_values, n_queries, budget = NIAH_VARIANTS[variant]
    keys = unique_keys(rng, n_keys)
    values = {k: [str(rng.randint(1000000, 9999999)) for _ in range(n_values)] for k in keys}
    needles = [f"One of the special magic numbers for {k} is: {v}." for k in keys
               for v in values[k]]
    rng.shuffle(needles)
    queries = keys[:n_queries]
    query = join_and(queries)
    head = ("Some special magic numbers are hidden within the following text. Make sure to "
            "memorize it. I will quiz you about the numbers afterwards.\n")
    tail = (f"\nWhat are all the special magic numbers for {query} mentioned in the provided "
            f"text?")
    overhead = len((head + tail).split()) + sum(len(n.split()) for n in needles)
    sentences = haystack_sentences(words_for(opts, overhead))
    hay, depths = insert_at_depths(rng, sentences, needles)
    prompt = head + " ".join(hay) + tail
    gold = [v for k in queries for v in values[k]]
    return {"prompt": prompt, "gold": gold, "max_tokens": opts.max_tokens or budget,
            "meta": {"variant": variant, "depths": [round(d, 3) for d in depths]}}


class NiahTask(RulerTask):
    variant = "single"

    def make(self, rng, opts, i):
        return make_niah(rng, opts, self.variant)


def _niah_class(variant, desc):
    return type(f"Niah_{variant}", (NiahTask,), {
        "name": f"ruler-niah-{variant}", "variant": variant, "description": desc})


NiahSingle = _niah_class("single", "RULER needle in a haystack: one key, one value")
NiahMultikey = _niah_class("multikey", "RULER NIAH: 4 keys in the haystack, one is asked")
NiahMultivalue = _niah_class("multivalue", "RULER NIAH: one key with 4 values, all asked")
NiahMultiquery = _niah_class("multiquery", "RULER NIAH: 4 keys, all 4 asked")


class NiahMix(NiahTask):
    name = "ruler-niah"
    description = "RULER NIAH, the four variants in turn (single, multikey, multivalue, multiquery)"

    def make(self, rng, opts, i):
        return make_niah(rng, opts, list(NIAH_VARIANTS)[i % len(NIAH_VARIANTS)])


def var_name(rng, taken):
    while True:
        v = "".join(rng.choice(string.ascii_uppercase) for _ in range(5))
        if v not in taken:
            taken.add(v)
            return v


class VariableTracking(RulerTask):
    name = "ruler-vt"
    description = "RULER variable tracking: one chain of 4 hops, name every variable"
    default_max_tokens = 40
    hops = 4

    def make(self, rng, opts, i):
        taken = set()
        names = [var_name(rng, taken) for _ in range(self.hops + 1)]
        value = str(rng.randint(10000, 99999))
        stmts = [f"VAR {names[0]} = {value}."] + [
            f"VAR {names[j + 1]} = VAR {names[j]}." for j in range(self.hops)]
        head = ("Memorize and track the chain(s) of variable assignment hidden in the following "
                "text.\n\n")
        tail = (f"\nQuestion: Find all variables that are assigned the value {value} in the "
                f"text above. Answer with the variable names.")
        overhead = len((head + tail).split()) + 4 * len(stmts)
        hay, depths = insert_at_depths(rng, haystack_sentences(words_for(opts, overhead)), stmts)
        return {"prompt": head + " ".join(hay) + tail, "gold": names,
                "meta": {"value": value, "depths": [round(d, 3) for d in depths]}}


def synthetic_words(rng, n, exclude=()):
    """n distinct pronounceable lowercase words (when the built-in list runs out)."""
    cons, vows = "bcdfghjklmnprstvz", "aeiou"
    out, seen = [], set(exclude)
    while len(out) < n:
        w = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(2, 3)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class CommonWords(RulerTask):
    name = "ruler-cwe"
    description = "RULER common-word extraction: the 10 most common words of a numbered list"
    default_max_tokens = 80
    num_common = 10

    def make(self, rng, opts, i):
        head = ("Below is a numbered list of words. In these words, some appear more often than "
                "others. Memorize the ones that appear most often.\n")
        tail = f"\nQuestion: What are the {self.num_common} most common words in the above list?"
        # An entry "12. word" is about three word-equivalents of tokens.
        entries = max(40, words_for(opts, len((head + tail).split())) // 3)
        freq_cw = max(3, min(30, entries // (2 * self.num_common)))
        freq_ucw = max(1, min(3, freq_cw // 3))
        num_ucw = max(1, (entries - self.num_common * freq_cw) // freq_ucw)
        pool = list(COMMON_WORDS)
        rng.shuffle(pool)
        need = self.num_common + num_ucw
        if need > len(pool):
            pool += synthetic_words(rng, need - len(pool), pool)
        common, uncommon = pool[:self.num_common], pool[self.num_common:need]
        words = common * freq_cw + uncommon * freq_ucw
        rng.shuffle(words)
        listing = "\n".join(f"{j + 1}. {w}" for j, w in enumerate(words))
        return {"prompt": head + listing + tail, "gold": common,
                "meta": {"freq_common": freq_cw, "freq_uncommon": freq_ucw,
                         "entries": len(words)}}


class FrequentWords(RulerTask):
    name = "ruler-fwe"
    description = "RULER frequent-word extraction: the 3 most frequent coded words (Zipf)"
    default_max_tokens = 40
    alpha = 2.0

    def make(self, rng, opts, i):
        head = ("Read the following coded text and track the frequency of each coded word. Find "
                "the three most frequently appeared coded words. ")
        tail = ("\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What "
                "are the three most frequently appeared words in the above coded text?")
        # A random five-letter coded word is about two tokens.
        n_words = max(30, int(words_for(opts, len((head + tail).split())) / 2))
        vocab_size = max(10, min(2000, n_words // 10))
        vocab = set()
        while len(vocab) < vocab_size:
            vocab.add("".join(rng.choice(string.ascii_lowercase) for _ in range(5)))
        vocab = sorted(vocab)
        rng.shuffle(vocab)
        weights = [1.0 / (r + 1) ** self.alpha for r in range(vocab_size)]
        while True:
            words = rng.choices(vocab, weights=weights, k=n_words)
            counts = Counter(words).most_common(4)
            if len(counts) == 4 and counts[2][1] > counts[3][1]:
                break
        chunks = [" ".join(words[j:j + 10]) for j in range(0, len(words), 10)]
        text = " .... ".join(chunks)
        return {"prompt": head + text + tail, "gold": [w for w, _ in counts[:3]],
                "meta": {"counts": [c for _, c in counts]}}


RULER_TASKS = [NiahMix, NiahSingle, NiahMultikey, NiahMultivalue, NiahMultiquery,
               VariableTracking, CommonWords, FrequentWords]
