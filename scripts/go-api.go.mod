// Written into gen/go by scripts/generate.sh, which then runs `go mod tidy` there to add the
// indirect requirements and go.sum: the module of the generated contextd.v1 Go code. The versions
// are the runtimes the generated code needs: protobuf for protoc-gen-go, grpc-go for
// protoc-gen-go-grpc and connect-go for protoc-gen-connect-go (plugins pinned in
// scripts/install-tools.sh).
module github.com/contextd-dev/contextd/gen/go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/grpc v1.77.0
	google.golang.org/protobuf v1.36.12
)
