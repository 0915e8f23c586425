"""The Bloom filter: the structure, its stored format, generations and sizing."""
