package tlsreload

import "time"

// SetClock makes s read the time from now, for tests of CRLs that expire.
// Set it before serving.
func SetClock(s *Server, now func() time.Time) { s.now = now }

// Tracked is how many connections client certificates opened and that are
// still open.
func Tracked(s *Server) int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return len(s.conns.live)
}
