"""The DDP trainer that ddptui uploads and launches on every host (needs torch, never ddptui)."""
