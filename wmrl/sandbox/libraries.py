"""The sandbox's library set: the ONE list the image, the agent prompt and the world model share.

Paper, Appendix D, Table 7 ("Libraries preinstalled in the execution sandbox, by category, with
the exact versions"), on Python 3.11. ``containers/sandbox.def`` installs exactly
``pip_requirements()`` (a test checks it); the agent's and the world model's prompts list
``prompt_listing()``. The paper's table text ends at ``regex`` without a version: it is
installed unpinned until the version is known.
"""

from __future__ import annotations

from dataclasses import dataclass

SANDBOX_PYTHON = "3.11"
# torch's CUDA 13.0 wheels live on PyTorch's own index.
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cu130"


@dataclass(frozen=True)
class Library:
    name: str  # the pip distribution name
    version: str  # exact version; "" = unpinned (unknown)
    category: str
    note: str = ""  # shown in prompts, e.g. "CUDA"

    def requirement(self) -> str:
        return f"{self.name}=={self.version}" if self.version else self.name

    def short(self) -> str:
        """``name major.minor`` as the paper's prompts write it."""
        version = ".".join(self.version.split(".")[:2])
        text = f"{self.name} {version}".strip()
        return f"{text} ({self.note})" if self.note else text


def _lib(category: str, spec: str, note: str = "") -> Library:
    name, _, version = spec.partition(" ")
    return Library(name=name, version=version, category=category, note=note)


SANDBOX_LIBRARIES: tuple[Library, ...] = (
    _lib("Scientific computing", "numpy 1.26.4"),
    _lib("Scientific computing", "pandas 2.2.3"),
    _lib("Scientific computing", "scipy 1.17.1"),
    _lib("Scientific computing", "statsmodels 0.14.6"),
    _lib("Scientific computing", "sympy 1.14.0"),
    _lib("Scientific computing", "networkx 3.6.1"),
    _lib("Classical ML", "scikit-learn 1.4.2"),
    _lib("Classical ML", "xgboost 3.2.0"),
    _lib("Classical ML", "lightgbm 4.6.0"),
    _lib("Classical ML", "catboost 1.2.10"),
    _lib("Classical ML", "joblib 1.5.3"),
    _lib("Deep learning (GPU)", "torch 2.12.0", note="CUDA"),
    _lib("Deep learning (GPU)", "torchvision 0.27.0"),
    _lib("Deep learning (GPU)", "tensorflow 2.21.0"),
    _lib("Deep learning (GPU)", "keras 3.14.1"),
    _lib("NLP", "transformers 5.12.1"),
    _lib("NLP", "tokenizers 0.22.2"),
    _lib("NLP", "nltk 3.9.4"),
    _lib("Imaging and plotting", "Pillow 12.2.0"),
    _lib("Imaging and plotting", "matplotlib 3.10.9"),
    _lib("Imaging and plotting", "seaborn 0.13.2"),
    _lib("Imaging and plotting", "plotly 6.6.0"),
    _lib("Utilities", "h5py 3.14.0"),
    _lib("Utilities", "tqdm 4.67.3"),
    _lib("Utilities", "requests 2.34.2"),
    _lib("Utilities", "regex"),
)


def pip_requirements() -> list[str]:
    """The lines of the image's requirements file, in table order."""
    return [lib.requirement() for lib in SANDBOX_LIBRARIES]


def prompt_listing() -> str:
    """'numpy 1.26, pandas 2.2, ..., torch 2.12 (CUDA), ...' for the agent and world-model prompts."""
    return ", ".join(lib.short() for lib in SANDBOX_LIBRARIES)
