module github.com/contextd-dev/contextd/examples/go

go 1.26.0

require (
	github.com/contextd-dev/contextd/clients/go v0.0.0
	github.com/contextd-dev/contextd/gen/go v0.0.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	golang.org/x/net v0.46.1-0.20251013234738-63d1a5100f82 // indirect
	golang.org/x/sys v0.37.0 // indirect
	golang.org/x/text v0.30.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251022142026-3a174f9686a8 // indirect
	google.golang.org/grpc v1.77.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// The examples build against the client and the generated API in this repository.
replace (
	github.com/contextd-dev/contextd/clients/go => ../../clients/go
	github.com/contextd-dev/contextd/gen/go => ../../gen/go
)
