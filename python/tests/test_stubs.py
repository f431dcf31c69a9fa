"""The type stubs document every public name, so an IDE's hover explains it."""

import ast
from pathlib import Path
from typing import List

import fencelock

STUBS = Path(fencelock.__file__).with_name("_native.pyi")


def undocumented(nodes: List[ast.stmt], prefix: str = "") -> List[str]:
    missing: List[str] = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_"):
                continue
            if ast.get_docstring(node) is None:
                missing.append(prefix + node.name)
            if isinstance(node, ast.ClassDef):
                missing += undocumented(node.body, f"{node.name}.")
    return missing


def test_every_public_class_function_and_method_in_the_stubs_has_a_docstring() -> None:
    tree = ast.parse(STUBS.read_text(encoding="utf-8"))
    names = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert len(names) > 100, "the stubs were not read"
    assert undocumented(tree.body) == []


def test_the_python_level_helpers_are_documented_too() -> None:
    for helper in (fencelock.current_lease, fencelock.BlockingCallInEventLoop, fencelock.LockError):
        assert helper.__doc__, helper
