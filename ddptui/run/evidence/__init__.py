"""A run's evidence: the ranks' stacks and torch's flight recorders, read (pure) and gathered from
every host within budgets."""
