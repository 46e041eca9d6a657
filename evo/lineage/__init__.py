"""Git-native lineage: versions as branches, records as notes, the writer locks.

The only package that runs git. Other modules call:

    from evo.lineage import Lineage, VersionRecord, workspace_lock
    lin = Lineage.open(root)
    path = lin.create_version("v3", ["v2"]); ...; sha = lin.commit_version("v3", msg, intervention)
    lin.append_event("v3", {"event": "evaluated", ...})
    records = lin.read_all()           # {name: VersionRecord}
    lin.promote("v3", reason) / lin.prune(...) / lin.revert(...) / lin.merge(a, b, reason)
"""

from evo.lineage.events import STATES, VersionRecord
from evo.lineage.lock import workspace_lock
from evo.lineage.store import Lineage, find_workspace_root

__all__ = ["Lineage", "VersionRecord", "STATES", "workspace_lock", "find_workspace_root"]
