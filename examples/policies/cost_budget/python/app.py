"""cost_budget in Python: the same policy as ../rust/src/lib.rs, rule for rule, so both give
the same decisions on the same snapshots (tests/policies.rs checks it).

componentize-py finds the `engine` resource of the exported `scaling` interface as the class
`Engine` in the module named after the interface: scaling.py. This module is the world's.
"""

from wit_world import exports


class Scaling(exports.Scaling):
    pass
