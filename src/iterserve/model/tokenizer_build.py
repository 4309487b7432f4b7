"""Builds a byte-level BPE tokenizer offline from a small built-in corpus.

Byte-level pre-tokenization means every Unicode string round-trips through
encode/decode whatever the merges learned, so the corpus only shapes how
compact the encoding is. Training is single-threaded over a fixed corpus and
therefore deterministic.
"""

from __future__ import annotations

import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
TURN_START_TOKEN = "<|start|>"
TURN_END_TOKEN = "<|end|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOS_TOKEN, TURN_START_TOKEN, TURN_END_TOKEN)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start|>{{ message['role'] }}\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)

_PARAGRAPHS = (
    "A serving engine receives requests from many users at once. Each request "
    "brings a prompt and asks for a number of new tokens. The scheduler decides, "
    "for every iteration, which requests run and how many of their tokens are "
    "computed. A request that finishes leaves the batch at once, and a waiting "
    "request can join in the very next step.",
    "The model reads the prompt, writes keys and values into a paged cache, and "
    "then produces one token at a time. Short answers return quickly while long "
    "answers keep their place. When memory runs low, the engine may pause a "
    "request, free its blocks, and rebuild them later from the tokens it kept.",
    "On a quiet morning the river was calm and the boats moved slowly past the "
    "old bridge. Children walked to school, a baker opened the shop, and the "
    "smell of fresh bread filled the street. Later that day it started to rain, "
    "so people hurried home and lit the lamps in their windows.",
    "Good tests describe what the system promises. They build a small example, "
    "run it, and compare the result with a reference that is easy to trust. "
    "If a change breaks a promise, the test names the broken rule and the exact "
    "input that shows it.",
    "Hello, how are you today? I am fine, thank you. What would you like to "
    "know? Please tell me about the weather, the news, and your favourite book. "
    "The answer is simple: read more, sleep well, and write things down.",
)


def _words(text: str, separator: str = " ") -> tuple[str, ...]:
    return tuple(text.split(separator))


_SUBJECTS = _words(
    "the engine|a request|the scheduler|our team|the cache|a user|the model|every worker|the river|my friend|the city|this table",
    "|",
)
_VERBS = _words(
    "reads|writes|measures|builds|finds|keeps|moves|checks|returns|counts|opens|closes|follows|explains|prints",
    "|",
)
_OBJECTS = _words(
    "the next token|a long prompt|several blocks|the final answer|a small table|the morning news|two numbers|every record|the door|a quiet street|the latest version|a simple plan|the first chapter",
    "|",
)
_ENDINGS = _words(
    "before noon|after the test|without delay|in the evening|for each step|with great care|during the night|at the end",
    "|",
)
_NUMBERS = tuple(str(n) for n in (0, 1, 2, 3, 4, 5, 7, 10, 12, 16, 32, 64, 100, 256, 1024))
_COMMON_WORDS = _words(
    "about above across after again against almost alone along already also always among "
    "animal another answer anyone anything appear apple area around arrive ask away baby "
    "back ball bank base beautiful because become bed before begin behind believe below "
    "best better between big bird black blue board boat body book both bottom box boy "
    "bring brother brown build business buy call came can car care carry case cat catch "
    "cause center certain chair change child children choose church circle class clean "
    "clear close cloud cold color come common complete computer consider contain continue "
    "control cook cool corner correct cost could country course cover create cross cry "
    "cup current cut dance dark data daughter day dead deal dear decide deep describe "
    "design develop different difficult dinner direction discover doctor dog done down "
    "draw dream dress drink drive drop dry during early earth east easy eat edge effect "
    "egg eight either else energy enough enter even event ever every example explain eye "
    "face fact fall family far farm fast father fear feel few field fight figure fill "
    "find fine finger finish fire first fish five floor flower fly food foot force forest "
    "forget form forward four free friend front fruit full game garden general girl give "
    "glass gold good government great green ground group grow guess hair half hand happen "
    "happy hard head hear heart heat heavy help here high hill history hold hole home "
    "hope horse hot hour house however human hundred idea important inch include increase "
    "inside island job join just key kind king kitchen knew know land language large last "
    "late laugh learn leave left less letter level light like line list listen little "
    "live long look machine main major make many map mark market matter mean measure meet "
    "member memory middle might mile milk mind minute miss moment money month moon more "
    "most mother mountain mouth music name nation natural near need never new night north "
    "note nothing notice number object ocean offer office often once only open order "
    "other outside over page paper parent part party pass past pattern people perhaps "
    "person picture piece place plant play please point poor possible power practice "
    "prepare present press pretty problem produce program property provide public pull "
    "push question quick quiet rain reach ready real reason receive record region "
    "remember report rest result rich ride right ring river road rock room round rule "
    "safe same save school science sea season seat second section seem sell send sentence "
    "serve service seven several shape share short should show side sign silver simple "
    "since sing sister size skin sky sleep slow small smile snow soft soil soldier solve "
    "song soon sound south space speak special speed spend spring square stand star start "
    "state station stay step still stone stop store story strange street strong student "
    "study subject summer sun support sure surface system table take talk teacher team "
    "tell test thank think third though thought thousand three through time today "
    "together tomorrow tonight total touch toward town track trade train travel tree "
    "trouble true try turn type under understand unit until usual valley value very "
    "village visit voice wait walk wall want warm wash watch water weather week weight "
    "west wheel where whether white whole wide wife wild will wind window winter wish "
    "woman wonder wood word work world write wrong yard year yellow young"
)
_SYLLABLES = _words(
    "ka|ri|mo|ten|sal|dor|vin|e|lu|pra|qui|zen|bal|tor|mi|nes|ol|gra|fen|u|cha|lys|ter|an", "|"
)


def corpus_lines(num_sentences: int = 3000, seed: int = 0) -> list[str]:
    """The built-in training text: fixed paragraphs plus seeded generated sentences."""
    rng = random.Random(seed)
    lines = list(_PARAGRAPHS)
    lines.extend(" ".join(_COMMON_WORDS[i : i + 12]) for i in range(0, len(_COMMON_WORDS), 12))
    for _ in range(num_sentences):
        sentence = (
            f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} "
            f"{rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}, "
            f"then {rng.choice(_VERBS)} {rng.choice(_NUMBERS)} of {rng.choice(_OBJECTS)}."
        )
        words = rng.sample(_COMMON_WORDS, 4) + [_pseudo_word(rng) for _ in range(6)]
        lines.append(f"{sentence} {' '.join(words)}.")
    return lines


def _pseudo_word(rng: random.Random) -> str:
    """A made-up word, so the learned vocabulary can grow past the English words."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))


def build_tokenizer(max_vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE tokenizer with the chat special tokens.

    The post-processor prepends BOS when `add_special_tokens=True`, like Llama.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=max_vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus_lines(), trainer=trainer)
    bos_id = special_token_id(tokenizer, BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    return tokenizer


def special_token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer has no special token {token!r}")
    return token_id


def tokenizer_config(model_max_length: int) -> dict[str, object]:
    """`tokenizer_config.json` contents that `AutoTokenizer` understands."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
    }
