package interceptor

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// capturingStream records the header and trailer metadata a handler sets
// instead of sending it. The metadata is stored with the result and sent
// only once the result is. SendHeader is recorded like SetHeader: headers
// leave with the stored result.
type capturingStream struct {
	grpc.ServerTransportStream // the call's own, for Method

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (s *capturingStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *capturingStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *capturingStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

func (s *capturingStream) metadata() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header, s.trailer
}
