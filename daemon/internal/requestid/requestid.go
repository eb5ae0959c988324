// Package requestid reads and makes the request ids that tie an HTTP
// request's log line to the gRPC call it causes. An id comes from outside,
// so it is checked before it is kept. An invalid one is never refused, but
// replaced.
package requestid

import (
	"context"

	"github.com/google/uuid"
	"google.golang.org/grpc/metadata"
)

const (
	// Header carries the id over HTTP, both ways.
	Header = "X-Request-Id"
	// MetadataKey carries the id to a gRPC server.
	MetadataKey = "x-request-id"
	// MaxLen bounds a kept id, so that a log line stays a line.
	MaxLen = 128
)

// Valid reports whether id is kept as it came. A valid id is 1 to MaxLen
// visible ASCII characters, with no space and no comma. So it stays one
// header value even after a proxy joins repeated lines. It is also safe in
// any log format.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == ',' {
			return false
		}
	}
	return true
}

// New makes an id: a random UUID.
func New() string { return uuid.NewString() }

// Of returns the id of a request that sent values, all the lines of its
// header. That is the one value if it is valid, else a new id.
func Of(values []string) string {
	if len(values) == 1 && Valid(values[0]) {
		return values[0]
	}
	return New()
}

// FromIncoming returns the valid id a gRPC call came with, or "". An
// invalid id is not logged, nor is one of several.
func FromIncoming(ctx context.Context) string {
	if vs := metadata.ValueFromIncomingContext(ctx, MetadataKey); len(vs) == 1 && Valid(vs[0]) {
		return vs[0]
	}
	return ""
}
