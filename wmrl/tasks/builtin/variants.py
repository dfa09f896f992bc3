"""Reference-solution variant lists: model families x hyperparameters x features x training fraction.

Each list mixes deliberately weak entries (dummy models, one feature, 5% of the rows), middling ones
and strong ones, so that the leaderboards they produce spread the position score over [0, 1].
Feature choices: ``all``, ``half`` and ``one`` (dense data), ``pool`` (images) or vocabulary
settings (text), mapped to code by each family's ``feature_choices``.
"""

from __future__ import annotations

from wmrl.tasks.builtin.spec import Variant as V


def classifier_variants(big: bool = True) -> list[V]:
    out = [
        V("dummy-prior", "dummy_clf", {"strategy": "prior"}, weak=True),
        V("dummy-uniform", "dummy_clf", {"strategy": "uniform"}, weak=True),
        V("stump-5pct", "tree_clf", {"depth": 1}, fraction=0.05, weak=True),
        V("logreg-one-feature", "logreg", {"C": 1.0}, features="one", weak=True),
        V("knn1-5pct", "knn_clf", {"k": 1}, fraction=0.05, weak=True),
        V("gnb", "gnb"),
        V("tree-d3", "tree_clf", {"depth": 3}),
        V("tree-d10", "tree_clf", {"depth": 10}),
        V("knn5-30pct", "knn_clf", {"k": 5}, fraction=0.3),
        V("knn15", "knn_clf", {"k": 15}),
        V("logreg-C0.001", "logreg", {"C": 0.001}),
        V("logreg-20pct", "logreg", {"C": 1.0}, fraction=0.2),
        V("logreg-half-features", "logreg", {"C": 1.0}, features="half"),
        V("logreg-C1", "logreg", {"C": 1.0}),
        V("logreg-C10", "logreg", {"C": 10.0}),
        V("rf10-d3", "rf_clf", {"n": 10, "depth": 3}),
        V("rf100-half-features", "rf_clf", {"n": 100, "depth": None}, features="half"),
        V("rf100", "rf_clf", {"n": 100, "depth": None}),
        V("et100", "et_clf", {"n": 100}),
        V("hgb30-30pct", "hgb_clf", {"it": 30, "lr": 0.1}, fraction=0.3),
    ]
    if big:  # boosting with many iterations is slow on many classes; families opt out
        out += [
            V("hgb100", "hgb_clf", {"it": 100, "lr": 0.1}),
            V("hgb200-lr0.05", "hgb_clf", {"it": 200, "lr": 0.05}),
        ]
    return out


def regressor_variants() -> list[V]:
    return [
        V("dummy-mean", "dummy_reg", {"strategy": "mean"}, weak=True),
        V("dummy-median", "dummy_reg", {"strategy": "median"}, weak=True),
        V("stump-5pct", "tree_reg", {"depth": 1}, fraction=0.05, weak=True),
        V("ridge-one-feature", "ridge", {"alpha": 1.0}, features="one", weak=True),
        V("knn1-5pct", "knn_reg", {"k": 1}, fraction=0.05, weak=True),
        V("tree-d2", "tree_reg", {"depth": 2}),
        V("tree-d5", "tree_reg", {"depth": 5}),
        V("tree-d12", "tree_reg", {"depth": 12}),
        V("knn5-30pct", "knn_reg", {"k": 5}, fraction=0.3),
        V("knn10", "knn_reg", {"k": 10}),
        V("ridge-a1000", "ridge", {"alpha": 1000.0}),
        V("ridge-20pct", "ridge", {"alpha": 1.0}, fraction=0.2),
        V("ridge-half-features", "ridge", {"alpha": 1.0}, features="half"),
        V("ridge-a1", "ridge", {"alpha": 1.0}),
        V("rf10-d3", "rf_reg", {"n": 10, "depth": 3}),
        V("rf100-half-features", "rf_reg", {"n": 100, "depth": None}, features="half"),
        V("rf100", "rf_reg", {"n": 100, "depth": None}),
        V("et100", "et_reg", {"n": 100}),
        V("hgb30-30pct", "hgb_reg", {"it": 30, "lr": 0.1}, fraction=0.3),
        V("hgb100", "hgb_reg", {"it": 100, "lr": 0.1}),
        V("hgb300-lr0.05", "hgb_reg", {"it": 300, "lr": 0.05}),
    ]


