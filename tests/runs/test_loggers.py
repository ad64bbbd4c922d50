"""The run's loggers: TensorBoard events (read back here, as TensorBoard reads them) without PyTorch."""

import os
import subprocess
import sys


def read_scalars(directory):
    """`{tag: {step: value}}` from the TensorBoard event files in `directory` (TFRecord framing)."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def test_tensorboard_logging_does_not_import_pytorch(tmp_path):
    """tensorboardX imports PyTorch where it is installed (seconds of every run's start on the GPU machine): a
    stand-in `torch` package that leaves a mark when imported shows that the logger never imports it, that the
    events are written all the same, and that the process can import torch afterwards."""
    (tmp_path / "torch").mkdir()
    marker = tmp_path / "torch_was_imported"
    (tmp_path / "torch" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('x')\nTensor = object\n")
    script = f"""
import sys
import numpy as np
from envcoder.runs.loggers import TensorBoardLog
log = TensorBoardLog({str(tmp_path / 'tb')!r}, ["good#0"])
log.write(3, {{"task_fitness": np.array([0.25])}}, {{}})
log.close()
assert "torch" not in sys.modules
import torch  # what the process imports later is not blocked
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "x"  # once: by the script's own import, after the logger's
    assert read_scalars(tmp_path / "tb" / "good#0") == {"task_fitness": {3: 0.25}}
