import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import * as internals from "../../../src/server/transport/connect-internals.js";
import { classifyContentType } from "../../../src/server/transport/content-type.js";

// What contextd relies on from connect's unversioned protocol internals (connect-internals.ts).
// A connect upgrade that changes any of it fails here first.
describe("connect's protocol internals", () => {
  it("parse content types as the classifier expects", () => {
    expect(internals.parseGrpcContentType("application/grpc")).toEqual({ binary: true });
    expect(internals.parseGrpcContentType("application/grpc+proto")).toEqual({ binary: true });
    expect(internals.parseGrpcContentType("application/grpc+json")).toEqual({ binary: false });
    expect(internals.parseGrpcContentType("application/grpc-web")).toBeUndefined();
    expect(internals.parseGrpcWebContentType("application/grpc-web+proto")).toMatchObject({ binary: true });
    expect(internals.parseGrpcWebContentType("application/grpc-web+json")).toMatchObject({ binary: false });
    expect(internals.parseConnectContentType("application/proto")).toEqual({ stream: false, binary: true });
    expect(internals.parseConnectContentType("application/json; charset=utf-8")).toEqual({ stream: false, binary: false });
    expect(internals.parseConnectContentType("application/connect+proto")).toEqual({ stream: true, binary: true });
    expect(internals.parseConnectContentType("text/plain")).toBeUndefined();
  });

  it("parse grpc-timeout headers, refusing those over the limit", () => {
    expect(internals.parseTimeout("1500m", Number.POSITIVE_INFINITY)).toEqual({ timeoutMs: 1500 });
    expect(internals.parseTimeout("2S", Number.POSITIVE_INFINITY)).toEqual({ timeoutMs: 2000 });
    expect(internals.parseTimeout(null, Number.POSITIVE_INFINITY)).toEqual({});
    expect(internals.parseTimeout("bogus", Number.POSITIVE_INFINITY).error?.code).toBe(Code.InvalidArgument);
    expect(internals.parseTimeout("10S", 5_000).error?.code).toBe(Code.InvalidArgument);
  });

  it("write gRPC status trailers and Connect error bodies", () => {
    const trailer = new Headers();
    internals.setTrailerStatus(trailer, new ConnectError("no such conversation", Code.NotFound));
    expect(trailer.get("grpc-status")).toBe(String(Code.NotFound));
    expect(trailer.get("grpc-message")).toBe("no%20such%20conversation");
    expect(internals.codeToHttpStatus(Code.ResourceExhausted)).toBe(429);
    expect(internals.contentTypeUnaryJson).toBe("application/json");
    const body = JSON.parse(new TextDecoder().decode(internals.errorToJsonBytes(new ConnectError("too big", Code.ResourceExhausted), {})));
    expect(body).toEqual({ code: "resource_exhausted", message: "too big" });
    expect(internals.endStreamFlag).toBe(0b10);
    expect(internals.trailerFlag).toBe(0b10000000);
    expect(new TextDecoder().decode(internals.trailerSerialize(new Headers({ "grpc-status": "0" })))).toBe("grpc-status: 0\r\n");
  });

  it("run a unary implementation through interceptors", async () => {
    expect(typeof internals.invokeUnaryImplementation).toBe("function");
    expect(internals.invokeUnaryImplementation.length).toBe(4);
  });
});

describe("classifyContentType", () => {
  it("names the protocol and codec of every content type the server serves", () => {
    expect(classifyContentType("application/grpc")).toEqual({ protocol: "grpc", binary: true, stream: true });
    expect(classifyContentType("application/grpc+json")).toEqual({ protocol: "grpc", binary: false, stream: true });
    expect(classifyContentType("application/grpc-web+proto")).toEqual({ protocol: "grpc-web", binary: true, stream: true });
    expect(classifyContentType("application/proto")).toEqual({ protocol: "connect", binary: true, stream: false });
    expect(classifyContentType("application/connect+json")).toEqual({ protocol: "connect", binary: false, stream: true });
    expect(classifyContentType("text/html")).toBeUndefined();
    expect(classifyContentType(undefined)).toBeUndefined();
  });
});
