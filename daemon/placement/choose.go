package placement

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// Choose picks the pod for a new principal by weighted rendezvous
// hashing. Each pod scores -w/ln(u), where u in (0, 1) is a hash of the
// pod and the principal, and the highest score wins. Every replica thus
// proposes the same pod, so replicas racing on one principal rarely even
// lose the compare-and-set. A pod takes new principals in proportion to
// its weight, and adding one moves no one. Pods of weight 0 or less, and
// those usable rejects, are never chosen; a nil usable takes them all.
// ok is false when no pod is left.
func Choose(principal string, weights map[string]int, usable func(pod string) bool) (pod string, ok bool) {
	best := math.Inf(-1)
	for p, w := range weights {
		if w <= 0 || (usable != nil && !usable(p)) {
			continue
		}
		s := score(p, principal, w)
		// Ties, vanishingly rare, go to the smaller name, not to the
		// map's order.
		if !ok || s > best || (s == best && p < pod) {
			pod, best, ok = p, s, true
		}
	}
	return pod, ok
}

// score is a pod's rendezvous score for principal. SHA-256 makes it the
// same in every process and every release.
func score(pod, principal string, weight int) float64 {
	h := sha256.New()
	h.Write([]byte(pod))
	h.Write([]byte{0})
	h.Write([]byte(principal))
	x := binary.BigEndian.Uint64(h.Sum(nil))
	u := (float64(x>>11) + 0.5) / (1 << 53) // the top 53 bits, in (0, 1)
	return -float64(weight) / math.Log(u)
}
