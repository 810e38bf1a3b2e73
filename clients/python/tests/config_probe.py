"""The client side of test_config_real.py's expand test, run under
clients/with-debian-hosts.sh (``localhost`` is ::1, then 127.0.0.1):
``config_probe.py CA_FILE PLAIN_PORT TLS_PORT``.

Builds one plain and one TLS client from ``idgen://localhost:PORT?expand=true`` URLs, prints
each one's nodes and the node that answered a call, then ``ready``; after a line on stdin
(the test has stopped the node on ::1) it calls both again and prints which node answered
and the failover events. Exits 1 at the first failure, saying which."""

import pathlib
import sys

try:  # the installed package (run_tests.sh), else the source tree next to the tests
    from idgen_client import Client
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from idgen_client import Client


def main(ca, plain_port, tls_port):
    events = []
    hook = lambda event, fields: events.append((event, fields))  # noqa: E731
    timeouts = "connect_timeout_ms=5000&timeout_ms=5000"
    clients = {
        "plain": Client.from_url(f"idgen://localhost:{plain_port}?expand=true&{timeouts}",
                                 hooks=hook, backoff_min=5.0),
        "tls": Client.from_url(f"idgens://localhost:{tls_port}?ca={ca}&expand=true&{timeouts}",
                               hooks=hook, backoff_min=5.0),
    }  # fmt: skip

    def call(kind):
        del events[:]
        ids = clients[kind].next_ids(3)
        answered = [f["node"] for e, f in events if e == "request"]
        moved = [f"{f['from_node']}->{f['to_node']}" for e, f in events if e == "failover"]
        print(f"{kind}: answered {answered[-1]} ids {len(ids)} failover {','.join(moved) or '-'}",
              flush=True)  # fmt: skip

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
