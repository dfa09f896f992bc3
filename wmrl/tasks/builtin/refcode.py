"""Reference solutions as standalone Python files that follow the agent's contract.

A solution = header (read ``DATA_DIR``/``SUBMISSION_PATH``) + the family's loader (defines
``X_train``, ``y_train``, ``X_test``, ``test_ids``) + the training fraction (and, for some
deliberately useless references, permuted labels) + a model from ``MODELS`` + the output block
for the task's submission format. The files are plain scripts: they run unchanged in the sandbox,
under ``python`` with the two environment variables set, or in-process during the pool build.
"""

from __future__ import annotations

from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData

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
_POLY = _SCALED.replace("StandardScaler", "PolynomialFeatures, StandardScaler")


def _scaled(imports: str, expression: str) -> tuple[str, str]:
    """A model behind a StandardScaler (for features on different scales)."""
    return _SCALED + imports, f"make_pipeline(StandardScaler(), {expression})"


_LOGREG = "from sklearn.linear_model import LogisticRegression\n"
_KNN_CLF = "from sklearn.neighbors import KNeighborsClassifier\n"
_KNN_REG = "from sklearn.neighbors import KNeighborsRegressor\n"
_MLP_CLF = "from sklearn.neural_network import MLPClassifier\n"
_MLP_REG = "from sklearn.neural_network import MLPRegressor\n"
_SGD_CLF = "from sklearn.linear_model import SGDClassifier\n"
_SVC = "from sklearn.svm import SVC\n"
_RIDGE = "from sklearn.linear_model import Ridge\n"

