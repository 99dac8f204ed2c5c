"""A Slurm cluster, a hosts file's ``[slurm]``: everything only it needs in the runs layer. Its
kind (:mod:`.kind`: what :func:`ddptui.run.backends.kind_of` gives for a ``[slurm]`` file), its
cluster before a run (:mod:`.cluster`), its backend for the supervisor (:mod:`.backend`), an
attempt's steps (:mod:`.attempt`), Slurm's commands on the login node (:mod:`.commands`), their
answers read (:mod:`.job`, pure), and Slurm's accounting of the jobs whose end no supervisor saw
(:mod:`.accounting`).

Nothing outside :mod:`ddptui.run.backends` imports these modules: the rest of ddptui reaches a
Slurm cluster through the kind. Slurm's pure parts of the lower layers stay there:
:mod:`ddptui.health.slurm`, :mod:`ddptui.plan.slurm`, :mod:`ddptui.remote.srun`."""
