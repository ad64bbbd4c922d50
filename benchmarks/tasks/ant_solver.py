"""The Ant with another MJX solver setting, as a task file (docs/benchmarks/eureka.md, "The field's budget"):
`ENVCODER_ANT_SOLVER="4,16"` sets the solver's iterations and line-search steps (the task's are 2 and 8); the task's
presets come along.

    ENVCODER_ANT_SOLVER=4,16 envcoder eval --task benchmarks/tasks/ant_solver.py --preset isaac --functions rewards/ \\
        --task-default --seeds 2
"""

import dataclasses
import os
import tempfile
from pathlib import Path

import yaml

from envcoder.tasks.ant import TASK as ANT

iterations, line_search = (int(n) for n in os.environ.get("ENVCODER_ANT_SOLVER", "4,16").split(","))
xml = Path(ANT.model_file).read_text().replace('iterations="2" ls_iterations="8"',
                                               f'iterations="{iterations}" ls_iterations="{line_search}"')
model = Path(tempfile.gettempdir()) / f"envcoder_ant_solver_{iterations}_{line_search}.xml"
model.write_text(xml)
training = yaml.safe_load((Path(ANT.model_file).parents[1] / "configs" / "ant.yaml").read_text())
TASK = dataclasses.replace(ANT, name=f"AntSolver{iterations}x{line_search}", model_file=model, training=training,
                           source=None)
