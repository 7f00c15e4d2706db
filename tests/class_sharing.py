"""JVM class-data sharing for the JVMs the tests start: an archive of the classes a Spark
session loads as it starts, built once per virtualenv, mapped by every later JVM instead of
loading and verifying Spark's classes from its jars again. It halves a JVM's start (a local
session and a short stream: 15.8 -> 8.8 CPU-seconds on the 2-core development VM).

Java 17 checks an archive against the JDK and the jars it was made from (their names, sizes and
modification times: a new virtualenv's jars do not match), so the archive lives in the
virtualenv, named by a hash of the JDK, the jars and the JVM options. A JVM started with an
archive that does not exist or does not match runs without one, silently (the ``cds`` log tags
are turned off). A truncated archive would crash the JVM, so an archive is only ever put in place
whole (written under another name, checked, renamed) and is checked again once per test run.

The archive is made from a running session (``jcmd PID VM.cds dynamic_dump``, which needs the JVM
started with ``-XX:+RecordDynamicDumpInfo``): the dump costs about what it saves on one JVM, so
the tests make it when the run starts JVMs of its own after the sessions (the slow set's
processes), and every run after that in the same virtualenv maps it. Nothing here is needed for a
test to pass: without ``jcmd``, without a writable virtualenv, or when a step fails, the JVMs start
as they would without sharing."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Log tags that would print a line when an archive cannot be used (a JVM of another virtualenv).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java() -> Path | None:
    """The java Spark's launcher runs (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def spark_jars() -> Path | None:
    """The jars folder of the Spark the tests run (``$SPARK_HOME``, else pyspark's own)."""
    if os.environ.get("SPARK_HOME"):
        jars = Path(os.environ["SPARK_HOME"]) / "jars"
    else:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.submodule_search_locations:
            return None
        jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    return jars if jars.is_dir() else None


def sharing_options(archive: Path) -> str:
    """The JVM options that map ``archive`` on top of the JDK's own archive of its classes, which
    a JVM keeps mapping when ``archive`` is missing (``-XX:SharedArchiveFile`` naming the missing
    file alone turns sharing off altogether)."""
    exe = java()
    base = exe.parent.parent / "lib" / "server" / "classes.jsa" if exe else None
    files = f"{base}:{archive}" if base is not None and base.exists() else str(archive)
    return f"-XX:SharedArchiveFile={files} {QUIET}"


def archive_path(jvm_options: str) -> Path | None:
    """Where this virtualenv's archive for JVMs started with ``jvm_options`` is (None: no
    sharing here, no virtualenv or no JDK or no Spark found)."""
    exe, jars = java(), spark_jars()
    if sys.prefix == sys.base_prefix or exe is None or jars is None:
        return None
    key = hashlib.sha256(jvm_options.encode())
    for path in [exe, *sorted(exe.parent.parent.glob("lib/server/libjvm.*")), *sorted(jars.iterdir())]:
        st = path.stat()
        key.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return Path(sys.prefix) / "var" / "sparkqos-cds" / f"{key.hexdigest()[:16]}.jsa"


def usable(archive: Path, jvm_options: str) -> bool:
    """Whether a JVM starts with ``archive`` mapped (a truncated or damaged file makes it fail)."""
    exe = java()
    if exe is None:
        return False
    options = [*jvm_options.split(), *sharing_options(archive).split()]
    try:
        with tempfile.TemporaryDirectory() as crash_dir:  # where a crashing JVM writes its hs_err file
            done = subprocess.run([str(exe), *options, "-version"], cwd=crash_dir, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def check(archive: Path, jvm_options: str) -> None:
    """Remove ``archive`` if a JVM cannot start with it (a later run makes it again)."""
    if archive.exists() and not usable(archive, jvm_options):
        archive.unlink(missing_ok=True)


def dump(jvm_pid: int, archive: Path, jvm_options: str) -> bool:
    """Write the classes the running JVM ``jvm_pid`` has loaded to ``archive``: dumped under a
    name of its own, checked, then renamed into place. Any failure leaves no archive."""
    exe = java()
    jcmd = exe.parent / "jcmd" if exe else None
    if jcmd is None or not jcmd.exists():
        return False
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.part")
    try:
        done = subprocess.run([str(jcmd), str(jvm_pid), "VM.cds", "dynamic_dump", str(partial)], capture_output=True, timeout=600)
        if done.returncode == 0 and partial.exists() and usable(partial, jvm_options):
            for stale in archive.parent.glob("*.jsa"):
                stale.unlink(missing_ok=True)
            os.replace(partial, archive)
            return True
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        partial.unlink(missing_ok=True)
    return False
