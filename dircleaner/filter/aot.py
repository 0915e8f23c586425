"""The filter kernels compiled ahead of time: an extension module that loads without numba.

A process that loads the kernels through numba's on-disk cache pays for importing numba and
initialising its compiler (about 0.4 s of CPU) before its first batch; the job's build waits
for that before it forks its workers. ``build()`` (``python -m dircleaner.filter.aot``, run by
``make install``) compiles the same kernel source (``dircleaner.filter.kernel``) with
``numba.pycc``, for this machine's CPU, into a module named after a hash of that source, of the
signatures below and of the CPU; ``load()`` imports it in a few milliseconds, without importing
numba. When it is missing or does not load (the kernel source or the CPU changed since, another
numpy ABI), ``load()`` returns None and the caller loads the kernels through numba as before:
both compile the same source, so they set and test the same bits.

The arguments are coerced (no copy when they already match) to the exact types compiled: C-
contiguous int64 index arrays, uint8 buffers, Python ints.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "kernel.py"
#: where the compiled module is written and looked for (numba's cache is there too)
DIRECTORY = _HERE / "__pycache__"

#: each kernel's compiled signature (numba's type syntax)
SIGNATURES: dict[str, str] = {
    "hash_many": "uint64[:, ::1](uint8[::1], int64[::1], int64[::1], int64)",
    "add_many": "void(uint8[::1], int64, int64, int64, uint8[::1], int64[::1], int64[::1])",
    "contains_many": (
        "boolean[::1](uint8[::1], int64, int64, int64, uint8[::1], int64[::1], int64[::1])"
    ),
    "partition_starts": "int64[::1](int64[::1], uint8[::1], int64[::1], int64[::1])",
    "key_shapes": "UniTuple(int64[::1], 2)(uint8[::1], int64[::1], int64[::1])",
    "token_prefix_ends": "int64[::1](int64[::1], uint8[::1], int64[::1])",
}

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]


def _host() -> bytes:
    """What the machine code is compiled for (the host's CPU, as numba's own cache is): its
    architecture, model and instruction-set flags, so that a copy on another CPU is not used."""
    described = [platform.machine().encode()]
    try:
        with open("/proc/cpuinfo", "rb") as info:
            for line in info:
                if line.startswith((b"model name", b"flags", b"Features", b"CPU part")):
                    described.append(line.strip())
                if line.strip() == b"":  # the first processor's block is enough
                    break
    except OSError:
        described.append(platform.processor().encode())
    return b"\n".join(described)


def module_name() -> str:
    """The compiled module's name: a hash of the kernel source, the signatures and the CPU."""
    digest = hashlib.sha256(_SOURCE.read_bytes())
    digest.update(repr(sorted(SIGNATURES.items())).encode())
    digest.update(_host())
    return f"_bloomkernels_{digest.hexdigest()[:16]}"


def _u8(a: Any) -> Bytes:
    return np.ascontiguousarray(a, dtype=np.uint8)


def _i64(a: Any) -> Ints:
    return np.ascontiguousarray(a, dtype=np.int64)


class Compiled:
    """The compiled module's kernels, with the signatures of ``dircleaner.filter.kernel``."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def hash_many(self, buf: Any, starts: Any, ends: Any, seed: int) -> npt.NDArray[np.uint64]:
        out: npt.NDArray[np.uint64] = self.module.hash_many(
            _u8(buf), _i64(starts), _i64(ends), int(seed)
        )
        return out

    def add_many(
        self, bits: Bytes, m: int, k: int, seed: int, buf: Any, starts: Any, ends: Any
    ) -> None:
        if bits.dtype != np.uint8 or not bits.flags.c_contiguous or not bits.flags.writeable:
            raise ValueError("add_many sets bits in place: a writable contiguous uint8 array")
        self.module.add_many(bits, int(m), int(k), int(seed), _u8(buf), _i64(starts), _i64(ends))

    def contains_many(
        self, bits: Any, m: int, k: int, seed: int, buf: Any, starts: Any, ends: Any
    ) -> npt.NDArray[np.bool_]:
        found: npt.NDArray[np.bool_] = self.module.contains_many(
            _u8(bits), int(m), int(k), int(seed), _u8(buf), _i64(starts), _i64(ends)
        )
        return found

    def partition_starts(self, tokens: Any, buf: Any, offsets: Any, prefix_ends: Any) -> Ints:
        rows: Ints = self.module.partition_starts(
            _i64(tokens), _u8(buf), _i64(offsets), _i64(prefix_ends)
        )
        return rows

    def key_shapes(self, buf: Any, lo: Any, hi: Any) -> tuple[Ints, Ints]:
        shapes: tuple[Ints, Ints] = self.module.key_shapes(_u8(buf), _i64(lo), _i64(hi))
        return shapes

    def token_prefix_ends(self, tokens: Any, buf: Any, offsets: Any) -> Ints:
        ends: Ints = self.module.token_prefix_ends(_i64(tokens), _u8(buf), _i64(offsets))
        return ends


def load(directory: Path | None = None) -> Compiled | None:
    """The compiled kernels of the current source (in ``DIRECTORY`` unless told), or None where
    they were not built (or do not load: then the caller takes numba's path)."""
    directory = directory or DIRECTORY
    name = module_name()
    found = sorted(directory.glob(f"{name}.*.so")) + sorted(directory.glob(f"{name}.so"))
    if not found:
        return None
    try:
        spec = importlib.util.spec_from_file_location(name, found[0])
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # e.g. built against another numpy: numba's path sets the same bits
        logging.getLogger(__name__).warning("ahead-of-time filter kernels unusable: %s", exc)
        return None
    return Compiled(module)


def build(directory: Path | None = None) -> Path:
    """Compile the kernels into ``directory`` (``DIRECTORY`` unless told; imports numba, takes
    a minute or less)."""
    from dircleaner.filter import kernel

    pycc: Any = importlib.import_module("numba.pycc")  # untyped

    directory = directory or DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    cc = pycc.CC(module_name())
    cc.output_dir = str(directory)
    cc.target_cpu = "host"  # numba's generic x86-64 is 5-10% slower on inserts
    cc.verbose = False
    for name, signature in SIGNATURES.items():
        cc.export(name, signature)(getattr(kernel, name).py_func)
    cc.compile()
    return directory / str(cc.output_file)


def main() -> None:
    """Compile the kernels unless this source's are there already (``--force``: anyway)."""
    if "--force" in sys.argv[1:] or load() is None:
        build()


if __name__ == "__main__":
    main()
