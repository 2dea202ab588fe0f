"""Multi-turn recall: conversations whose last question needs a fact stated in the first turn.
Turn 1 states a fact inside some text and asks for an acknowledgement, the middle turns ask an
unrelated question each, the last turn asks for the fact. Every turn after the first repeats the
conversation so far with the model's own answers (the runner fills them in: "after_previous"),
so a server that caches the conversation's KV (dqserve's [prefix_cache] assistant_kv) serves the
earlier turns' answers from the KV decode wrote ("reuse") or recomputes them ("reprefill"). The
score is whether the last answer contains the fact."""
import random

from .. import EvalError
from .base import Task, response_text
from .ruler import haystack_sentences

FACTS = [("the code of the {} vault", lambda r: str(r.randint(10000, 99999))),
         ("the name of {}'s cat", lambda r: r.choice(["Miso", "Pepper", "Luna", "Toby", "Ziggy",
                                                     "Olive", "Bruno", "Nala"])),
         ("the colour of the {} door", lambda r: r.choice(["red", "green", "blue", "yellow",
                                                         "purple", "orange", "white"])),
         ("the city {} moved to", lambda r: r.choice(["Lisbon", "Oslo", "Nairobi", "Lima",
                                                     "Hanoi", "Perth", "Quebec", "Tunis"]))]
OWNERS = ["Anna", "Bertil", "Chidi", "Dora", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun"]
MIDDLE = [lambda r: f"What is {r.randint(2, 9)} plus {r.randint(2, 9)}?",
          lambda r: f"Name a fruit that starts with the letter {r.choice('ABCGLMOP')}.",
          lambda r: "Write one short sentence about the sea.",
          lambda r: f"How many days are in {r.randint(2, 5)} weeks?"]


class MultiTurnRecall(Task):
    name = "multiturn"
    family = "multi-turn"
    description = ("multi-turn recall: a fact stated in turn 1, unrelated middle turns, the fact "
                   "asked for in the last turn (turns 2-3 after the first)")
    default_max_tokens = 32
    middle_turns = 1

    def items(self, opts, limit):
        if opts.api != "chat":
            raise EvalError(f"task {self.name} is a chat conversation; run it with --api chat")
        n = 100 if limit is None else limit
        rng = random.Random(f"{self.name}/{opts.seed}/{self.middle_turns}")
        out = []
        for i in range(n):
            what, value = rng.choice(FACTS)
            subject = what.format(rng.choice(OWNERS))
            answer = value(rng)
            filler = " ".join(haystack_sentences(60))
            first = (f"{filler} By the way, {subject} is {answer}. Please remember it. "
                     "Reply with just OK.")
            reqs = [self.generation_request(opts, [{"role": "user", "content": first}], 8)]
            for _ in range(self.middle_turns):
                reqs.append(self.follow_up(opts, rng.choice(MIDDLE)(rng)))
            reqs.append(self.follow_up(opts, f"What is {subject}? Answer in a few words."))
            out.append({"id": f"{self.name}-{self.middle_turns}-{i}", "gold": answer,
                        "meta": {"turns": len(reqs)}, "requests": reqs})
        return out

    def follow_up(self, opts, text):
        req = self.generation_request(opts, [{"role": "user", "content": text}])
        req["after_previous"] = True
        return req

    def score(self, item, responses):
        text = response_text(responses[-1])
        return {"score": float(item["gold"].lower() in text.lower()), "pred": text.strip()[:200]}


class MultiTurnRecall3(MultiTurnRecall):
    name = "multiturn-3"
    description = "multiturn with two unrelated middle turns (4 turns in all)"
    middle_turns = 2
