"""The Ant with other MJX physics settings, as a task file (docs/benchmarks/eureka.md, "The field's budget").

`ENVCODER_ANT_SOLVER="4,16"` sets the solver's iterations and line-search steps (the task's are 2 and 8).
`ENVCODER_ANT_SUBSTEPS=4` steps the same 1/60 s control step in that many physics steps and makes the contacts and
joint limits as stiff as MuJoCo allows at that step (`solref` time constant 2.04 physics steps: MuJoCo's floor is
2); the task's 2 substeps keep MuJoCo's default 0.02 s. `ENVCODER_ANT_FRICTION=1.25` sets the sliding friction of
every contact (MuJoCo takes the larger of a pair's two, the task's 1.5; PhysX averages them: 1.25 in IsaacGymEnvs).
The task's presets come along.

    ENVCODER_ANT_SUBSTEPS=4 envcoder eval --task benchmarks/tasks/ant_physics.py --preset isaac \\
        --functions rewards/ --task-default --seeds 2
"""

import dataclasses
import os
import tempfile
from pathlib import Path

import yaml

from envcoder.tasks.ant import TASK as ANT

iterations, line_search = (int(n) for n in os.environ.get("ENVCODER_ANT_SOLVER", "2,8").split(","))
substeps = int(os.environ.get("ENVCODER_ANT_SUBSTEPS", "2"))
xml = Path(ANT.model_file).read_text().replace('iterations="2" ls_iterations="8"',
                                               f'iterations="{iterations}" ls_iterations="{line_search}"')
if substeps != 2:
    timestep = 1 / 60 / substeps
    stiff = f'solref="{2.04 * timestep:.6f} 1"'
    xml = xml.replace('timestep="0.0083333"', f'timestep="{timestep:.7f}"')
    xml = xml.replace('<joint armature="0.03" damping="0.1" limited="true"/>',
                      f'<joint armature="0.03" damping="0.1" limited="true" solreflimit="{2.04 * timestep:.6f} 1"/>')
    xml = xml.replace('density="5.0"', f'density="5.0" {stiff}')
    xml = xml.replace('size="0 0 0.05" friction="1 0.1 0.1"', f'size="0 0 0.05" friction="1 0.1 0.1" {stiff}')
friction = os.environ.get("ENVCODER_ANT_FRICTION")
if friction is not None:
    xml = xml.replace('friction="1.5 0.1 0.1"', f'friction="{float(friction):g} 0.1 0.1"')
    xml = xml.replace('size="0 0 0.05" friction="1 0.1 0.1"', f'size="0 0 0.05" friction="{float(friction):g} 0.1 0.1"')
tag = f"{iterations}x{line_search}s{substeps}" + (f"f{float(friction):g}" if friction is not None else "")
name = f"Ant{tag}"
model = Path(tempfile.gettempdir()) / f"envcoder_ant_{tag}.xml"
model.write_text(xml)
training = yaml.safe_load((Path(ANT.model_file).parents[1] / "configs" / "ant.yaml").read_text())
TASK = dataclasses.replace(ANT, name=name, model_file=model, substeps=substeps, training=training, source=None)
