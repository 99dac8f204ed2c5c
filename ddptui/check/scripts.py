"""The two small scripts the check sends to hosts to test node 0's master port."""

# Both run on the host's Python with the standard library only, like the probe.
LISTENER = """\
import socket, sys, time
port, seconds, expected = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind(("", port))
except OSError as error:
    print("error", error, flush=True)
    sys.exit(1)
server.listen(64)
server.settimeout(0.2)
print("ready", server.getsockname()[1], flush=True)
deadline, accepted = time.time() + seconds, 0
while accepted < expected and time.time() < deadline:
    try:
        peer = server.accept()[0]
    except socket.timeout:
        continue
    # The worker hangs up first, so its side keeps TIME_WAIT and the master port stays free.
    peer.settimeout(2)
    try:
        peer.recv(1)
    except OSError:
        pass
    peer.close()
    accepted += 1
"""

CONNECT = """\
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as error:
    print(error)
    sys.exit(3)
"""
CONNECT_FAILED = 3
