package interceptor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// UnaryServerInterceptor returns an interceptor that runs each request's
// handler at most once per (scope, idempotency key). It replays the stored
// result to every retry. See the package documentation.
//
// It fails for options that cannot work. A method named in WithKeyPolicy
// or WithTransactional must be named as "/package.Service/Method". The
// rest are once.New's rules: a lease must be positive and shorter than the
// TTL, a handler timeout and a result size positive, and WithoutStoring(OK)
// is refused.
func UnaryServerInterceptor(store storage.Store, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	o := evaluateOptions(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	guard, err := once.New(store, o.guard)
	if err != nil {
		return nil, fmt.Errorf("interceptor: %w", err)
	}
	i := &idempotency{guard: guard, opts: o}
	return i.intercept, nil
}

// MustUnaryServerInterceptor is UnaryServerInterceptor for options known
// to be valid. It panics if they are not.
func MustUnaryServerInterceptor(store storage.Store, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := UnaryServerInterceptor(store, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// idempotency is the gRPC face of a once.Guard: metadata in, status out.
type idempotency struct {
	guard *once.Guard
	opts  *options
}

func (i *idempotency) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	obs := &once.Observation{Operation: info.FullMethod} // the guard fills in the rest, but for Code
	defer func() {
		obs.Code = code.Code(status.Code(err))
		if obs.Err != nil { // the caller knows only the code; the operator needs the cause
			i.opts.guard.Logger.LogAttrs(ctx, slog.LevelError, "idempotency: store failed",
				slog.String("method", obs.Operation), slog.String("code", status.Code(err).String()), slog.String("err", obs.Err.Error()))
		}
		i.opts.observer.Finished(ctx, *obs)
	}()
	rk, dedup, msg, err := i.identify(ctx, req, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if !dedup {
		return handler(ctx, req)
	}
	c := &grpcCall{i: i, obs: obs, handler: handler, req: req}
	a, err := i.guard.Run(ctx, once.Request{
		Scope: rk.Scope, Key: rk.Key, Operation: info.FullMethod, Message: msg,
		Transactional: i.opts.transactional[info.FullMethod], OnClaim: c.claimed,
	}, obs, c.run)
	return c.answer(ctx, a, err)
}

// grpcCall is one keyed call: what the guard needs of gRPC.
type grpcCall struct {
	i       *idempotency
	obs     *once.Observation // what the guard has observed so far
	handler grpc.UnaryHandler
	req     any
	resp    any         // the handler's response of its last run
	expires metadata.MD // the header that says when the record is forgotten
}

// claimed tells the observer of the claim, and says when the record is
// forgotten. Until then a retry with this key is safe. The time is
// truncated to the second, so it is never late. A replay sends it with
// its stored header; every other answer gets it now, before the handler
// runs. A caller that has gone gets no header; its claim still runs.
func (c *grpcCall) claimed(ctx context.Context, outcome storage.Outcome, rec *storage.Record) error {
	c.i.opts.observer.Claimed(ctx, *c.obs)
	c.expires = metadata.MD{wire.ExpiresAtHeader: []string{rec.Expiry.UTC().Format(time.RFC3339)}}
	if once.Replays(outcome, rec) {
		return nil // the replay sends it with the stored header
	}
	if err := grpc.SetHeader(ctx, c.expires); err != nil && ctx.Err() == nil {
		return status.Errorf(codes.Internal, "idempotency: set header: %v", err)
	}
	return nil
}

// run runs the handler for the guard. Its header and trailer metadata are
// held back until the result is stored, so that a superseded attempt
// sends nothing of its own.
func (c *grpcCall) run(ctx context.Context) (*storage.Result, error) {
	capture := &capturingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, herr := c.handler(grpc.NewContextWithServerTransportStream(ctx, capture), c.req)
	header, trailer := capture.metadata()
	result, err := newResult(resp, herr, header, trailer)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: %v", err)
	}
	c.resp = resp
	return result, nil
}

// answer turns the guard's answer into the call's: the stored result
// replayed, the handler's own response with its metadata, or a status.
func (c *grpcCall) answer(ctx context.Context, a once.Answer, err error) (any, error) {
	if err == nil && a.Replayed {
		return replay(ctx, a.Result, c.expires, c.i.opts.storedBytes)
	}
	var refused *once.Refusal
	switch {
	case errors.As(err, &refused):
		return nil, status.ErrorProto(refused.Status)
	case err != nil:
		return nil, err
	}
	if err := sendMetadata(ctx, a.Result.Header, a.Result.Trailer); err != nil {
		return nil, err
	}
	if a.Result.Status != nil {
		return nil, status.ErrorProto(a.Result.Status)
	}
	if c.i.opts.storedBytes {
		return &StoredResponse{a.Result.Response}, nil
	}
	return c.resp, nil
}

// identify returns the record key and message of a request, dedup false
// when the request is to pass through, or a status error for the caller.
func (i *idempotency) identify(ctx context.Context, req any, method string) (rk storage.RecordKey, dedup bool, msg proto.Message, err error) {
	policy := i.opts.policy(method)
	if policy == KeyIgnored {
		return storage.RecordKey{}, false, nil, nil
	}
	if policy == KeyOptional && !KeySent(ctx) {
		return storage.RecordKey{}, false, nil, nil
	}
	// The credential comes first: without one, the key is not even read.
	scope, err := i.opts.scope(ctx)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unauthenticated, err.Error())
		}
		return storage.RecordKey{}, false, nil, err
	}
	key, sent, err := keyFromContext(ctx)
	switch {
	case err != nil:
		return storage.RecordKey{}, false, nil, err
	case !sent:
		return storage.RecordKey{}, false, nil, errKeyMissing(method)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return storage.RecordKey{}, false, nil, status.Errorf(codes.Internal, "idempotency: request of %s is a %T, not a protobuf message", method, req)
	}
	return storage.RecordKey{Scope: scope, Key: key}, true, msg, nil
}

