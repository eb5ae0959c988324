package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// decodeError says why a body that protojson refused does not decode as
// a message of md. It uses the face's own words. The wording of protojson
// is not stable (it varies on purpose), and it names fields its own way.
// A field is named as the body spelled it, with the names of the objects
// around it. So it is expires_in_seconds, not ExpiresInSeconds.
func decodeError(data []byte, md protoreflect.MessageDescriptor) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return fmt.Errorf("the body is not valid JSON (at byte %d): send one JSON object", syntax.Offset)
		}
		return errors.New("the body is not valid JSON: send one JSON object")
	}
	if why := explainObject(data, md, ""); why != "" {
		return errors.New(why)
	}
	return errors.New("the body does not decode as the request")
}

// explainObject says what is wrong with data as a message of md.
// The fields of data are named with prefix. It returns "" if it finds
// nothing wrong field by field. The caller has checked that data is valid
// JSON.
func explainObject(data []byte, md protoreflect.MessageDescriptor, prefix string) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		if prefix == "" {
			return "the body is not a JSON object: send one JSON object"
		}
		return fmt.Sprintf("field %q: want an object", strings.TrimSuffix(prefix, "."))
	}
	seen := map[protoreflect.FieldNumber]string{}
	for dec.More() {
		tok, _ := dec.Token()
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "" // unreachable: data is valid JSON
		}
		fd := md.Fields().ByJSONName(name)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(name))
		}
		switch {
		case fd == nil:
			return fmt.Sprintf("unknown field %q", prefix+name)
		case seen[fd.Number()] != "":
			return fmt.Sprintf("field %q is sent twice (as %q and %q)", prefix+name, seen[fd.Number()], name)
		}
		seen[fd.Number()] = name
		if why := explainField(fd, name, raw, md, prefix); why != "" {
			return why
		}
	}
	return ""
}

// explainField says what is wrong with raw as the value of field fd.
// The body spells the field name. It returns "" if nothing is wrong.
func explainField(fd protoreflect.FieldDescriptor, name string, raw json.RawMessage, md protoreflect.MessageDescriptor, prefix string) string {
	alone, _ := json.Marshal(map[string]json.RawMessage{name: raw})
	if protojson.Unmarshal(alone, dynamicpb.NewMessage(md)) == nil {
		return ""
	}
	if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && !wellKnown(fd.Message()) && bytes.HasPrefix(raw, []byte("{")) {
		if why := explainObject(raw, fd.Message(), prefix+name+"."); why != "" {
			return why
		}
	}
	return fmt.Sprintf("field %q: want %s", prefix+name, want(fd))
}

// wellKnown reports whether md is a google.protobuf type. JSON spells
// most of them in a form of their own, such as Timestamp's string.
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// want describes the JSON value field fd takes.
func want(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "an object"
	case fd.IsList():
		return "a list"
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "a whole number from -2147483648 to 2147483647"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "a whole number from 0 to 4294967295"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "a whole number, as a string of digits"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.StringKind:
		return "a string of UTF-8 text"
	case protoreflect.BytesKind:
		return "a base64 string"
	case protoreflect.EnumKind:
		return "one of " + enumNames(fd.Enum())
	}
	switch fd.Message().FullName() {
	case "google.protobuf.Timestamp":
		return `an RFC 3339 time, as a string such as "2026-01-02T15:04:05Z"`
	case "google.protobuf.Duration":
		return `a duration, as a string such as "1.5s"`
	}
	return "an object"
}

// enumNames lists the names of ed's values, as JSON spells them.
func enumNames(ed protoreflect.EnumDescriptor) string {
	names := make([]string, ed.Values().Len())
	for i := range names {
		names[i] = string(ed.Values().Get(i).Name())
	}
	return strings.Join(names, ", ")
}
