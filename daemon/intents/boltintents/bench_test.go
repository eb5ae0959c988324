package boltintents_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/wire"
)

// transport stands in for the call's grpc transport stream, which a
// benchmark without a network does not have.
type transport struct{}

func (transport) Method() string {
	return paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName
}
func (transport) SetHeader(metadata.MD) error  { return nil }
func (transport) SendHeader(metadata.MD) error { return nil }
func (transport) SetTrailer(metadata.MD) error { return nil }

// BenchmarkCreate measures fresh creates, as paymentsd serves them (intents
// in the bbolt file, the interceptor with CreatePaymentIntent
// transactional), with and without the interceptor, 64 at a time, without
// the network:
//
//	go test -run '^$' -bench BenchmarkCreate -benchmem ./boltintents
func BenchmarkCreate(b *testing.B) {
	method := paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName
	req := &paymentsv1.CreatePaymentIntentRequest{
		Chain: "evm:31337", Token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", Merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount: "100000000", ExpiresInSeconds: 900,
	}
	info := &grpc.UnaryServerInfo{FullMethod: method}
	for _, c := range []int{1, 64} {
		for _, withInterceptor := range []bool{false, true} {
			b.Run(fmt.Sprintf("c=%d/interceptor=%t", c, withInterceptor), func(b *testing.B) {
				db, err := boltstore.Open(filepath.Join(b.TempDir(), "db"), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				intents, err := boltintents.New(context.Background(), db)
				if err != nil {
					b.Fatal(err)
				}
				srv := server.New(intents, nil)
				handler := func(ctx context.Context, req any) (any, error) {
					return srv.CreatePaymentIntent(ctx, req.(*paymentsv1.CreatePaymentIntentRequest))
				}
				call := handler
				if withInterceptor {
					intercept := interceptor.MustUnaryServerInterceptor(db, interceptor.WithScope(auth.Scope),
						interceptor.WithKeyPolicy(method, interceptor.KeyRequired), interceptor.WithTransactional(method))
					call = func(ctx context.Context, req any) (any, error) { return intercept(ctx, req, info, handler) }
				}
				var n atomic.Uint64
				before, commits := db.Bolt().Stats(), db.Commits()
				create := func() {
					ctx := metadata.NewIncomingContext(context.Background(),
						metadata.Pairs("authorization", "Bearer bench", wire.KeyHeader, fmt.Sprint("fresh-", n.Add(1))))
					ctx = grpc.NewContextWithServerTransportStream(auth.NewContext(ctx, "dev:bench"), transport{})
					if _, err := call(ctx, req); err != nil {
						b.Error(err)
					}
				}
				cpu := cpuTime()
				b.ResetTimer()
				if c == 1 {
					for range b.N {
						create()
					}
				} else {
					b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							create()
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
				after := db.Bolt().Stats()
				st := after.Sub(&before)
				b.ReportMetric(float64(db.Commits()-commits)/float64(b.N), "commits/op")
				b.ReportMetric(float64(st.TxStats.GetWrite())/float64(db.Commits()-commits), "pages/commit")
				b.ReportMetric(float64(st.TxStats.GetWriteTime().Microseconds())/float64(db.Commits()-commits), "write-µs/commit")
				b.ReportMetric(float64(st.TxStats.GetSpillTime().Microseconds())/float64(db.Commits()-commits), "spill-µs/commit")
			})
		}
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
