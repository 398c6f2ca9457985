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
# a plan that moves partition 0 back from the stored 1500 (failOnDataLoss=false, a log that
# now ends below it).
put("checkpoint_file", "plan-moving-back",
    'v1\n{"batchId":7,"from":{"events":{"0":0,"1":900}},"movedBackFrom":{"events":{"0":1500}},'
    '"timestampMs":1700000000100}\n{"events":{"0":12,"1":950}}\n')
# a commit with the leader epochs and the topic ids its positions were read at.
put("checkpoint_file", "commit-with-topic-ids",
    'v1\n{"batchId":7,"leaderEpochs":{"events":{"0":4}},'
    '"timestampMs":1700000000200,"topicIds":{"events":"5c3e8a0f1d2b4c6a8e9f0a1b2c3d4e5f"}}\n'
    '{"events":{"0":1200,"1":950}}\n')

# store specs: mode byte 0 (arbitrary spec), odd bytes (built URL: scheme, user, password,
# host, secret query value separated by 0 bytes).
for i, spec in enumerate(["checkpoint:/data/ckpt", "kafka", "sqlite:offsets.db",
                          "postgres://kd:s3cr@t@db:5432/kd?sslmode=require&password=x",
                          "redis://:pw@localhost:6379/0", "mariadb://u:p@h/d"]):
    put("store_spec", f"spec-{i}", b"\x00" + spec.encode())
put("resume_state", "zookeeper-resume",
    b"\x00" + b'{"leaderEpochs":{"events":{"0":4,"1":0}},"topicIds":{"events":"5c3e8a0f1d2b4c6a8e9f0a1b2c3d4e5f"}}')
put("resume_state", "commit-metadata", b"\x01kdirect:batch=7 topicId=5c3e8a0f1d2b4c6a8e9f0a1b2c3d4e5f")
put("resume_state", "commit-metadata-old", b"\x01kdirect:batch=12")
put("store_spec", "built-postgres", b"\x01kd\x00p@ss/w?rd\x00db:5432/kd")
put("store_spec", "built-mysql-query", b"\x05u\x00pw\x00h/d\x00ab@cd")

# config keys: selector (index into config_keys.rs's KEYS) then value.
for sel, value in [(0, "localhost:9092"), (3, "events-.*"), (8, "read_committed"),
                   (14, '{"events":{"0":23,"1":-1}}'), (17, '{"t":{"0":1700000000000}}'),
                   (19, '{"events":{"0":-2}}'), (29, "processing-time=500ms"), (13, "true")]:
    put("config_keys", f"key-{sel}", bytes([sel]) + value.encode())
put("config_keys", "raw-key", b"\xffunknown.key\x00value")

# group_response and consumer_protocol: hand-built frames from the JSON schemas (Kafka's
# JoinGroupResponse.json, SyncGroupResponse.json, HeartbeatResponse.json,
# LeaveGroupResponse.json; the consumer protocol bytes are the golden ones of
# crates/proto/src/api/consumer_protocol.rs). Selector byte: version << 2 | API (0 JoinGroup,
# 1 SyncGroup, 2 Heartbeat, 3 LeaveGroup).
def s16(b):  # string / nullable string (None = -1)
    return struct.pack(">h", -1) if b is None else struct.pack(">h", len(b)) + b


