"""Shared fixtures: the real models and Vela's golden output live in ../shared next to the repository."""

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _existing(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"{path} is missing (tests need the shared corpus and golden files at ../shared)")
    return path


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    return _existing(SHARED / "corpus")


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return _existing(SHARED / "golden" / "vela-5.2.0-legacy")
