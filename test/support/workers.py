"""What the pytest workers of one run share: a directory, what is built once, and the serial lock.

``scripts/run_tests.sh`` runs the suite in parallel workers (pytest-xdist). They share the run's
directory, made by the controller (or by a run without workers) and removed by it at the end.
In it:

* ``built_once`` builds a checkpoint once per run: the first worker to ask builds it under an
  exclusive file lock, the others wait on the lock and reuse it.
* ``module_group_scheduler`` keeps the tests of a module marked
  ``pytestmark = pytest.mark.xdist_group(...)`` on one worker, so its module-scoped fixtures start
  once. xdist's own ``--dist loadgroup`` does not under pytest 9: it tags a group onto
  ``item._nodeid``, which pytest 9 no longer reads (node ids are ``item._id``), so every test went
  wherever the load put it; here the group is read from the module's source instead.
* ``serial_lock`` lets a timing-sensitive test (``@pytest.mark.serial``: it asserts empty ticks,
  jitter or rates) run while no other worker runs a test. Every other test holds the lock shared;
  a serial test first takes the turnstile, so tests starting after it queue behind it instead of
  starving it, then holds the lock exclusively.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

_run_directory: Path | None = None
_in_worker = False


def start_run() -> Path:
    """A plain run's or the xdist controller's: make the run's directory."""
    global _run_directory
    _run_directory = Path(tempfile.mkdtemp(prefix="lerobot_ros_test_run_"))
    return _run_directory


def join_run(directory: str) -> None:
    """An xdist worker's: use the directory the controller made."""
    global _run_directory, _in_worker
    _run_directory, _in_worker = Path(directory), True


def end_run() -> None:
    """The process that made the run's directory removes it, once the tests are over."""
    if _run_directory is not None and not _in_worker:
        shutil.rmtree(_run_directory, ignore_errors=True)


def run_directory() -> Path:
    return _run_directory


def in_worker() -> bool:
    """Whether this process is one of an xdist run's workers (a pytest started by a test is a
    run of its own, though it inherits a worker's environment)."""
    return _in_worker


@contextlib.contextmanager
def file_lock(path: Path, exclusive: bool = True) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def built_once(name: str, build: Callable[[Path], Path]) -> Path:
    """``build(directory)``'s result, built by the first worker of the run that asks."""
    root = _run_directory
    directory = root / f"built_{name}"
    done = root / f"built_{name}.path"
    with file_lock(root / f"built_{name}.lock"):
        if not done.is_file():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            done.write_text(str(build(directory)))
        return Path(done.read_text())


@contextlib.contextmanager
def serial_lock(serial: bool) -> Iterator[None]:
    """Held around each test of a worker: exclusively by a serial test, shared by the others."""
    root = _run_directory
    lock = (root / "serial.lock").open("a")
    # A serial test keeps the turnstile while it waits for the others' tests to end; tests that
    # start meanwhile wait at the turnstile behind it.
    with file_lock(root / "serial.turnstile"):
        fcntl.flock(lock, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


_MODULE_GROUP = re.compile(r"^pytestmark = .*xdist_group\(\"([^\"]+)\"\)", re.MULTILINE)


@functools.cache
def module_group(root: Path, module: str) -> str | None:
    """The xdist_group a test module's ``pytestmark`` names, if any."""
    found = _MODULE_GROUP.search((root / module).read_text())
    return found.group(1) if found else None


def module_group_scheduler(config, log):
    """The controller's scheduler: a grouped module is one unit of work, every other test its own,
    handed out in collection order (the long benchmark and install tests come first)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = module_group(config.rootpath, nodeid.split("::", 1)[0])
            return f"group {group}" if group else nodeid

    config.option.loadscopereorder = False
    return ModuleGroupScheduling(config, log)
