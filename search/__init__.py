"""Search: templates, config spaces, measurement, tuning logs and tuners.

```python
@lt.search.template("matmul")
def matmul(cfg, N, M, K):
    ...                                   # cfg.define_split(...), cfg["tile_i"].apply(...)
    return s, [A, B, C]

task = lt.search.create_task("matmul", (512, 512, 512), target="c")
tuner = lt.search.GATuner(task, seed=0)
best = tuner.tune(200, lt.search.MeasureOption(timeout=10),
                  callbacks=[lt.search.log_to_file("mm.jsonl"), lt.search.progress_bar()])
with lt.search.apply_history_best("mm.jsonl"):
    s, args = matmul(512, 512, 512)      # the best logged config
```
"""
from .auto import auto_schedule, auto_task
from .callbacks import LogToFile, ProgressBar, log_to_file, progress_bar
from .flops import count_flop
from .ga_tuner import GATuner
from .gbt_tuner import GBTOptions, GBTTuner
from .log import ApplyHistoryBest, LogWriter, Record, apply_history_best, load_best, load_records
from .measure import ErrorKind, MeasureOption, Measurer, MeasureResult, measure_configs
from .optuna_tuner import OptunaTuner
from .sa_tuner import SATuner
from .space import ConfigEntity, ConfigSpace, FallbackConfig
from .task import Task, create_task
from .template import (
    DagTemplate,
    DispatchContext,
    TaskKey,
    Template,
    get_template,
    registered,
    template,
)
from .tuner import Tuner, TuningError
from .tuners import TUNERS, GridTuner, RandomTuner, make_tuner
from .workers import worker_role

__all__ = ["auto_schedule", "auto_task", "LogToFile", "ProgressBar", "log_to_file",
           "progress_bar", "count_flop", "GATuner", "GBTTuner", "GBTOptions", "OptunaTuner",
           "ApplyHistoryBest", "LogWriter", "Record", "apply_history_best", "load_best",
           "load_records", "ErrorKind", "MeasureOption", "Measurer", "MeasureResult",
           "measure_configs", "SATuner", "ConfigEntity", "ConfigSpace", "FallbackConfig",
           "Task", "create_task", "DispatchContext", "TaskKey", "Template", "get_template",
           "registered", "template", "Tuner", "TuningError", "GridTuner", "RandomTuner",
           "worker_role", "DagTemplate", "TUNERS", "make_tuner"]
