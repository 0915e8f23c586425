"""The job's steps in order: build, sweep, re-check, plan, delete (and the prefix walk)."""
