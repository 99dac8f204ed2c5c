"""The remote layer: SSH to every host with asyncssh, and every failure as a per-host value.

- :mod:`.connection`: :class:`~.connection.RemoteCluster`, one reused connection per host.
- :mod:`.channel`: commands on a connection's channels, within their deadlines and caps.
- :mod:`.transport`: :class:`~.transport.Transport`, what a run asks of SSH or Slurm's ``srun``.
- :mod:`.commands`: argv → remote command line, :func:`~.commands.python_argv`, results.
- :mod:`.status`: :class:`~.status.Reach` / :class:`~.status.Reachability`, the verdicts.
- :mod:`.failures`: exceptions → verdicts; :mod:`.hostkeys`: known_hosts files;
  :mod:`.trust`: fetching host keys for ``ddptui trust``.
"""
