"""Small-image classification family: grayscale PNG files in a folder or a zip, drawn from a seed.

The regime decides which image features pay, and the description says it in one sentence:

- ``position``: a bright spot at one of a few fixed places (raw or pooled pixels, linear models);
- ``shape``: circles, squares and triangles anywhere in the frame, at any size (translation-invariant
  features: gradient-orientation histograms; raw pixels fail);
- ``texture``: stripes of random phase and frequency whose orientation is the class (gradient
  orientations; row and column profiles tell only horizontal from vertical).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from skimage.draw import disk, polygon, rectangle

from wmrl.tasks.builtin.images import _READ_FOLDER, _READ_ZIP, deterministic_zip, png_bytes
from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData
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

REGIMES = ("position", "shape", "texture")
CLASSES = {
    "position": ("top_left", "top_right", "bottom_left", "bottom_right"),
    "shape": ("circle", "square", "triangle"),
    "texture": ("horizontal", "vertical", "diagonal", "antidiagonal"),
}
SUMMARIES = {
    "position": ("Sensor Spots", "Tell where the bright spot lies in each noisy sensor frame"),
    "shape": ("Noisy Shapes", "Tell which shape each noisy image shows"),
    "texture": ("Stripe Orientation", "Tell the orientation of the stripes in each noisy image"),
}
HINTS = {
    "position": ("The spot always sits at one of a few fixed places; a dimmer distractor may appear anywhere.",
                 "Where the bright spot is matters, not its shape; fixed positions, small jitter."),
    "shape": ("Shapes appear anywhere in the frame and at any size: their position carries no information.",
              "Each shape is drawn at a random place and size; only its outline tells the class."),
    "texture": ("Stripe phase and spacing vary at random; only their orientation tells the class.",
                "The stripes shift and change width from image to image; their direction is the label."),
}
FOLDERS = ("images", "imgs", "pictures", "frames")

_POOL = '''def featurize(images):
    k = __K__
    h, w = images.shape[1] // k * k, images.shape[2] // k * k
    pooled = images[:, :h, :w].reshape(len(images), h // k, k, w // k, k).mean(axis=(2, 4))
    return pooled.reshape(len(images), -1)
'''
CHOICES = {
    "all": "def featurize(images):\n    return images.reshape(len(images), -1)\n",
    "one": "def featurize(images):\n    return images[:, 0, :1]\n",
    "pool": _POOL.replace("__K__", "2"),
    "pool4": _POOL.replace("__K__", "4"),
    "profiles": "def featurize(images):\n    return np.hstack([images.mean(axis=2), images.mean(axis=1)])\n",
    "hist": ("def featurize(images):\n"
             "    return np.stack([np.histogram(image, bins=16, range=(0.0, 1.0))[0] for image in images]) / "
             "images[0].size\n"),
    "gradients": '''def featurize(images):
    dy, dx = np.gradient(images, axis=(1, 2))
    magnitude = np.hypot(dx, dy)
    angle = np.mod(np.arctan2(dy, dx), np.pi)  # orientation without sign
    bins = np.minimum((angle / np.pi * 8).astype(int), 7)
    hist = np.stack([np.bincount(b.ravel(), weights=m.ravel(), minlength=8) for b, m in zip(bins, magnitude)])
    hist = hist / (hist.sum(axis=1, keepdims=True) + 1e-9)
    return np.hstack([hist, magnitude.mean(axis=(1, 2))[:, None]])
''',
}
_LOAD = '''
__READ__

__TRAINTEST__

__FEATURES__

X_train = featurize(np.stack([read_image(i) for i in train["__ID__"]]))
X_test = featurize(np.stack([read_image(i) for i in test["__ID__"]]))
'''

# Schema "discovered": the one entry of DATA_DIR that is not a CSV or the description holds the images.
_DISCOVER_READ = '''import io
import zipfile

from PIL import Image

STORE = [name for name in sorted(os.listdir(DATA_DIR)) if not name.endswith((".csv", ".md"))][0]
FOLDER = STORE.removesuffix(".zip")  # a folder, or a zip whose members sit in a folder of its name
archive = zipfile.ZipFile(os.path.join(DATA_DIR, STORE)) if STORE.endswith(".zip") else None


def read_image(image_id):
    name = f"{FOLDER}/{image_id}.png"
    if archive is not None:
        blob = archive.read(name)
    else:
        with open(os.path.join(DATA_DIR, name), "rb") as handle:
            blob = handle.read()
    with Image.open(io.BytesIO(blob)) as image:
        return np.asarray(image, dtype=np.float32) / 255.0
'''

_UNIFORM = {"weights": "uniform"}
_REFERENCES = (
    ReferenceSpec("majority", "dummy_clf", {"strategy": "prior"}),
    ReferenceSpec("logreg-corner-pixel", "logreg", {"C": 1.0}, features="one"),
    ReferenceSpec("gnb", "gnb"),
    ReferenceSpec("logreg-pixels", "logreg", {"C": 0.1}),
    ReferenceSpec("logreg-pixels-20pct", "logreg", {"C": 0.1}, fraction=0.2),
    ReferenceSpec("logreg-pool", "logreg", {"C": 0.1}, features="pool"),
    ReferenceSpec("logreg-profiles", "logreg", {"C": 1.0}, features="profiles"),
    ReferenceSpec("logreg-hist", "logreg", {"C": 1.0}, features="hist"),
    ReferenceSpec("logreg-gradients", "logreg", {"C": 1.0}, features="gradients"),
    ReferenceSpec("knn3-pixels", "knn_clf_raw", {"k": 3, **_UNIFORM}),
    ReferenceSpec("knn5-pool4", "knn_clf_raw", {"k": 5, **_UNIFORM}, features="pool4"),
    ReferenceSpec("knn15-gradients", "knn_clf", {"k": 15, **_UNIFORM}, features="gradients"),
    ReferenceSpec("tree-d4-pixels", "tree_clf", {"depth": 4}),
    ReferenceSpec("rf100-pixels", "rf_clf", {"n": 100, "depth": None}),
    ReferenceSpec("rf100-pool", "rf_clf", {"n": 100, "depth": None}, features="pool"),
    ReferenceSpec("rf100-gradients", "rf_clf", {"n": 100, "depth": None}, features="gradients"),
    ReferenceSpec("hgb50-pool4", "hgb_clf", {"it": 50, "lr": 0.1}, features="pool4"),
    ReferenceSpec("svc-pool", "svc", {"C": 1.0}, features="pool"),
)


def _draw(rng: np.random.Generator, regime: str, label: int, k: int, size: int) -> np.ndarray:
    canvas = np.full((size, size), rng.uniform(20, 90))
    bright = rng.uniform(140, 230)
    if regime == "position":
        quarter = size / 4
        centres = [(quarter, quarter), (quarter, 3 * quarter), (3 * quarter, quarter), (3 * quarter, 3 * quarter)]
        if k == 2:
            centres = [(size / 2, quarter), (size / 2, 3 * quarter)]  # left, right
        cy, cx = np.array(centres[label]) + rng.integers(-1, 2, size=2)
        if rng.random() < 0.5:  # a dimmer distractor anywhere
            rr, cc = disk(tuple(rng.uniform(2, size - 2, size=2)), size / 8, shape=canvas.shape)
            canvas[rr, cc] = (canvas[0, 0] + bright) / 2
        rr, cc = disk((cy, cx), size / 7, shape=canvas.shape)
        canvas[rr, cc] = bright
    elif regime == "shape":
        r = rng.uniform(size / 6, size / 3.2)
        cy, cx = rng.uniform(r + 1, size - 1 - r, size=2)
        if label == 0:
            rr, cc = disk((cy, cx), r, shape=canvas.shape)
        elif label == 1:
            rr, cc = rectangle((int(cy - r), int(cx - r)), extent=(int(2 * r), int(2 * r)), shape=canvas.shape)
        else:
            rr, cc = polygon([cy - r, cy + r, cy + r], [cx, cx - r, cx + r], shape=canvas.shape)
        canvas[rr, cc] = bright
    else:
        theta = (0.0, np.pi / 2, np.pi / 4, 3 * np.pi / 4)[label]
        yy, xx = np.mgrid[0:size, 0:size]
        wave = np.sin(2 * np.pi * rng.uniform(0.1, 0.25) * (yy * np.cos(theta) + xx * np.sin(theta))
                      + rng.uniform(0, 2 * np.pi))
        canvas = canvas + (bright - canvas) * (wave + 1) / 2
    return canvas


def image_classification(task_id: str, split: str, seed: int, rng: np.random.Generator,
                         schema: str = "literal") -> TaskData:
    regime = pick(rng, REGIMES)
    k = int(rng.integers(2, len(CLASSES[regime]) + 1))
    classes = ("left", "right") if regime == "position" and k == 2 else CLASSES[regime][:k]
    surface = draw_surface(rng, problem_of(k), schema)
    size, n = pick(rng, (16, 20, 24, 28)), int(rng.integers(400, 901))
    noise = rng.uniform(20, 60)
    index = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 4.0)))
    images = np.stack([np.clip(_draw(rng, regime, int(c), k, size) + rng.normal(0, noise, (size, size)), 0, 255)
                       .round() for c in index])
    values = label_values(rng, classes, surface.output)
    y = np.array(values, dtype=object)[index]
    y = y.astype(int) if isinstance(values[0], int) else y.astype(str)
    folder, zipped = pick(rng, FOLDERS), bool(rng.random() < 0.4)
    target = pick(rng, ("label", "class", "category", "target"))
    surface = replace(surface, id_prefix=surface.id_prefix or "img_")  # ids name files: never bare integers
    stub = pd.DataFrame({"_row": np.arange(n)})
    data = task_data(task_id, SUMMARIES[regime][0], split, "image", surface,
                     f"{SUMMARIES[regime][1]} (`{target}`). {pick(rng, HINTS[regime])}",
                     f"wmrl.tasks.families.images ({regime})", stub, y, target, seed, "", CHOICES,
                     list(_REFERENCES), [])
    rows = pd.concat([data.train[[surface.id_column, "_row"]], data.test[[surface.id_column, "_row"]]])
    members = {f"{folder}/{i}.png": png_bytes(images[r]) for i, r in zip(rows[surface.id_column], rows["_row"])}
    data.train, data.test = data.train.drop(columns="_row"), data.test.drop(columns="_row")
    data.files = {f"{folder}.zip": deterministic_zip(members)} if zipped else members
    where = f"`{folder}.zip` (members `{folder}/<{surface.id_column}>.png`)" if zipped else \
        f"the folder `{folder}/` (`{folder}/<{surface.id_column}>.png`)"
    data.data_notes = [(f"Each image is a {size}x{size} grayscale PNG in {where}; `{surface.train_file}` maps "
                        f"`{surface.id_column}` to `{target}`."), values_note(target, values, y, surface.output)]
    if surface.discovered:
        read, load = _DISCOVER_READ, _LOAD.replace('"__ID__"', "ID")
    else:  # the built-in pool's readers
        read, load = (_READ_ZIP if zipped else _READ_FOLDER).replace("images", folder), _LOAD
    data.loader = (load.replace("__READ__", read.strip()).replace("__TRAINTEST__", read_block(surface).strip())
                   .replace("__ID__", surface.id_column) + tail_block(surface, target))
    return data
