"""The `lose-unsynced-journal` fault: the power loss of `lose-unsynced`
(fencecheck/nemesis/faults/lose_unsynced.py) on a file system with one metadata journal, as ext4
and xfs are: any fsync makes every name change before it durable (`--names journal` of
clusters/faults/unsynced_fs.py). `lose-unsynced` keeps to POSIX, where a new file's name is
durable only once its directory is fsynced; a server that creates a file, fsyncs it and never
fsyncs the directory loses the file there and keeps it here. Running both tells a server's own
durability bug from the file system's rule (docs/findings/power-loss-and-membership.md).
"""

from __future__ import annotations

from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.lose_unsynced import DESCRIPTOR as POSIX
from fencecheck.nemesis.faults.lose_unsynced import LoseUnsyncedFault

DESCRIPTOR = FaultDescriptor(
    name="lose-unsynced-journal",
    factory="fencecheck.nemesis.faults.lose_unsynced_journal:LoseUnsyncedJournalFault",
    summary="lose-unsynced on a journaling file system (ext4, xfs): any fsync keeps the names",
    requires=POSIX.requires,
    runtimes=POSIX.runtimes,
    needs=POSIX.needs,
)


class LoseUnsyncedJournalFault(LoseUnsyncedFault):
    name = "lose-unsynced-journal"
    names = "journal"
