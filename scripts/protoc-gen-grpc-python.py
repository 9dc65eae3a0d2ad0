"""A protoc plugin that runs grpcio-tools' built-in grpc_python generator.

grpcio-tools ships the generator inside its bundled protoc, not as a standalone plugin, so buf
cannot call it directly. This adapter takes buf's CodeGeneratorRequest, hands the descriptors to
the bundled protoc and returns what it wrote as a CodeGeneratorResponse.
"""

import pathlib
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    with tempfile.TemporaryDirectory() as work:
        descriptors = pathlib.Path(work, "descriptors.binpb")
        descriptors.write_bytes(
            descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString()
        )
        out = pathlib.Path(work, "out")
        out.mkdir()
        status = protoc.main(
            [
                "protoc",
                f"--descriptor_set_in={descriptors}",
                f"--grpc_python_out={out}",
                *request.file_to_generate,
            ]
        )
        if status != 0:
            response.error = f"grpc_tools.protoc exited with status {status}"
        for path in sorted(out.rglob("*.py")):
            generated = response.file.add()
            generated.name = str(path.relative_to(out))
            generated.content = path.read_text()
    sys.stdout.buffer.write(response.SerializeToString())


if __name__ == "__main__":
    main()
