"""What the docs checks (tests/check-design-refs.py, tests/check-doc-links.py) leave out when they
walk the repository: build output, dependencies and caches, nothing the project wrote by hand."""

SKIPPED_DIRS = frozenset(
    {
        ".git",
        "target",
        "node_modules",
        "dist",
        "build",
        ".venv",
        "venv",
        "__pycache__",
        ".ruff_cache",
        ".mypy_cache",
        ".pytest_cache",
    }
)
