"""Text classification family: documents from a synthetic vocabulary (no corpus ships offline).

The regime decides which text representation pays, and the description says it in one sentence:

- ``keywords``: each class has its own words (bag-of-words models: multinomial naive Bayes, logistic
  regression on tf-idf);
- ``negation``: opinion words whose meaning a preceding negator flips (word bigrams pay);
- ``suffixes``: each document names a few never-repeated terms whose endings give the class (word
  vocabularies miss them on the test set; character n-grams pay).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData
from wmrl.tasks.builtin.text import CHOICES, _zipf, vocabulary
from wmrl.tasks.families.surface import (
    draw_surface,
    label_values,
    pick,
    problem_of,
    read_block,
    tail_block,
    task_data,
    values_note,
)

# regime -> (title, text column names, classes, summary); the classes' order is the one of the names.
THEMES = {
    "keywords": (
        ("Support Tickets", ("message", "ticket", "text"), ("billing", "technical", "account", "shipping", "returns"),
         "Route each support ticket to its team"),
        ("News Topics", ("headline", "snippet", "text"), ("sport", "finance", "science", "travel", "food"),
         "Classify each news snippet by topic"),
        ("Forum Sections", ("post", "body", "text"), ("gaming", "cooking", "gardening", "music", "cycling"),
         "Assign each forum post to its section"),
    ),
    "negation": (
        ("Review Sentiment", ("review", "text", "comment"), ("negative", "neutral", "positive"),
         "Classify the sentiment of each product review"),
        ("Feedback Tone", ("feedback", "text", "response"), ("negative", "neutral", "positive"),
         "Classify the tone of each customer's feedback"),
    ),
    "suffixes": (
        ("Compound Families", ("description", "notes", "text"), ("solvent", "acid", "polymer", "dye", "alloy"),
         "Classify each lab note by the family of the compounds it describes"),
        ("Species Records", ("field_notes", "record", "text"), ("beetle", "moth", "spider", "snail", "wasp"),
         "Classify each field record by the animal group of the species it names"),
    ),
}
HINTS = {
    "keywords": ("Each class has its own vocabulary; most other words are shared by all classes.",
                 "The words a document uses give its class away; word order carries nothing."),
    "negation": ("Watch out for negations: a negation word reverses the opinion word that follows it.",
                 "Opinion words decide the label, but a preceding negation word flips their meaning."),
    "suffixes": ("Most names appear in a single document only; the endings of the names tell the class.",
                 "Every record names new terms, rarely seen twice; their word endings follow the class."),
}
_SUFFIXES = ("ex", "ium", "ol", "ane", "ite", "ase", "oid", "yne", "ora", "ix", "ulus", "ina", "oth")

LOADER = '''from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

__READ__VECTORIZER, DENSE = __FEATURES__
X_train = VECTORIZER.fit_transform(train["__TEXT__"])
X_test = VECTORIZER.transform(test["__TEXT__"])
if DENSE:
    X_train, X_test = X_train.toarray(), X_test.toarray()
'''

_DISCOVER_TEXT = "TEXT = [column for column in test.columns if column != ID][0]  # the one input column\n"

_UNIFORM = {"weights": "uniform"}
_REFERENCES = (
    ReferenceSpec("majority", "dummy_clf", {"strategy": "prior"}),
    ReferenceSpec("logreg-10-words", "logreg_sparse", {"C": 1.0}, features="tiny"),
    ReferenceSpec("tree-d5-100-words", "tree_clf", {"depth": 5}, features="small"),
    ReferenceSpec("knn15", "knn_clf_raw", {"k": 15, **_UNIFORM}),
    ReferenceSpec("gnb-100-words", "gnb", features="small_dense"),
    ReferenceSpec("mnb-counts", "mnb", {"alpha": 1.0}, features="counts"),
    ReferenceSpec("mnb", "mnb", {"alpha": 1.0}),
    ReferenceSpec("mnb-bigrams", "mnb", {"alpha": 0.3}, features="bigrams"),
    ReferenceSpec("cnb", "cnb", {"alpha": 1.0}),
    ReferenceSpec("bnb-binary", "bnb_raw", {"binarize": 0.0}, features="binary"),
    ReferenceSpec("logreg", "logreg_sparse", {"C": 10.0}),
    ReferenceSpec("logreg-20pct", "logreg_sparse", {"C": 10.0}, fraction=0.2),
    ReferenceSpec("logreg-bigrams", "logreg_sparse", {"C": 10.0}, features="bigrams"),
    ReferenceSpec("logreg-chars", "logreg_sparse", {"C": 10.0}, features="chars"),
    ReferenceSpec("mnb-chars", "mnb", {"alpha": 0.3}, features="chars"),
    ReferenceSpec("sgd", "sgd_clf_raw", {"alpha": 0.0001}),
    ReferenceSpec("rf100-1000-words", "rf_clf", {"n": 100, "depth": None}, features="mid"),
)


def _keywords(rng: np.random.Generator, n: int, k: int) -> tuple[list[str], np.ndarray]:
    words = vocabulary(400 + 150 * k, rng)
    background, topical = words[:400], [words[400 + 150 * c: 550 + 150 * c] for c in range(k)]
    p_bg, p_topic = _zipf(400), _zipf(150)
    share = rng.uniform(0.08, 0.22)  # the signal's strength
    labels = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 4.0)))
    texts = []
    for c in labels:
        m = int(rng.integers(10, 40))
        u, word, other = rng.random(m), rng.choice(150, size=m, p=p_topic), rng.integers(k, size=m)
        common = rng.choice(400, size=m, p=p_bg)
        texts.append(" ".join(topical[c][w] if x < share else topical[o][w] if x < share + 0.08 else background[b]
                              for x, w, o, b in zip(u, word, other, common)))  # share + 0.08: a random class's words
    return texts, labels


def _negation(rng: np.random.Generator, n: int, k: int) -> tuple[list[str], np.ndarray]:
    words = vocabulary(532, rng)  # few opinion words, each often negated: word pairs carry the label
    background, opinion, negators = words[:500], (words[515:530], words[500:515]), words[530:532]
    p_bg, p_op = _zipf(500), _zipf(15)
    negate_rate = rng.uniform(0.3, 0.5)
    texts, latent = [], np.zeros(n)
    for i in range(n):
        m = int(rng.integers(12, 40))
        is_opinion, positive, negated = rng.random(m) < 0.3, rng.random(m) < 0.5, rng.random(m) < negate_rate
        word, common, negator = rng.choice(15, size=m, p=p_op), rng.choice(500, size=m, p=p_bg), rng.integers(2, size=m)
        tokens = []
        for j in range(m):
            if not is_opinion[j]:
                tokens.append(background[common[j]])
                continue
            if negated[j]:
                tokens.append(negators[negator[j]])
            tokens.append(opinion[int(positive[j])][word[j]])
            latent[i] += (1.0 if positive[j] else -1.0) * (-1.0 if negated[j] else 1.0)
        texts.append(" ".join(tokens))
    latent += rng.normal(0.0, rng.uniform(0.3, 0.7), n)
    cuts = np.quantile(latent, np.cumsum(rng.dirichlet(np.full(k, 5.0)))[:-1])
    return texts, np.searchsorted(cuts, latent)


def _suffixes(rng: np.random.Generator, n: int, k: int) -> tuple[list[str], np.ndarray]:
    endings = [str(s) for s in rng.permutation(np.array(_SUFFIXES))[: 2 * k]]
    background = vocabulary(300, rng)
    p_bg = _zipf(300)
    stems = vocabulary(6000, rng)
    labels = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 4.0)))
    purity = rng.uniform(0.65, 0.9)  # the share of names that carry their own class's ending
    texts = []
    for c in labels:
        tokens = [background[b] for b in rng.choice(300, size=int(rng.integers(8, 25)), p=p_bg)]
        m = int(rng.integers(2, 5))
        owners = np.where(rng.random(m) < purity, c, rng.integers(k, size=m))
        names = [stems[s] + endings[2 * o + e] for s, o, e in
                 zip(rng.integers(len(stems), size=m), owners, rng.integers(2, size=m))]
        for name, place in zip(names, rng.random(m)):
            tokens.insert(int(place * (len(tokens) + 1)), name)
        texts.append(" ".join(tokens))
    return texts, labels


_CORPORA = {"keywords": _keywords, "negation": _negation, "suffixes": _suffixes}


def text_classification(task_id: str, split: str, seed: int, rng: np.random.Generator,
                        schema: str = "literal") -> TaskData:
    regime = pick(rng, tuple(THEMES))
    title, columns, all_classes, summary = pick(rng, THEMES[regime])
    k = int(rng.integers(2, 4)) if regime == "negation" else int(rng.integers(2, 6))
    classes = (all_classes[0], all_classes[2]) if regime == "negation" and k == 2 else all_classes[:k]
    surface = draw_surface(rng, problem_of(k), schema)
    column, target = pick(rng, columns), pick(rng, ("label", "category", "class", "target"))
    n = int(np.exp(rng.uniform(np.log(600), np.log(2000))))
    texts, index = _CORPORA[regime](rng, n, k)
    values = label_values(rng, classes, surface.output)
    y = np.array(values, dtype=object)[index]
    y = y.astype(int) if isinstance(values[0], int) else y.astype(str)
    read = read_block(surface) + (_DISCOVER_TEXT if surface.discovered else "")
    text = "TEXT" if surface.discovered else f'"{column}"'
    loader = LOADER.replace("__READ__", read).replace('"__TEXT__"', text) + tail_block(surface, target)
    notes = [(f"`{surface.train_file}` holds the id column `{surface.id_column}`, the document in `{column}` "
              f"(lower-case words separated by spaces) and the target `{target}`."),
             values_note(target, values, y, surface.output)]
    return task_data(
        task_id, title, split, "text", surface, f"{summary} (`{target}`). {pick(rng, HINTS[regime])}",
        f"wmrl.tasks.families.text ({regime})", pd.DataFrame({column: texts}), y, target, seed, loader, CHOICES,
        list(_REFERENCES), notes,
    )
