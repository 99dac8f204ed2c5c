"""SSH hosts, a hosts file's ``[[hosts]]``: everything only they need, from the check to the
run's end. Its kind (:mod:`.kind`: what :func:`ddptui.run.backends.kind_of` gives for a hosts
file without ``[slurm]``), its cluster before a run (:mod:`.cluster`), its backend for the
supervisor (:mod:`.backend`), and staging and starting an attempt (:mod:`.launcher`).

Nothing outside :mod:`ddptui.run.backends` imports these modules: the rest of ddptui reaches
SSH hosts through the kind."""
