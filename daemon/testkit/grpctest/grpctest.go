// Package grpctest is a test kit. It serves a gRPC server on loopback for
// the length of a test, and dials it. A package's interceptors, codecs and
// services are then tested over a real connection.
package grpctest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Serve serves s on a loopback port until the test ends. It returns a
// plaintext connection to it made with opts, also closed at the end.
func Serve(t testing.TB, s *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
