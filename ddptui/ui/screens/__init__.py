"""The console's screens: health (the hosts), run (one run live), runs (the store), help,
first run (no hosts file), and the confirmation every destructive key asks for."""
