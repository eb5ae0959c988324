// Package server implements payments.v1.PaymentIntentService: the payments
// domain. It knows nothing of how intents are stored, and of idempotency
// keys only the one a create ran under (once.KeyFrom), kept with the
// intent for operators. The interceptor in front of it makes Create run
// once per key.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// IntentStore keeps payment intents, each owned by one principal. An intent
// of another owner is reported as absent.
//
// Under the idempotency interceptor, a handler's context may carry a unit
// of work of the store's backend. A store writes through it, so that the
// handler's writes commit together with its answer.
//
// An error other than ErrNotFound is a failure of the storage, answered
// UNAVAILABLE. One that wraps ErrDamaged is answered DATA_LOSS.
type IntentStore interface {
	// CreateIntent stores a new intent with key, the idempotency key that
	// created it ("" when none did); ErrExists if its id is taken.
	CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error
	// GetIntent returns the intent; ErrNotFound when owner has none with
	// that id.
	GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error)
	// UpdateIntent applies update atomically. It stores the intent if
	// update reports a change, and returns it as stored. It returns
	// ErrNotFound when the intent is absent.
	UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error)
	// ListIntents returns up to limit intents in creation order, after the
	// cursor after. The limit is at least 1. It also returns the next
	// page's cursor, which is nil on the last page.
	ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error)
}

// FoundIntent is an intent found by its id alone, for an operator: its
// owner, the idempotency key that created it, and the intent. Key is ""
// for an intent created without one, or stored before keys were kept.
type FoundIntent struct {
	Owner  string
	Key    string
	Intent *paymentsv1.PaymentIntent
}

// IntentScanner is what an operator's search of one owner's intents reads
// (package intentsearch): a scan, newest first, of an index both stores
// keep for paging.
type IntentScanner interface {
	// ScanIntents calls fn with owner's intents created at from or later
	// that sort before before (by creation time, then id; the zero
	// Position is past the newest), newest first, each with the key that
	// created it. It stops when fn returns false or an error, which it
	// returns.
	ScanIntents(ctx context.Context, owner string, from time.Time, before Position, fn func(FoundIntent) (bool, error)) error
}

// Position is where an intent sorts among its owner's: by creation time,
// then id.
type Position struct {
	CreateTime time.Time
	ID         string
}

// PositionOf is where pi sorts.
func PositionOf(pi *paymentsv1.PaymentIntent) Position {
	return Position{CreateTime: pi.GetCreateTime().AsTime(), ID: pi.GetId()}
}

// Errors of an IntentStore, matched with errors.Is.
var (
	// ErrNotFound is returned when the owner has no intent with the id.
	ErrNotFound = errors.New("payment intent not found")
	// ErrExists is returned when a new intent's id is taken.
	ErrExists = errors.New("payment intent already exists")
	// ErrDamaged, wrapped in a store's error, says the store found the
	// data it read damaged. A retry would meet the same damage. So the
	// caller is told DATA_LOSS, not UNAVAILABLE.
	ErrDamaged = errors.New("payment intent storage found its data damaged")
)

// Page sizes of ListPaymentIntents.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// ListBudget is the most intents the Lists in progress read at once. A
// List holds its page in memory, about a kilobyte an intent, while it
// reads it. Without a bound, one client could hold a thousand
// Lists of a thousand intents at once: a gigabyte. A List that finds no
// room is refused at once, UNAVAILABLE: waiting, it would hold a call
// slot that a create could use.
const ListBudget = 8 * MaxPageSize

// Server is the PaymentIntentService.
type Server struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer

	store   IntentStore
	now     func() time.Time
	listing *semaphore.Weighted // of ListBudget intents
}

// New returns a Server keeping intents in store and reading time from now
// (time.Now when nil).
func New(store IntentStore, now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	return &Server{store: store, now: now, listing: semaphore.NewWeighted(ListBudget)}
}

// CreatePaymentIntent creates an intent owned by the caller.
func (s *Server) CreatePaymentIntent(ctx context.Context, req *paymentsv1.CreatePaymentIntentRequest) (*paymentsv1.CreatePaymentIntentResponse, error) {
	owner, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	expiresIn, err := validateCreate(req)
	if err != nil {
		return nil, err
	}
	now := s.now()
	pi := &paymentsv1.PaymentIntent{
		Id:         newIntentID(),
		State:      paymentsv1.State_STATE_CREATED,
		Version:    1,
		Chain:      req.Chain,
		Token:      req.Token,
		Payer:      req.Payer,
		Merchant:   req.Merchant,
		Amount:     req.Amount,
		CreateTime: timestamppb.New(now),
		ExpireTime: timestamppb.New(now.Add(expiresIn)),
	}
	_, key, _ := once.KeyFrom(ctx) // "" when no key guards the call
	if err := s.store.CreateIntent(ctx, owner, key, pi); err != nil {
		return nil, storeError(err, "") // ErrExists too: a fresh id from the CSPRNG cannot be taken
	}
	return &paymentsv1.CreatePaymentIntentResponse{PaymentIntent: pi}, nil
}

// GetPaymentIntent returns one of the caller's intents.
func (s *Server) GetPaymentIntent(ctx context.Context, req *paymentsv1.GetPaymentIntentRequest) (*paymentsv1.GetPaymentIntentResponse, error) {
	owner, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateID(req); err != nil {
		return nil, err
	}
	pi, err := s.store.GetIntent(ctx, owner, req.Id)
	if err != nil {
		return nil, storeError(err, req.Id)
	}
	return &paymentsv1.GetPaymentIntentResponse{PaymentIntent: expired(pi, s.now())}, nil
}

