package server

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// Limits of CreatePaymentIntentRequest.expires_in_seconds.
const (
	DefaultExpiresIn = 900 * time.Second
	MinExpiresIn     = 60 * time.Second
	MaxExpiresIn     = 86400 * time.Second
)

var (
	addressPattern = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)
	idPattern      = regexp.MustCompile(`^pi_[0-9a-f]{24}$`)
	maxAmount      = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// violations collects every bad field of a request, so that one answer
// names them all.
type violations []*errdetails.BadRequest_FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// err returns INVALID_ARGUMENT with a BadRequest naming each field, or nil.
func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	fields := make([]string, len(v))
	for i, fv := range v {
		fields[i] = fv.Field
	}
	st := status.New(codes.InvalidArgument, "invalid "+strings.Join(fields, ", "))
	withDetails, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v})
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// rejectUnknownFields refuses a request carrying fields this server does
// not know. Under proto3 they would be dropped silently. But ignoring a
// newer client's field, a currency say, could move the wrong money.
func rejectUnknownFields(v *violations, req proto.Message) {
	for b := req.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			v.add("", "malformed unknown fields")
			return
		}
		v.add(fmt.Sprintf("#%d", num), "unknown field number %d of %s; this server does not know it and will not ignore it",
			num, req.ProtoReflect().Descriptor().FullName())
		b = b[n:]
	}
}

// validateCreate checks every field and returns the intent's lifetime.
func validateCreate(req *paymentsv1.CreatePaymentIntentRequest) (time.Duration, error) {
	var v violations
	rejectUnknownFields(&v, req)
	if err := ParseChain(req.Chain); err != nil {
		v.add("chain", "%v", err)
	}
	for _, f := range []struct{ name, value string }{
		{"token", req.Token}, {"payer", req.Payer}, {"merchant", req.Merchant},
	} {
		if !addressPattern.MatchString(f.value) {
			v.add(f.name, "must be 0x and 40 hex digits, got %q", f.value)
		}
	}
	if err := ParseAmount(req.Amount); err != nil {
		v.add("amount", "%v", err)
	}
	expiresIn := DefaultExpiresIn
	if s := req.ExpiresInSeconds; s != 0 {
		expiresIn = time.Duration(s) * time.Second
		if expiresIn < MinExpiresIn || expiresIn > MaxExpiresIn {
			v.add("expires_in_seconds", "must be 0 (for %d) or %d to %d, got %d",
				int(DefaultExpiresIn.Seconds()), int(MinExpiresIn.Seconds()), int(MaxExpiresIn.Seconds()), s)
		}
	}
	return expiresIn, v.err()
}

// ParseChain checks a chain name: "evm:" and a decimal chain id from 1 to
// 2^64-1, without leading zeros.
func ParseChain(chain string) error {
	id, ok := strings.CutPrefix(chain, "evm:")
	if !ok {
		return fmt.Errorf("must be evm:<decimal chain id>, got %q", chain)
	}
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n == 0 || id[0] == '0' {
		return fmt.Errorf("chain id must be a decimal integer from 1 to 2^64-1 without leading zeros, got %q", id)
	}
	return nil
}

// ParseAmount checks an amount: a decimal integer from 1 to 2^256-1 with no
// sign and no leading zeros.
func ParseAmount(amount string) error {
	if amount == "" {
		return fmt.Errorf("is required")
	}
	for i := 0; i < len(amount); i++ {
		if amount[i] < '0' || amount[i] > '9' {
			return fmt.Errorf("must be a decimal integer with no sign, got %q", amount)
		}
	}
	if amount[0] == '0' {
		return fmt.Errorf("must be from 1 to 2^256-1 with no leading zeros, got %q", amount)
	}
	if len(amount) > 78 { // 2^256-1 has 78 digits
		return fmt.Errorf("must be at most 2^256-1")
	}
	n, _ := new(big.Int).SetString(amount, 10)
	if n.Cmp(maxAmount) > 0 {
		return fmt.Errorf("must be at most 2^256-1")
	}
	return nil
}

// validateID checks a request naming an intent by id.
func validateID(req interface {
	proto.Message
	GetId() string
}) error {
	var v violations
	rejectUnknownFields(&v, req)
	if !idPattern.MatchString(req.GetId()) {
		v.add("id", "must be pi_ and 24 lowercase hex digits, got %q", req.GetId())
	}
	return v.err()
}

// validateList checks a list request and returns its page size.
func validateList(req *paymentsv1.ListPaymentIntentsRequest) (int, error) {
	var v violations
	rejectUnknownFields(&v, req)
	size := DefaultPageSize
	switch n := req.PageSize; {
	case n < 0:
		v.add("page_size", "must not be negative, got %d", n)
	case n > 0:
		size = min(int(n), MaxPageSize)
	}
	return size, v.err()
}

// ValidIntentID reports whether id is one an intent can have: "pi_" and
// 24 lowercase hex digits.
func ValidIntentID(id string) bool { return idPattern.MatchString(id) }
