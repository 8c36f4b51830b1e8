#!/usr/bin/env python3
"""A minimal client of the Kubernetes CRI (runtime.v1.RuntimeService) for the VM lane: what the
kubelet sends for `kubectl checkpoint`-style requests, without a kubelet.

Usage: cri-call.py SOCKET version
       cri-call.py SOCKET checkpoint CONTAINER_ID LOCATION [TIMEOUT_SECONDS]

Prints one line: `key=value ...` of the response, or `error code=NAME details=TEXT` (exit 1) when
the call fails. The messages are encoded here by hand (a few string and integer fields of the CRI's
protobuf definitions), so only python3-grpcio is needed, no generated code.
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


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    sock, what = argv[1], argv[2]
    try:
        if what == "version":
            # VersionRequest{version}; VersionResponse{version, runtime_name, runtime_version,
            # runtime_api_version}
            names = {1: "version", 2: "runtime_name", 3: "runtime_version", 4: "runtime_api_version"}
            reply = call(sock, "Version", field_bytes(1, "v1"))
            print(" ".join(f"{names.get(n, n)}={v.decode()}" for n, v in fields(reply)))
        elif what == "checkpoint" and len(argv) in (5, 6):
            # CheckpointContainerRequest{container_id, location, timeout}
            request = field_bytes(1, argv[3]) + field_bytes(2, argv[4])
            if len(argv) == 6:
                request += field_int(3, int(argv[5]))
            call(sock, "CheckpointContainer", request)
            print(f"checkpointed {argv[3]} to {argv[4]}")
        else:
            sys.exit(__doc__)
    except grpc.RpcError as e:
        print(f"error code={e.code().name} details={e.details()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
