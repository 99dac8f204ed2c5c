"""Following a run: every host's files read into typed events, and the run's model made of them
(progress, ranks, silence, the launch's stamps), pure but for the host files' follower."""