// replay answers with a stored result, marked as replayed. A stored error
// carries the mark in its trailer too. The stored header is sent after
// header (the record's expiry), in one piece.
func replay(ctx context.Context, result *storage.Result, header metadata.MD, storedBytes bool) (any, error) {
	for k, vs := range result.Header {
		header[k] = append(header[k], vs...) // copies: the stored result is shared
	}
	header[wire.ReplayedHeader] = append(header[wire.ReplayedHeader], "true")
	trailer := result.Trailer
	if result.Status != nil {
		// A stored error carries the marker in its trailer too. The trailer
		// comes with the status. A client can then tell the stored error from
		// an error of its connection, cut after the header (see package
		// retry).
		trailer = metadata.Join(trailer, metadata.Pairs(wire.ReplayedHeader, "true"))
	}
	if err := sendMetadata(ctx, header, trailer); err != nil {
		return nil, err
	}
	if result.Status != nil {
		return nil, status.ErrorProto(result.Status)
	}
	if storedBytes {
		return &StoredResponse{result.Response}, nil
	}
	resp, err := result.Response.UnmarshalNew()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: stored response cannot be decoded: %v", err)
	}
	return resp, nil
}

func newResult(resp any, herr error, header, trailer metadata.MD) (*storage.Result, error) {
	r := &storage.Result{Header: header, Trailer: trailer}
	if herr != nil {
		st, ok := status.FromError(herr)
		if !ok {
			st = status.FromContextError(herr) // as grpc-go itself converts handler errors
		}
		r.Status = st.Proto()
		return r, nil
	}
	msg, ok := resp.(proto.Message)
	if !ok || msg == nil {
		return nil, fmt.Errorf("handler returned %T, not a protobuf message", resp)
	}
	var err error
	r.Response, err = anypb.New(msg)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return r, nil
}

// sendMetadata sets header and trailer on the call (grpc-go copies them).
// For a caller that has gone, it sets what it can.
func sendMetadata(ctx context.Context, header, trailer metadata.MD) error {
	if len(header) > 0 {
		if err := grpc.SetHeader(ctx, header); err != nil && ctx.Err() == nil {
			return status.Errorf(codes.Internal, "idempotency: set header: %v", err)
		}
	}
	if len(trailer) > 0 {
		if err := grpc.SetTrailer(ctx, trailer); err != nil && ctx.Err() == nil {
			return status.Errorf(codes.Internal, "idempotency: set trailer: %v", err)
		}
	}
	return nil
}
