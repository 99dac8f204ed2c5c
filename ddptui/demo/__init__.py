"""``ddptui demo``: the whole product on one machine, with loopback SSH hosts served in-process
(no sshd, no GPU, no root, no hosts file of the user's)."""
