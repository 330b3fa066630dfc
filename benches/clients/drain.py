"""Real-client drain benchmark: how long N confluent-kafka consumers in one group take to read a topic.

The caller pre-fills topic T with at least --expect records. This script starts --consumers
confluent-kafka (librdkafka) Consumers, one thread each, in group G (classic protocol, default
assignor, auto.offset.reset=earliest, auto commit on), and consumes until the records read across
all consumers reach --expect or --timeout passes. The clock runs from just before the consumers
are created until the expected count is reached, so it covers the group join, the rebalance,
the offset fetches and the fetching itself; closing the consumers (which commits) is not timed.

Prints exactly one JSON object on stdout as its last line:
  {"records": int, "seconds": float, "first_record_seconds": float|null, "consumers": N, "ok": bool}
and exits 0 if ok (records >= expect), else 1. Errors go to stderr.
"""

import argparse
import json
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True, help="HOST:PORT")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--consumers", type=int, required=True)
    ap.add_argument("--expect", type=int, required=True, help="records to consume in total")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    args = ap.parse_args()

    lock = threading.Lock()
    done = threading.Event()
    state = {"records": 0, "first": None, "end": None}

    def on_error(err):
        print(f"drain.py: client error: {err}", file=sys.stderr)

    def run(index):
        try:
            consumer = Consumer({
                "bootstrap.servers": args.bootstrap,
                "group.id": args.group,
                "client.id": f"drain-{index}",
                "group.protocol": "classic",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "session.timeout.ms": 10000,
                "error_cb": on_error,
            })
        except Exception as e:  # noqa: BLE001 - report and let the others go on
            print(f"drain.py: consumer {index}: {e}", file=sys.stderr)
            return
        try:
            consumer.subscribe([args.topic])
            while not done.is_set() and time.perf_counter() < deadline:
                msgs = consumer.consume(num_messages=1000, timeout=0.2)
                n = 0
                for m in msgs:
                    err = m.error()
                    if err is None:
                        n += 1
                    elif err.code() != KafkaError._PARTITION_EOF:
                        print(f"drain.py: consumer {index}: {err}", file=sys.stderr)
                if n:
                    with lock:
                        now = time.perf_counter()
                        if state["first"] is None:
                            state["first"] = now
                        state["records"] += n
                        if state["records"] >= args.expect and state["end"] is None:
                            state["end"] = now
                            done.set()
        except Exception as e:  # noqa: BLE001
            print(f"drain.py: consumer {index}: {e}", file=sys.stderr)
        finally:
            consumer.close()  # commits the consumed offsets

    start = time.perf_counter()
    deadline = start + args.timeout
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(args.consumers)]
    for t in threads:
        t.start()
    # Wait for the expected count, the timeout, or every consumer thread having given up.
    while not done.wait(0.1):
        if time.perf_counter() >= deadline or not any(t.is_alive() for t in threads):
            break
    stopped = time.perf_counter()
    done.set()
    for t in threads:
        t.join(timeout=30)
        if t.is_alive():
            print("drain.py: a consumer did not close within 30 s", file=sys.stderr)

    with lock:
        records, first, end = state["records"], state["first"], state["end"]
    ok = records >= args.expect
    result = {
        "records": records,
        "seconds": round((end if end is not None else stopped) - start, 6),
        "first_record_seconds": None if first is None else round(first - start, 6),
        "consumers": args.consumers,
        "ok": ok,
    }
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
