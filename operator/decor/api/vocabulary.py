"""The vocabulary: every name DECOR and the cluster (or its users' tools) share.

The API's group, version and kind; the labels and annotations on what DECOR creates; a job's
phases; its condition types and their reasons; the Event reasons; the planner's verdicts; the
kinds of actuation; the operator's metric names. Defined here once and imported everywhere
else (the operator, the local runtime, ``kubectl dtj``, ``bench/``); the names the trainer
shares with the operator (its metrics, its environment) are the trainer's own, in
:mod:`decor_trainer.contract`. Nothing but constants: this module imports nothing.
"""

from __future__ import annotations

# --- the API -------------------------------------------------------------------------------

API_GROUP = "decor.dev"
API_VERSION = "v1alpha1"
KIND = "DeadlineTrainingJob"
PLURAL = "deadlinetrainingjobs"
CRD_NAME = f"{PLURAL}.{API_GROUP}"
ANNOTATION_CRD_REVISION = "decor.dev/crd-revision"
"""Annotation on the CRD: its schema's revision, a whole number (see :mod:`decor.core.crd_revision`)."""

# --- labels and annotations ------------------------------------------------------------------

LABEL_JOB = "decor.dev/job"
"""Label on every trainer pod: the name of its DeadlineTrainingJob."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "decor-operator"
LABEL_JOB_UID = "decor.dev/job-uid"
"""Label on a checkpoint claim DECOR made: the uid of the job it was made for (a claim is a
job's only when this matches: a leftover of an earlier job of the same name is not)."""
ANNOTATION_ALLOCATION = "decor.dev/allocation"
"""Annotation on a trainer pod: the allocation it was created with (informational)."""
LABEL_ROLE = "decor.dev/role"
"""Label on the pods of a several-pod job: ``leader`` (global rank 0) or ``worker``."""
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"
LABEL_LEADER = "decor.dev/leader"
"""Label on a worker pod: the name of its group's leader pod."""
FINALIZER = "decor.dev/finalizer"
ANNOTATION_PREFIX = "decor.dev"
"""Prefix of kopf's bookkeeping annotations (its progress and last-handled configuration)."""

# --- phases ----------------------------------------------------------------------------------

PHASE_PENDING = "Pending"  # no trainer pod running yet (created, scheduling, starting)
PHASE_RUNNING = "Running"  # the trainer runs and the controller acts every period
PHASE_RESTARTING = "Restarting"  # the trainer pod is being replaced (GPU change, pod lost)
PHASE_SUSPENDED = "Suspended"  # spec.suspend: no pod, controller state kept
PHASE_SUCCEEDED = "Succeeded"  # all planned steps done (see status.outcome)
PHASE_FAILED = "Failed"  # the trainer failed more often than the operator retries
PHASE_QUEUED = "Queued"  # not admitted (yet): the planner cannot meet its deadline now
PHASES: tuple[str, ...] = (
    PHASE_QUEUED,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_RESTARTING,
    PHASE_SUSPENDED,
    PHASE_SUCCEEDED,
    PHASE_FAILED,
)
TERMINAL_PHASES = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})

# --- condition types -------------------------------------------------------------------------

CONDITION_ADMITTED = "Admitted"  # the planner's verdict; reason: a planner verdict (VERDICT_*)
CONDITION_STALLED = "Stalled"  # the trainer runs but has completed no step for a while
# The control law's verdicts, reported as conditions of the same names.
CONDITION_ON_TRACK = "OnTrack"  # the job is predicted to finish by its deadline with headroom
CONDITION_AT_RISK = "AtRisk"  # it needs more than 90% of MAX to make the deadline
CONDITION_INFEASIBLE = "Infeasible"  # even MAX cannot make the deadline; running at MAX
CONDITION_METRICS_UNAVAILABLE = "MetricsUnavailable"  # no usable progress sample; allocation held
CONDITION_COMPLETE = "Complete"  # all planned steps are done
CONDITION_DEADLINE_MISSED = "DeadlineMissed"  # the deadline passed before the job completed
CONDITION_TYPES: tuple[str, ...] = (
    CONDITION_ADMITTED,
    CONDITION_STALLED,
    CONDITION_ON_TRACK,
    CONDITION_AT_RISK,
    CONDITION_INFEASIBLE,
    CONDITION_METRICS_UNAVAILABLE,
    CONDITION_COMPLETE,
    CONDITION_DEADLINE_MISSED,
)
DECISION_STARTING = "Starting"
"""The law's verdict while too little progress is seen to predict anything: not a condition
type (the conditions then say :data:`REASON_MEASURING_SPEED`)."""