# key -> (imports, expression); expressions are formatted with ReferenceSpec.params. A ``_raw`` key is
# the same model without the scaler (pixels in [0, 1], tf-idf vectors: already on one scale).
# Every classifier has ``predict_proba`` (probability submissions need it).
MODELS: dict[str, tuple[str, str]] = {
    # classifiers
    "dummy_clf": ("from sklearn.dummy import DummyClassifier\n", 'DummyClassifier(strategy="{strategy}", random_state=0)'),
    "logreg": _scaled(_LOGREG, "LogisticRegression(C={C}, max_iter=2000)"),
    "logreg_sparse": (_LOGREG, "LogisticRegression(C={C}, max_iter=2000)"),
    "poly_logreg": (_POLY + _LOGREG, ("make_pipeline(StandardScaler(), PolynomialFeatures(2), StandardScaler(), "
                                      "LogisticRegression(C={C}, max_iter=2000))")),
    "sgd_clf": _scaled(_SGD_CLF, 'SGDClassifier(loss="log_loss", alpha={alpha}, random_state=0)'),
    "sgd_clf_raw": (_SGD_CLF, 'SGDClassifier(loss="log_loss", alpha={alpha}, random_state=0)'),
    "knn_clf": _scaled(_KNN_CLF, 'KNeighborsClassifier(n_neighbors={k}, weights="{weights}")'),
    "knn_clf_raw": (_KNN_CLF, 'KNeighborsClassifier(n_neighbors={k}, weights="{weights}")'),
    "gnb": ("from sklearn.naive_bayes import GaussianNB\n", "GaussianNB()"),
    "bnb": _scaled("from sklearn.naive_bayes import BernoulliNB\n", "BernoulliNB()"),  # above/below the mean
    "bnb_raw": ("from sklearn.naive_bayes import BernoulliNB\n", "BernoulliNB(binarize={binarize})"),
    "mnb": ("from sklearn.naive_bayes import MultinomialNB\n", "MultinomialNB(alpha={alpha})"),
    "cnb": ("from sklearn.naive_bayes import ComplementNB\n", "ComplementNB(alpha={alpha})"),
    "lda": ("from sklearn.discriminant_analysis import LinearDiscriminantAnalysis\n", "LinearDiscriminantAnalysis()"),
    "qda": ("from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis\n",
            "QuadraticDiscriminantAnalysis(reg_param={reg})"),
    "svc": _scaled(_SVC, "SVC(C={C}, probability=True, random_state=0)"),
    "svc_raw": (_SVC, "SVC(C={C}, probability=True, random_state=0)"),
    "mlp_clf": _scaled(_MLP_CLF, "MLPClassifier(hidden_layer_sizes=({h},), alpha={alpha}, max_iter={it}, random_state=0)"),
    "mlp_clf_raw": (_MLP_CLF, "MLPClassifier(hidden_layer_sizes=({h},), alpha={alpha}, max_iter={it}, random_state=0)"),
    "tree_clf": ("from sklearn.tree import DecisionTreeClassifier\n", "DecisionTreeClassifier(max_depth={depth}, random_state=0)"),
    "rf_clf": ("from sklearn.ensemble import RandomForestClassifier\n",
               "RandomForestClassifier(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "et_clf": ("from sklearn.ensemble import ExtraTreesClassifier\n",
               "ExtraTreesClassifier(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "bag_clf": ("from sklearn.ensemble import BaggingClassifier\n", "BaggingClassifier(n_estimators={n}, random_state=0)"),
    "ada_clf": ("from sklearn.ensemble import AdaBoostClassifier\n",
                "AdaBoostClassifier(n_estimators={n}, learning_rate={lr}, random_state=0)"),
    "gb_clf": ("from sklearn.ensemble import GradientBoostingClassifier\n",
               "GradientBoostingClassifier(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "hgb_clf": ("from sklearn.ensemble import HistGradientBoostingClassifier\n",
                "HistGradientBoostingClassifier(max_iter={it}, learning_rate={lr}, random_state=0)"),
    # regressors
    "dummy_reg": ("from sklearn.dummy import DummyRegressor\n", 'DummyRegressor(strategy="{strategy}")'),
    "linreg": _scaled("from sklearn.linear_model import LinearRegression\n", "LinearRegression()"),
    "ridge": _scaled(_RIDGE, "Ridge(alpha={alpha})"),
    "ridge_sparse": (_RIDGE, "Ridge(alpha={alpha})"),
    "poly_ridge": (_POLY + _RIDGE, "make_pipeline(StandardScaler(), PolynomialFeatures(2), Ridge(alpha={alpha}))"),
    "lasso": _scaled("from sklearn.linear_model import Lasso\n", "Lasso(alpha={alpha})"),
    "lasso_raw": ("from sklearn.linear_model import Lasso\n", "Lasso(alpha={alpha})"),
    "enet": _scaled("from sklearn.linear_model import ElasticNet\n", "ElasticNet(alpha={alpha}, l1_ratio=0.5)"),
    "huber": _scaled("from sklearn.linear_model import HuberRegressor\n", "HuberRegressor(max_iter=1000)"),
    "bayes_ridge": _scaled("from sklearn.linear_model import BayesianRidge\n", "BayesianRidge()"),
    "sgd_reg_raw": ("from sklearn.linear_model import SGDRegressor\n", "SGDRegressor(alpha={alpha}, random_state=0)"),
    "linsvr_raw": ("from sklearn.svm import LinearSVR\n", "LinearSVR(C={C}, max_iter=5000, random_state=0)"),
    "svr": _scaled("from sklearn.svm import SVR\n", "SVR(C={C})"),
    "knn_reg": _scaled(_KNN_REG, 'KNeighborsRegressor(n_neighbors={k}, weights="{weights}")'),
    "knn_reg_raw": (_KNN_REG, 'KNeighborsRegressor(n_neighbors={k}, weights="{weights}")'),
    "mlp_reg": _scaled(_MLP_REG, "MLPRegressor(hidden_layer_sizes=({h},), alpha={alpha}, max_iter={it}, random_state=0)"),
    "mlp_reg_raw": (_MLP_REG, "MLPRegressor(hidden_layer_sizes=({h},), alpha={alpha}, max_iter={it}, random_state=0)"),
    "tree_reg": ("from sklearn.tree import DecisionTreeRegressor\n", "DecisionTreeRegressor(max_depth={depth}, random_state=0)"),
    "rf_reg": ("from sklearn.ensemble import RandomForestRegressor\n",
               "RandomForestRegressor(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "et_reg": ("from sklearn.ensemble import ExtraTreesRegressor\n",
               "ExtraTreesRegressor(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "bag_reg": ("from sklearn.ensemble import BaggingRegressor\n", "BaggingRegressor(n_estimators={n}, random_state=0)"),
    "ada_reg": ("from sklearn.ensemble import AdaBoostRegressor\n", "AdaBoostRegressor(n_estimators={n}, random_state=0)"),
    "gb_reg": ("from sklearn.ensemble import GradientBoostingRegressor\n",
               "GradientBoostingRegressor(n_estimators={n}, max_depth={depth}, random_state=0)"),
    "hgb_reg": ("from sklearn.ensemble import HistGradientBoostingRegressor\n",
                "HistGradientBoostingRegressor(max_iter={it}, learning_rate={lr}, random_state=0)"),
}

OUTPUTS: dict[str, str] = {
    "label": '''pred = model.predict(X_test)
pd.DataFrame({"__ID__": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "value": '''pred = model.predict(X_test)
pd.DataFrame({"__ID__": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "prob_binary": '''proba = model.predict_proba(X_test)
classes = list(model.classes_)
pred = proba[:, classes.index(1)] if 1 in classes else np.zeros(len(test_ids))
pd.DataFrame({"__ID__": test_ids, "__TARGET__": pred}).to_csv(SUBMISSION_PATH, index=False)
''',
    "prob_multi": '''sample = pd.read_csv(os.path.join(DATA_DIR, "sample_submission.csv"))
proba = model.predict_proba(X_test)
submission = pd.DataFrame({"__ID__": test_ids})
for column in sample.columns[1:]:
    submission[column] = 0.0
for k, label in enumerate(model.classes_):
    submission[f"__TARGET___{label}"] = proba[:, k]
submission.to_csv(SUBMISSION_PATH, index=False)
''',
}

SUBSET = '''if FRACTION < 1:
    keep = np.random.default_rng(0).permutation(len(y_train))[: max(2, int(FRACTION * len(y_train)))]
    X_train, y_train = X_train[keep], y_train[keep]
'''

# Deliberately useless: the model learns the label distribution but no link to the features.
SHUFFLE = '''y_train = np.random.default_rng(1).permutation(y_train)  # labels no longer match their rows
'''

FIT = '''model = __MODEL__
model.fit(X_train, y_train)
'''


def make_code(data: TaskData, variant: ReferenceSpec) -> str:
    imports, expression = MODELS[variant.model]
    if variant.features not in data.feature_choices:
        raise KeyError(f"{data.task_id}/{variant.name}: unknown feature choice {variant.features!r}")
    loader = data.loader.replace("__FEATURES__", data.feature_choices[variant.features])
    weak = " (deliberately weak)" if variant.weak else ""
    fit = FIT.replace("__MODEL__", expression.format(**variant.params))
    discovered = data.reference_style == "discovered"
    parts = [
        HEADER.format(name=variant.name, task_id=data.task_id, weak=weak),
        "" if discovered else imports,
        loader.strip() + "\n",
        f"FRACTION = {variant.fraction!r}\n" + SUBSET,
        SHUFFLE if variant.shuffle_labels else "",
        imports + fit if discovered else fit,  # import and constructor adjacent: written together
        _output_block(data),
    ]
    return "\n".join(part for part in parts if part)


def _output_block(data: TaskData) -> str:
    block = OUTPUTS[data.output]
    if data.reference_style == "discovered":  # the loader's ID and TARGET variables, not literal names
        block = block.replace('"__ID__"', "ID").replace('"__TARGET__"', "TARGET").replace("__TARGET__", "{TARGET}")
    return block.replace("__TARGET__", data.target).replace("__ID__", data.id_column)
