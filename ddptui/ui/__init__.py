"""The Textual console (``ddptui [HOSTS]``): a view and a keyboard over the check and the runs
layer. The only package that imports textual; it never opens a socket itself (the services it
calls do, from workers) and shows every host's text through :func:`ddptui.untrusted.plain`."""