# --- condition reasons ------------------------------------------------------------------------

REASON_MEASURING_SPEED = "MeasuringSpeed"  # too little progress seen yet to predict anything
REASON_PREDICTED_ON_TIME = "PredictedOnTime"  # the plan finishes by the deadline with headroom
REASON_NEEDS_NEAR_MAX = "NeedsNearMax"  # the plan needs more than 90% of resources.max
REASON_BEHIND_AT_MAX = "BehindAtMax"  # decor-nn: behind the set point while at resources.max
REASON_EVEN_MAX_TOO_SLOW = "EvenMaxTooSlow"  # the speed model says max finishes late
REASON_DEADLINE_IN_PAST = "DeadlineInPast"  # the deadline had passed when it was set
REASON_SUSPENDED_TOO_LONG = "SuspendedTooLong"  # suspended past when max could still make it
REASON_FEASIBLE = "Feasible"  # Infeasible cleared: max (or less) makes the deadline
REASON_NO_PROGRESS_SAMPLE = "NoProgressSample"  # /metrics or Prometheus gave no usable sample
REASON_METRICS_OK = "ProgressSampled"  # MetricsUnavailable cleared: a sample was read
REASON_DEADLINE_PASSED = "DeadlinePassed"  # now is past the deadline and steps remain
REASON_BEFORE_DEADLINE = "BeforeDeadline"  # DeadlineMissed cleared (e.g. deadline moved later)
REASON_FINISHED = "AllStepsDone"  # Complete: every planned step is done
REASON_FINISHED_LATE = "FinishedLate"  # DeadlineMissed at completion: finished after it
REASON_FINISHED_ON_TIME = "FinishedOnTime"  # DeadlineMissed cleared at completion
REASON_RUNNING = "Running"  # Complete is False while steps remain
REASON_INVALID_SPEC = "InvalidSpec"  # the spec passed the API server but not the model
REASON_CREATE_REFUSED = "CreateRefused"  # the API refused a trainer pod (admission, quota, 422)
REASON_RESIZE_REFUSED = "ResizeRefused"
"""Admitted condition (True: the job runs at what it holds) and Warning Event reason when
the API server refuses an in-place CPU resize (a ResourceQuota's or LimitRange's 403, 422)."""
REASON_TRAINER_FAILED = "TrainerFailed"  # the trainer pod failed more than the retry budget
REASON_EXITED_EARLY = "ExitedEarly"  # the trainer exited 0 before its planned steps
REASON_CRASH_LOOP = "CrashLoop"  # the trainer crashed (restarted in place) past the budget
REASON_UNSCHEDULABLE = "Unschedulable"  # a pod could not be placed: back to what last ran
REASON_NO_NEW_STEPS = "NoNewSteps"  # Stalled: the trainer runs but completes no step
REASON_STEPS_MOVING = "StepsMoving"  # Stalled cleared
REASON_TEMPLATE_REFUSED = "TemplateRefused"
"""Condition reason and Event reason when the template asks for something not allowed."""
REASON_LIMIT_RANGE_REFUSED = "LimitRangeRefused"
"""Admitted condition (False) and Warning Event reason when the namespace's LimitRanges allow
no allocation within spec.resources.min..max (the message names the LimitRange and bound)."""

# --- event reasons ----------------------------------------------------------------------------

