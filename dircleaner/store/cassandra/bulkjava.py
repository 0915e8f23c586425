"""The bulk loader's Java side: a JDK, Cassandra's jars, and the helper compiled once.

The helper (``java/DircleanerBulk.java``, shipped as source) drives Cassandra's own
``CQLSSTableWriter`` and ``BulkLoader`` from the ``cassandra-all`` jar. It is compiled on first
use, against the jars it will run with, into ``$XDG_CACHE_HOME/dircleaner/java/<digest>/``
(``~/.cache`` without it); the digest covers the source and the jar, so a changed helper or
another Cassandra release compiles afresh and nothing stale runs. Nothing compiled is shipped.

Where the jars are, first match wins: ``DIRCLEANER_CASSANDRA_LIB``; ``$CASSANDRA_HOME/lib`` (a
Cassandra installation); ``$CASSANDRA_HOME_CACHE/lib`` and, in a checkout, ``.cache/cassandra/lib``
(what ``scripts/cassandra fetch`` fills). Java: ``$JAVA_HOME/bin`` or the ``PATH``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dircleaner.errors import DircleanerError

ENV_LIB = "DIRCLEANER_CASSANDRA_LIB"
SOURCE = Path(__file__).with_name("java") / "DircleanerBulk.java"
LOGBACK = Path(__file__).with_name("java") / "logback.xml"
MAIN_CLASS = "DircleanerBulk"
#: the module flags Cassandra's own tools run with on Java 17 (harmless on Java 11)
JAVA17_FLAGS = (
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
)
_CHECKOUT_LIB = Path(__file__).resolve().parents[3] / ".cache" / "cassandra" / "lib"


class BulkLoaderUnavailable(DircleanerError):
    """Java, javac or Cassandra's jars are missing: the bulk loader cannot run here."""


@dataclass(frozen=True)
class JavaHelper:
    """How to start the compiled helper: the ``java`` binary and the class path."""

    java: str
    classpath: str
    #: the jar directory, for messages
    lib: Path

    def command(self, heap_mib: int, *args: str) -> list[str]:
        """The command line of one helper run (``args`` never hold a secret)."""
        return [
            self.java,
            f"-Xmx{heap_mib}m",
            "-XX:+UseG1GC",
            *JAVA17_FLAGS,
            f"-Dlogback.configurationFile={LOGBACK.as_uri()}",
            "-cp",
            self.classpath,
            MAIN_CLASS,
            *args,
        ]


def find_cassandra_lib(environ: Mapping[str, str] | None = None) -> Path:
    """The directory of ``cassandra-all-*.jar`` and its dependencies, or one line saying how
    to get it."""
    env = os.environ if environ is None else environ
    candidates: list[Path] = []
    if env.get(ENV_LIB):
        lib = Path(env[ENV_LIB]).expanduser()
        if not _cassandra_jar(lib):
            raise BulkLoaderUnavailable(
                f"{ENV_LIB}={lib} holds no cassandra-all-*.jar; point it at a Cassandra"
                " installation's lib/ directory"
            )
        return lib
    if env.get("CASSANDRA_HOME"):
        candidates.append(Path(env["CASSANDRA_HOME"]) / "lib")
    if env.get("CASSANDRA_HOME_CACHE"):
        candidates.append(Path(env["CASSANDRA_HOME_CACHE"]) / "lib")
    candidates.append(_CHECKOUT_LIB)
    for lib in candidates:
        if _cassandra_jar(lib):
            return lib
    raise BulkLoaderUnavailable(
        "the bulk loader needs Cassandra's jars (cassandra-all and its dependencies): set"
        f" {ENV_LIB} to a Cassandra installation's lib/ directory, or run scripts/cassandra"
        " fetch in a checkout"
    )


def _cassandra_jar(lib: Path) -> Path | None:
    jars = sorted(lib.glob("cassandra-all-*.jar")) if lib.is_dir() else []
    return jars[0] if jars else None


def find_tool(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``$JAVA_HOME/bin/NAME`` if it exists, else NAME on the ``PATH``, else None."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name, path=env.get("PATH"))


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where compiled helpers are kept: ``$XDG_CACHE_HOME/dircleaner/java``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dircleaner" / "java"


def java_helper(environ: Mapping[str, str] | None = None) -> JavaHelper:
    """The helper, compiled now if this source and jar have not been compiled before."""
    lib = find_cassandra_lib(environ)
    java = find_tool("java", environ)
    if java is None:
        raise BulkLoaderUnavailable(
            "the bulk loader needs Java 11 or 17 (java not found: install a JDK or set JAVA_HOME)"
        )
    jar = _cassandra_jar(lib)
    assert jar is not None  # find_cassandra_lib checked it
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    target = cache_root(environ) / digest.hexdigest()[:16]
    if not (target / f"{MAIN_CLASS}.class").is_file():
        _compile(lib, target, environ)
    return JavaHelper(java, os.pathsep.join([str(target), str(lib / "*")]), lib)


def _compile(lib: Path, target: Path, environ: Mapping[str, str] | None) -> None:
    """javac the helper into ``target``: into a fresh directory renamed into place, so two
    processes compiling at once both end with a complete one."""
    javac = find_tool("javac", environ)
    if javac is None:
        raise BulkLoaderUnavailable(
            "the bulk loader compiles a small Java helper on first use and needs a JDK's javac"
            " (not found: install a JDK 11 or 17, or set JAVA_HOME)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".compiling-", dir=target.parent))
    try:
        done = subprocess.run(
            [
                javac,
                "-nowarn",
                "--release",
                "11",
                "-d",
                str(scratch),
                "-cp",
                str(lib / "*"),
                str(SOURCE),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr)
            raise BulkLoaderUnavailable(
                f"compiling the bulk loader's Java helper against {lib} failed: {first.strip()}"
            )
        try:
            scratch.rename(target)
        except OSError:
            if not (target / f"{MAIN_CLASS}.class").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
