"""No unused names in the library: functions, classes, methods, properties, attributes,
variables and constants that nothing in ``dircleaner/`` uses.

``vulture`` finds them, except module-level names with a leading underscore (it takes ``_x``
for "meant to be unused"), which ``unused_private_constants`` finds. A name used only by name
(a click command, a protocol's method that another library calls, a driver's attribute) or
only by tests, the benchmarks or the scripts is listed in ``USED_ELSEWHERE`` with where it is
used; an entry vulture no longer reports must go (the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dircleaner"

#: click registers a command under its decorator: nothing calls the function by its name
COMMAND_DECORATORS = ["@*.command", "@*.group"]

_GROUND_TRUTH = "scoring a run against its ground truth: scripts/score.py and bench/ call it"

#: (file under dircleaner/, name) → who uses it, where vulture cannot see
USED_ELSEWHERE: dict[tuple[str, str], str] = {
    # read by another library, by its name
    ("filter/aot.py", "output_dir"): "numba.pycc.CC reads it when it compiles",
    ("filter/aot.py", "target_cpu"): "numba.pycc.CC reads it when it compiles",
    ("filter/kernel.py", "typingctx"): "numba's @intrinsic passes it to the typing function",
    ("store/cassandra/__init__.py", "find_spec"): "the import system calls a finder's find_spec",
    ("store/cassandra/kv.py", "consistency_level"): "the driver reads a bound statement's level",
    ("store/cassandra/walkreads.py", "consistency_level"): "the driver reads it, as above",
    ("store/cassandra/requests.py", "is_idempotent"): "the driver's retry policy reads it",
    ("store/cassandra/requests.py", "_timer"): "the driver's response future holds its timer there",
    # read by name from a table of the module's own
    ("cli/night_metrics.py", "slots_read"): "_CHURN_GAUGES names it as a string",
    ("cli/night_metrics.py", "entries_read"): "_CHURN_GAUGES names it as a string",
    ("synth/runner.py", "_worker_main"): "the generator's worker runs it by `python -c`",
    # part of a record or protocol the library fills, read only by tests or benchmarks
    ("store/capabilities.py", "TombstoneCounter"): "the protocol tests and benchmarks count with",
    ("store/records.py", "exact"): "the store contract checks an exact count is marked so",
    ("entrysort.py", "spilled_files"): "tests check the restore's sort spilled, or did not",
    ("synth/spec.py", "generate_seconds"): "the load benchmarks report it",
    ("synth/groundtruth.py", "wrongly_deleted"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "precision"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "recall"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "score"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "read_truth"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "audited_dirs"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "tombstones_by_partition"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "percentile"): _GROUND_TRUTH,
    ("synth/groundtruth.py", "audited_by_via"): _GROUND_TRUTH,
}


def vulture_findings(paths: list[Path]) -> set[tuple[str, str]]:
    """(file relative to its package root, name) of everything vulture finds unused."""
    scan = vulture.Vulture(ignore_decorators=COMMAND_DECORATORS)
    scan.scavenge([str(p) for p in paths])
    return {
        (Path(item.filename).resolve().relative_to(PACKAGE).as_posix(), item.name)
        for item in scan.get_unused_code()
    }


def unused_private_constants(package: Path) -> set[tuple[str, str]]:
    """Module-level ``_NAME = …`` that no module of ``package`` reads."""
    defined: set[tuple[str, str]] = set()
    used: set[str] = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and _private(target.id):
                    defined.add((path.relative_to(package).as_posix(), target.id))
        for sub in ast.walk(tree):
            if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Store):
                used.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                used.add(sub.attr)
            elif isinstance(sub, ast.alias):
                used.add(sub.name)
    return {(module, name) for module, name in defined if name not in used}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def test_nothing_in_the_library_is_unused() -> None:
    found = vulture_findings([PACKAGE]) | unused_private_constants(PACKAGE)
    assert sorted(found - set(USED_ELSEWHERE)) == []


def test_every_name_listed_as_used_elsewhere_is_still_reported() -> None:
    """An entry vulture stops reporting (the name went, or is now used) leaves the list."""
    assert sorted(set(USED_ELSEWHERE) - vulture_findings([PACKAGE])) == []


def test_the_check_finds_an_unused_function_attribute_and_private_constant(
    tmp_path: Path,
) -> None:
    package = tmp_path / "dircleaner"
    package.mkdir()
    (package / "m.py").write_text(
        "import numpy as np\n"
        "_USED = np.uint64(3)\n"
        "_UNUSED = np.uint64(8)\n"
        "class C:\n"
        "    def __init__(self) -> None:\n"
        "        self.kept = _USED\n"
        "        self.dropped = 1\n"
        "    def method(self) -> int:\n"
        "        return self.kept\n"
        "def helper() -> int:\n"
        "    return C().method()\n"
        "print(C)\n"
    )
    assert unused_private_constants(package) == {("m.py", "_UNUSED")}
    scan = vulture.Vulture(ignore_decorators=COMMAND_DECORATORS)
    scan.scavenge([str(package)])
    names = {item.name for item in scan.get_unused_code()}
    assert names == {"dropped", "helper"}
