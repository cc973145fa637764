"""What a plan was compiled from (`CompileInputs`, ``DIR/report/inputs.json``), and muting the warnings of a
second costing of the same inputs. The top layer beside the CLI: `compiler.api` and `compiler.explanation`
both read it, so neither imports the other for it ([Note: plan API layering] in `compiler.api`)."""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.ir.precision import Precision

#: Where the report goes inside a plan directory, and the record of what the plan was compiled from.
REPORT_DIR = "report"
INPUTS_FILE = "inputs.json"


@dataclass(frozen=True)
class CompileInputs:
    """What a plan was compiled from; saved as ``DIR/report/inputs.json`` so `compiler.explanation` re-costs it.

    Paths are absolute. Budgets in watts (and dollars per hour); None keeps the cluster file's.
    """

    model: str
    cluster: str
    workload: str
    power_budget_w: float | None = None
    objective: str = "throughput"
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    dtype: str = "bf16"
    kv_dtype: str | None = None
    time_limit_s: float = 60.0
    cost_budget_per_hour: float | None = None
    deployable: bool = False  # `compile --deployable`: only what the cluster file's engines run
    calibration: str | None = None  # `--calibration`: a profile replacing the cluster file's (None keeps it)

    @staticmethod
    def of(model: str, cluster: str | os.PathLike, workload: str | os.PathLike, **options: Any) -> CompileInputs:
        return CompileInputs(model, str(Path(cluster).resolve()), str(Path(workload).resolve()), **options)

    def precision(self) -> Precision:
        from compiler.ir.precision import Precision

        return Precision.of(self.dtype, self.kv_dtype)

    def overrides(self) -> dict[str, float | str]:
        """Keyword arguments of the driver's passes for the budgets and calibration profile given (none: the
        cluster file's)."""
        out: dict[str, float | str] = {}
        if self.power_budget_w is not None:
            out["power_budget_w"] = self.power_budget_w
        if self.cost_budget_per_hour is not None:
            out["cost_budget_per_hour"] = self.cost_budget_per_hour
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @staticmethod
    def load(path: str | os.PathLike) -> CompileInputs | None:
        """The inputs recorded in a plan directory, or None when it has none (compiled without a report)."""
        file = Path(path) / REPORT_DIR / INPUTS_FILE
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            return CompileInputs(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as e:
            raise BadInput(f"{file}: not a record of compile inputs ({type(e).__name__}: {e}); recompile the plan "
                           "or pass --cluster and --workload") from None


@contextmanager
def repeat_warnings_muted() -> Iterator[None]:
    """Warnings of a second costing of the same inputs (the report's frontier, explain) were said by the first."""
    logger = logging.getLogger("compiler")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
