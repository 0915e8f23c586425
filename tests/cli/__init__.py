"""The tests of each command: ``test_<command>.py``, and ``test_<command>_<aspect>.py`` for a
command with many (docs/development.md)."""
