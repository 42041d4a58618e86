"""The contract between a trainer and DECOR: the names both sides use.

The metrics a trainer publishes (the reporter in-process, or the sidecar from the progress
file), the environment the runtime gives the trainer process, and their defaults
(docs/contract.md). The operator and the local runtime import these names from here; this
module imports nothing, so the trainer image never needs operator code.
"""

# --- metrics (counters without the ``_total`` suffix that prometheus_client appends) ----------

STEPS_COMPLETED = "decor_steps_completed"
SAMPLES_COMPLETED = "decor_samples_completed"
STEPS_PLANNED = "decor_steps_planned"
EPOCHS_COMPLETED = "decor_epochs_completed"
EPOCHS_PLANNED = "decor_epochs_planned"
STEP_DURATION = "decor_step_duration_seconds"
EPOCH_DURATION = "decor_epoch_duration_seconds"
LAST_STEP_TIMESTAMP = "decor_last_step_timestamp_seconds"
RESTART_DURATION = "decor_training_restart_seconds"
THREADS_FOLLOW_LIMIT = "decor_threads_follow_limit"

DEFAULT_METRICS_PORT = 9100
"""Port of the metrics endpoint when neither the caller nor ``DECOR_METRICS_PORT`` says."""
DEFAULT_PROGRESS_FILE = "/var/run/decor/progress.json"
"""Progress-file path of the sidecar when neither the caller nor ``DECOR_PROGRESS_FILE`` says."""

# --- the environment the runtime gives the trainer process ----------------------------------

ENV_EPOCHS = "DECOR_EPOCHS"
ENV_STEPS_PER_EPOCH = "DECOR_STEPS_PER_EPOCH"
ENV_METRICS_PORT = "DECOR_METRICS_PORT"
ENV_METRICS_ADDRESS = "DECOR_METRICS_ADDRESS"
ENV_METRICS_LINGER_S = "DECOR_METRICS_LINGER_S"
ENV_PROGRESS_FILE = "DECOR_PROGRESS_FILE"
ENV_CHECKPOINT_DIR = "DECOR_CHECKPOINT_DIR"
ENV_WORKERS = "DECOR_WORKERS"
"""Worker processes to run when no CUDA device is visible (the operator sets it to the
allocated GPU count; docs/contract.md)."""
ENV_WORLD_SIZE = "DECOR_WORLD_SIZE"
"""Workers across all the job's pods (absent: this pod's workers, a world of one pod)."""
ENV_RANK_OFFSET = "DECOR_RANK_OFFSET"
"""Global rank of this pod's first worker (absent: 0)."""
ENV_MASTER_ADDR = "MASTER_ADDR"
"""Address of global rank 0's rendezvous (torch's env:// TCPStore), as under torchrun."""
ENV_MASTER_PORT = "MASTER_PORT"
"""Its TCP port."""
ENV_BATCH_POLICY = "DECOR_BATCH_POLICY"
"""``fixed-global`` or ``scale-with-workers`` (docs/distributed.md)."""

# --- data-parallel defaults ---------------------------------------------------------------------

POLICY_FIXED_GLOBAL = "fixed-global"
POLICY_SCALE_WITH_WORKERS = "scale-with-workers"
DEFAULT_MASTER_PORT = 29500
"""Rendezvous port of a world that spans pods when ``MASTER_PORT`` is not set (torchrun's
default). A world in one pod takes a free port instead, so that trainers on one host never
collide."""
