"""Memory of a process tree (a process and its descendants, e.g. DataLoader workers), read two ways.

A **cheap read** takes every process's resident set (RSS, ``/proc/PID/statm``): about 15 µs a process. A **full
read** adds what the process holds of its own (``_rss_and_own``): its proportional set (PSS,
``/proc/PID/smaps_rollup``), which splits each page between the processes sharing it, so that forked workers' pages
count once, less its file pages (the libraries' code, mapped files). Those the kernel shares with every process on
the machine that maps the same files, whose PSS halves when one more process maps them (a process that imported
torch: 71 MiB of file pages alone, 36 beside a second one), and reclaims under pressure: counted, a trial would read
lower whenever another torch process runs. A full read costs the kernel a walk of the process's page tables, under the
memory-map lock the training loop needs: 8-11 ms on a 600 MiB torch process. Inside a timed window only cheap reads may
run (``docs/benchmarks.md``, harness costs); a full read outside it tells each process's excess (RSS less what it
holds of its own), which turns the cheap reads of the same processes into estimates (``pss_estimate``).

A trial forked from the fork server shares the anonymous pages of its imports with that server (heap, Python's
objects), which PSS would charge half to the server. A full read adds the server's share back
(``TreeReading.lent``), so that a forked trial reads what the same trial reads as a fresh process.

Where ``/proc`` is missing (not Linux), both reads fall back to psutil, and to RSS where the OS reports no PSS.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

MIB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, FileNotFoundError, ProcessLookupError)
# Set in a forked trial's environment: the pid of the fork server it was forked from.
FORK_SERVER_ENV = "AUTOTUNE_FORK_SERVER_PID"


@dataclass(frozen=True)
class MemoryBudget:
    """A memory limit in MiB and the key that set it, which the verdict on a trial over it names."""

    key: str
    mb: float


@dataclass(frozen=True)
class TreeReading:
    """One reading of a process tree at ``time``: bytes resident per pid, and for a full read what each holds of its
    own (``pss``: PSS less file pages, ``_rss_and_own``; None for a cheap read, and where the OS reports no PSS);
    ``lent``: for a full read of a forked tree, the fork server's PSS share of the anonymous pages of its imports,
    which a fresh process would hold alone (``_lent_pss``)."""

    time: float
    rss: dict[int, int]
    pss: dict[int, int] | None = None
    lent: int = 0

    @property
    def total(self) -> int:
        """The tree's bytes: what its processes hold of their own (and the pages lent) where this is a full read with
        PSS, else RSS."""
        return self.lent + sum((self.rss if self.pss is None else self.pss).values())


class ProcessTree:
    """Reads the memory of process ``root`` and its descendants; processes that exit meanwhile are skipped.
    ``lender``: the fork server ``root`` was forked from, if any (``fork_server_of``)."""

    def __init__(self, root: int, clock: Callable[[], float] = time.perf_counter, lender: int | None = None) -> None:
        self.root, self.lender = root, lender
        self._clock = clock
        self._statm = os.path.exists(f"/proc/{root}/statm")
        self.metric = "pss" if _pss_available(root) else "rss"

    def pids(self) -> list[int]:
        """The root and its living descendants."""
        return tree_pids(self.root)

    def read_cheap(self) -> TreeReading:
        """RSS of every process in the tree: microseconds, safe inside a timed window."""
        return TreeReading(self._clock(), _each(self.pids(), self._rss))

    def read_full(self) -> TreeReading:
        """RSS and what each process of the tree holds of its own: milliseconds per process, for outside a timed
        window."""
        pids = self.pids()
        if self.metric == "rss":
            return TreeReading(self._clock(), _each(pids, self._rss))
        both = _each(pids, _rss_and_own)
        rss, pss = {p: r for p, (r, _) in both.items()}, {p: s for p, (_, s) in both.items()}
        return TreeReading(self._clock(), rss, pss, self._lent())

    def _lent(self) -> int:
        """The fork server's PSS share of the anonymous pages of its imports (``_lent_pss``): a fresh process would
        hold them alone."""
        if self.lender is None:
            return 0
        try:
            return _lent_pss(self.lender)
        except (*_GONE, PermissionError):
            return 0

    def peak_rss(self) -> int | None:
        """The root process's own high-water mark of resident memory (``VmHWM``), or None where not reported."""
        try:
            with open(f"/proc/{self.root}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def _rss(self, pid: int) -> int:
        if not self._statm:
            return psutil.Process(pid).memory_info().rss
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE


def pss_estimate(reading: TreeReading, full: list[TreeReading], root: int) -> int:
    """The tree's memory at ``reading``, shared pages counted once.

    Exact for a full reading. For a cheap one, each process counts its RSS less its shared excess (RSS - PSS) in a
    full reading of the same layout that saw it: a process's excess depends on which processes share its pages (the
    root's grows once workers fork from it), so the full readings rank first by layout (the same processes, then
    every one of them and more, then the nearest count of processes), then by nearness in time. A process no full
    reading saw (a worker started since) counts the mean excess of the non-root processes of the best-ranked full
    reading that has any, or its whole RSS where none has. Without any PSS the estimate is the RSS total.
    """
    if reading.pss is not None:
        return reading.total
    with_pss = sorted((r for r in full if r.pss is not None), key=lambda r: _layout_distance(r, reading))
    total = with_pss[0].lent if with_pss else 0
    with_workers = next((r for r in with_pss if any(pid != root for pid in r.pss)), None)
    for pid, rss in reading.rss.items():
        seen = next((r for r in with_pss if pid in r.pss and pid in r.rss), None)
        if seen is not None:
            excess = seen.rss[pid] - seen.pss[pid]
        else:
            excess = _sibling_excess(with_workers, root) if with_workers is not None and pid != root else 0
        total += max(0, rss - excess)
    return total


def _layout_distance(full: TreeReading, reading: TreeReading) -> tuple[int, int, float]:
    """How far ``full``'s processes are from ``reading``'s, then its time: the same set, a superset, any other."""
    pids, wanted = full.rss.keys(), reading.rss.keys()
    tier = 0 if pids == wanted else 1 if pids >= wanted else 2
    return tier, abs(len(pids) - len(wanted)), abs(full.time - reading.time)


def peak_estimate(cheap: list[TreeReading], full: list[TreeReading], root: int, root_peak_rss: int | None) -> int:
    """The tree's peak, shared pages counted once: the highest estimate over all readings, or, where it is
    higher, the root's high-water mark (catching a peak between readings) beside the other processes as the
    last full reading saw them."""
    estimates = [pss_estimate(reading, full, root) for reading in [*cheap, *full]]
    peak = max(estimates, default=0)
    if root_peak_rss is None or not full:
        return peak
    last = max(full, key=lambda r: r.time)
    pss = last.pss if last.pss is not None else last.rss
    root_excess = last.rss.get(root, 0) - pss.get(root, 0)
    return max(peak, root_peak_rss - root_excess + last.total - pss.get(root, 0))


def _lent_pss(pid: int) -> int:
    """What fork server ``pid`` holds of the pages a trial forked from it would hold alone as a fresh process: its
    PSS share of the anonymous pages it shares (its heap, Python's objects, a library's relocated data). With it, a
    forked trial's peak reads within 2 % of a fresh one's (``benchmarks/forked.py``, docs/benchmarks.md section 5).

    From ``/proc/PID/smaps_rollup`` where it reports ``Pss_Anon`` (Linux 5.8 and later), less the private dirty
    pages (an anonymous page is dirty; a fork server writes to no file): one read of ~10 ms, where summing the
    mappings of ``/proc/PID/smaps`` takes ~35 ms for a server that imported torch."""
    fields = _rollup(pid)
    if "Pss_Anon" in fields:
        return max(0, fields["Pss_Anon"] - fields["Private_Dirty"])
    # Before Linux 5.8 a tree's reads count its file pages (``_rss_and_own``): so does its server's share then.
    maps = psutil.Process(pid).memory_maps(grouped=True)
    shared_anonymous = sum(max(0, m.pss - m.private_clean - m.private_dirty) for m in maps if _anonymous(m.path))
    return shared_anonymous + sum(m.pss for m in maps if m.path.startswith("/"))


def _rollup(pid: int) -> dict[str, int]:
    """The byte counts of ``/proc/PID/smaps_rollup``; empty where the kernel has none (before Linux 4.14). Raises
    FileNotFoundError once ``pid`` is gone."""
    path = f"/proc/{pid}/smaps_rollup"
    if not os.path.exists(path):
        os.stat(f"/proc/{pid}")
        return {}
    with open(path, encoding="ascii") as rollup:
        lines = rollup.read().splitlines()[1:]  # the first names the address range
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        amount = value.split()
        if len(amount) == 2 and amount[1] == "kB":
            fields[name] = int(amount[0]) * 1024
    return fields


def _anonymous(path: str) -> bool:
    return not path or path == "[heap]" or path.startswith("[anon")


def fork_server_of(environ: dict[str, str]) -> int | None:
    """The pid of the fork server this process was forked from, or None for a fresh process."""
    pid = environ.get(FORK_SERVER_ENV)
    return int(pid) if pid else None


def _sibling_excess(reading: TreeReading, root: int) -> int:
    excesses = [reading.rss[pid] - reading.pss[pid] for pid in reading.pss if pid != root and pid in reading.rss]
    return int(statistics.fmean(excesses)) if excesses else 0


def _each(pids: list[int], read: Callable[[int], object]) -> dict:
    values = {}
    for pid in pids:
        try:
            values[pid] = read(pid)
        except _GONE:
            continue
    return values


# Linux lists a process's children in /proc/PID/task/TID/children: reading them costs per process of the tree, where
# psutil's children(recursive=True) reads the parent of every process on the machine.
_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def tree_pids(root: int) -> list[int]:
    """``root`` and its living descendants ([] once ``root`` is gone): about 8 µs a thread of the tree, as it reads
    each thread's children file."""
    if not _CHILDREN_FILES:
        try:
            return [root, *(child.pid for child in psutil.Process(root).children(recursive=True))]
        except psutil.NoSuchProcess:
            return []
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        children = _proc_children(pid)
        if children is not None:
            found.append(pid)
            pending.extend(children)
    return found


def _proc_children(pid: int) -> list[int] | None:
    """The children of ``pid`` from ``/proc/PID/task/*/children``; None once it is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    children: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as listed:
                children.extend(int(child) for child in listed.read().split())
        except OSError:
            continue
    return children


def _rss_and_own(pid: int) -> tuple[int, int]:
    """``pid``'s resident bytes and what it holds of its own: its PSS less its file pages (``Pss_File`` of
    ``/proc/PID/smaps_rollup``, Linux 5.8 and later; before that, its whole PSS; without the rollup, as psutil reads
    it from every mapping)."""
    fields = _rollup(pid)
    if "Pss" in fields:
        return fields["Rss"], fields["Pss"] - fields.get("Pss_File", 0)
    info = psutil.Process(pid).memory_full_info()
    return info.rss, info.pss


def _pss_available(pid: int) -> bool:
    """Whether this process may read ``pid``'s PSS (psutil reads ``smaps_rollup``, else ``smaps``): the kernel checks
    the permission as the file is opened, and walks the process's page tables only as it is read (a torch
    process's: ~20 ms, MACHINE.md), so it is opened, not read."""
    for name in ("smaps_rollup", "smaps"):
        try:
            with open(f"/proc/{pid}/{name}", "rb"):
                return True
        except FileNotFoundError:
            continue
        except OSError:  # PermissionError; ESRCH for a process that ended meanwhile
            return False
    return False
