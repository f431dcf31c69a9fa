"""No fragment of a URL's password appears in an error (tests/vectors/leaky-urls.json, shared
with every language), and a URL object that is not a str is refused by its type alone."""

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

import fencelock

VECTORS: List[Dict[str, str]] = json.loads(
    (Path(__file__).resolve().parents[2] / "tests" / "vectors" / "leaky-urls.json").read_text()
)["vectors"]


def fragments(password: str) -> List[str]:
    return [f for f in re.split(r"[^A-Za-z0-9]", password) if len(f) >= 2]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["url"] for v in VECTORS])
def test_no_fragment_of_a_password_appears_in_an_error(vector: Dict[str, str]) -> None:
    with pytest.raises(fencelock.LockError) as caught:
        fencelock.connect(vector["url"], operation_timeout=3)
    cause = caught.value.__cause__
    shown = f"{caught.value} {caught.value!r} {cause} {cause!r}"
    for fragment in fragments(vector["password"]):
        assert fragment not in shown, shown


class SecretUrl:
    """Stands for pydantic's RedisDsn or yarl.URL: a URL object whose repr shows the password."""

    def __repr__(self) -> str:
        return "SecretUrl('redis://:hunter2@cache:6379')"


@pytest.mark.parametrize("url", [b"redis://:hunter2@cache:6379", SecretUrl()])
def test_a_url_that_is_not_a_str_is_refused_by_its_type_alone(url: Any) -> None:
    for call in (lambda: fencelock.connect(url), lambda: fencelock.Fence.open(url, "resource")):
        with pytest.raises(fencelock.InvalidArgument) as caught:
            call()
        assert isinstance(caught.value, TypeError)
        assert "hunter2" not in str(caught.value) and "hunter2" not in repr(caught.value)
        assert f"got {type(url).__name__}; pass str(url)" in str(caught.value)
