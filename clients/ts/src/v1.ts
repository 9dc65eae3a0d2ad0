// The generated contextd.v1 API (messages, enums, schemas, services), bundled in this package so
// that its types are the ones the client's methods take: `import { Role, Provider } from
// "@contextd/client/v1"`.
export * from "../generated/contextd/v1/artifact_pb.js";
export * from "../generated/contextd/v1/compile_pb.js";
export * from "../generated/contextd/v1/context_service_pb.js";
export * from "../generated/contextd/v1/conversation_service_pb.js";
export * from "../generated/contextd/v1/message_pb.js";
export * from "../generated/contextd/v1/state_pb.js";
export * from "../generated/contextd/v1/telemetry_pb.js";
export * from "../generated/contextd/v1/telemetry_service_pb.js";
export * from "../generated/contextd/v1/usage_ledger_pb.js";
