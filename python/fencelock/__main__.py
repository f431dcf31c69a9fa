"""``python -m fencelock ...`` runs the ``fencelock`` command, as the console script does."""

from ._cli import main

main()