// CancelPaymentIntent cancels one of the caller's intents. A canceled
// intent is returned unchanged. A created one past its expiry was already
// canceled by the system, and is stored as such.
func (s *Server) CancelPaymentIntent(ctx context.Context, req *paymentsv1.CancelPaymentIntentRequest) (*paymentsv1.CancelPaymentIntentResponse, error) {
	owner, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateID(req); err != nil {
		return nil, err
	}
	now := s.now()
	pi, err := s.store.UpdateIntent(ctx, owner, req.Id, func(pi *paymentsv1.PaymentIntent) bool {
		if pi.State != paymentsv1.State_STATE_CREATED {
			return false
		}
		reason, at := paymentsv1.CancellationReason_CANCELLATION_REASON_REQUESTED, now
		if isExpired(pi, now) {
			reason, at = paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED, pi.ExpireTime.AsTime()
		}
		cancel(pi, reason, at)
		return true
	})
	if err != nil {
		return nil, storeError(err, req.Id)
	}
	return &paymentsv1.CancelPaymentIntentResponse{PaymentIntent: pi}, nil
}

// ListPaymentIntents lists the caller's intents, oldest first.
func (s *Server) ListPaymentIntents(ctx context.Context, req *paymentsv1.ListPaymentIntentsRequest) (*paymentsv1.ListPaymentIntentsResponse, error) {
	owner, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	size, err := validateList(req)
	if err != nil {
		return nil, err
	}
	after, err := decodePageToken(owner, req.PageToken)
	if err != nil {
		return nil, err
	}
	if !s.listing.TryAcquire(int64(size)) {
		return nil, status.Errorf(codes.Unavailable, "the server is listing its limit of %d intents at once; retry later, or ask for smaller pages", ListBudget)
	}
	defer s.listing.Release(int64(size))
	page, next, err := s.store.ListIntents(ctx, owner, after, size)
	if err != nil {
		return nil, storeError(err, "")
	}
	now := s.now()
	resp := &paymentsv1.ListPaymentIntentsResponse{PaymentIntents: make([]*paymentsv1.PaymentIntent, len(page))}
	for i, pi := range page {
		resp.PaymentIntents[i] = expired(pi, now)
	}
	if next != nil {
		resp.NextPageToken = encodePageToken(owner, next)
	}
	return resp, nil
}

func isExpired(pi *paymentsv1.PaymentIntent, now time.Time) bool {
	return pi.State == paymentsv1.State_STATE_CREATED && !now.Before(pi.ExpireTime.AsTime())
}

// expired returns pi as it is at now. A created intent past its expiry was
// canceled by the system at expire_time. Reads never show it as created,
// whether or not the cancellation was stored yet.
func expired(pi *paymentsv1.PaymentIntent, now time.Time) *paymentsv1.PaymentIntent {
	if !isExpired(pi, now) {
		return pi
	}
	c := proto.CloneOf(pi)
	cancel(c, paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED, pi.ExpireTime.AsTime())
	return c
}

func cancel(pi *paymentsv1.PaymentIntent, reason paymentsv1.CancellationReason, at time.Time) {
	pi.State = paymentsv1.State_STATE_CANCELED
	pi.CancellationReason = reason
	pi.CancelTime = timestamppb.New(at)
	pi.Version++
}

// newIntentID returns "pi_" and 24 hex digits from the CSPRNG.
func newIntentID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails; see crypto/rand.Read
	return "pi_" + hex.EncodeToString(b[:])
}

func principal(ctx context.Context) (string, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no authenticated principal")
	}
	return p, nil
}

// storeError is the answer to err, an IntentStore's error about intent id.
// It is NOT_FOUND for ErrNotFound. Otherwise it is UNAVAILABLE with a
// plain message, or DATA_LOSS for damage (see storageError). The store's
// own text stays out of the answer but in the error, for the server's log.
func storeError(err error, id string) error {
	if errors.Is(err, ErrNotFound) {
		return status.Errorf(codes.NotFound, "payment intent %s not found", id)
	}
	return &storageError{cause: err}
}

// storageError is a storage failure. It gives the caller a status and the
// log its cause (errors.Unwrap). A cause that wraps ErrDamaged is answered
// DATA_LOSS. A cause that wraps a storage.ScopeUnavailableError is
// answered UNAVAILABLE with its retry delay.
type storageError struct{ cause error }

func (e *storageError) Error() string { return "payment intent storage: " + e.cause.Error() }
func (e *storageError) Unwrap() error { return e.cause }

// GRPCStatus is what the caller is told.
func (e *storageError) GRPCStatus() *status.Status {
	if errors.Is(e.cause, ErrDamaged) {
		return status.New(codes.DataLoss, "payment intent storage found its data damaged")
	}
	var away *storage.ScopeUnavailableError
	if errors.As(e.cause, &away) {
		delay := max(away.RetryAfter, 100*time.Millisecond)
		st := status.Newf(codes.Unavailable, "the caller's payment intents are unavailable (%s); retry after %v", away.Why, delay)
		if withDelay, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
			return withDelay
		}
		return st
	}
	return status.New(codes.Unavailable, "payment intent storage is unavailable; try again")
}
