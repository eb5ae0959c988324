package connlimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/daemon/testkit/rawgrpc"
)

// server is a real gRPC server on loopback behind the limits as paymentsd
// sets them. Its test.Big/Get answers as many bytes as asked.
type grpcServer struct {
	addr  string
	calls *Calls
	rs    *Refusals
}

func serve(t *testing.T, maxCalls int, unread Unread) *grpcServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := refusals()
	l := Limit(lis, 100, rs)
	calls := NewCalls(maxCalls, unread, l, rs)
	srv := grpc.NewServer(grpc.Creds(Credentials(insecure.NewCredentials(), 10*time.Second, calls, rs)),
		grpc.InTapHandle(calls.Tap), grpc.StatsHandler(calls.StatsHandler()), grpc.ReadBufferSize(0),
		grpc.ChainUnaryInterceptor(calls.UnaryServerInterceptor))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Big", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			calls.Handled(ctx)
			in := &wrapperspb.UInt32Value{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return &wrapperspb.BytesValue{Value: make([]byte, in.Value)}, nil
		}}},
	}, struct{}{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return &grpcServer{addr: lis.Addr().String(), calls: calls, rs: rs}
}

// get is a call of test.Big/Get asking for n bytes.
func (s *grpcServer) get(t *testing.T, u *rawgrpc.Unreader, n uint32) {
	t.Helper()
	msg, _ := proto.Marshal(wrapperspb.UInt32(n))
	if err := u.Call(rawgrpc.Fields(s.addr, "/test.Big/Get"), msg); err != nil {
		t.Fatal(err)
	}
}

// answerBytes is the DATA bytes of an answer of n bytes: the gRPC prefix
// and the BytesValue's tag and length.
func answerBytes(n int) int64 {
	return int64(5 + len(protowire(n)) + n)
}

func protowire(n int) []byte {
	b, _ := proto.Marshal(&wrapperspb.BytesValue{Value: make([]byte, n)})
	return b[:len(b)-n]
}

func unreader(t *testing.T, addr string) *rawgrpc.Unreader {
	t.Helper()
	u, err := rawgrpc.Unread(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// eventually waits, generously, for cond; the machine may be loaded.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A bound for a machine loaded by other packages' tests, not a speed.
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2m for %s", what)
		}
	}
}

