// Package retry is the client half of the idempotency layer. It is a unary
// client interceptor for the methods it is configured for. It gives each
// call a random idempotency key and keeps it across attempts. It retries
// with backoff what is safe to retry: UNAVAILABLE, an attempt's own
// timeout, and ABORTED from the idempotency layer. ChosenKey tells the
// caller the key, for its logs. Every answer about a record carries
// wire.ExpiresAtHeader, the time until which a retry with the key stays
// safe.
//
// Put this interceptor first in the chain, outside (before) any other retry
// interceptor, such as go-grpc-middleware's retry. It picks the key once
// per call. A retry interceptor outside it would have each attempt pick a
// new key, and the server would run every attempt.
//
// UnaryClientInterceptor returns an error for options that cannot work.
// Such options name no methods, or a method not named
// "/package.Service/Method", or fewer than one attempt.
// MustUnaryClientInterceptor panics instead, for options fixed in code.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/wire"
)

// Option configures UnaryClientInterceptor.
type Option func(*options)

type options struct {
	methods        map[string]bool
	maxAttempts    int
	baseDelay      time.Duration
	maxDelay       time.Duration
	attemptTimeout time.Duration
}

// Defaults of the client options.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 50 * time.Millisecond
	DefaultMaxDelay    = 2 * time.Second
)

// WithMethods names the methods, by full name, that the client
// interceptor gives keys and retries. Others pass through untouched.
func WithMethods(fullMethods ...string) Option {
	return func(o *options) {
		for _, m := range fullMethods {
			o.methods[m] = true
		}
	}
}

// WithMaxAttempts bounds the attempts of one call, the first included.
// Default 5.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithBackoff sets the exponential backoff between attempts. Before attempt
// n+1, it waits a time drawn uniformly from 0 to min(max, base·2^(n-1)).
// This is full jitter. The defaults are 50ms and 2s.
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) { o.baseDelay, o.maxDelay = base, max }
}

// WithAttemptTimeout gives each attempt its own deadline, within the
// caller's. An attempt that runs out of it is retried. By default there is
// none.
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *options) { o.attemptTimeout = d }
}

// UnaryClientInterceptor makes the calls of the configured methods safe to
// retry, and retries them. A call without an idempotency-key gets a fresh
// random one (UUID v4), kept for all of its attempts. So the server runs it
// at most once. It retries with exponential backoff and full jitter. It
// does so on UNAVAILABLE (after at least its RetryInfo delay, if it has
// one), on an attempt's own timeout, and on ABORTED from
// the idempotency layer. That ABORTED is IDEMPOTENCY_KEY_IN_USE, retried
// after at least its RetryInfo delay. Or it is
// IDEMPOTENCY_ATTEMPT_SUPERSEDED, whose winner's result a retry gets. It
// never retries a replayed result, FAILED_PRECONDITION or any other answer.
// It stops after WithMaxAttempts, and never waits past the caller's
// deadline or cancellation.
//
// It fails without WithMethods, since it would make no call safe. It also
// fails for a method not named "/package.Service/Method", and for
// WithMaxAttempts below 1.
func UnaryClientInterceptor(opts ...Option) (grpc.UnaryClientInterceptor, error) {
	o := &options{
		methods:     map[string]bool{},
		maxAttempts: DefaultMaxAttempts,
		baseDelay:   DefaultBaseDelay,
		maxDelay:    DefaultMaxDelay,
	}
	for _, opt := range opts {
		opt(o)
	}
	if len(o.methods) == 0 {
		return nil, errors.New("retry: UnaryClientInterceptor without WithMethods would make no call safe to retry")
	}
	for m := range o.methods {
		if err := wire.ValidateMethod(m); err != nil {
			return nil, fmt.Errorf("retry: WithMethods: %w", err)
		}
	}
	if o.maxAttempts < 1 {
		return nil, fmt.Errorf("retry: WithMaxAttempts(%d): need at least 1", o.maxAttempts)
	}
	return o.intercept, nil
}

// MustUnaryClientInterceptor is UnaryClientInterceptor for options known
// to be valid. It panics if they are not.
func MustUnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	i, err := UnaryClientInterceptor(opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// ChosenKey is a call option that stores in *key the idempotency key that a
// call under UnaryClientInterceptor carried. That is the caller's own key,
// or the one the interceptor chose. It is for the caller's logs, since it
// names the call to the server's operators.
func ChosenKey(key *string) grpc.CallOption { return chosenKey{key: key} }

type chosenKey struct {
	grpc.EmptyCallOption
	key *string
}

func (o *options) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
	if !o.methods[method] {
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	key := md.Get(wire.KeyHeader)
	if len(key) == 0 {
		key = []string{uuid.NewString()}
		ctx = metadata.AppendToOutgoingContext(ctx, wire.KeyHeader, key[0])
	}
	for _, opt := range callOpts {
		if c, ok := opt.(chosenKey); ok {
			*c.key = key[0]
		}
	}
	for attempt := 1; ; attempt++ {
		trailer, err := o.attempt(ctx, method, req, reply, cc, invoker, callOpts)
		if err == nil {
			return nil
		}
		wait, retry := retryable(ctx, err, trailer)
		if !retry || attempt >= o.maxAttempts {
			return err
		}
		backoff := o.baseDelay << min(attempt-1, 30)
		if backoff <= 0 || backoff > o.maxDelay {
			backoff = o.maxDelay
		}
		timer := time.NewTimer(max(wait, rand.N(backoff+1)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return err
		}
	}
}

// attempt makes one attempt, under its own timeout if one is set, and
// returns the trailer the server sent with its answer.
func (o *options) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts []grpc.CallOption) (trailer metadata.MD, err error) {
	if o.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.attemptTimeout)
		defer cancel()
	}
	err = invoker(ctx, method, req, reply, cc, append(callOpts[:len(callOpts):len(callOpts)], grpc.Trailer(&trailer))...)
	return trailer, err
}

// details returns the idempotency layer's ErrorInfo reason and the
// RetryInfo delay of st, if it has them.
func details(st *status.Status) (reason string, wait time.Duration) {
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.Domain == wire.ErrorDomain {
				reason = d.Reason
			}
		case *errdetails.RetryInfo:
			wait = d.RetryDelay.AsDuration()
		}
	}
	return reason, wait
}

// retryable says whether an attempt's error may be retried with the same
// key. It also says how long the server asked to wait first. A stored
// error is final. The server replays it with the replayed marker in its
// trailer, which comes with the status. A marker in the header alone was a
// replay whose status was lost on the way, by a connection cut between
// them. The error is then the connection's, and the next attempt gets the
// answer.
func retryable(ctx context.Context, err error, trailer metadata.MD) (time.Duration, bool) {
	if ctx.Err() != nil || len(trailer.Get(wire.ReplayedHeader)) > 0 {
		return 0, false // the caller gave up, or this is the stored result
	}
	if errors.Is(err, io.EOF) {
		// grpc-go may end a unary call with a bare io.EOF when its stream
		// closed before the request was sent: the connection's failure.
		return 0, true
	}
	st := status.Convert(err)
	reason, wait := details(st)
	switch st.Code() {
	case codes.Unavailable:
		return wait, true // a RetryInfo here: one scope's records are away for now
	case codes.DeadlineExceeded:
		return 0, true // the attempt's own deadline: the caller's is still live
	case codes.Aborted:
		return wait, reason == wire.ReasonKeyInUse || reason == wire.ReasonAttemptSuperseded
	}
	return 0, false
}
