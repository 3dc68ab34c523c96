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
* ``before_test`` and ``after_test`` let a timing-sensitive test (``@pytest.mark.serial``: it
  asserts empty ticks, jitter or rates) run while no other worker runs a test. Every other test
  holds the lock shared; a serial test first takes the turnstile, so tests starting after it
  queue behind it instead of starving it, then holds the lock exclusively, and keeps it for the
  serial test after it. The serial tests are handed out first, before any other worker has
  started a process.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import re
import shutil
import tempfile
import time
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
def file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
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


_serial_lock = None  # the open lock file while this worker holds the lock
_first_test = True
#: How long a worker's first test waits for the serial unit to take the lock (it is handed out
#: first, so it arrives within the workers' start-up; the bound only guards against a hang).
SERIAL_START_WAIT_S = 300.0


def before_test(serial: bool, serial_tests_collected: bool) -> None:
    """Take the lock for a test: exclusively for a serial one, shared otherwise.

    The serial tests run first (``module_group_scheduler``): at the start no other worker has a
    fixture running yet, so nothing else competes for the cores. A worker's first other test
    waits until they have taken the lock, so it cannot slip in first and make them wait for it.
    """
    global _serial_lock, _first_test
    if _serial_lock is not None:
        return  # still held exclusively from the serial test before
    started = _run_directory / "serial.started"
    if _first_test and serial_tests_collected and not serial:
        deadline = time.monotonic() + SERIAL_START_WAIT_S
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    _first_test = False
    _serial_lock = (_run_directory / "serial.lock").open("a")
    # A serial test keeps the turnstile while it waits for the others' tests to end; tests that
    # start meanwhile wait at the turnstile behind it.
    with file_lock(_run_directory / "serial.turnstile"):
        fcntl.flock(_serial_lock, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
    if serial:
        started.touch()


def after_test(serial: bool, next_serial: bool) -> None:
    """Release the lock, unless a serial test is followed by another (the serial tests are one
    unit of work, so the others wait for them once, not once per test)."""
    global _serial_lock
    if serial and next_serial:
        return
    fcntl.flock(_serial_lock, fcntl.LOCK_UN)
    _serial_lock.close()
    _serial_lock = None


_MODULE_GROUP = re.compile(r"^pytestmark = .*xdist_group\(\"([^\"]+)\"\)", re.MULTILINE)


@functools.cache
def module_group(root: Path, module: str) -> str | None:
    """The xdist_group a test module's ``pytestmark`` names, if any."""
    found = _MODULE_GROUP.search((root / module).read_text())
    return found.group(1) if found else None


def _is_serial_mark(decorator: ast.expr) -> bool:
    return ast.unparse(decorator) in ("pytest.mark.serial", "pytest.mark.serial()")


@functools.cache
def serial_tests(root: Path, module: str) -> frozenset[str]:
    """The names of a module's test functions marked ``@pytest.mark.serial``."""
    tree = ast.parse((root / module).read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(map(_is_serial_mark, node.decorator_list))
    )


SERIAL_UNIT = "serial tests"


def module_group_scheduler(config, log):
    """The controller's scheduler: the serial tests are one unit of work, handed out first; a
    grouped module is one unit; every other test is its own, in collection order (the long
    benchmark and install tests come first).

    First, not last: handed out last, they ran while another worker was blocked inside a grouped
    module whose module-scoped processes (a streaming demo launch) kept running beside them, and
    a serial rate check failed (6.7 chunks/s against 27.5 before the flood)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module, _, test = nodeid.partition("::")
            if test.split("[", 1)[0] in serial_tests(config.rootpath, module):
                return SERIAL_UNIT
            group = module_group(config.rootpath, module)
            return f"group {group}" if group else nodeid

        def _assign_work_unit(self, node) -> None:
            if SERIAL_UNIT in self.workqueue:
                self.workqueue.move_to_end(SERIAL_UNIT, last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False
    return ModuleGroupScheduling(config, log)
