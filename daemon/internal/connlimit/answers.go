package connlimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// answers follows the calls of one gRPC connection until their answers
// have left: the bytes each answer holds that are not yet written, and
// the flow-control windows the client has granted. A client that does not
// read leaves its answers in the server's memory. This is what shows it.
type answers struct {
	calls *Calls
	conn  *conn // the connection, closed to drop what it holds

	opened atomic.Uint32 // the stream of the last HEADERS frame the server read
	unsent atomic.Int64  // bytes of answers produced and not yet written

	mu         sync.Mutex
	byStream   map[uint32]*call
	window     int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	connWindow int64 // what the client's connection window lets the server send
	done       bool  // the connection is closed
	grace      *time.Timer
}

// The windows of a new HTTP/2 connection (RFC 9113, section 6.9.2).
const initialWindow = 65535

// follow begins following the calls of a new connection.
func (c *Calls) follow(tracked *conn) *answers {
	a := &answers{calls: c, conn: tracked, byStream: map[uint32]*call{}, window: initialWindow, connWindow: initialWindow}
	c.mu.Lock()
	c.conns[a] = true
	c.mu.Unlock()
	tracked.setAnswers(a)
	return a
}

// open ties cl to the stream the server is opening: the last one whose
// HEADERS frame it read. It reports false once the connection is closed.
func (a *answers) open(cl *call) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return false
	}
	cl.stream = a.opened.Load()
	a.byStream[cl.stream] = cl
	return true
}

// produced counts n bytes of cl's answer handed to the transport.
func (a *answers) produced(cl *call, n int64) {
	a.mu.Lock()
	if a.byStream[cl.stream] != cl {
		a.mu.Unlock()
		return
	}
	cl.unsent += n
	a.mu.Unlock()
	a.add(n)
}

// sent counts n bytes of a stream's DATA written to the connection. They
// used up the client's windows.
func (a *answers) sent(stream uint32, n int64) {
	a.mu.Lock()
	a.connWindow -= n
	cl := a.byStream[stream]
	if cl == nil {
		a.mu.Unlock()
		return
	}
	cl.credit -= n
	cl.unsent -= n
	a.mu.Unlock()
	a.add(-n)
}

// add changes the bytes unsent of the connection and of the server.
func (a *answers) add(n int64) {
	a.unsent.Add(n)
	a.calls.unsent.Add(n)
}

// maxWindow is the largest flow-control window HTTP/2 allows (RFC 9113,
// section 6.9.1).
const maxWindow = 1<<31 - 1

// granted counts a client's WINDOW_UPDATE: on stream 0, the connection's.
// A window past maxWindow is a flow-control error, which grpc-go does not
// catch: its window would wrap and send nothing, while this one would
// read open. The connection is closed.
func (a *answers) granted(stream uint32, n int64) {
	a.mu.Lock()
	over := false
	if stream == 0 {
		a.connWindow += n
		over = a.connWindow > maxWindow
	} else if cl := a.byStream[stream]; cl != nil {
		cl.credit += n
		over = a.window+cl.credit > maxWindow
	}
	a.mu.Unlock()
	if over {
		a.calls.closeFlowError(a)
	}
}

// initialWindow takes a client's SETTINGS_INITIAL_WINDOW_SIZE. It changes
// the window of every stream by its difference, which keeping each
// stream's credit apart from it does.
func (a *answers) initialWindow(n int64) {
	a.mu.Lock()
	a.window = n
	a.mu.Unlock()
}

// ended is a stream done: its END_STREAM or RST_STREAM written, or the
// client's RST_STREAM read. Whatever of its answer was not written never
// will be.
func (a *answers) ended(stream uint32) {
	a.mu.Lock()
	cl := a.byStream[stream]
	if cl == nil {
		a.mu.Unlock()
		return
	}
	delete(a.byStream, stream)
	drop := cl.unsent
	cl.unsent = 0
	a.mu.Unlock()
	a.add(-drop)
	a.calls.answerLeft(cl)
}

// blocked reports whether cl's answer waits on its client: for a window
// the client has not granted, or for the client to read what the server
// wrote, whatever the windows say.
func (a *answers) blocked(cl *call) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byStream[cl.stream] == cl && (cl.unsent > 0 && a.closedWindow(cl) || a.conn.writeStalled())
}

// closedWindow reports whether cl's stream or its connection has no
// window left. Guarded by a.mu.
func (a *answers) closedWindow(cl *call) bool {
	return a.window+cl.credit <= 0 || a.connWindow <= 0
}

// stuck reports whether an answer of the connection waits on its client.
func (a *answers) stuck() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn.writeStalled() {
		return true
	}
	for _, cl := range a.byStream {
		if cl.unsent > 0 && a.closedWindow(cl) {
			return true
		}
	}
	return false
}

// end marks the connection closed and returns its calls, their answers
// dropped.
func (a *answers) end() []*call {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return nil
	}
	a.done = true
	if a.grace != nil {
		a.grace.Stop()
	}
	var calls []*call
	var drop int64
	for _, cl := range a.byStream {
		calls = append(calls, cl)
		drop += cl.unsent
		cl.unsent = 0
	}
	a.byStream = nil
	a.add(-drop)
	return calls
}

// closed is the connection closed by the server: each of its calls'
// answers has left, as far as it ever will.
func (a *answers) closed() {
	for _, cl := range a.end() {
		a.calls.answerLeft(cl)
	}
	a.calls.forget(a)
}

// startGrace runs f after d, once: the connection's time to read what it
// holds past its bound.
func (a *answers) startGrace(d time.Duration, f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.grace == nil && !a.done {
		a.grace = time.AfterFunc(d, func() {
			a.mu.Lock()
			a.grace = nil
			a.mu.Unlock()
			f()
		})
	}
}
