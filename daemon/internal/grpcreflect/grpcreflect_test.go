package grpcreflect_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alphapb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	embedded "github.com/paymentsd/paymentsd/daemon"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/grpcreflect"
	"github.com/paymentsd/paymentsd/daemon/testkit/grpctest"
)

type payments struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
}

// ask sends one reflection request to a server with the payments service
// and reflection, and returns the answer.
func ask(t *testing.T, req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
	t.Helper()
	s := grpc.NewServer()
	paymentsv1.RegisterPaymentIntentServiceServer(s, payments{})
	if err := grpcreflect.Register(s, embedded.Descriptors); err != nil {
		t.Fatal(err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(grpctest.Serve(t, s)).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestRegister_ListsTheServices(t *testing.T) {
	resp := ask(t, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	})
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	for _, want := range []string{
		paymentsv1.PaymentIntentService_ServiceDesc.ServiceName,
		reflectionpb.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alphapb.ServerReflection_ServiceDesc.ServiceName,
	} {
		if !slices.Contains(names, want) {
			t.Errorf("services %q lack %s", names, want)
		}
	}
}

// The file served keeps its comments, which the generated code's lacks.
func TestRegister_ServesTheComments(t *testing.T) {
	resp := ask(t, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: paymentsv1.PaymentIntentService_ServiceDesc.ServiceName,
		},
	})
	files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	if len(files) == 0 {
		t.Fatalf("no file: %v", resp)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(files[0], &fd); err != nil {
		t.Fatal(err)
	}
	comments := 0
	for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
		if strings.TrimSpace(loc.GetLeadingComments()) != "" {
			comments++
		}
	}
	if comments == 0 {
		t.Errorf("%s is served without comments", fd.GetName())
	}
}

func TestRegister_BadDescriptors(t *testing.T) {
	if err := grpcreflect.Register(grpc.NewServer(), []byte{0xff}); err == nil {
		t.Error("no error for descriptors that do not decode")
	}
}
