package interceptor

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

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
