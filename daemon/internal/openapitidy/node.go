package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// node is a JSON value that keeps the order of its object's members. The
// maps of encoding/json would sort them.
type node struct {
	kind  byte // '{', '[' or 0 for a scalar
	obj   []member
	arr   []*node
	value json.RawMessage
}

type member struct {
	key string
	val *node
}

func scalar(raw string) *node { return &node{value: json.RawMessage(raw)} }

func parse(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := decode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the document")
	}
	return n, nil
}

func decode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		n := &node{kind: '{'}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decode(dec)
			if err != nil {
				return nil, err
			}
			n.obj = append(n.obj, member{k.(string), v})
		}
		_, err = dec.Token()
		return n, err
	case json.Delim('['):
		n := &node{kind: '['}
		for dec.More() {
			v, err := decode(dec)
			if err != nil {
				return nil, err
			}
			n.arr = append(n.arr, v)
		}
		_, err = dec.Token()
		return n, err
	}
	raw, err := json.Marshal(tok)
	return &node{value: raw}, err
}

// get is the member key of an object; nil when there is none.
func (n *node) get(key string) *node {
	for _, m := range n.members() {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// set replaces the member key of an object, or adds it at the end.
func (n *node) set(key string, v *node) {
	for i := range n.obj {
		if n.obj[i].key == key {
			n.obj[i].val = v
			return
		}
	}
	n.obj = append(n.obj, member{key, v})
}

// insertSorted adds the member key to an object whose keys are sorted,
// where it sorts.
func (n *node) insertSorted(key string, v *node) {
	i := 0
	for i < len(n.obj) && n.obj[i].key < key {
		i++
	}
	n.obj = slices.Insert(n.obj, i, member{key, v})
}

// keep drops the object's members whose key ok refuses.
func (n *node) keep(ok func(key string) bool) {
	if n == nil {
		return
	}
	kept := n.obj[:0]
	for _, m := range n.obj {
		if ok(m.key) {
			kept = append(kept, m)
		}
	}
	n.obj = kept
}

func (n *node) members() []member {
	if n == nil {
		return nil
	}
	return n.obj
}

func (n *node) elems() []*node {
	if n == nil {
		return nil
	}
	return n.arr
}

// str is a string scalar's value; "" for anything else.
func (n *node) str() string {
	var s string
	if n == nil || n.kind != 0 || json.Unmarshal(n.value, &s) != nil {
		return ""
	}
	return s
}

// encode writes n as protoc-gen-openapiv2 does: two-space indent, a
// newline at the end.
func (n *node) encode() []byte {
	var b bytes.Buffer
	n.write(&b, 0)
	b.WriteByte('\n')
	return b.Bytes()
}

func (n *node) write(b *bytes.Buffer, depth int) {
	indent := strings.Repeat("  ", depth+1)
	switch {
	case n.kind == '{' && len(n.obj) == 0:
		b.WriteString("{}")
	case n.kind == '[' && len(n.arr) == 0:
		b.WriteString("[]")
	case n.kind == '{':
		b.WriteString("{\n")
		for i, m := range n.obj {
			key, _ := json.Marshal(m.key)
			b.WriteString(indent)
			b.Write(key)
			b.WriteString(": ")
			m.val.write(b, depth+1)
			writeSep(b, i, len(n.obj), depth)
		}
		b.WriteString("}")
	case n.kind == '[':
		b.WriteString("[\n")
		for i, e := range n.arr {
			b.WriteString(indent)
			e.write(b, depth+1)
			writeSep(b, i, len(n.arr), depth)
		}
		b.WriteString("]")
	default:
		b.Write(n.value)
	}
}

// writeSep ends element i of count. It writes a comma before the next, or
// the closing bracket's indent after the last.
func writeSep(b *bytes.Buffer, i, count, depth int) {
	if i < count-1 {
		b.WriteString(",\n")
		return
	}
	b.WriteString("\n" + strings.Repeat("  ", depth))
}
