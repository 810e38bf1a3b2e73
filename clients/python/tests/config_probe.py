"""The client side of test_config_real.py's expand test, run under
clients/with-debian-hosts.sh (``localhost`` is ::1, then 127.0.0.1):
``config_probe.py CA_FILE PLAIN_PORT TLS_PORT``.

Builds one plain and one TLS client from ``idgen://localhost:PORT?expand=true`` URLs, prints
each one's nodes and the node that answered a call, then ``ready``; after a line on stdin
(the test has stopped the node on ::1) it calls both again and prints which node answered
and the failover events. Exits 1 at the first failure, saying which."""

import sys

import _support  # the installed package (run_tests.sh), else the source tree
from idgen_client import Client


def main(ca, plain_port, tls_port):
    events = []
    hook = lambda event, fields: events.append((event, fields))  # noqa: E731
    clients = _support.expand_clients(Client, ca, plain_port, tls_port, hook)

    def call(kind):
        del events[:]
        _support.expand_report(kind, events, clients[kind].next_ids(3))

    try:
        for kind, client in clients.items():
            print(f"{kind}: nodes {','.join(n['node'] for n in client.nodes())}", flush=True)
            call(kind)
        print("ready", flush=True)
        sys.stdin.readline()
        for kind in clients:
            call(kind)
    except Exception as e:  # noqa: BLE001 — any failure is the answer
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        return 1
    finally:
        for client in clients.values():
            client.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
