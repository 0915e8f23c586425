"""The job around the steps: run, resume, the lease, the workers (local or Dask)."""
