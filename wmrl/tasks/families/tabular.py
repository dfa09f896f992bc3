"""Tabular task families: binary classification, multiclass classification and regression.

Every instance draws, from its seed: a theme (column and target names) or anonymous names, numeric
columns on very different scales, categorical columns (strings, or integer codes whose order means
nothing), missing values, size, class balance, noise, the metric and submission format, and the
*regime* of the generating process, which decides which modelling choices pay:

- ``linear``: an additive function of the measurements (scaled linear models win; trees trail);
- ``interaction``: thresholds and pairs of conditions that only matter together (trees, forests and
  boosting win; linear models see almost nothing);
- ``radial``: the distance of the measurements from a typical profile (degree-2 features, RBF SVMs,
  k-NN on scaled data win; linear models fail).

Categorical effects are additive but unrelated to the codes' order, so one-hot encoding beats ordinal
codes for linear models. The description names the regime in one sentence, as a data scientist's
brief would: a solution that reads it can choose the model family that pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData
from wmrl.tasks.families.surface import (
    Surface,
    draw_surface,
    label_values,
    pick,
    read_block,
    tail_block,
    task_data,
    values_note,
)


@dataclass(frozen=True)
class Theme:
    title: str
    numeric: tuple[str, ...]
    categorical: tuple[tuple[str, tuple[str, ...]], ...]
    binary: tuple[str, str, str]  # target, what 1 means, title
    multiclass: tuple[str, tuple[str, ...], str]  # target, classes, title
    regression: tuple[str, str, str]  # target, what it measures, title


THEMES = (
    Theme("customers", ("tenure_months", "monthly_spend", "support_calls", "age", "visits_per_week", "discount_rate",
                        "account_balance", "days_since_login", "num_products", "satisfaction", "referrals",
                        "late_payments"),
          (("plan", ("basic", "plus", "pro", "family")), ("region", ("north", "south", "east", "west", "central")),
           ("channel", ("web", "store", "phone"))),
          ("churned", "the customer cancels within three months", "Customer Churn"),
          ("segment", ("bronze", "silver", "gold", "platinum"), "Customer Segments"),
          ("annual_value", "the customer's spending over the next year", "Customer Value")),
    Theme("loans", ("income", "loan_amount", "credit_score", "debt_ratio", "age", "years_employed", "open_accounts",
                    "inquiries", "utilization", "term_months", "savings", "dependents"),
          (("purpose", ("car", "home", "education", "business", "medical")), ("housing", ("rent", "own", "mortgage")),
           ("employment", ("salaried", "self_employed", "contract", "retired"))),
          ("defaulted", "the borrower defaults on the loan", "Loan Default"),
          ("risk_grade", ("A", "B", "C", "D", "E"), "Loan Risk Grades"),
          ("interest_rate", "the interest rate the lender set", "Loan Pricing")),
    Theme("machines", ("temperature", "vibration", "pressure", "rpm", "voltage", "current", "humidity",
                       "runtime_hours", "load_pct", "oil_quality", "noise_db", "cycles"),
          (("line", ("L1", "L2", "L3", "L4")), ("vendor", ("acme", "borg", "cyber", "delta")),
           ("shift", ("day", "night", "weekend"))),
          ("failed", "the machine fails within a week", "Machine Failure"),
          ("fault_type", ("none", "bearing", "electrical", "overheating"), "Fault Diagnosis"),
          ("remaining_life", "the hours the machine runs before its next failure", "Remaining Useful Life")),
    Theme("patients", ("age", "bmi", "systolic_bp", "diastolic_bp", "cholesterol", "glucose", "heart_rate",
                       "steps_per_day", "sleep_hours", "creatinine", "hemoglobin", "visits_last_year"),
          (("smoker", ("never", "former", "current")), ("clinic", ("A", "B", "C", "D", "E")),
           ("insurance", ("public", "private", "none"))),
          ("readmitted", "the patient is readmitted within 30 days", "Hospital Readmission"),
          ("risk_level", ("low", "medium", "high"), "Patient Risk Levels"),
          ("length_of_stay", "the days the patient stays in hospital", "Length of Stay")),
    Theme("farms", ("rainfall_mm", "temperature_c", "soil_ph", "nitrogen", "phosphorus", "potassium", "elevation_m",
                    "slope_deg", "sunshine_hours", "irrigation_mm", "plot_area", "organic_matter"),
          (("soil_type", ("clay", "loam", "sand", "silt", "peat")), ("crop", ("wheat", "maize", "barley", "soy")),
           ("district", ("d1", "d2", "d3", "d4", "d5", "d6"))),
          ("good_harvest", "the plot's harvest is above the district's target", "Harvest Success"),
          ("quality_class", ("low", "fair", "good", "premium"), "Crop Quality"),
          ("yield_t_ha", "the plot's yield in tonnes per hectare", "Crop Yield")),
    Theme("houses", ("floor_area", "lot_size", "rooms", "bathrooms", "age_years", "distance_center_km",
                     "garage_spaces", "energy_score", "crime_index", "school_score", "noise_level", "tax_rate"),
          (("neighbourhood", ("harbor", "hills", "oldtown", "park", "station", "campus")),
           ("house_type", ("detached", "semi", "terraced", "flat")), ("heating", ("gas", "electric", "heat_pump", "oil"))),
          ("sold_fast", "the house sells within 30 days", "Quick Sales"),
          ("price_band", ("budget", "mid", "upper", "luxury"), "Price Bands"),
          ("sale_price", "the price the house sold for", "House Prices")),
)

REGIMES = ("linear", "interaction", "radial")
HINTS = {
    "linear": ("Earlier studies found that each measurement adds its own, proportional contribution to the outcome.",
               "The outcome is known to move steadily with the measurements: roughly additive, with no thresholds."),
    "interaction": (("Experts describe the outcome with rules: thresholds on some measurements, and pairs of "
                     "conditions that only matter together."),
                    ("The outcome follows if-then rules: crossing a threshold matters, and some conditions only "
                     "count in combination.")),
    "radial": (("Rows close to a typical profile behave alike; what matters is how far each measurement lies from "
                "its usual value, in either direction."),
               ("Extreme values in either direction count: the outcome depends on the distance of the measurements "
                "from their typical levels.")),
}
_ANONYMOUS = ("f_{:02d}", "x{}", "var_{}", "feat{}", "col_{}")

# (name, model of refcode.MODELS, params, feature choice, training fraction): strong and weak by design
# of the data, not by label; which of them win depends on the instance's regime.
_CLASSIFIERS = (
    ("majority", "dummy_clf", {"strategy": "prior"}, "numeric", 1.0),
    ("logreg-first-column", "logreg", {"C": 1.0}, "one", 1.0),
    ("tree-d2", "tree_clf", {"depth": 2}, "ordinal", 1.0),
    ("gnb", "gnb", {}, "numeric", 1.0),
    ("logreg-unscaled", "logreg_sparse", {"C": 1.0}, "onehot", 1.0),
    ("logreg", "logreg", {"C": 1.0}, "ordinal", 1.0),
    ("logreg", "logreg", {"C": 1.0}, "onehot", 1.0),
    ("logreg-20pct", "logreg", {"C": 1.0}, "onehot", 0.2),
    ("poly2-logreg", "poly_logreg", {"C": 0.1}, "onehot", 1.0),
    ("knn15-unscaled", "knn_clf_raw", {"k": 15, "weights": "uniform"}, "onehot", 1.0),
    ("knn15", "knn_clf", {"k": 15, "weights": "uniform"}, "onehot", 1.0),
    ("svc", "svc", {"C": 1.0}, "onehot", 1.0),
    ("mlp", "mlp_clf", {"h": 32, "alpha": 0.001, "it": 200}, "onehot", 1.0),
    ("tree-full", "tree_clf", {"depth": None}, "ordinal", 1.0),
    ("rf100", "rf_clf", {"n": 100, "depth": None}, "ordinal", 1.0),
    ("rf100", "rf_clf", {"n": 100, "depth": None}, "onehot", 1.0),
    ("hgb100", "hgb_clf", {"it": 100, "lr": 0.1}, "ordinal", 1.0),
    ("hgb100-30pct", "hgb_clf", {"it": 100, "lr": 0.1}, "onehot", 0.3),
)
_REGRESSORS = (
    ("mean", "dummy_reg", {"strategy": "mean"}, "numeric", 1.0),
    ("ridge-first-column", "ridge", {"alpha": 1.0}, "one", 1.0),
    ("tree-d2", "tree_reg", {"depth": 2}, "ordinal", 1.0),
    ("lasso-unscaled", "lasso_raw", {"alpha": 1.0}, "onehot", 1.0),
    ("ridge", "ridge", {"alpha": 1.0}, "ordinal", 1.0),
    ("ridge", "ridge", {"alpha": 1.0}, "onehot", 1.0),
    ("ridge-20pct", "ridge", {"alpha": 1.0}, "onehot", 0.2),
    ("huber", "huber", {}, "onehot", 1.0),
    ("poly2-ridge", "poly_ridge", {"alpha": 1.0}, "onehot", 1.0),
    ("knn15-unscaled", "knn_reg_raw", {"k": 15, "weights": "uniform"}, "onehot", 1.0),
    ("knn15", "knn_reg", {"k": 15, "weights": "uniform"}, "onehot", 1.0),
    ("svr", "svr", {"C": 10.0}, "onehot", 1.0),
    ("mlp", "mlp_reg", {"h": 32, "alpha": 0.001, "it": 200}, "onehot", 1.0),
    ("tree-full", "tree_reg", {"depth": None}, "ordinal", 1.0),
    ("rf100", "rf_reg", {"n": 100, "depth": None}, "ordinal", 1.0),
    ("rf100", "rf_reg", {"n": 100, "depth": None}, "onehot", 1.0),
    ("hgb100", "hgb_reg", {"it": 100, "lr": 0.1}, "ordinal", 1.0),
    ("hgb100-30pct", "hgb_reg", {"it": 100, "lr": 0.1}, "onehot", 0.3),
)

_SELECT = {
    "numeric": "X_train, X_test = train[FEATURES].copy(), test[FEATURES].copy()\n",
    "one": "X_train, X_test = train[FEATURES[:1]].copy(), test[FEATURES[:1]].copy()\n",
    "onehot": '''as_text = {column: str for column in CATEGORICAL}
X_train = pd.get_dummies(train[FEATURES + CATEGORICAL].astype(as_text), columns=CATEGORICAL, dtype=float)
X_test = pd.get_dummies(test[FEATURES + CATEGORICAL].astype(as_text), columns=CATEGORICAL, dtype=float)
X_test = X_test.reindex(columns=X_train.columns, fill_value=0.0)
''',
    "ordinal": '''X_train, X_test = train[FEATURES + CATEGORICAL].copy(), test[FEATURES + CATEGORICAL].copy()
for column in CATEGORICAL:
    codes = {value: code for code, value in enumerate(sorted(train[column].astype(str).unique()))}
    X_train[column] = X_train[column].astype(str).map(codes)
    X_test[column] = X_test[column].astype(str).map(codes).fillna(-1)
''',
}
_TO_ARRAY = '''X_train = X_train.to_numpy(dtype=float)
X_test = X_test.to_numpy(dtype=float)
'''
_IMPUTE_TO_ARRAY = '''FILL = X_train.median()
X_train = X_train.fillna(FILL).to_numpy(dtype=float)
X_test = X_test.fillna(FILL).to_numpy(dtype=float)
'''


def _latent(rng: np.random.Generator, z: np.ndarray, regime: str) -> np.ndarray:
    """A standardised function of the informative columns ``z`` (rows x columns) of the given regime."""
    n, d = z.shape
    if regime == "linear":
        f = z @ (rng.choice([-1.0, 1.0], d) * rng.uniform(0.5, 1.5, d))
    elif regime == "interaction":
        above = z > rng.uniform(-0.6, 0.6, d)
        f = np.zeros(n)
        for j in range(0, d - 1, 2):  # an exclusive-or of two threshold conditions
            f += rng.uniform(1.0, 2.0) * np.where(above[:, j] ^ above[:, j + 1], 1.0, -1.0)
        if d % 2:
            f += rng.uniform(1.0, 2.0) * np.where(above[:, -1], 1.0, -1.0)
    else:
        f = -((z - rng.uniform(-0.5, 0.5, d)) ** 2) @ rng.uniform(0.5, 1.5, d)
    return (f - f.mean()) / (f.std() + 1e-12)


def _standardise(f: np.ndarray) -> np.ndarray:
    return (f - f.mean()) / (f.std() + 1e-12)


@dataclass
class _Table:
    features: pd.DataFrame
    numeric: list[str]
    categorical: list[str]
    int_coded: list[str]
    missing: bool
    latents: list[np.ndarray]  # one standardised latent per output (one, or one per class)


def _table(rng: np.random.Generator, theme: Theme, anonymous: bool, regime: str, n: int, outputs: int) -> _Table:
    n_num = int(rng.integers(4, 11))
    numeric = [str(c) for c in rng.permutation(np.array(theme.numeric))[:n_num]]
    cats = [theme.categorical[i] for i in rng.permutation(len(theme.categorical))[: pick(rng, (0, 1, 2, 2, 3))]]
    if anonymous:
        style = pick(rng, _ANONYMOUS)
        numeric = [style.format(i) for i in range(n_num)]
        cats = [(f"cat_{chr(97 + i)}", levels) for i, (_, levels) in enumerate(cats)]
    z = rng.normal(size=(n, n_num))
    informative = rng.permutation(n_num)[: int(rng.integers(2, min(5, n_num) + 1))]
    frame = pd.DataFrame(index=range(n))
    for j, name in enumerate(numeric):
        scale = 10 ** rng.uniform(-1.5, 3.0)
        raw = z[:, j] * scale + rng.uniform(-1.0, 3.0) * scale
        decimals = max(0, 3 - int(np.floor(np.log10(scale))))
        frame[name] = np.round(raw).astype(int) if scale > 5 and rng.random() < 0.4 else np.round(raw, decimals)
    codes = [rng.choice(len(levels), size=n, p=rng.dirichlet(np.full(len(levels), 3.0))) for _, levels in cats]
    int_coded = []
    for (name, levels), code in zip(cats, codes):
        if rng.random() < 0.4:  # integer codes: their order means nothing (the effects below ignore it)
            frame[name] = rng.permutation(len(levels))[code] + 1
            int_coded.append(name)
        else:
            frame[name] = np.array(levels)[code]
    latents = []
    for _ in range(outputs):
        f = _latent(rng, z[:, informative], regime)
        for (_, levels), code in zip(cats, codes):
            f = f + rng.normal(0.0, 0.7, len(levels))[code]
        latents.append(_standardise(f))
    missing = bool(rng.random() < 0.3)
    if missing:
        for name in rng.permutation(np.array(numeric))[: max(1, n_num // 3)]:
            frame.loc[rng.random(n) < rng.uniform(0.03, 0.1), str(name)] = np.nan
    return _Table(frame, numeric, [name for name, _ in cats], int_coded, missing, latents)


# Schema "discovered": the columns by dtype; integers with few distinct values are category codes.
_DISCOVER_COLUMNS = '''COLUMNS = [column for column in test.columns if column != ID]
CATEGORICAL = [column for column in COLUMNS if not pd.api.types.is_numeric_dtype(train[column])
               or (pd.api.types.is_integer_dtype(train[column]) and train[column].nunique() <= MAX_CODES)]
FEATURES = [column for column in COLUMNS if column not in CATEGORICAL]
'''
MAX_CODES = 12  # more levels than any theme's categorical column has; fewer than an integer measurement takes


def _loader(surface: Surface, target: str, table: _Table) -> tuple[str, dict[str, str]]:
    if surface.discovered:
        head = read_block(surface) + f"MAX_CODES = {MAX_CODES}\n" + _DISCOVER_COLUMNS
    else:
        head = read_block(surface) + f"FEATURES = {table.numeric!r}\n"
        if table.categorical:
            head += f"CATEGORICAL = {table.categorical!r}\n"
    choices = {k: v for k, v in _SELECT.items() if table.categorical or k in ("numeric", "one")}
    finish = _IMPUTE_TO_ARRAY if table.missing else _TO_ARRAY
    return head + "__FEATURES__" + finish + tail_block(surface, target), choices


def _references(specs: tuple, has_categorical: bool) -> list[ReferenceSpec]:
    out: dict[str, ReferenceSpec] = {}
    for base, model, params, features, fraction in specs:
        if not has_categorical and features in ("onehot", "ordinal"):
            features = "numeric"
        name = f"{base}-{features}" if has_categorical and features in ("onehot", "ordinal") else base
        out.setdefault(name, ReferenceSpec(name, model, dict(params), fraction, features))
    return list(out.values())


def _notes(surface: Surface, target: str, table: _Table) -> list[str]:
    notes = [f"`{surface.train_file}` holds the id column `{surface.id_column}`, the target `{target}`, "
             f"{len(table.numeric)} numeric columns ({', '.join(f'`{c}`' for c in table.numeric)})"
             + (f" and {len(table.categorical)} categorical ones ({', '.join(f'`{c}`' for c in table.categorical)})."
                if table.categorical else ".")]
    if table.int_coded:
        notes.append(f"{', '.join(f'`{c}`' for c in table.int_coded)}: category codes stored as integers; their "
                     "order means nothing.")
    if table.missing:
        notes.append("Some numeric values are missing (empty cells), in both files.")
    return notes


def _instance(rng: np.random.Generator, task_id: str, split: str, seed: int, problem: str, schema: str) -> TaskData:
    theme = pick(rng, THEMES)
    anonymous = bool(rng.random() < 0.35)
    regime = pick(rng, REGIMES)
    n = int(np.exp(rng.uniform(np.log(500), np.log(2500))))
    surface = draw_surface(rng, problem, schema)
    noise = rng.uniform(0.2, 0.9)
    if problem == "regression":
        target, what, title = theme.regression
        target = pick(rng, ("target", "y", "value")) if anonymous else target
        table = _table(rng, theme, anonymous, regime, n, 1)
        tails = rng.standard_t(3, n) if rng.random() < 0.3 else rng.normal(size=n)
        spread = 10 ** rng.uniform(0.0, 3.0)
        y = np.round((table.latents[0] + noise * tails) * spread + rng.uniform(0.0, 5.0) * spread, 3)
        summary, values = f"Predict {what} (`{target}`).", []
        specs = _REGRESSORS
    else:
        if problem == "binary":
            target, what, title = theme.binary
            classes: tuple[str, ...] = ("no", "yes")
        else:
            target, classes, title = theme.multiclass
            what = f"the {target.replace('_', ' ')} of each row ({', '.join(classes)})"
        target = pick(rng, ("target", "label", "outcome")) if anonymous else target
        table = _table(rng, theme, anonymous, regime, n, 1 if problem == "binary" else len(classes))
        if problem == "binary":
            positive = pick(rng, (0.5, 0.35, 0.2, 0.1))
            score = table.latents[0] + noise * rng.normal(size=n)
            index = (score > np.quantile(score, 1 - positive)).astype(int)
            summary = f"Predict whether {what} (`{target}`)."
        else:
            logits = np.column_stack(table.latents) * 2.0 + rng.normal(0.0, 0.6, len(classes))
            index = np.argmax(logits + noise * rng.gumbel(size=logits.shape), axis=1)
            summary = f"Predict {what}."
        values = label_values(rng, classes, surface.output)
        y = np.array(values, dtype=object)[index]
        y = y.astype(int) if isinstance(values[0], int) else y.astype(str)
        specs = _CLASSIFIERS
    loader, choices = _loader(surface, target, table)
    notes = _notes(surface, target, table) + ([values_note(target, values, y, surface.output)] if values else [])
    return task_data(
        task_id, f"{title}" if not anonymous else f"{title} (anonymised)", split, "tabular", surface,
        f"{summary} {pick(rng, HINTS[regime])}", f"wmrl.tasks.families.tabular ({problem}, {regime})",
        table.features, y, target, seed, loader, choices, _references(specs, bool(table.categorical)), notes,
    )


def tabular_binary(task_id: str, split: str, seed: int, rng: np.random.Generator, schema: str = "literal") -> TaskData:
    return _instance(rng, task_id, split, seed, "binary", schema)


def tabular_multiclass(task_id: str, split: str, seed: int, rng: np.random.Generator, schema: str = "literal") -> TaskData:
    return _instance(rng, task_id, split, seed, "multiclass", schema)


def regression(task_id: str, split: str, seed: int, rng: np.random.Generator, schema: str = "literal") -> TaskData:
    return _instance(rng, task_id, split, seed, "regression", schema)
