package interceptor

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"
)

// newError returns a status error with an ErrorInfo of reason and any
// further details.
func newError(code codes.Code, reason, msg string, meta map[string]string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain, Metadata: meta}
	withDetails, err := st.WithDetails(append([]protoadapt.MessageV1{info}, details...)...)
	if err != nil {
		return st.Err() // unreachable: code is never OK and the details always marshal
	}
	return withDetails.Err()
}

func errKeyMissing(method string) error {
	return newError(codes.InvalidArgument, wire.ReasonKeyMissing,
		fmt.Sprintf("%s requires an idempotency-key header", method), nil)
}

func errKeyInvalid(why string) error {
	return newError(codes.InvalidArgument, wire.ReasonKeyInvalid, "invalid idempotency-key: "+why, nil)
}

// StatusErrors keeps gRPC status errors through once.Do and once.DoValue:
// with once.Options{Statuses: interceptor.StatusErrors}, a function's
// status error is stored with its code and details, and every call gets
// a status error back, so status.Code and status.FromError work on it. A
// refusal is still a *once.Refusal; its Status is what a server answers.
var StatusErrors once.Statuses = statusErrors{}

type statusErrors struct{}

func (statusErrors) Status(err error) (*spb.Status, bool) {
	s, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	return s.Proto(), true
}

func (statusErrors) Error(st *spb.Status) error { return status.ErrorProto(st) }
