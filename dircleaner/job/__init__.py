"""The job around the steps: the nightly run, the prefix clean, resume."""
