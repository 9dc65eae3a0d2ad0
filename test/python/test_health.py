import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import contextd.v1.context_service_pb2_grpc as context_grpc
from contextd.v1 import compile_pb2


def test_health_serving(sidecar):
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ["", "contextd.v1.ContextService", "contextd.v1.TelemetryService"]:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING, service


def test_generated_package_imports():
    request = compile_pb2.CompileRequest(conversation_id="c1")
    assert compile_pb2.CompileRequest.FromString(request.SerializeToString()).conversation_id == "c1"
    assert hasattr(context_grpc, "ContextServiceStub")
