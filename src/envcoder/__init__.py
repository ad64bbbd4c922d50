"""envcoder: evaluate many RL environment-shaping candidates in one process on one GPU."""

import os

__version__ = "0.1.0"

# XLA's concurrency-optimized CPU scheduler can deadlock a training program: with jaxlib 0.10.2 on a 2-core
# machine, the initialization of 6 or more Cartpole groups never finished (every thread idle). Turned off before
# JAX starts its CPU backend; the flag concerns only the CPU (GPU runs are unchanged).
_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}=false".strip()

# XLA's own warnings (a deprecation notice of the partitioner sharded runs use, `envcoder.rl.sharding.use_gspmd`;
# "Very slow compile?" alarms) are not the user's to act on; its errors still print. Set it to 0 to see them all.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
