"""Persistent ``vllm bench serve`` client (layer 4, runs): a script run by the vLLM environment's
interpreter, ``python _bench_worker.py DIR``.

It imports vLLM's own benchmark module once (``vllm.benchmarks.serve``: ``add_cli_args`` and
``main``, what ``vllm bench serve`` runs) and then serves requests: for each ``DIR/req-<n>.json``
(``{"argv": [...], "log": path}``: the arguments after ``vllm bench serve``) it parses them with
vLLM's parser, runs ``main`` with stdout / stderr sent to ``log``, and writes ``DIR/rep-<n>.json``
(``{"rc", "seconds", "error"}``).  ``DIR/stop`` ends it.  One process per server saves the ~9 s
start-up (importing vLLM and torch) of each ``vllm bench serve`` process; the benchmark itself is
vLLM's code, unchanged.  Standard library + vLLM only.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main(d: str) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with open(os.path.join(d, "ready.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(d, "ready.tmp"), os.path.join(d, "ready"))
    n = 0
    saved = (os.dup(1), os.dup(2))
    while True:
        req_path = os.path.join(d, f"req-{n}.json")
        if os.path.exists(os.path.join(d, "stop")):
            return 0
        if not os.path.exists(req_path):
            time.sleep(0.05)
            continue
        req = json.load(open(req_path))
        t0 = time.monotonic()
        rc, err = 0, None
        with open(req["log"], "ab", buffering=0) as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                parser = FlexibleArgumentParser(prog="vllm bench serve")
                add_cli_args(parser)
                bench_main(parser.parse_args(req["argv"]))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException as e:  # noqa: BLE001 - reported to the starter, the worker goes on
                traceback.print_exc()
                rc, err = 1, f"{type(e).__name__}: {e}"
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
        rep = {"rc": rc, "seconds": time.monotonic() - t0, "error": err}
        tmp = os.path.join(d, f"rep-{n}.tmp")
        with open(tmp, "w") as f:
            json.dump(rep, f)
        os.replace(tmp, os.path.join(d, f"rep-{n}.json"))
        n += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
