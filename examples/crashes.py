"""A solution with a bug: the agent sees the full traceback (`wmrl exec breast-cancer-diagnosis examples/crashes.py`)."""
import os

import pandas as pd

train = pd.read_csv(os.path.join(os.environ["DATA_DIR"], "train.csv"))
print(train["diagnosis"].mean())  # no such column: the target is `malignant`
