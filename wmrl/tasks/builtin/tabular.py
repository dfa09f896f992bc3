"""Tabular task families: scikit-learn's bundled datasets and generators, statsmodels' datasets."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import statsmodels.api as sm
from sklearn import datasets

from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData, classification_frames
from wmrl.tasks.builtin.variants import classifier_variants, regressor_variants

LOADER = '''train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
FEATURES = __FEATURES__
X_train = train[FEATURES].to_numpy(dtype=float)
y_train = train["__TARGET__"].to_numpy()
X_test = test[FEATURES].to_numpy(dtype=float)
test_ids = test["id"]
'''


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def _tabular(
    task_id: str, name: str, split: str, metric: str, output: str, features: pd.DataFrame, y: np.ndarray,
    target: str, summary: str, source: str, seed: int, variants: list[ReferenceSpec], test_frac: float = 0.3,
) -> TaskData:
    features = features.rename(columns=_snake).reset_index(drop=True)
    columns = list(features.columns)
    train, test, answers, sample = classification_frames(features, np.asarray(y), target, output, seed, test_frac)
    return TaskData(
        task_id=task_id, name=name, category="tabular", split=split, metric=metric, summary=summary,
        source=source, output=output, train=train, test=test, answers=answers, sample_submission=sample,
        loader=LOADER.replace("__TARGET__", target), variants=variants, target=target,
        feature_choices={"all": repr(columns), "half": repr(columns[: max(1, len(columns) // 2)]),
                         "two": repr(columns[:2]), "one": repr(columns[:1]), "last": repr(columns[-1:])},
        data_notes=[f"`train.csv` has {len(columns)} numeric feature columns, `id` and the target `{target}`."],
    )


def breast_cancer() -> TaskData:
    bunch = datasets.load_breast_cancer(as_frame=True)
    y = (bunch.target.to_numpy() == 0).astype(int)  # 1 = malignant
    return _tabular(
        "breast-cancer-diagnosis", "Breast Cancer Diagnosis", "train", "roc_auc", "prob_binary", bunch.data, y,
        "malignant", "Predict the probability that a breast mass is malignant from 30 measurements of its cell nuclei "
        "(digitised fine-needle aspirate images).", "sklearn.datasets.load_breast_cancer", 101,
        classifier_variants(),
    )


def wine() -> TaskData:
    bunch = datasets.load_wine(as_frame=True)
    return _tabular(
        "wine-cultivar", "Wine Cultivar", "heldout", "log_loss", "prob_multi", bunch.data, bunch.target.to_numpy(),
        "cultivar", "Predict, for each wine, the probability of each of the three cultivars it was grown from, "
        "given 13 results of its chemical analysis.", "sklearn.datasets.load_wine", 102, classifier_variants(),
    )


def diabetes() -> TaskData:
    bunch = datasets.load_diabetes(as_frame=True, scaled=False)
    return _tabular(
        "diabetes-progression", "Diabetes Progression", "train", "rmse", "value", bunch.data, bunch.target.to_numpy(),
        "progression", "Predict a quantitative measure of diabetes progression one year after baseline from age, "
        "sex, body-mass index, blood pressure and six blood serum measurements.", "sklearn.datasets.load_diabetes",
        103, regressor_variants(),
    )


def synthetic_classification() -> TaskData:
    X, y = datasets.make_classification(
        n_samples=3000, n_features=20, n_informative=6, n_redundant=4, n_classes=3, flip_y=0.05,
        class_sep=0.8, random_state=104,
    )
    frame = pd.DataFrame(np.round(X, 5), columns=[f"f{i:02d}" for i in range(X.shape[1])])
    return _tabular(
        "synthetic-multiclass", "Synthetic Multiclass", "train", "accuracy", "label", frame, y, "label",
        "Classify each row into one of three classes from 20 anonymised numeric features; some are "
        "informative, some redundant and some pure noise.", "sklearn.datasets.make_classification", 104,
        classifier_variants(),
    )


def friedman() -> TaskData:
    X, y = datasets.make_friedman1(n_samples=2000, n_features=10, noise=1.0, random_state=105)
    frame = pd.DataFrame(np.round(X, 5), columns=[f"x{i}" for i in range(X.shape[1])])
    return _tabular(
        "friedman-regression", "Friedman Regression", "heldout", "mae", "value", frame, np.round(y, 5), "y",
        "Predict a noisy non-linear response from ten uniform inputs, only five of which matter.",
        "sklearn.datasets.make_friedman1", 105, regressor_variants(),
    )


def hastie() -> TaskData:
    X, y = datasets.make_hastie_10_2(n_samples=3000, random_state=106)
    frame = pd.DataFrame(np.round(X, 5), columns=[f"x{i}" for i in range(X.shape[1])])
    return _tabular(
        "hastie-binary", "Hastie Binary", "train", "log_loss", "prob_binary", frame, (y > 0).astype(int), "target",
        "Predict the probability of the positive class; the class depends on the squared norm of ten Gaussian "
        "inputs, so the boundary is a sphere.", "sklearn.datasets.make_hastie_10_2", 106, classifier_variants(),
    )


def affairs() -> TaskData:
    data = sm.datasets.fair.load_pandas().data.sample(n=4000, random_state=107).reset_index(drop=True)
    y = (data.pop("affairs").to_numpy() > 0).astype(int)
    data = data[["occupation", "occupation_husb", "educ", "religious", "children", "age", "yrs_married", "rate_marriage"]]
    return _tabular(
        "marriage-affairs", "Marriage Affairs", "train", "roc_auc", "prob_binary", data, y, "had_affair",
        "Predict the probability that a respondent of the 1974 Redbook survey reports an extramarital affair, "
        "from marriage rating, age, years married, children, religiousness, education and occupations.",
        "statsmodels.datasets.fair", 107, classifier_variants(),
    )


def anes_party() -> TaskData:
    data = sm.datasets.anes96.load_pandas().data
    y = data["PID"].astype(int).to_numpy()
    features = data[["popul", "TVnews", "age", "educ", "income", "selfLR", "ClinLR", "DoleLR", "vote"]]
    return _tabular(
        "anes96-party", "ANES 1996 Party Identification", "train", "macro_f1", "label", features, y, "party_id",
        "Predict each respondent's party identification (0 strong Democrat ... 6 strong Republican) from the 1996 "
        "American National Election Survey: demographics, TV news habits, left-right self-placement and "
        "placements of the candidates.", "statsmodels.datasets.anes96", 108, classifier_variants(big=False),
    )


FAMILIES = (breast_cancer, wine, diabetes, synthetic_classification, friedman, hastie, affairs, anes_party)
