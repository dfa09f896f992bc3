"""An agent-style solution for the built-in task `breast-cancer-diagnosis`.

Try it: `wmrl exec breast-cancer-diagnosis examples/breast_cancer_forest.py`. DATA_DIR and
SUBMISSION_PATH are predefined in the sandbox (as variables and in the environment).
"""
import os

import pandas as pd
from sklearn.ensemble import RandomForestClassifier

train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))  # noqa: F821 (predefined by the sandbox)
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))  # noqa: F821
features = [c for c in train.columns if c not in ("id", "malignant")]
model = RandomForestClassifier(n_estimators=200, random_state=0).fit(train[features], train["malignant"])
print(f"trained on {len(train)} rows, {len(features)} features")
pd.DataFrame({"id": test["id"], "malignant": model.predict_proba(test[features])[:, 1]}).to_csv(
    SUBMISSION_PATH, index=False  # noqa: F821
)
