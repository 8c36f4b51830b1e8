#!/usr/bin/env python3
"""A minimal client of the Kubernetes CRI (runtime.v1.RuntimeService) for the VM lane: what the
kubelet sends for its checkpoint API, without a kubelet.

Usage: cri-call.py SOCKET CALL [+ CALL]...
where CALL is `version` or `checkpoint CONTAINER_ID LOCATION [TIMEOUT_SECONDS]`.

Prints one line per call: `key=value ...` of the response, or `error code=NAME details=TEXT`
when the call fails; exits 1 when one did. Several calls share one process (python and grpc are
slow to start in the lane's guest). The messages are encoded here by hand (a few string and
integer fields of the CRI's protobuf definitions), so only python3-grpcio is needed, no generated
code.
"""

import sys

import grpc

SERVICE = "/runtime.v1.RuntimeService/"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number, value):
    data = value.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_int(number, value):
    return varint(number << 3) + varint(value)


def fields(buf):
    """Yields (number, value) of a message's varint and length-delimited fields."""
    i = 0

    def read_varint():
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < len(buf):
        key = read_varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, read_varint()
        elif wire == 2:
            n = read_varint()
            yield number, bytes(buf[i : i + n])
            i += n
        else:
            raise ValueError(f"unexpected wire type {wire} of field {number}")


def call(sock, method, request):
    channel = grpc.insecure_channel("unix://" + sock)
    stub = channel.unary_unary(SERVICE + method)
    return stub(request, timeout=600)


def one(sock, args):
    """Runs one call; returns its line."""
    what = args[0] if args else ""
    if what == "version" and len(args) == 1:
        # VersionRequest{version}; VersionResponse{version, runtime_name, runtime_version,
        # runtime_api_version}
        names = {1: "version", 2: "runtime_name", 3: "runtime_version", 4: "runtime_api_version"}
        reply = call(sock, "Version", field_bytes(1, "v1"))
        return " ".join(f"{names.get(n, n)}={v.decode()}" for n, v in fields(reply))
    if what == "checkpoint" and len(args) in (3, 4):
        # CheckpointContainerRequest{container_id, location, timeout}
        request = field_bytes(1, args[1]) + field_bytes(2, args[2])
        if len(args) == 4:
            request += field_int(3, int(args[3]))
        call(sock, "CheckpointContainer", request)
        return f"checkpointed {args[1]} to {args[2]}"
    sys.exit(__doc__)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    sock, calls, failed = argv[1], [[]], False
    for arg in argv[2:]:
        if arg == "+":
            calls.append([])
        else:
            calls[-1].append(arg)
    for args in calls:
        try:
            print(one(sock, args), flush=True)
        except grpc.RpcError as e:
            print(f"error code={e.code().name} details={e.details()}", flush=True)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
