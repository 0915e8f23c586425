"""The Bloom filter: the structure, its stored format, generations and sizing."""

#: the filter engines' names (``--engine``, the stored header): the keys of
#: ``filter.engines.ENGINES``, known without importing the engines (and numpy)
ENGINE_NAMES = ("mmh3", "pybloom-live")
