"""Where the slices of the ring run: local processes or a Dask cluster, behind one interface."""