def image_variants() -> list[V]:
    return [
        V("dummy-prior", "dummy_clf", {"strategy": "prior"}, weak=True),
        V("dummy-uniform", "dummy_clf", {"strategy": "uniform"}, weak=True),
        V("stump-5pct", "tree_clf", {"depth": 1}, fraction=0.05, weak=True),
        V("logreg-corner-pixel", "logreg", {"C": 1.0}, features="one", weak=True),
        V("knn1-5pct", "knn_clf_raw", {"k": 1}, fraction=0.05, weak=True),
        V("gnb", "gnb"),
        V("tree-d4", "tree_clf", {"depth": 4}),
        V("tree-d12", "tree_clf", {"depth": 12}),
        V("knn3-pool", "knn_clf_raw", {"k": 3}, features="pool"),
        V("knn5-30pct", "knn_clf_raw", {"k": 5}, fraction=0.3),
        V("knn3", "knn_clf_raw", {"k": 3}),
        V("logreg-C0.001", "logreg", {"C": 0.001}),
        V("logreg-20pct", "logreg", {"C": 0.1}, fraction=0.2),
        V("logreg-pool", "logreg", {"C": 0.1}, features="pool"),
        V("logreg-C0.1", "logreg", {"C": 0.1}),
        V("rf10-d4", "rf_clf", {"n": 10, "depth": 4}),
        V("rf100-pool", "rf_clf", {"n": 100, "depth": None}, features="pool"),
        V("rf100", "rf_clf", {"n": 100, "depth": None}),
        V("et200", "et_clf", {"n": 200}),
        V("hgb20-lr0.2", "hgb_clf", {"it": 20, "lr": 0.2}),
    ]


def text_variants(task: str) -> list[V]:
    """``task``: ``clf`` (labels/probabilities) or ``reg``."""
    if task == "reg":
        return [
            V("dummy-mean", "dummy_reg", {"strategy": "mean"}, weak=True),
            V("dummy-median", "dummy_reg", {"strategy": "median"}, weak=True),
            V("ridge-5pct", "ridge_sparse", {"alpha": 1.0}, fraction=0.05, weak=True),
            V("ridge-10-words", "ridge_sparse", {"alpha": 1.0}, features="tiny", weak=True),
            V("tree-d3", "tree_reg", {"depth": 3}),
            V("tree-d8", "tree_reg", {"depth": 8}),
            V("ridge-a100", "ridge_sparse", {"alpha": 100.0}),
            V("ridge-100-words", "ridge_sparse", {"alpha": 1.0}, features="small"),
            V("ridge-20pct", "ridge_sparse", {"alpha": 1.0}, fraction=0.2),
            V("ridge-a10", "ridge_sparse", {"alpha": 10.0}),
            V("ridge-a1", "ridge_sparse", {"alpha": 1.0}),
            V("ridge-bigrams", "ridge_sparse", {"alpha": 1.0}, features="bigrams"),
            V("ridge-bigrams-a3", "ridge_sparse", {"alpha": 3.0}, features="bigrams"),
            V("rf50-d6", "rf_reg", {"n": 50, "depth": 6}, features="small"),
            V("rf100", "rf_reg", {"n": 100, "depth": None}, features="small"),
            V("hgb100-100-words", "hgb_reg", {"it": 100, "lr": 0.1}, features="small_dense"),
            V("hgb100-30pct", "hgb_reg", {"it": 100, "lr": 0.1}, features="small_dense", fraction=0.3),
            V("ridge-a0.1", "ridge_sparse", {"alpha": 0.1}),
            V("ridge-bigrams-50pct", "ridge_sparse", {"alpha": 1.0}, features="bigrams", fraction=0.5),
            V("ridge-a0.01-30pct", "ridge_sparse", {"alpha": 0.01}, fraction=0.3),
        ]
    return [
        V("dummy-prior", "dummy_clf", {"strategy": "prior"}, weak=True),
        V("dummy-uniform", "dummy_clf", {"strategy": "uniform"}, weak=True),
        V("logreg-5pct", "logreg_sparse", {"C": 1.0}, fraction=0.05, weak=True),
        V("logreg-10-words", "logreg_sparse", {"C": 1.0}, features="tiny", weak=True),
        V("tree-d3", "tree_clf", {"depth": 3}),
        V("tree-d10", "tree_clf", {"depth": 10}),
        V("knn5", "knn_clf_raw", {"k": 5}),
        V("mnb-100-words", "mnb", {"alpha": 1.0}, features="small"),
        V("mnb", "mnb", {"alpha": 1.0}),
        V("mnb-alpha0.1", "mnb", {"alpha": 0.1}),
        V("mnb-20pct", "mnb", {"alpha": 1.0}, fraction=0.2),
        V("logreg-C0.01", "logreg_sparse", {"C": 0.01}),
        V("logreg-C1", "logreg_sparse", {"C": 1.0}),
        V("logreg-C10", "logreg_sparse", {"C": 10.0}),
        V("logreg-bigrams", "logreg_sparse", {"C": 10.0}, features="bigrams"),
        V("logreg-30pct", "logreg_sparse", {"C": 10.0}, fraction=0.3),
        V("rf50-d6", "rf_clf", {"n": 50, "depth": 6}, features="small"),
        V("rf100", "rf_clf", {"n": 100, "depth": None}, features="small"),
        V("hgb50", "hgb_clf", {"it": 50, "lr": 0.1}, features="small_dense"),
        V("mnb-bigrams", "mnb", {"alpha": 0.3}, features="bigrams"),
    ]
