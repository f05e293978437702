"""Task environments for RL rollouts and grading, and the scheduler that runs many of them.

An environment is a copy-on-write view of a *base* (a snapshot directory of a repository after
its setup commands ran, built once and shared read-only by every environment made from it). The
agent edits the view with the harness's own tools and runs commands in agent/sandbox.py's sandbox;
grading applies the environment's diff to a FRESH view of the base and runs the tests there.

    from training.envs import Base, BaseSpec, Environment, Limits, Scheduler, Job, grade

    spec = BaseSpec(key="django__django-11099", source="/data/checkouts/django",  # a directory
                    setup=("python -m venv .venv", ".venv/bin/pip install -e ."),
                    setup_network=True)
    base = await Base.build(spec)                 # content-addressed: built once, then reused
    base = Base.from_dir("/some/prepared/tree")   # or a ready snapshot, used as is
    spec = BaseSpec(key=task.instance_id, source=TaskSource(task))   # a TreeSource fills the tree
                                                  # itself (training.tasks.base_spec(task))

    limits = Limits(timeout_s=120, memory_bytes=4 * GIB, max_processes=256,
                    max_file_bytes=GIB, disk_bytes=2 * GIB, cpus=0.5)
    async with await Environment.create(base, limits=limits) as env:
        env.root, env.isolation       # Path of the merged view; "overlay+bwrap" here
        env.workspace                 # agent.workspace.Workspace rooted at env.root, named
                                      # /workspace to the model (the same prompt in every env)
        env.tool_context()            # ToolContext for default_tools() (run_terminal gets limits)
        env.session_config(**kw)      # SessionConfig(workspace=env.root, auto_allow=True, ...)
        session = await env.open_session(policy)   # Session.create on it, limits applied
        r = await env.run("pytest -x", timeout_s=60)       # agent.sandbox.SandboxResult
        await env.apply(patch)        # git apply, else patch -p1 --fuzz=5, in the sandbox
        patch = env.diff()            # git-style diff vs the base (binary-safe, `git apply`-able;
                                      # .git, caches and .gitignored files left out)
        g = await env.grade(["pytest tests/test_x.py"], patches=[test_patch],
                            exclude_paths=["tests/test_x.py"])   # the diff less those files
        g.passed, g.applied, g.results   # GradeResult; tests ran in a fresh overlay
        await env.healthy()           # mounted, and a sandboxed `true` runs
    # close() (or leaving the block) unmounts and deletes everything; idempotent

    g = await grade(base, ["pytest -q"], diff=model_patch, patches=[test_patch], limits=limits)

    async with Scheduler(cpus=2, max_concurrency=16, max_queue=10_000, state_dir=None,
                         base_dir=None, backend="local") as sched:
        # backend="ray": Scheduler(backend="ray", actors=4, cpus_per_actor=0.5, address=None,
        #                          init={"num_cpus": 2}); cpus default to the cluster's
        result = await sched.submit(Job(base=spec, run=my_rollout, tests=("pytest -q",),
                                        limits=limits))     # waits in the queue when full
        results = await sched.map(jobs)                    # JobResult per job, in order
        await sched.prepare(spec)                          # warm the base pool ahead
        sched.stats()                                      # queued, running, cpus in use, ...

`Job.run` is `async def rollout(env: Environment) -> Any` (picklable for Ray: a module-level
function or a cloudpickle-able closure); without it, `Job.commands` run in order. A job goes
through stages setup (base from the pool, environment, health check) -> run -> grade (when
`tests`: `patches` and `exclude_paths` as in `grade`), each timed; a failure in any stage comes
back in `JobResult.error`/`error_stage`, never as an exception from `submit` (only
`SchedulerClosedError` is raised). A rollout that raises `RolloutFailed(message, output)` hands
`output` back in `JobResult.output` (training/run.py: the session log's path). Tasks run as jobs
through training/run.py (`run_task`).

Isolation (`env.isolation`, "<filesystem>+<sandbox>"): the filesystem level is the first of
  overlay         kernel overlayfs mounted by this process (needs CAP_SYS_ADMIN: root here), the
                  upper dir on a size-capped tmpfs (`Limits.disk_bytes`: a real disk quota;
                  None: the upper dir on the state dir's disk, uncapped)
  fuse-overlayfs  when the `fuse-overlayfs` binary and /dev/fuse exist (unprivileged)
  copy            `cp -a --reflink=auto` of the base (any machine; disk capped per file only)
that works; the sandbox level is agent/sandbox.py's (bwrap, unshare or none), and below bwrap
environments, bases with setup commands and the scheduler's workers refuse to start
(agent.isolation.UnsandboxedError) unless `allow_unsandboxed=True` (Environment.create,
Base.build, grade, Scheduler) or the user's config.toml says so. An overlay mounted
only inside a user namespace is not a level: the harness's file tools run in this process and
must see the merged view, and a mount of another namespace cannot be bound into bwrap.

State: every environment registers in `state_dir` (default $COMPOSER_ENVS_DIR or
/tmp/composer-envs, hidden from sandboxes) with its owner's pid and start time in its directory
name; `reap()` (called by `Scheduler.start()`) unmounts, kills and deletes what dead owners left:
overlays, tmpfs mounts, pids cgroups, temp dirs, half-built bases. `state_dir/envs` is itself a
private self-bind while environments exist, and a closed environment's empty mount points are
deleted up to 2 s later while others of the process are open: both keep bubblewrap, which
copies the whole mount tree when a sandbox starts, from tripping over environments that come
and go (registry.Registry.retire, fs.make_private). Bases live in `base_dir` (default
$COMPOSER_BASES_DIR or /var/tmp/composer-bases), visible read-only inside sandboxes so absolute
paths written by setup (venv script shebangs) still resolve.

Modules: env.py (Limits, Base, Environment, grade), fs.py (mounts, overlay/copy, probing),
diff.py (upper dir -> git diff), registry.py (state dir, reaping), scheduler.py (Job, Scheduler),
ray_backend.py (Ray actors), exceptions.py.

Tests: .venv/bin/python -m pytest tests/training/test_envs.py   (-m "not slow" for the quick ones)
Bench: .venv/bin/python bench/envs.py
"""

from agent.sandbox import GIB, SandboxResult
from training.envs.env import (
    Base,
    BaseSpec,
    Environment,
    GradeResult,
    Limits,
    Rollout,
    TreeSource,
    grade,
)
from training.envs.exceptions import (
    BaseBuildError,
    EnvClosedError,
    EnvError,
    MountError,
    RolloutFailed,
    SchedulerClosedError,
    SetupError,
)
from training.envs.registry import ReapReport, reap
from training.envs.scheduler import Job, JobResult, Scheduler, SchedulerStats

__all__ = [
    "GIB",
    "Base",
    "BaseBuildError",
    "BaseSpec",
    "EnvClosedError",
    "EnvError",
    "Environment",
    "GradeResult",
    "Job",
    "JobResult",
    "Limits",
    "MountError",
    "ReapReport",
    "Rollout",
    "RolloutFailed",
    "SandboxResult",
    "Scheduler",
    "SchedulerClosedError",
    "SchedulerStats",
    "SetupError",
    "TreeSource",
    "grade",
    "reap",
]
