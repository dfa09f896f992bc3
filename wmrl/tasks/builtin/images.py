"""Image task families: real PNG files in a folder or a zip (digits, LFW subset, generated shapes)."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pandas as pd
from PIL import Image
from skimage.data import lfw_subset
from skimage.draw import disk, polygon, rectangle
from sklearn import datasets

from wmrl.tasks.builtin.spec import TaskData, classification_frames
from wmrl.tasks.builtin.variants import image_variants

_READ_FOLDER = '''from PIL import Image


def read_image(image_id):
    with Image.open(os.path.join(DATA_DIR, "images", f"{image_id}.png")) as image:
        return np.asarray(image, dtype=np.float32) / 255.0
'''

_READ_ZIP = '''import io
import zipfile

from PIL import Image

archive = zipfile.ZipFile(os.path.join(DATA_DIR, "images.zip"))


def read_image(image_id):
    with Image.open(io.BytesIO(archive.read(f"images/{image_id}.png"))) as image:
        return np.asarray(image, dtype=np.float32) / 255.0
'''

_FEATURES = '''

FEATURES = __FEATURES__


def featurize(ids):
    images = np.stack([read_image(i) for i in ids])
    if FEATURES == "one":  # a single corner pixel
        images = images[:, :1, :1]
    elif FEATURES == "rows":  # the mean of each row: a vertical intensity profile
        images = images.mean(axis=2)
    elif FEATURES in ("pool", "pool4"):  # 2x2 or 4x4 mean pooling
        k = 2 if FEATURES == "pool" else 4
        h, w = images.shape[1] // k * k, images.shape[2] // k * k
        images = images[:, :h, :w].reshape(len(images), h // k, k, w // k, k).mean(axis=(2, 4))
    return images.reshape(len(images), -1)


train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
X_train = featurize(train["id"])
y_train = train["__TARGET__"].to_numpy()
X_test = featurize(test["id"])
test_ids = test["id"]
'''

_CHOICES = {c: f'"{c}"' for c in ("all", "pool", "pool4", "rows", "one")}


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def deterministic_zip(members: dict[str, bytes]) -> bytes:
    """A zip whose bytes depend only on ``members`` (fixed timestamps and attributes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name])
    return buffer.getvalue()


def _image_task(
    task_id: str, name: str, split: str, metric: str, output: str, images: np.ndarray, labels: np.ndarray,
    target: str, summary: str, source: str, seed: int, zipped: bool, test_frac: float = 0.3,
) -> TaskData:
    stub = pd.DataFrame({"_row": np.arange(len(images))})  # carries each row's image through the shuffle
    train, test, answers, sample = classification_frames(stub, labels, target, output, seed, test_frac, id_prefix="img_")
    rows = pd.concat([train[["id", "_row"]], test[["id", "_row"]]])
    members = {f"images/{i}.png": png_bytes(images[r]) for i, r in zip(rows["id"], rows["_row"])}
    train, test = train.drop(columns="_row"), test.drop(columns="_row")
    where = "`images.zip` (members `images/<id>.png`)" if zipped else "the folder `images/` (`images/<id>.png`)"
    h, w = images.shape[1:]
    return TaskData(
        task_id=task_id, name=name, category="image", split=split, metric=metric, summary=summary, source=source,
        output=output, train=train, test=test, answers=answers, sample_submission=sample,
        loader=(_READ_ZIP if zipped else _READ_FOLDER) + _FEATURES.replace("__TARGET__", target),
        variants=image_variants(), target=target, feature_choices=_CHOICES,
        files={"images.zip": deterministic_zip(members)} if zipped else members,
        data_notes=[f"Each image is a {h}x{w} grayscale PNG in {where}; `train.csv` maps `id` to `{target}`."],
    )


def digits_png() -> TaskData:
    bunch = datasets.load_digits()
    images = np.clip(bunch.images * 16, 0, 255)
    return _image_task(
        "digits-png", "Handwritten Digits (PNG)", "train", "accuracy", "label", images, bunch.target,
        "digit", "Recognise the handwritten digit (0-9) in each 8x8 grayscale image.",
        "sklearn.datasets.load_digits, written as PNG files", 201, zipped=False,
    )


def digits_noisy_zip() -> TaskData:
    bunch = datasets.load_digits()
    rng = np.random.default_rng(202)
    big = np.kron(bunch.images, np.ones((2, 2))) * 16  # 16x16
    shifted = np.stack([np.roll(img, tuple(rng.integers(-2, 3, size=2)), axis=(0, 1)) for img in big])
    images = np.clip(shifted + rng.normal(0, 40, shifted.shape), 0, 255).round()
    return _image_task(
        "digits-noisy-zip", "Noisy Shifted Digits (zip)", "train", "macro_f1", "label",
        images, bunch.target, "digit",
        "Recognise the handwritten digit (0-9) in each 16x16 image; the digits are shifted by up to two pixels "
        "and covered in pixel noise.", "sklearn.datasets.load_digits, upscaled, shifted, noised, zipped PNG", 202,
        zipped=True,
    )


def lfw_faces() -> TaskData:
    # Heavy pixel noise: the clean crops are separable by any linear model (AUC 1.0, a saturated task).
    noisy = lfw_subset() + np.random.default_rng(203).normal(0, 0.5, (200, 25, 25))
    images = np.clip(noisy * 255, 0, 255).round()
    labels = np.r_[np.ones(100, dtype=int), np.zeros(100, dtype=int)]  # first 100 are faces
    return _image_task(
        "lfw-face-detection", "Face or Not", "heldout", "roc_auc", "prob_binary", images, labels,
        "is_face", "Predict the probability that each noisy 25x25 grayscale crop shows a human face.",
        "skimage.data.lfw_subset with pixel noise", 203, zipped=False, test_frac=0.4,
    )


def shapes() -> TaskData:
    rng = np.random.default_rng(204)
    kinds = np.array(["circle", "square", "triangle"])
    labels = kinds[rng.integers(0, 3, size=900)]
    images = np.zeros((900, 24, 24))
    for i, kind in enumerate(labels):
        canvas = np.full((24, 24), rng.uniform(20, 90))
        size = rng.uniform(4, 8)
        cy, cx = rng.uniform(size + 1, 23 - size, size=2)
        if kind == "circle":
            rr, cc = disk((cy, cx), size, shape=canvas.shape)
        elif kind == "square":
            rr, cc = rectangle((int(cy - size), int(cx - size)), extent=(int(2 * size), int(2 * size)), shape=canvas.shape)
        else:
            rr, cc = polygon([cy - size, cy + size, cy + size], [cx, cx - size, cx + size], shape=canvas.shape)
        canvas[rr, cc] = rng.uniform(140, 230)
        images[i] = np.clip(canvas + rng.normal(0, 35, canvas.shape), 0, 255).round()
    return _image_task(
        "noisy-shapes", "Noisy Shapes", "train", "log_loss", "prob_multi", images, labels,
        "shape", "Predict, for each 24x24 noisy grayscale image, the probability that it shows a circle, a square "
        "or a triangle.", "generated with skimage.draw", 204, zipped=False,
    )


FAMILIES = (digits_png, digits_noisy_zip, lfw_faces, shapes)
