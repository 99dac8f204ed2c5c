"""Planning (pure): what a host offers a run (:mod:`.resources`) and the launch plan."""
