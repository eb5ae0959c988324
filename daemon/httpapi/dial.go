package httpapi

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// Dial serves srv on an in-memory listener and returns a connection to it.
// The gateway calls the server through it. So an HTTP call meets the very
// interceptors of a gRPC call. There is no port to bind or expose, and no
// dependence on what --listen names. The listener is served until srv
// stops. Call Dial once srv's services are registered. Close the
// connection after srv stops.
func Dial(srv *grpc.Server) *grpc.ClientConn {
	lis := memListener{bufconn.Listen(memBufferBytes)}
	conn, err := grpc.NewClient("passthrough:///in-memory",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithChainUnaryInterceptor(outgoing))
	if err != nil {
		panic(err) // unreachable: the target and options are constants grpc-go accepts
	}
	go srv.Serve(lis) // returns, closing lis, when srv stops
	return conn
}

// memBufferBytes is what each direction of the in-memory connection
// buffers. HTTP/2's flow control bounds what is in flight anyway.
const memBufferBytes = 256 << 10

// memListener is grpc-go's in-memory listener, whose connections it marks
// as memConn for ServerCredentials.
type memListener struct{ *bufconn.Listener }

func (l memListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return memConn{c}, nil
}

// memConn is the server's end of an in-memory connection, which
// ServerCredentials recognises.
type memConn struct{ net.Conn }

// ServerCredentials returns the transport credentials of a server that
// Dial serves. Network connections handshake with network: TLS, say, or
// nil for plaintext. Dial's in-memory connections skip the handshake and
// are marked auth.Forwarded. The HTTP face has authenticated their callers
// and passes each call's principal. No network client can get that mark.
func ServerCredentials(network credentials.TransportCredentials) credentials.TransportCredentials {
	if network == nil {
		network = insecure.NewCredentials()
	}
	return serverCreds{network}
}

type serverCreds struct {
	network credentials.TransportCredentials
}

func (c serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(memConn); ok {
		return conn, auth.Forwarded{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.network.ServerHandshake(conn)
}

func (c serverCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.network.ClientHandshake(ctx, authority, conn)
}

func (c serverCreds) Info() credentials.ProtocolInfo { return c.network.Info() }

func (c serverCreds) Clone() credentials.TransportCredentials {
	return serverCreds{c.network.Clone()}
}

// OverrideServerName is part of the interface, deprecated in grpc-go.
func (c serverCreds) OverrideServerName(name string) error {
	//lint:ignore SA1019 the interface still requires the method, and a wrapper must forward it
	return c.network.OverrideServerName(name)
}
