"""gpuval shared types: the CRDs and the agent's result document, and the contract's words.

This face exports the names the other packages use most: a node's and a check's `Verdict`, the
reasons catalogue (`Reason`, `Severity`, `REASONS`, `verdict_of`, `action_of`, `RepairAction`,
`REPAIRABLE_ACTIONS`), the conditions and Events (`ConditionType`, `ConditionReason`,
`EventReason`, `ValidationPhase`, `is_bad`), the environment variables (`AgentEnv`,
`OperatorEnv`), `label_value`, and the module `keys` (labels, annotations, taints, status keys).
Code outside this package imports them from here: `from gpuval_api import Reason, keys`.

The face holds only modules of the standard library's weight (enums and strings), so importing any
part of gpuval_api stays as quick as before; the typed documents (`gpuval_api.crd`,
`gpuval_api.result`, pydantic models) are imported from their modules. Modules inside gpuval_api
import from the module that defines a name, never from this face.
"""

from gpuval_api import keys
from gpuval_api.conditions import (
    ConditionReason,
    ConditionType,
    EventReason,
    ValidationPhase,
    is_bad,
)
from gpuval_api.env import AgentEnv, OperatorEnv
from gpuval_api.labels import label_value
from gpuval_api.reasons import (
    REASONS,
    REPAIRABLE_ACTIONS,
    Reason,
    RepairAction,
    Severity,
    action_of,
    verdict_of,
)
from gpuval_api.verdicts import Verdict

__all__ = [
    "REASONS",
    "REPAIRABLE_ACTIONS",
    "AgentEnv",
    "ConditionReason",
    "ConditionType",
    "EventReason",
    "OperatorEnv",
    "Reason",
    "RepairAction",
    "Severity",
    "ValidationPhase",
    "Verdict",
    "action_of",
    "is_bad",
    "keys",
    "label_value",
    "verdict_of",
]
