"""The client side of test_connect.py, run under clients/with-debian-hosts.sh:
``connect_probe.py CA_FILE (plain=HOST:PORT | tls=HOST:PORT)...``. Gets IDs from each node
and prints ``connected: N``; exits 1 at the first failure, saying which."""

import pathlib
import sys

try:  # the installed package (run_tests.sh), else the source tree next to the tests
    from idgen_client import Client
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from idgen_client import Client


def main(ca, targets):
    connected = 0
    for target in targets:
        kind, addr = target.split("=", 1)
        tls = {"tls_ca": ca} if kind == "tls" else {}
        try:
            with Client([addr], connect_timeout=5.0, timeout=5.0, **tls) as client:
                ids = client.next_ids(3)
        except Exception as e:  # noqa: BLE001 — any failure is the answer
            print(f"{target}: FAILED: {type(e).__name__}: {e}", flush=True)
            return 1
        print(f"{target}: ids {ids[0]}..{ids[-1]}", flush=True)
        connected += 1
    print(f"connected: {connected}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
