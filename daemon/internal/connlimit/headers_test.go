package connlimit

import (
	"encoding/binary"
	"testing"
)

// frame is one HTTP/2 frame header with a payload of n zero bytes.
func frame(typ, flags byte, n int) []byte {
	b := make([]byte, 9+n)
	b[0], b[1], b[2] = byte(n>>16), byte(n>>8), byte(n)
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], 1)
	return b
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// referenceScan reads a whole connection's bytes at once, frame by frame:
// whether the preface was wrong, whether a header block is open at the
// end, and how many were opened.
func referenceScan(b []byte) (bad, open bool, opens int) {
	n := min(len(b), len(clientPreface))
	if string(b[:n]) != clientPreface[:n] {
		return true, false, 0
	}
	for b = b[n:]; len(b) >= 9; {
		length := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		switch b[3] {
		case frameHeaders:
			open = b[4]&flagEndHeaders == 0
			if open {
				opens++
			}
		case frameContinuation:
			if b[4]&flagEndHeaders != 0 {
				open = false
			}
		}
		if len(b) < 9+length {
			break
		}
		b = b[9+length:]
	}
	return false, open, opens
}

func TestFrameScanner(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        []byte
		bad, open bool
		opens     int
	}{
		{"preface only", []byte(clientPreface), false, false, 0},
		{"part of the preface", []byte(clientPreface[:7]), false, false, 0},
		{"wrong preface", []byte("GET / HTTP/1.1\r\n"), true, false, 0},
		{"complete block", concat([]byte(clientPreface), frame(frameHeaders, flagEndHeaders, 30)), false, false, 0},
		{"open block", concat([]byte(clientPreface), frame(frameHeaders, 0, 30)), false, true, 1},
		{"open block, its payload to come", concat([]byte(clientPreface), frame(frameHeaders, 0, 30)[:12]), false, true, 1},
		{"block closed by continuation", concat([]byte(clientPreface), frame(frameHeaders, 0, 30),
			frame(frameContinuation, 0, 100), frame(frameContinuation, flagEndHeaders, 5)), false, false, 1},
		{"block still open after continuations", concat([]byte(clientPreface), frame(frameHeaders, 0, 30),
			frame(frameContinuation, 0, 100), frame(frameContinuation, 0, 5)), false, true, 1},
		{"END_HEADERS inside a data payload is payload", concat([]byte(clientPreface), frame(frameHeaders, 0, 3),
			frame(0x0, 0, 9)), false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for size := 1; size <= len(tc.in); size++ {
				var s frameScanner
				for b := tc.in; len(b) > 0; b = b[min(size, len(b)):] {
					s.scan(b[:min(size, len(b))])
				}
				if s.badPreface != tc.bad || s.blockOpen != tc.open || s.opens != tc.opens {
					t.Fatalf("in pieces of %d: bad %v open %v opens %d, want %v %v %d",
						size, s.badPreface, s.blockOpen, s.opens, tc.bad, tc.open, tc.opens)
				}
			}
		})
	}
}

// FuzzFrameScanner feeds a connection's bytes in pieces whose sizes the
// fuzzer picks, and checks the scanner against a reading of the whole.
func FuzzFrameScanner(f *testing.F) {
	f.Add(concat([]byte(clientPreface), frame(frameHeaders, 0, 30), frame(frameContinuation, flagEndHeaders, 2)), []byte{1, 7, 30})
	f.Add(concat([]byte(clientPreface), frame(frameHeaders, flagEndHeaders, 3), frame(0, 1, 4)), []byte{24})
	f.Add([]byte("PRI * HTTP/1.1"), []byte{3})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		var s frameScanner
		b := in
		for i := 0; len(b) > 0; i++ {
			n := len(b)
			if len(sizes) > 0 {
				n = min(int(sizes[i%len(sizes)])+1, len(b))
			}
			s.scan(b[:n])
			b = b[n:]
		}
		bad, open, opens := referenceScan(in)
		if s.badPreface != bad || s.blockOpen != open || s.opens != opens {
			t.Fatalf("scanner: bad %v open %v opens %d; whole: %v %v %d", s.badPreface, s.blockOpen, s.opens, bad, open, opens)
		}
	})
}
