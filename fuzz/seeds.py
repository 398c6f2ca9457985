#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets added for issue 17 (and metadata_response's,
re-keyed to its one-byte version selector) from files already in the repository: the mock
cluster's response frames (crates/proto/tests/data/*-response.bin), the golden librdkafka
batches (tests/data/golden/*.bin), and a few hand-written texts. Run from fuzz/; idempotent.
Fuzzer finds and fixed crashes are copied into corpus/<target>/ by hand, not by this script."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "crates/proto/tests/data")
GOLDEN = os.path.join(ROOT, "tests/data/golden")
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

# Lowest version kdirect speaks per API (the `api!` ranges in crates/proto/src/api/).
MIN_VERSION = {"metadata": 1, "list_offsets": 1, "api_versions": 0, "find_coordinator": 0,
               "offset_fetch": 1, "offset_commit": 2}


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


responses = {}
for fn in sorted(os.listdir(DATA)):
    if not fn.endswith("-response.bin") or fn.startswith("fetch"):
        continue
    api, ver = fn[: -len("-response.bin")].rsplit("-v", 1)
    body = read(os.path.join(DATA, fn))
    responses.setdefault(api, []).append(body)
    put(f"{api}_response", f"mock-{api}-v{ver}", bytes([int(ver) - MIN_VERSION[api]]) + body)

# frame: max 65535, a chunking seed, then size-prefixed frames (two back to back, and one
# frame followed by a prefix that claims more than the maximum).
frames = [struct.pack(">i", len(b)) + b for bodies in responses.values() for b in bodies]
put("frame", "two-frames", b"\xff\xff\x07" + frames[0] + frames[1])
put("frame", "frame-then-too-large", b"\xff\x00\x03" + frames[2][:300] + struct.pack(">i", 1 << 20))
put("frame", "negative-size", b"\x10\x00\x01" + struct.pack(">i", -1))

# codecs: the records section (after the 61-byte v2 batch header) of each golden batch.
for codec in ["gzip", "snappy", "lz4", "zstd"]:
    batch = read(os.path.join(GOLDEN, f"{codec}.bin"))
    length = struct.unpack(">i", batch[8:12])[0]
    records = batch[61 : 12 + length]
    put(f"codec_{codec}", f"golden-{codec}", b"\x00\x10" + records)  # cap 64 KiB
    put(f"codec_{codec}", f"golden-{codec}-small-cap", b"\x02\x00" + records)  # cap 32 B

# checkpoint files: an offsets/N plan with its froms, a commits/N file.
put("checkpoint_file", "offsets-plan",
    'v1\n{"batchId":7,"timestampMs":1700000000000,"from":{"events":{"0":1100,"1":900}}}\n'
    '{"events":{"0":1200,"1":950}}\n')
put("checkpoint_file", "commits",
    'v1\n{"batchId":7,"timestampMs":1700000000000}\n{"events":{"0":1200,"1":950},"b":{"3":0}}\n')

# store specs: mode byte 0 (arbitrary spec), odd bytes (built URL: scheme, user, password,
# host, secret query value separated by 0 bytes).
for i, spec in enumerate(["checkpoint:/data/ckpt", "kafka", "sqlite:offsets.db",
                          "postgres://kd:s3cr@t@db:5432/kd?sslmode=require&password=x",
                          "redis://:pw@localhost:6379/0", "mariadb://u:p@h/d"]):
    put("store_spec", f"spec-{i}", b"\x00" + spec.encode())
put("store_spec", "built-postgres", b"\x01kd\x00p@ss/w?rd\x00db:5432/kd")
put("store_spec", "built-mysql-query", b"\x05u\x00pw\x00h/d\x00ab@cd")

# config keys: selector (index into config_keys.rs's KEYS) then value.
for sel, value in [(0, "localhost:9092"), (3, "events-.*"), (8, "read_committed"),
                   (14, '{"events":{"0":23,"1":-1}}'), (17, '{"t":{"0":1700000000000}}'),
                   (19, '{"events":{"0":-2}}'), (29, "processing-time=500ms"), (13, "true")]:
    put("config_keys", f"key-{sel}", bytes([sel]) + value.encode())
put("config_keys", "raw-key", b"\xffunknown.key\x00value")
