"""Reference solutions as standalone Python files that follow the agent's contract.

A solution = header (read ``DATA_DIR``/``SUBMISSION_PATH``) + the family's loader (defines
``X_train``, ``y_train``, ``X_test``, ``test_ids``) + a model from ``MODELS`` + the output block
for the task's submission format. The files are plain scripts: they run unchanged in the sandbox,
under ``python`` with the two environment variables set, or in-process during the pool build.
"""

from __future__ import annotations

from wmrl.tasks.builtin.spec import TaskData, Variant

HEADER = '''"""Reference solution `{name}` for task `{task_id}`{weak}."""
import os
import warnings

import numpy as np
import pandas as pd

warnings.filterwarnings("ignore")
DATA_DIR = os.environ["DATA_DIR"]
SUBMISSION_PATH = os.environ["SUBMISSION_PATH"]
'''

_SCALED = "from sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\n"

# key -> (imports, expression); expressions are formatted with Variant.params.
MODELS: dict[str, tuple[str, str]] = {
    "dummy_clf": ("from sklearn.dummy import DummyClassifier\n", 'DummyClassifier(strategy="{strategy}", random_state=0)'),
    "logreg": (_SCALED + "from sklearn.linear_model import LogisticRegression\n",
               "make_pipeline(StandardScaler(), LogisticRegression(C={C}, max_iter=2000))"),
    "logreg_sparse": ("from sklearn.linear_model import LogisticRegression\n", "LogisticRegression(C={C}, max_iter=2000)"),
    "knn_clf": (_SCALED + "from sklearn.neighbors import KNeighborsClassifier\n",
                "make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors={k}))"),
    "knn_clf_raw": ("from sklearn.neighbors import KNeighborsClassifier\n", "KNeighborsClassifier(n_neighbors={k})"),
    "gnb": ("from sklearn.naive_bayes import GaussianNB\n", "GaussianNB()"),
    "mnb": ("from sklearn.naive_bayes import MultinomialNB\n", "MultinomialNB(alpha={alpha})"),
    "tree_clf": ("from sklearn.tree import DecisionTreeClassifier\n", "DecisionTreeClassifier(max_depth={depth}, random_state=0)"),
    "rf_clf": ("from sklearn.ensemble import RandomForestClassifier\n",
               "RandomForestClassifier(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "et_clf": ("from sklearn.ensemble import ExtraTreesClassifier\n",
               "ExtraTreesClassifier(n_estimators={n}, random_state=0)"),
    "hgb_clf": ("from sklearn.ensemble import HistGradientBoostingClassifier\n",
                "HistGradientBoostingClassifier(max_iter={it}, learning_rate={lr}, random_state=0)"),
    "dummy_reg": ("from sklearn.dummy import DummyRegressor\n", 'DummyRegressor(strategy="{strategy}")'),
    "ridge": (_SCALED + "from sklearn.linear_model import Ridge\n", "make_pipeline(StandardScaler(), Ridge(alpha={alpha}))"),
    "ridge_sparse": ("from sklearn.linear_model import Ridge\n", "Ridge(alpha={alpha})"),
    "knn_reg": (_SCALED + "from sklearn.neighbors import KNeighborsRegressor\n",
                "make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors={k}))"),
    "tree_reg": ("from sklearn.tree import DecisionTreeRegressor\n", "DecisionTreeRegressor(max_depth={depth}, random_state=0)"),
    "rf_reg": ("from sklearn.ensemble import RandomForestRegressor\n",
               "RandomForestRegressor(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "et_reg": ("from sklearn.ensemble import ExtraTreesRegressor\n", "ExtraTreesRegressor(n_estimators={n}, random_state=0)"),
    "hgb_reg": ("from sklearn.ensemble import HistGradientBoostingRegressor\n",
                "HistGradientBoostingRegressor(max_iter={it}, learning_rate={lr}, random_state=0)"),
}

OUTPUTS: dict[str, str] = {
    "label": '''pred = model.predict(X_test)
pd.DataFrame({"id": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "value": '''pred = model.predict(X_test)
pd.DataFrame({"id": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "prob_binary": '''proba = model.predict_proba(X_test)
classes = list(model.classes_)
pred = proba[:, classes.index(1)] if 1 in classes else np.zeros(len(test_ids))
pd.DataFrame({"id": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "prob_multi": '''sample = pd.read_csv(os.path.join(DATA_DIR, "sample_submission.csv"))
proba = model.predict_proba(X_test)
submission = pd.DataFrame({"id": test_ids})
for column in sample.columns[1:]:
    submission[column] = 0.0
for k, label in enumerate(model.classes_):
    submission[f"__TARGET___{label}"] = proba[:, k]
submission.to_csv(SUBMISSION_PATH, index=False)
''',
}

FIT = '''if FRACTION < 1:
    keep = np.random.default_rng(0).permutation(len(y_train))[: max(2, int(FRACTION * len(y_train)))]
    X_train, y_train = X_train[keep], y_train[keep]
model = __MODEL__
model.fit(X_train, y_train)
'''


def make_code(data: TaskData, variant: Variant) -> str:
    imports, expression = MODELS[variant.model]
    if variant.features not in data.feature_choices:
        raise KeyError(f"{data.task_id}/{variant.name}: unknown feature choice {variant.features!r}")
    loader = data.loader.replace("__FEATURES__", data.feature_choices[variant.features])
    weak = " (deliberately weak)" if variant.weak else ""
    parts = [
        HEADER.format(name=variant.name, task_id=data.task_id, weak=weak),
        imports,
        loader.strip() + "\n",
        f"FRACTION = {variant.fraction!r}\n",
        FIT.replace("__MODEL__", expression.format(**variant.params)),
        OUTPUTS[data.output].replace("__TARGET__", data.target),
    ]
    return "\n".join(parts)
