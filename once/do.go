package once

import (
	"context"
	"crypto/sha256"
	"encoding/json"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/storage"
)

// Answered says how a call of Do or DoValue was answered.
type Answered struct {
	// Replayed is true when an earlier call stored the answer, response or
	// error, and the function did not run in this one.
	Replayed bool
	// Attempt is the attempt that made the answer: 1 unless a run whose
	// worker died was taken over.
	Attempt uint64
}

// Do runs fn at most once for req, as Run does, and returns its response:
// fn's own the first time, the stored one after. An error fn returns is
// stored as its status (see Statuses and Errorf), and answered alike on
// the first run and every replay. A typed nil response is stored, and
// answered, as an empty message. The error is a *Refusal when the rules
// answered instead; any other is fn's, as stored.
func Do[T proto.Message](ctx context.Context, g *Guard, req Request, fn func(ctx context.Context) (T, error)) (T, Answered, error) {
	var resp T
	obs := &Observation{}
	a, err := g.Run(ctx, req, obs, func(ctx context.Context) (*storage.Result, error) {
		var ferr error
		resp, ferr = fn(ctx)
		if ferr != nil {
			return &storage.Result{Status: statusOf(ferr, g.opts.Statuses)}, nil
		}
		if any(resp) == nil {
			return nil, misuse("the function returned neither a response nor an error")
		}
		if !resp.ProtoReflect().IsValid() { // a typed nil: answer what is stored, an empty message
			resp = resp.ProtoReflect().Type().New().Interface().(T)
		}
		packed, err := anypb.New(resp)
		if err != nil {
			return nil, misuse("encode response: %v", err)
		}
		return &storage.Result{Response: packed}, nil
	})
	var zero T
	answered := Answered{Replayed: a.Replayed, Attempt: obs.Attempt}
	switch {
	case err != nil:
		return zero, answered, err
	case a.Result.Status != nil:
		return zero, answered, storedError(a.Result.Status, g.opts.Statuses)
	case !a.Replayed:
		return resp, answered, nil
	}
	msg, err := a.Result.Response.UnmarshalNew()
	if err != nil {
		return zero, answered, plain(ErrDataLoss, code.Code_INTERNAL, "idempotency: stored response cannot be decoded: %v", err)
	}
	stored, ok := msg.(T)
	if !ok {
		return zero, answered, misuse("stored response is a %T, not a %T", msg, zero)
	}
	return stored, answered, nil
}

// jsonScheme is the fingerprint scheme of DoValue: SHA-256 over the
// operation, a NUL byte and the value's JSON encoding. A record of another
// scheme never replays to DoValue, nor one of DoValue to Do.
const jsonScheme = "sha256-json-v1"

// jsonTypeURL marks a stored response that is a JSON value of DoValue.
const jsonTypeURL = "type.paymentsd.dev/once.JSON"

// DoValue is Do for plain Go values. in is fingerprinted by its JSON
// encoding (encoding/json: struct fields in order, map keys sorted), so
// In must encode deterministically: the same value, the same bytes. fn's
// response is stored as JSON, and every call, the first one too, gets it
// decoded from those bytes: what JSON does not keep, such as unexported
// fields, no call sees. req.Message must be nil, and FingerprintExclude
// does not apply. Errors are as in Do. A response that cannot be encoded
// is stored as an INTERNAL error, since fn has run.
func DoValue[In, Out any](ctx context.Context, g *Guard, req Request, in In, fn func(ctx context.Context, in In) (Out, error)) (Out, Answered, error) {
	var zero Out
	if req.Message != nil {
		return zero, Answered{}, misuse("DoValue fingerprints its value: the request's message must be nil")
	}
	body, err := json.Marshal(in)
	if err != nil {
		return zero, Answered{}, misuse("encode the request's value: %v", err)
	}
	obs := &Observation{}
	a, err := g.run(ctx, req, fingerprintJSON(req.Operation, body), jsonScheme, obs, func(ctx context.Context) (*storage.Result, error) {
		out, ferr := fn(ctx, in)
		if ferr != nil {
			return &storage.Result{Status: statusOf(ferr, g.opts.Statuses)}, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return &storage.Result{Status: &spb.Status{Code: int32(code.Code_INTERNAL),
				Message: "idempotency: the function's response cannot be encoded as JSON; it was discarded: " + err.Error()}}, nil
		}
		return &storage.Result{Response: &anypb.Any{TypeUrl: jsonTypeURL, Value: b}}, nil
	})
	answered := Answered{Replayed: a.Replayed, Attempt: obs.Attempt}
	switch {
	case err != nil:
		return zero, answered, err
	case a.Result.Status != nil:
		return zero, answered, storedError(a.Result.Status, g.opts.Statuses)
	case a.Result.Response.GetTypeUrl() != jsonTypeURL:
		return zero, answered, misuse("stored response is a %s, not a JSON value", a.Result.Response.GetTypeUrl())
	}
	var out Out
	if err := json.Unmarshal(a.Result.Response.GetValue(), &out); err != nil {
		return zero, answered, misuse("decode the stored response as a %T: %v", out, err)
	}
	return out, answered, nil
}

func fingerprintJSON(operation string, body []byte) storage.Fingerprint {
	h := sha256.New()
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write(body)
	return storage.Fingerprint(h.Sum(nil))
}
