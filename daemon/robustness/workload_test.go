package robustness

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// keysPerPrincipal is the pool a create draws its key from: small, so that
// duplicates, concurrent duplicates and mismatches collide. The pool
// slides on (one create in ten moves it by a key) so that fresh creates
// go on all run long.
const keysPerPrincipal = 6

// workload is the clients' shared knowledge: each principal's key pool
// and the intent ids answers have shown, which gets and cancels name.
type workload struct {
	hi [2]atomic.Int64 // per principal: the pool is the keys below hi

	mu   sync.Mutex
	seen [2][]string
	ids  map[string]bool
	// refusedKeys: per principal, the keys a create was refused with a
	// stored error (INVALID_ARGUMENT), for the releaser.
	refusedKeys [2][]int
	used        map[[2]int]bool // principal, key
}

func newWorkload() *workload {
	w := &workload{ids: map[string]bool{}, used: map[[2]int]bool{}}
	for i := range w.hi {
		w.hi[i].Store(keysPerPrincipal)
	}
	return w
}

// client sends random operations through ep until stop, recording each.
func (w *workload) client(id int, rng *rand.Rand, ep *endpoint, h *history, stop *atomic.Bool) {
	for n := 0; !stop.Load(); n++ {
		o := &op{Client: id, Principal: rng.IntN(len(tokens)), Face: []string{"grpc", "http"}[rng.IntN(2)]}
		switch r := rng.IntN(100); {
		case r < 50:
			w.create(o, rng)
		case r < 70:
			o.Kind, o.ID = opGet, w.pick(o.Principal, rng)
		case r < 82:
			o.Kind, o.ID = opCancel, w.pick(o.Principal, rng)
			if rng.IntN(2) == 0 {
				o.Key = fmt.Sprintf("cancel-%d-%d", id, n) // its own key: a keyed cancel is transactional too
			}
		default:
			o.Kind = opList
		}
		if (o.Kind == opGet || o.Kind == opCancel) && o.ID == "" {
			o.Key = ""
			w.create(o, rng)
		}
		o.Call = h.now()
		ep.do(o)
		o.Return = h.now()
		h.add(o)
		w.learn(o)
		if o.Unknown {
			time.Sleep(20 * time.Millisecond) // a server down: do not spin
		}
	}
}

func (w *workload) create(o *op, rng *rand.Rand) {
	hi := w.hi[o.Principal].Load()
	k := int(hi) - 1 - rng.IntN(keysPerPrincipal)
	o.Kind, o.Key, o.Body = opCreate, keyName(k), rng.IntN(2)
	if rng.IntN(10) == 0 {
		w.hi[o.Principal].CompareAndSwap(hi, hi+1)
	}
	w.mu.Lock()
	w.used[[2]int{o.Principal, k}] = true
	w.mu.Unlock()
}

// pick is a random intent id of principal p that an answer has shown, or
// "" while there is none.
func (w *workload) pick(p int, rng *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen[p]) == 0 {
		return ""
	}
	return w.seen[p][rng.IntN(len(w.seen[p]))]
}

// learn keeps the ids o's answer shows.
func (w *workload) learn(o *op) {
	if o.Kind == opCreate && o.Code == codes.InvalidArgument && !o.Unknown {
		w.mu.Lock()
		w.refusedKeys[o.Principal] = append(w.refusedKeys[o.Principal], keyIndex(o.Key))
		w.mu.Unlock()
	}
	if o.Code != codes.OK || o.Unknown {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	add := func(id string) {
		if !w.ids[id] {
			w.ids[id] = true
			w.seen[o.Principal] = append(w.seen[o.Principal], id)
		}
	}
	if o.Intent != nil {
		add(o.Intent.Id)
	}
	for _, pi := range o.Intents {
		add(pi.Id)
	}
}

// refused is a key whose create was refused with a stored error, the
// latest of a random principal's (false while there is none).
func (w *workload) refused(rng *rand.Rand) (principal, key int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := rng.IntN(len(tokens))
	for range tokens {
		if n := len(w.refusedKeys[p]); n > 0 {
			return p, w.refusedKeys[p][n-1], true
		}
		p = (p + 1) % len(tokens)
	}
	return 0, 0, false
}

// usedKey is a key some create sent.
type usedKey struct{ principal, key int }

func (w *workload) keysUsed() []usedKey {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []usedKey
	for k := range w.used {
		out = append(out, usedKey{k[0], k[1]})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].principal < out[j].principal || out[i].principal == out[j].principal && out[i].key < out[j].key
	})
	return out
}