EVENT_POD_CREATED = "PodCreated"  # a trainer pod was created (first start or recreation)
EVENT_RESIZED = "Resized"  # an in-place CPU resize was requested
EVENT_RESIZE_INFEASIBLE = "ResizeInfeasible"  # the kubelet cannot fit a resize on the node
EVENT_RESIZE_REFUSED = REASON_RESIZE_REFUSED  # the API server refused a resize (quota)
EVENT_RESTARTING = "Restarting"  # the trainer pod was deleted to change the GPU count
EVENT_POD_LOST = "PodLost"  # the trainer pod vanished or failed; recreated from checkpoint
EVENT_UNSCHEDULABLE = REASON_UNSCHEDULABLE  # a pod waited too long to be placed; fell back
EVENT_STALLED = CONDITION_STALLED  # the trainer completes no step
EVENT_QUEUED = "Queued"  # not admitted: its deadline cannot be met without making another late
EVENT_ADMITTED = "Admitted"  # admitted after waiting in the queue
EVENT_PREEMPTED = "Preempted"  # gave its capacity to a higher-priority job; waits in the queue
EVENT_SHORTED = "Shorted"  # admitted, but its node cannot hold what it needs now
EVENT_SUSPENDED = "Suspended"  # spec.suspend: the trainer pod was deleted
EVENT_RESUMED = "Resumed"  # spec.suspend cleared: a pod resumes from the checkpoint
EVENT_DEADLINE_CHANGED = "DeadlineChanged"  # spec.deadline/duration moved the deadline
EVENT_DEADLINE_IN_PAST = REASON_DEADLINE_IN_PAST  # Infeasible at admission: runs at max
EVENT_INFEASIBLE = CONDITION_INFEASIBLE  # the speed model says even max finishes late
EVENT_AT_RISK = CONDITION_AT_RISK  # the plan needs nearly all of resources.max
EVENT_DEADLINE_MISSED = CONDITION_DEADLINE_MISSED  # the deadline passed with steps remaining
EVENT_METRICS_UNAVAILABLE = CONDITION_METRICS_UNAVAILABLE  # progress unreadable; holding
EVENT_METRICS_RECOVERED = "MetricsRecovered"  # progress readable again
EVENT_COMPLETED = "Completed"  # all steps done; message gives the deviation
EVENT_FAILED = "Failed"  # gave up after repeated trainer failures
EVENT_INVALID_SPEC = REASON_INVALID_SPEC
EVENT_LIMIT_RANGE_CLIPPED = "LimitRangeClipped"  # a LimitRange narrowed spec.resources.min/max
EVENT_LIMIT_RANGE_REFUSED = REASON_LIMIT_RANGE_REFUSED  # LimitRanges leave no allocation

EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"

# --- the planner's verdicts (the reasons of the Admitted condition) --------------------------

VERDICT_ADMITTED = "Admitted"  # runs with at least its need (deadline met as predicted)
VERDICT_QUEUED = "Queued"  # not admitted: cannot be met without making an admitted job late
VERDICT_PREEMPTED = "Preempted"  # was admitted, gave way to a higher-priority job; now queued
VERDICT_SHORTED = (
    "Shorted"  # admitted, but the node cannot hold its need this period (it will be late)
)
VERDICT_BEST_EFFORT = "BestEffort"  # no deadline: gets what is left over (possibly nothing)

# --- kinds of actuation (the ``kind`` label of decor_operator_actuations_total) ---------------

ACTUATION_RESIZE = "resize"  # in-place CPU resize requested
ACTUATION_RESTART = "restart"  # trainer pod deleted to change the GPU count
ACTUATION_CREATE = "create"  # trainer pod created (first start, resume, recreation)
ACTUATION_SUSPEND = "suspend"  # trainer pod deleted because of spec.suspend
ACTUATION_PREEMPT = "preempt"  # trainer pod deleted because a higher priority job needs room
ACTUATIONS = (
    ACTUATION_RESIZE,
    ACTUATION_RESTART,
    ACTUATION_CREATE,
    ACTUATION_SUSPEND,
    ACTUATION_PREEMPT,
)

# --- the operator's metrics (prometheus_client appends ``_total`` to counters) ---------------

METRIC_ACTUATIONS = "decor_operator_actuations"
METRIC_RECONCILE_ERRORS = "decor_operator_reconcile_errors"
METRIC_JOBS = "decor_operator_jobs"
METRIC_JOBS_TRACKED = "decor_operator_jobs_tracked"
METRIC_RECONCILE_DURATION = "decor_operator_reconcile_duration_seconds"
METRIC_PERIOD_LATENESS = "decor_operator_period_lateness_seconds"
METRIC_PLAN_DURATION = "decor_operator_plan_duration_seconds"
METRIC_PERIOD_DURATION = "decor_operator_period_duration_seconds"
METRIC_PERIOD_STEP_DURATION = "decor_operator_period_step_duration_seconds"
METRIC_GC_PAUSE = "decor_operator_gc_pause_seconds"
PERIOD_STEPS = ("snapshot", "read", "prepare", "plan", "commit")
"""The control period's steps, in order (the ``step`` label of the step duration metric;
:mod:`decor.service.loop`)."""
METRIC_STATUS_WRITES_WAITING = "decor_operator_status_writes_waiting"
METRIC_EVENTS_DROPPED = "decor_operator_events_dropped"
METRIC_LEADER = "decor_operator_leader"
METRIC_LEADER_TAKEOVERS = "decor_operator_leader_takeovers"