// A call is in progress until its answer has left, not until its handler
// returns. Each answer's bytes are counted to the byte, on the stream it
// belongs to, a stream refused before the tap among them.
func TestAnswers_InProgressUntilTheyLeave(t *testing.T) {
	s := serve(t, 100, unread)
	u := unreader(t, s.addr)
	s.get(t, u, 1000)
	// Refused before the tap handle (not a POST), between two calls.
	fields := rawgrpc.Fields(s.addr, "/test.Big/Get")
	fields[0].Value = "GET"
	if err := u.Call(fields, nil); err != nil {
		t.Fatal(err)
	}
	s.get(t, u, 2000)
	s.get(t, u, 0)

	want := answerBytes(1000) + answerBytes(2000) + answerBytes(0)
	eventually(t, "three answers left unread", func() bool { return s.calls.Leaving() == 3 })
	if got := s.calls.Active(); got != 3 {
		t.Errorf("calls in progress: %d, want the 3 whose answers wait", got)
	}
	if got := s.calls.Unsent(); got != want {
		t.Errorf("unread bytes: %d, want %d", got, want)
	}

	// The 2,000 bytes' window alone (the fourth stream, the refused one
	// being the second): that answer leaves, no other.
	if err := u.GrantCall(2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one answer to leave", func() bool { return s.calls.Active() == 2 })
	if got, want := s.calls.Unsent(), answerBytes(1000)+answerBytes(0); got != want {
		t.Errorf("after one answer left, unread bytes: %d, want %d", got, want)
	}
	if err := u.Grant(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every answer to leave", func() bool { return s.calls.Active() == 0 && s.calls.Leaving() == 0 })
	if got := s.calls.Unsent(); got != 0 {
		t.Errorf("unread bytes once all left: %d", got)
	}
	// The server's trailers are counted as they are written; the client
	// reads them a moment later.
	eventually(t, "the client to read four streams ended", func() bool {
		ended, _ := u.Ended()
		return ended == 4
	})
	if ended, _ := u.Ended(); ended != 4 {
		t.Errorf("streams the server ended: %d, want 4", ended)
	}
}

// Answers left unread hold slots, but not against a client that calls:
// the connection of an answer waiting for a window is closed to make room.
func TestAnswers_UnreadAnswersClosedToMakeRoom(t *testing.T) {
	s := serve(t, 4, unread)
	u := unreader(t, s.addr)
	for range 4 {
		s.get(t, u, 10)
	}
	eventually(t, "four answers left unread", func() bool { return s.calls.Leaving() == 4 })
	time.Sleep(stuck) // the answers are stuck on their client only after this

	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call with every slot held by unread answers: %v", err)
	}
	<-u.Closed()
	if got := s.rs.Count(AnswerEvicted); got != 1 {
		t.Errorf("answer_evicted: %d, want 1", got)
	}
	eventually(t, "the closed connection's slots to be free", func() bool { return s.calls.Active() == 0 && s.calls.Unsent() == 0 })
}

// A connection past its bound of unread bytes has its new calls refused,
// and is closed once the grace has passed.
func TestAnswers_PerConnectionBound_RefusedThenClosed(t *testing.T) {
	s := serve(t, 100, Unread{PerConnection: 64 << 10, Grace: 300 * time.Millisecond, Total: 1 << 30})
	u := unreader(t, s.addr)
	for range 70 {
		s.get(t, u, 1000)
	}
	eventually(t, "the connection to be over its bound", func() bool { return s.calls.Unsent() > 64<<10 })
	s.get(t, u, 1000)
	eventually(t, "the call over the bound refused", func() bool { return s.rs.Count(UnreadRefused) >= 1 })
	<-u.Closed()
	if got := s.rs.Count(UnreadClosed); got != 1 {
		t.Errorf("unread_closed: %d, want 1", got)
	}
	eventually(t, "the closed connection's slots and bytes to be free", func() bool { return s.calls.Active() == 0 && s.calls.Unsent() == 0 })
}

// Past the server's bound of unread bytes, the connection holding most is
// closed; the others are kept.
func TestAnswers_TotalBound_ClosesTheLargest(t *testing.T) {
	s := serve(t, 1000, Unread{PerConnection: 1 << 20, Grace: time.Hour, Total: 128 << 10})
	large, small := unreader(t, s.addr), unreader(t, s.addr)
	for range 100 {
		s.get(t, large, 1000)
	}
	eventually(t, "the large connection's answers", func() bool { return s.calls.Leaving() == 100 })
	for range 40 {
		s.get(t, small, 1000)
	}
	<-large.Closed()
	eventually(t, "the small connection's answers", func() bool { return s.calls.Leaving() == 40 })
	select {
	case <-small.Closed():
		t.Fatal("the smaller connection was closed too")
	default:
	}
	if got, want := s.calls.Unsent(), 40*answerBytes(1000); got != want {
		t.Errorf("unread bytes: %d, want the small connection's %d", got, want)
	}
	if got := s.rs.Count(UnreadClosed); got != 1 {
		t.Errorf("unread_closed: %d, want 1", got)
	}
}

// A client that grants every window and then does not read at all holds
// the server's writes instead: its answers are stuck on it all the same,
// and its connection is closed to make room.
func TestAnswers_ClientNotReadingTCP_ClosedToMakeRoom(t *testing.T) {
	s := serve(t, 4, Unread{PerConnection: 1 << 30, Grace: time.Hour, Total: 1 << 30})
	u := unreader(t, s.addr)
	if err := u.GrantStreams(1<<31 - 1); err != nil {
		t.Fatal(err)
	}
	if err := u.GrantConnection(1<<31 - 1 - 65535); err != nil {
		t.Fatal(err)
	}
	u.StopReading()
	for range 4 {
		s.get(t, u, 4<<20) // far more than the sockets' buffers
	}
	// The windows are open: only the blocked write says the client does
	// not read.
	eventually(t, "four answers left unread", func() bool { return s.calls.Leaving() == 4 })
	time.Sleep(stuck)

	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call with every slot held by answers the client does not read: %v", err)
	}
	if got := s.rs.Count(AnswerEvicted); got != 1 {
		t.Errorf("answer_evicted: %d, want 1", got)
	}
}

// A window raised past what HTTP/2 allows closes the connection: grpc-go
// would wrap it and send nothing, while it would read open here.
func TestAnswers_WindowPastTheMaximum_ClosesTheConnection(t *testing.T) {
	s := serve(t, 4, unread)
	u := unreader(t, s.addr)
	if err := u.GrantConnection(1<<31 - 1); err != nil {
		t.Fatal(err)
	}
	<-u.Closed()
	if got := s.rs.Count(FlowControl); got != 1 {
		t.Errorf("flow_control: %d, want 1", got)
	}
}

// Calls that need no credential hold at most their own share of the
// slots: past it they are refused, and a customer's call still finds
// room.
func TestAnswers_AnonymousCallsBoundApart(t *testing.T) {
	s := serve(t, 8, unread)
	s.calls.Anonymous(2, "/test.Big/")
	u := unreader(t, s.addr)
	for range 4 {
		if err := u.Call(rawgrpc.Fields(s.addr, "/grpc.health.v1.Health/Check"), nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two health checks held, two refused", func() bool {
		return s.calls.Leaving() == 2 && s.rs.Count(AnonymousLimit) == 2
	})
	for range 6 {
		s.get(t, u, 10)
	}
	eventually(t, "the customer's calls to take the other six slots", func() bool { return s.calls.Leaving() == 8 })
	if got := s.rs.Count(AnonymousLimit); got != 2 {
		t.Errorf("anonymous_limit: %d, want 2", got)
	}
}
