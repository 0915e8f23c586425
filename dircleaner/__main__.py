"""``python -m dircleaner``: the same as the ``dircleaner`` console script."""

from dircleaner.cli import main

main()
