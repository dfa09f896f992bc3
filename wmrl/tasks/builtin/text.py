"""Text task families. No text corpus ships offline, so documents are generated from a synthetic
vocabulary whose word distributions depend on the label (a learnable, not trivial, signal)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from wmrl.tasks.builtin.spec import TaskData, classification_frames
from wmrl.tasks.builtin.variants import text_variants

LOADER = '''from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
VECTORIZER, DENSE = __FEATURES__
X_train = VECTORIZER.fit_transform(train["text"])
X_test = VECTORIZER.transform(test["text"])
if DENSE:
    X_train, X_test = X_train.toarray(), X_test.toarray()
y_train = train["__TARGET__"].to_numpy()
test_ids = test["id"]
'''

CHOICES = {
    "all": "(TfidfVectorizer(sublinear_tf=True), False)",
    "tiny": "(TfidfVectorizer(max_features=10), False)",
    "small": "(TfidfVectorizer(max_features=100), False)",
    "small_dense": "(TfidfVectorizer(max_features=100), True)",
    "mid": "(TfidfVectorizer(max_features=1000), False)",
    "bigrams": "(TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True), False)",
    "counts": "(CountVectorizer(), False)",
    "binary": "(CountVectorizer(binary=True), False)",
    "chars": "(TfidfVectorizer(analyzer='char_wb', ngram_range=(2, 4), min_df=3, sublinear_tf=True), False)",
}

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl", "gr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct pronounceable pseudo-words."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 4))
        word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))] for _ in range(n))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _zipf(n: int) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1)
    return p / p.sum()


def _text_task(task_id: str, name: str, split: str, metric: str, output: str, texts: list[str], y: np.ndarray,
               target: str, summary: str, seed: int, kind: str) -> TaskData:
    frame = pd.DataFrame({"text": texts})
    train, test, answers, sample = classification_frames(frame, y, target, output, seed)
    return TaskData(
        task_id=task_id, name=name, category="text", split=split, metric=metric, summary=summary,
        source="generated from a synthetic vocabulary (wmrl.tasks.builtin.text)", output=output, train=train,
        test=test, answers=answers, sample_submission=sample, loader=LOADER.replace("__TARGET__", target),
        variants=text_variants(kind), target=target, feature_choices=CHOICES,
        data_notes=["Each row holds one document in the column `text` (lower-case words separated by spaces)."],
    )


def topics() -> TaskData:
    rng = np.random.default_rng(301)
    words = vocabulary(1400, rng)
    background, topical = words[:400], words[400:]
    names = ["sport", "finance", "science", "travel", "food"]
    topic_words = [topical[i * 200:(i + 1) * 200] for i in range(len(names))]
    labels, texts = [], []
    for _ in range(2500):
        t = int(rng.integers(len(names)))
        tokens = []
        for _ in range(int(rng.integers(12, 40))):
            u = rng.random()
            if u < 0.18:
                tokens.append(topic_words[t][rng.choice(200, p=_zipf(200))])
            elif u < 0.26:  # confusers: words of another topic
                tokens.append(topic_words[int(rng.integers(len(names)))][rng.choice(200, p=_zipf(200))])
            else:
                tokens.append(background[rng.choice(400, p=_zipf(400))])
        labels.append(names[t])
        texts.append(" ".join(tokens))
    return _text_task(
        "news-topics", "News Topics", "train", "accuracy", "label", texts, np.array(labels), "topic",
        "Classify each short news snippet into one of five topics (sport, finance, science, travel, food).", 301, "clf",
    )


def _sentiment_corpus(seed: int, n: int) -> tuple[list[str], np.ndarray]:
    """Documents and their latent sentiment; negators flip the next opinion word (bigrams matter)."""
    rng = np.random.default_rng(seed)
    words = vocabulary(900, rng)
    background, positive, negative = words[:600], words[600:700], words[700:800]
    strength = np.r_[np.linspace(2.0, 0.3, 100)]  # earlier opinion words carry more weight
    negators = words[800:803]
    texts, latent = [], []
    for _ in range(n):
        tokens, score = [], 0.0
        for _ in range(int(rng.integers(15, 45))):
            u = rng.random()
            if u < 0.2:
                polarity = 1 if rng.random() < 0.5 else -1
                k = int(rng.choice(100, p=_zipf(100)))
                negate = rng.random() < 0.25
                if negate:
                    tokens.append(negators[int(rng.integers(3))])
                tokens.append((positive if polarity > 0 else negative)[k])
                score += polarity * strength[k] * (-0.7 if negate else 1.0)
            else:
                tokens.append(background[rng.choice(600, p=_zipf(600))])
        texts.append(" ".join(tokens))
        latent.append(score + rng.normal(0, 1.5))
    return texts, np.asarray(latent)


def sentiment() -> TaskData:
    texts, latent = _sentiment_corpus(302, 3000)
    return _text_task(
        "review-sentiment", "Review Sentiment", "train", "roc_auc", "prob_binary", texts, (latent > 0).astype(int),
        "positive", "Predict the probability that each product review is positive. Negation words flip the "
        "meaning of the opinion word that follows them.", 302, "clf",
    )


def rating() -> TaskData:
    texts, latent = _sentiment_corpus(303, 2500)
    stars = np.clip(np.round(3 + latent / 2.0), 1, 5).astype(int)
    return _text_task(
        "review-rating", "Review Star Rating", "heldout", "rmse", "value", texts, stars, "stars",
        "Predict the star rating (1 to 5) that each reviewer gave, from the text of the review.", 303, "reg",
    )


FAMILIES = (topics, sentiment, rating)
