"""The class-data sharing archive of the tests' JVMs (tests/class_sharing.py) never breaks a run:
a damaged archive is removed before any JVM maps it, a failed dump leaves none, and outside a
virtualenv there is none."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import class_sharing
from tests.conftest import JVM_OPTIONS

pytestmark = pytest.mark.skipif(class_sharing.java() is None, reason="no java")


def test_a_truncated_archive_is_removed_and_a_missing_one_is_no_error(tmp_path):
    archive, java = tmp_path / "whole.jsa", str(class_sharing.java())
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={archive}", "-version"], cwd=tmp_path, capture_output=True, check=True)
    assert class_sharing.usable(archive, JVM_OPTIONS)
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 4])  # a JVM mapping it would crash
    assert not class_sharing.usable(truncated, JVM_OPTIONS)
    class_sharing.check(truncated, JVM_OPTIONS)
    class_sharing.check(archive, JVM_OPTIONS)
    assert not truncated.exists() and archive.exists()
    assert class_sharing.usable(tmp_path / "missing.jsa", JVM_OPTIONS)  # a JVM starts without one


def test_a_failed_dump_leaves_no_archive(tmp_path):
    archive = tmp_path / "cds" / "x.jsa"
    assert not class_sharing.dump(2**22 + 7, archive, JVM_OPTIONS)  # no such JVM
    assert not archive.exists() and list(archive.parent.iterdir()) == []


def test_no_archive_outside_a_virtualenv(monkeypatch):
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    assert class_sharing.archive_path(JVM_OPTIONS) is None