def b32(b):
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def uv(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def cs(b):  # compact (nullable) string / bytes
    return b"\x00" if b is None else uv(len(b) + 1) + b


SUB_V3 = (b"\x00\x03" + struct.pack(">i", 2) + s16(b"events") + s16(b"logs") + b32(b"\x01\x02\x03")
          + struct.pack(">i", 1) + s16(b"events") + struct.pack(">iii", 2, 0, 2)
          + struct.pack(">i", 7) + s16(b"r1"))
ASSIGN_V3 = (b"\x00\x03" + struct.pack(">i", 2) + s16(b"events") + struct.pack(">iii", 2, 0, 1)
             + s16(b"logs") + struct.pack(">ii", 1, 5) + b32(None))
CID = struct.pack(">i", 7)
TAGS = b"\x00"


def sel(version, api):
    return bytes([version << 2 | api])


# JoinGroup v5 (the leader's answer, one member with a static instance id) and v9 (flexible).
put("group_response", "join_group-v5", sel(5, 0) + CID + struct.pack(">ihi", 0, 0, 3) + s16(b"range")
    + s16(b"m-1") + s16(b"m-1") + struct.pack(">i", 1) + s16(b"m-1") + s16(b"i-1") + b32(SUB_V3))
put("group_response", "join_group-v9", sel(9, 0) + CID + TAGS + struct.pack(">ihi", 0, 0, 3)
    + cs(b"consumer") + cs(b"range") + cs(b"m-1") + b"\x00" + cs(b"m-1") + uv(2)
    + cs(b"m-1") + cs(None) + cs(SUB_V3) + TAGS + TAGS)
# SyncGroup v3 and v5 (flexible), with the golden assignment; v0 with an empty one.
put("group_response", "sync_group-v3", sel(3, 1) + CID + struct.pack(">ih", 0, 0) + b32(ASSIGN_V3))
put("group_response", "sync_group-v5", sel(5, 1) + CID + TAGS + struct.pack(">ih", 0, 0)
    + cs(b"consumer") + cs(b"range") + cs(ASSIGN_V3) + TAGS)
put("group_response", "sync_group-v0-empty", sel(0, 1) + CID + struct.pack(">h", 27) + b32(b""))
# Heartbeat v0 (REBALANCE_IN_PROGRESS) and v4.
put("group_response", "heartbeat-v0", sel(0, 2) + CID + struct.pack(">h", 27))
put("group_response", "heartbeat-v4", sel(4, 2) + CID + TAGS + struct.pack(">ih", 0, 0) + TAGS)
# LeaveGroup v2 and v5 (flexible, one member).
put("group_response", "leave_group-v2", sel(2, 3) + CID + struct.pack(">ih", 0, 0))
put("group_response", "leave_group-v5", sel(5, 3) + CID + TAGS + struct.pack(">ih", 0, 0) + uv(2)
    + cs(b"m-1") + cs(b"i-1") + struct.pack(">h", 0) + TAGS + TAGS)

# describe_groups_response: version byte, then frames from DescribeGroupsResponse.json: a
# stable consumer group (v4: a static kdirect member with the golden assignment and a Java
# member whose assignment is empty), v5 (flexible) and v6 (a missing group's
# GROUP_ID_NOT_FOUND with its message).
MEMBER_V4 = (s16(b"kdirect-1") + s16(b"i-1") + s16(b"kdirect") + s16(b"/127.0.0.1") + b32(SUB_V3)
             + b32(ASSIGN_V3) + s16(b"consumer-g-1-2") + s16(None) + s16(b"consumer-g-1")
             + s16(b"/127.0.0.1") + b32(b"") + b32(b""))
put("describe_groups_response", "stable-v4", bytes([4]) + CID + struct.pack(">ii", 0, 1)
    + struct.pack(">h", 0) + s16(b"g") + s16(b"Stable") + s16(b"consumer") + s16(b"range")
    + struct.pack(">i", 2) + MEMBER_V4 + struct.pack(">i", -2147483648))
put("describe_groups_response", "stable-v5", bytes([5]) + CID + TAGS + struct.pack(">i", 0) + uv(2)
    + struct.pack(">h", 0) + cs(b"g") + cs(b"Stable") + cs(b"consumer") + cs(b"range") + uv(2)
    + cs(b"kdirect-1") + cs(None) + cs(b"kdirect") + cs(b"/127.0.0.1") + cs(SUB_V3) + cs(ASSIGN_V3)
    + TAGS + struct.pack(">i", -2147483648) + TAGS + TAGS)
put("describe_groups_response", "not-found-v6", bytes([6]) + CID + TAGS + struct.pack(">i", 0) + uv(2)
    + struct.pack(">h", 69) + cs(b"group gone") + cs(b"g") + cs(b"Dead") + cs(b"") + cs(b"") + uv(1)
    + struct.pack(">i", -2147483648) + TAGS + TAGS)

put("consumer_protocol", "subscription-v3", SUB_V3)
put("consumer_protocol", "subscription-v0", b"\x00\x00" + struct.pack(">i", 1) + s16(b"events") + b32(None))
put("consumer_protocol", "subscription-v4-trailing", b"\x00\x04" + SUB_V3[2:] + struct.pack(">i", 42))
put("consumer_protocol", "assignment-v3", ASSIGN_V3)
put("consumer_protocol", "assignment-empty", b"")
