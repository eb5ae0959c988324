package connlimit

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// recorder writes down what a frameReader reports.
type recorder struct{ got []string }

func (r *recorder) frame(h frameHeader) {
	r.got = append(r.got, fmt.Sprintf("frame %d %d %d %d", h.typ, h.flags, h.stream, h.length))
}

func (r *recorder) field(h frameHeader, f []byte) {
	r.got = append(r.got, fmt.Sprintf("field %d %d %x", h.typ, h.stream, f))
}

// referenceFrames reads a whole side of a connection at once: each
// complete frame header, each complete SETTINGS parameter of a SETTINGS
// frame that is no ACK, and the increment of a WINDOW_UPDATE of length 4.
func referenceFrames(b []byte) []string {
	var got []string
	for len(b) >= 9 {
		length := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		typ, flags := b[3], b[4]
		stream := binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1)
		got = append(got, fmt.Sprintf("frame %d %d %d %d", typ, flags, stream, length))
		payload := b[9:min(len(b), 9+length)]
		switch {
		case typ == frameSettings && flags&flagAck == 0:
			for p := payload; len(p) >= 6 && len(payload)-len(p) < length-length%6; p = p[6:] {
				got = append(got, fmt.Sprintf("field %d %d %x", typ, stream, p[:6]))
			}
		case typ == frameWindowUpdate && length == 4 && len(payload) == 4:
			got = append(got, fmt.Sprintf("field %d %d %x", typ, stream, payload))
		}
		if len(b) < 9+length {
			break
		}
		b = b[9+length:]
	}
	return got
}

func settings(params ...uint32) []byte {
	b := make([]byte, 9+6*len(params)/2)
	n := len(b) - 9
	b[0], b[1], b[2], b[3] = byte(n>>16), byte(n>>8), byte(n), frameSettings
	for i := 0; i < len(params); i += 2 {
		binary.BigEndian.PutUint16(b[9+3*i:], uint16(params[i]))
		binary.BigEndian.PutUint32(b[9+3*i+2:], params[i+1])
	}
	return b
}

func windowUpdate(stream, increment uint32) []byte {
	b := []byte{0, 0, 4, frameWindowUpdate, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	binary.BigEndian.PutUint32(b[9:], increment)
	return b
}

// FuzzFrameReader feeds one side of a connection in pieces whose sizes
// the fuzzer picks, and checks what the reader reports against a reading
// of the whole.
func FuzzFrameReader(f *testing.F) {
	f.Add(concat(settings(settingInitialWindowSize, 0, 3, 100), windowUpdate(0, 1<<20), frame(frameHeaders, flagEndHeaders, 7)), []byte{1, 5, 9})
	f.Add(concat(frame(frameSettings, flagAck, 0), windowUpdate(3, 65535), frame(frameData, flagEndStream, 300)), []byte{13})
	f.Add(concat(frame(frameSettings, 0, 7), frame(frameWindowUpdate, 0, 5)), []byte{2})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		var r frameReader
		var rec recorder
		b := in
		for i := 0; len(b) > 0; i++ {
			n := len(b)
			if len(sizes) > 0 {
				n = min(int(sizes[i%len(sizes)])+1, len(b))
			}
			r.scan(b[:n], &rec)
			b = b[n:]
		}
		if want := referenceFrames(in); !slices.Equal(rec.got, want) {
			t.Fatalf("in pieces: %q\nwhole: %q", rec.got, want)
		}
	})
}
