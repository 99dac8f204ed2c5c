"""A run's code: what it uploads (the job's directory as git's ignore rules and ``exclude`` leave
it), and the upload that lays it out on each host."""
