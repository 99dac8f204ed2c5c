"""What runs on the hosts, in their own Python, never on the head.

- :mod:`.agent` and the modules it uses (:mod:`.common`, :mod:`.processes`, :mod:`.stacks`,
  :mod:`.cache`, :mod:`.follow`): the node agent's commands, stdlib only, Python ≥ 3.8; sent
  as one program (:mod:`ddptui.remote.programs`), each importable and tested as a module;
- :mod:`.sitecustomize`: the stack handler every rank loads, written by the agent's ``start``;
- :mod:`.probe` and its sections (:mod:`.probe_network`, :mod:`.probe_system`,
  :mod:`.probe_gpus`, :mod:`.probe_kernel`, :mod:`.probe_workdir`, :mod:`.probe_torch`,
  :mod:`.probe_torch_cache`, each through :mod:`.probe_section`): the check's probe, stdlib
  only (NVML where installed), Python ≥ 3.8; sent as one program like the agent;
- :mod:`.bench`: the interconnect benchmark, run with the hosts' own torch.

Nothing on the head imports this package: the head reads its sources as text
(``tests/test_boundaries.py`` checks both directions).
"""
