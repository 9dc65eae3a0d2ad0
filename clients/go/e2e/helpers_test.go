package e2e

import (
	"strings"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// roleAndParts summarises a message as "ROLE:part,part", for comparing conversation shapes.
func roleAndParts(message *contextdv1.Message) string {
	var kinds []string
	for _, part := range message.GetParts() {
		kinds = append(kinds, string(part.ProtoReflect().WhichOneof(part.ProtoReflect().Descriptor().Oneofs().ByName("kind")).Name()))
	}
	role := strings.TrimPrefix(message.GetRole().String(), "ROLE_")
	return role + ":" + strings.Join(kinds, ",")
}

func containsAll(text string, parts ...string) bool {
	for _, part := range parts {
		if !strings.Contains(text, part) {
			return false
		}
	}
	return true
}
